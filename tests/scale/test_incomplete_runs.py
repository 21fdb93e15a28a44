"""Gate, grade and compare refuse a run whose import was interrupted (issue 24)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.helpers import bundle, case


class ProcessDied(Exception):
    """Stands for the import process dying between two chunk transactions."""


def interrupted_import(
    db: str, data: RunBundle, after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Import `data` in chunks of 1 and stop after `after` cases are written.

    The import reads its source once, before it writes (issue 32): the process "dies" in the
    write of chunk `after + 1`.
    """
    services = build_services(Settings(db=db))
    write = getattr(services.ledger, "_write_chunk")  # noqa: B009 - a test's stand-in for a kill
    written = 0

    def dying(*args: Any, **kwargs: Any) -> Any:
        nonlocal written
        if written == after:
            raise ProcessDied
        written += 1
        return write(*args, **kwargs)

    try:
        with monkeypatch.context() as m:
            m.setattr(services.ledger, "_write_chunk", dying)
            with pytest.raises(ProcessDied):
                services.ledger.import_stream(
                    data.run, lambda: iter(data.cases), Context(actor="ci"), chunk_size=1
                )
    finally:
        services.close()


@pytest.fixture
def three_cases() -> RunBundle:
    data = bundle(key="half")
    data["cases"] = [case(f"c{i}") for i in range(3)]
    return RunBundle.model_validate(data)


def test_gate_grade_and_compare_refuse_an_interrupted_import_until_it_is_re_run(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    three_cases: RunBundle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cli = Cli(capsys, sqlite_url)
    interrupted_import(sqlite_url, three_cases, after=2, monkeypatch=monkeypatch)
    assert [r["case_count"] for r in cli.json("runs")["data"]] == [2]
    refusal = "is incomplete: it is created with 2 cases so far (an interrupted import leaves "
    for command in (
        ("gate", "half"),
        ("grade", "half", "--preset", "ifixai-v1"),
        ("compare", "half", "half"),
    ):
        code, out, err = cli(*command)
        assert (code, out) == (2, ""), command
        if command[0] != "compare":  # compare names it its own way: "only completed runs"
            assert refusal in err, command
        assert "re-run the import to complete it" in err, command
        assert "Traceback" not in err

    path = tmp_path / "half.json"
    path.write_text(three_cases.model_dump_json())
    cli.json("import", str(path))
    assert [r["case_count"] for r in cli.json("runs")["data"]] == [3]
    code, out, err = cli("gate", "half")
    assert code == 0, err
    assert out.endswith("gate: passed\n")
    code, _, err = cli("compare", "half", "half")
    assert code == 0, err
