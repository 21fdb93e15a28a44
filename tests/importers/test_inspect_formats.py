"""Issue 18: Inspect's message-deduplicating `.eval` logs, and log format version 3.

`inspect-tool_dialogue.eval` was written by the installed `inspect_ai` (0.3.285) with its mock
model (tests/fixtures/scorers/make_inspect_logs.py): a tool-using dialogue whose model calls
repeat their input, which Inspect's writer pools in `events_data` (`input_refs` into a message
pool) with long texts moved to `attachments`. That version writes format version 2; its reader
takes a version 3 header as it takes 2, so the v3 log here is that fixture with the header's
version set to 3 (every other byte of every member as Inspect wrote it). The expected figures
are read back with Inspect's own `read_eval_log`, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import FIXTURES

DIALOGUE = FIXTURES / "scorers" / "inspect-tool_dialogue.eval"


def _members(path: Path) -> dict[str, bytes]:
    import inspect_ai.log  # noqa: F401  (Inspect registers the zstd method its writer uses)

    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def as_version(path: Path, version: int, out: Path) -> Path:
    """`path` with the format version of its header (and journal start) set to `version`."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in _members(path).items():
            if name in ("header.json", "_journal/start.json"):
                data = orjson.dumps({**orjson.loads(data), "version": version})
            z.writestr(name, data)
    return out


def reported(path: Path) -> tuple[int, dict[str, float], dict[str, list[str]]]:
    """The version, `SCORER/METRIC` figures and per-sample message roles Inspect reads."""
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(path))
    scores = log.results.scores if log.results else []
    metrics = {
        f"{s.name}/{k}": float(m.value)
        for s in scores
        for k, m in s.metrics.items()
        if math.isfinite(m.value)
    }
    roles = {str(s.id): [str(m.role) for m in s.messages] for s in log.samples or []}
    return log.version, metrics, roles


def import_run(url: str, path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from evaledger.api.cli import main

    assert main(["import", str(path), "--db", url, "--json"]) == 0
    (row,) = orjson.loads(capsys.readouterr().out)["imported"]
    assert main(["show", row["run_id"], "--db", url, "--json"]) == 0
    shown: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return shown


def test_the_dialogue_fixture_is_stored_deduplicated_as_inspect_writes_it() -> None:
    """The raw sample members hold the message pool and attachments the fixture is about."""
    samples = [
        orjson.loads(data)
        for name, data in _members(DIALOGUE).items()
        if name.startswith("samples/")
    ]
    assert samples
    for sample in samples:
        assert sample["events_data"]["messages"], "no pooled messages"
        refs = [e["input_refs"] for e in sample["events"] if e["event"] == "model"]
        assert len(refs) >= 2 and all(refs), "model calls do not refer to the pool"
        assert sample["attachments"], "no attachments"


@pytest.mark.parametrize("version", [2, 3])
def test_a_deduplicated_log_imports_with_inspects_own_figures_and_messages(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    path = DIALOGUE if version == 2 else as_version(DIALOGUE, 3, tmp_path / "v3.eval")
    read_version, metrics, roles = reported(path)
    assert read_version == version
    shown = import_run(store_url, path, capsys)
    assert shown["aggregate"]["scorer_metrics"] == pytest.approx(metrics, rel=1e-12)
    assert "scorer_metrics_mismatched" not in shown["aggregate"]
    assert {c["test_case_key"] for c in shown["cases"]} == set(roles)

    from evaledger.api.cli import main

    for key, want in roles.items():
        assert main(["transcript", shown["run"]["run_id"], key, "--db", store_url, "--json"]) == 0
        turns = orjson.loads(capsys.readouterr().out)["turns"]
        assert [t["role"] for t in turns] == want
        assert all(t["content"] is None or "attachment://" not in t["content"] for t in turns)


def test_inspects_chunked_sample_layout_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Written by Inspect's own converter; Inspect's reader cannot read it, nor does the importer."""
    from inspect_ai.log._recorders.chunked import convert_eval_logs_to_chunked

    from evaledger.api.cli import main

    convert_eval_logs_to_chunked(str(DIALOGUE), str(tmp_path / "chunked"), chunk_size=2)
    (path,) = (tmp_path / "chunked").iterdir()
    assert any(n.startswith("samples/d1_epoch_1/") for n in _members(path))
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(SystemExit) as exited:
        main(["import", str(path), "--db", db])
    assert exited.value.code == 2
    assert "chunked sample layout (samples/ID_epoch_N/…) is not supported" in (
        capsys.readouterr().err
    )
    assert main(["runs", "--db", db, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["data"] == []


def test_an_unknown_inspect_log_version_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaledger.api.cli import main

    path = as_version(DIALOGUE, 9, tmp_path / "v9.eval")
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(SystemExit) as exited:
        main(["import", str(path), "--db", db])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "version 9 is not supported" in err and "1, 2, 3" in err
