"""Streamed bundle import: the same cases and the same stored bytes as a whole-file import.

A bundle file is parsed case by case with ijson (importers/bundle.py) and written through
`Ledger.import_stream`; these tests hold it to the whole-file path (`parse_input_json`, then
`RunBundle`, then `import_bundle`): equal cases on varied input, byte-identical stored events,
the same bad-input checks naming the field, nothing stored on bad input.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.cli import main
from evaledger.domain.errors import PermissionDeniedError, ValidationError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from evaledger.importers import bundle as bundle_module
from evaledger.importers import load
from evaledger.importers.bundle import _Scanning, _surrogate_problem, open_bundle, read_bundle
from evaledger.importers.load import import_all, open_imports
from tests.helpers import bundle, case, event_count

FIXED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _write(
    path: Path, data: dict[str, Any], *, run_last: bool = False, ascii: bool = False
) -> Path:
    if run_last:
        data = {k: data[k] for k in sorted(data, key=lambda k: k == "run")}
    if ascii:
        path.write_text(json.dumps(data, ensure_ascii=True))
    else:
        path.write_bytes(orjson.dumps(data))
    return path


def _stored(services: Services) -> list[tuple[Any, ...]]:
    return [
        (n.originator_id, n.originator_version, n.topic, n.state)
        for n in services.ledger.notifications(1, 1_000_000)
    ]


@pytest.fixture
def two_stores(tmp_path: Path) -> Iterator[tuple[Services, Services]]:
    # Inline: the two stores' bytes are compared, and sealing salts each payload at random (its
    # reference, the event's hash and every later link differ from store to store).
    a = build_services(Settings(db=f"sqlite:///{tmp_path}/a/", seal_payloads=False))
    b = build_services(Settings(db=f"sqlite:///{tmp_path}/b/", seal_payloads=False))
    for s in (a, b):
        s.ledger.clock = lambda: FIXED
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _many(n: int) -> dict[str, Any]:
    data = bundle()
    data["cases"] = [case(f"tc-{i}", score=1 + i % 5) for i in range(n)]
    for i, c in enumerate(data["cases"]):
        c["cost_usd"] = 0.1 * i + 1e-7
        c["transcript"][1]["content"] = f"réponse {i} \U0001f600 \u4e2d"
        c["transcript"][1]["latency_ms"] = 123.456 + i / 3
    return data


@pytest.mark.parametrize("run_last", [False, True])
@pytest.mark.parametrize("ascii", [False, True])
def test_a_streamed_bundle_stores_the_bytes_a_whole_file_import_stores(
    two_stores: tuple[Services, Services], tmp_path: Path, run_last: bool, ascii: bool
) -> None:
    whole, streamed = two_stores
    path = _write(tmp_path / "b.json", _many(40), run_last=run_last, ascii=ascii)
    ctx = Context(actor="t")
    whole.ledger.import_bundle(read_bundle(path.read_bytes(), "b.json"), ctx)
    opened = open_bundle(path)
    assert opened.count == 40
    done = streamed.ledger.import_stream(opened.run, opened.cases, ctx)
    assert (done.cases, done.new_cases) == (40, 40)
    assert _stored(streamed) == _stored(whole)
    # Importing it again (as `evaledger import` does) writes nothing.
    (again,) = import_all(streamed.ledger, open_imports([path]), ctx)
    assert again.result.events == 0 and again.result.new_cases == 0
    assert _stored(streamed) == _stored(whole)


def test_a_streamed_bundle_in_many_chunks_stores_each_case_as_a_whole_import_does(
    two_stores: tuple[Services, Services], tmp_path: Path
) -> None:
    whole, streamed = two_stores
    path = _write(tmp_path / "b.json", _many(23), run_last=True)
    ctx = Context(actor="t")
    result = whole.ledger.import_bundle(read_bundle(path.read_bytes(), "b.json"), ctx)
    opened = open_bundle(path)
    done = streamed.ledger.import_stream(opened.run, opened.cases, ctx, chunk_size=5)
    assert done.cases == 23 and done.new_cases == 23
    for case_id in result.case_ids:
        assert [(e.topic, e.state) for e in streamed.ledger.stored_events_of(case_id)] == [
            (e.topic, e.state) for e in whole.ledger.stored_events_of(case_id)
        ]
    assert streamed.ledger.get_run(done.run_id).status == whole.ledger.get_run(result.run_id).status


_floats = st.floats(allow_nan=False, allow_infinity=False)
_texts = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    costs=st.lists(_floats.map(abs).filter(lambda x: x <= 1e12), min_size=1, max_size=6),
    texts=st.lists(_texts, min_size=1, max_size=6),
    metadata=st.dictionaries(_texts, st.one_of(_floats, st.integers(-(2**53) + 1, 2**53 - 1))),
    run_last=st.booleans(),
    ascii=st.booleans(),
)
def test_streamed_cases_equal_the_whole_file_parse(
    tmp_path_factory: pytest.TempPathFactory,
    costs: list[float],
    texts: list[str],
    metadata: dict[str, Any],
    run_last: bool,
    ascii: bool,
) -> None:
    data = bundle()
    template = data["cases"][0]
    data["cases"] = []
    for i, (cost, text) in enumerate(zip(costs, texts * len(costs), strict=False)):
        c = json.loads(json.dumps(template))
        c["test_case"]["key"] = f"k{i}"
        c["cost_usd"] = cost
        c["transcript"][0]["content"] = text
        c["named_scores"] = [
            {
                "scorer": "s",
                "scores": [{"name": "x", "value": cost, "scale": "number"}],
                "metadata": metadata,
            }
        ]
        data["cases"].append(c)
    path = _write(tmp_path_factory.mktemp("p") / "b.json", data, run_last=run_last, ascii=ascii)
    whole = read_bundle(path.read_bytes(), "b.json")
    streamed = open_bundle(path)
    assert streamed.run == whole.run
    cases = list(streamed.cases())
    assert cases == whole.cases
    assert [c.model_dump_json() for c in cases] == [c.model_dump_json() for c in whole.cases]
    for c in cases:
        for v in c.named_scores[0].metadata.values():
            assert not isinstance(v, float) or math.isfinite(v)


# -- bad input ---------------------------------------------------------------------------------


def _bad(data: dict[str, Any], old: bytes, new: bytes) -> bytes:
    raw = orjson.dumps(data)
    assert old in raw
    return raw.replace(old, new, 1)


def _second_case_bad(old: bytes, new: bytes) -> bytes:
    data = _many(3)
    data["cases"][1]["transcript"][0]["content"] = "MARK"
    return _bad(data, b'"MARK"', new) if old == b"MARK" else _bad(data, old, new)


BAD: dict[str, tuple[bytes, str, str]] = {
    # name: (file bytes, streamed error names, whole-file error names)
    "NUL": (_second_case_bad(b"MARK", b'"a\\u0000b"'), "cases.1.transcript.0.content", "NUL"),
    "lone high surrogate": (
        _second_case_bad(b"MARK", b'"a\\ud800b"'),
        "lone surrogates",
        "cases.1.transcript.0.content",
    ),
    "lone low surrogate": (
        _second_case_bad(b"MARK", b'"\\udc00"'),
        "lone surrogates",
        "cases.1.transcript.0.content",
    ),
    "huge integer": (
        _second_case_bad(b"MARK", b"12345678901234567"),
        "cases.1.transcript.0.content",
        "cases.1.transcript.0.content",
    ),
    "integer beyond 64 bits": (
        _second_case_bad(b"MARK", b"123456789012345678901234567890"),
        "malformed JSON",
        "cases.1.transcript.0.content",
    ),
    "NaN": (_second_case_bad(b'"cost_usd":1e-7', b'"cost_usd":NaN'), "malformed JSON", "cost_usd"),
    "bad score": (
        _second_case_bad(b'"score":2', b'"score":9'),
        "cases.1.verdicts.0.metric_scores.0.score",
        "cases.1.verdicts.0.metric_scores.0.score",
    ),
    "unknown top-level key": (
        _bad(_many(2), b'"format"', b'"extra":1,"format"'),
        "extra: Extra inputs",
        "extra: Extra inputs",
    ),
    "wrong format": (
        _bad(_many(2), b'"evaledger.run-bundle/1"', b'"evaledger.run-bundle/9"'),
        "format: expected",
        "format: expected",
    ),
    "cut off": (orjson.dumps(_many(3))[:-40], "malformed JSON", "malformed JSON"),
    "cases not a list": (
        _bad(_many(1), b'"cases":[', b'"cases":{"a":[') + b"}",
        "cases: Input should be a valid list",
        "cases",
    ),
    "bad run": (_bad(_many(2), b'"suite":{', b'"suite":{"x":1,'), "run.suite.x", "run.suite.x"),
}


@pytest.mark.parametrize("streamed", [True, False], ids=["large file", "small file"])
@pytest.mark.parametrize("name", BAD)
def test_bad_input_in_a_bundle_names_the_field_and_stores_nothing(
    services: Services,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    streamed: bool,
) -> None:
    raw, large, small = BAD[name]
    if streamed:  # as if the file were too large to re-read whole for the error
        monkeypatch.setattr(bundle_module, "WHOLE_FILE_MAX", 0)
    path = tmp_path / "bad.json"
    path.write_bytes(raw)
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(path), "--db", services.settings.db])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (large if streamed else small) in err, err
    assert event_count(services) == 0


def test_an_escaped_backslash_before_u_d800_is_text_not_a_surrogate(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bundle_module, "WHOLE_FILE_MAX", 0)
    path = tmp_path / "b.json"
    path.write_bytes(_second_case_bad(b"MARK", b'"\\\\ud800 \\\\\\\\udc00"'))
    (done,) = import_all(services.ledger, open_imports([path]), Context())
    assert done.result.cases == 3


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(
            [
                b"a",
                b"\\\\",
                b"\\",
                b"\\ud83d\\ude00",
                b"\\uD800",
                b"\\udc00",
                b"\\ud800",
                b"x" * 300,
            ]
        ),
        max_size=30,
    ),
    block=st.integers(1, 700),
)
def test_the_surrogate_scan_over_blocks_finds_what_a_whole_scan_finds(
    parts: list[bytes], block: int
) -> None:
    data = b"".join(parts)
    scan = _Scanning(io.BytesIO(data))
    while scan.read(block):
        pass
    assert (scan.lone is not None) == (_surrogate_problem(data) is not None)


@settings(max_examples=200, deadline=None)
@given(
    before=st.integers(0, 1500),
    needle=st.sampled_from([b"\\u0000", b"1" * 16, b"-9007199254740993"]),
    block=st.integers(1, 700),
)
def test_the_header_scan_flags_a_nul_escape_or_a_huge_integer_across_blocks(
    before: int, needle: bytes, block: int
) -> None:
    """The per-case walk is skipped only when the scan saw neither (at any block boundary)."""
    data = b"x" * before + needle + b"y" * 40
    scan = _Scanning(io.BytesIO(data))
    while scan.read(block):
        pass
    assert scan.suspect
    clean = _Scanning(io.BytesIO(b"x" * before + b"1" * 15 + b" \\u0001" + b"y" * 40))
    while clean.read(block):
        pass
    assert not clean.suspect


def test_overrides_in_a_streamed_bundle_need_the_admin_scope(
    services: Services, tmp_path: Path
) -> None:
    data = _many(2)
    data["cases"][1]["overrides"] = [{"verdict_index": 0, "passed": True, "reason": "checked"}]
    path = _write(tmp_path / "b.json", data)
    ctx = Context(actor="t", project="default", scope=TokenScope.WRITE)
    with pytest.raises(PermissionDeniedError):
        import_all(services.ledger, open_imports([path]), ctx)
    assert event_count(services) == 0
    (done,) = import_all(services.ledger, open_imports([path]), Context(actor="t"))
    assert done.result.cases == 2


def test_an_interrupted_streamed_bundle_import_resumes_without_duplicates(
    two_stores: tuple[Services, Services], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, streamed = two_stores
    path = _write(tmp_path / "b.json", _many(12))
    ctx = Context(actor="t")
    whole_result = whole.ledger.import_bundle(read_bundle(path.read_bytes(), "b.json"), ctx)
    opened = open_bundle(path)
    real = streamed.ledger._write_chunk
    calls = 0

    def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ValidationError("interrupted", field="file")
        return real(*args, **kwargs)

    monkeypatch.setattr(streamed.ledger, "_write_chunk", failing)
    with pytest.raises(ValidationError):
        streamed.ledger.import_stream(opened.run, opened.cases, ctx, chunk_size=5)
    monkeypatch.undo()
    done = streamed.ledger.import_stream(opened.run, opened.cases, ctx, chunk_size=5)
    assert (done.cases, done.new_cases) == (12, 7)
    run = streamed.ledger.get_run(done.run_id)
    assert sorted(run.case_ids) == sorted(whole_result.case_ids)
    assert run.status == whole.ledger.get_run(whole_result.run_id).status
    for case_id in whole_result.case_ids:
        assert [(e.topic, e.state) for e in streamed.ledger.stored_events_of(case_id)] == [
            (e.topic, e.state) for e in whole.ledger.stored_events_of(case_id)
        ]


def test_a_bundle_on_standard_input_is_streamed_from_a_spooled_copy(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "b.json", _many(7), run_last=True)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    monkeypatch.setattr(bundle_module, "WHOLE_FILE_MAX", 0)
    (done,) = import_all(services.ledger, open_imports(["-"]), Context())
    assert (done.result.cases, done.source.sources) == (7, ("-",))


def test_a_case_twice_in_a_streamed_bundle_names_both_places_and_stores_nothing(
    services: Services, tmp_path: Path
) -> None:
    data = _many(7)
    data["cases"][6]["test_case"]["key"] = "tc-2"
    opened = open_bundle(_write(tmp_path / "b.json", data))
    with pytest.raises(ValidationError, match=r"cases\[6\]: .*'tc-2'.* \(first at cases\[2\]\)"):
        services.ledger.import_stream(opened.run, opened.cases, Context(), chunk_size=3)
    assert event_count(services) == 0


def test_a_bundle_of_more_than_one_chunk_is_imported_in_chunks_and_sealed(
    two_stores: tuple[Services, Services], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, chunked = two_stores
    path = _write(tmp_path / "b.json", _many(12))
    (one,) = import_all(small.ledger, open_imports([path]), Context())
    monkeypatch.setattr(load, "ONE_TRANSACTION", 5)
    (done,) = import_all(chunked.ledger, open_imports([path]), Context())
    assert (done.result.cases, done.result.events) == (12, one.result.events)
    assert (verify(small.ledger).commits, verify(chunked.ledger).commits) == (1, 3)
    assert verify(chunked.ledger).runs_sealed == 1
    # The same events in the same order; only the transactions differ.
    assert _stored(chunked) == _stored(small)
