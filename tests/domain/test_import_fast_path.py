"""The import's fast paths give exactly what the reference paths give.

A bundle case is dumped once (python mode): its v2 digest and its events' stored states come
from that dump (`DomainEvent.encode_with`) instead of a JSON-mode dump for the digest and a
`model_dump` per event. The states must be byte for byte what `encode_state` gives (the hash
chain hashes them), on varied bundles; cases recorded with a v1 digest must still compare.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain import events as events_module
from evaledger.domain import payloads as payloads_module
from evaledger.domain.aggregates import Aggregate, case_id_for, run_id_for
from evaledger.domain.bundle import BundleCase, RunBundle
from evaledger.domain.errors import ConflictError, ValidationError
from evaledger.domain.events import (
    CASE_DIGEST_V2,
    CaseOpened,
    DomainEvent,
    encode_state,
    request_digest,
)
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from evaledger.domain.verify import verify
from tests.conftest import example_bundle_data
from tests.helpers import bundle, case

CTX = Context(actor="fast-path")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
METRICS = list(DEFAULT_METRIC_NAMES[:3])

text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)
maybe_text = st.none() | text
amount = st.none() | st.floats(0, 1e6, allow_nan=False) | st.integers(0, 10_000)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(-1e6, 1e6) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
json_object = st.dictionaries(text, json_value, max_size=3)
usage = st.none() | st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 10_000), "completion_tokens": st.integers(0, 10_000)}
)
instant = st.none() | st.builds(
    lambda minutes, offset: (
        (T0 + timedelta(minutes=minutes)).astimezone(timezone_of(offset)).isoformat()
    ),
    st.integers(0, 10_000),
    st.integers(-12, 12),
)
judge = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["llm", "human", "structural"]),
        "provider": maybe_text,
        "model": maybe_text,
        "temperature": st.none() | st.floats(0, 2),
        "params": json_object,
    },
)
outcome = st.fixed_dictionaries(
    {"statement": text.filter(bool), "passed": st.booleans()},
    optional={
        "severity": st.none() | st.sampled_from(["blocker", "medium", "low"]),
        "justification": maybe_text,
    },
)


def timezone_of(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


@st.composite
def metric_scores(draw: st.DrawFn, turns: int) -> list[dict[str, Any]]:
    chosen = draw(st.lists(st.sampled_from(METRICS), unique=True, max_size=3))
    return [
        {
            "metric": m,
            "score": draw(st.integers(0, 5)),
            "justification": draw(maybe_text),
            "failure_code": draw(st.none() | st.just("wrong_tool")),
            "turns": draw(st.lists(st.integers(0, turns - 1), max_size=2)) if turns else [],
        }
        for m in chosen
    ]


@st.composite
def turn(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"role": draw(st.sampled_from(["user", "assistant", "tool", "system"]))}
    optional: dict[str, Any] = {
        "content": maybe_text,
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {"name": text.filter(bool)}, optional={"id": maybe_text, "arguments": json_object}
            ),
            max_size=2,
        ),
        "tool_call_id": maybe_text,
        "latency_ms": amount,
        "usage": usage,
        "cost_usd": amount,
        "metrics": st.dictionaries(text, st.floats(-1e3, 1e3), max_size=2),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            body[name] = draw(strategy)
    return body


@st.composite
def case_body(draw: st.DrawFn, key: str) -> dict[str, Any]:
    status = draw(st.sampled_from(["completed", "completed", "errored", "canceled", "pending"]))
    test_case: dict[str, Any] = {
        "key": key,
        "expected_outcomes": draw(
            st.lists(
                text.filter(bool) | st.fixed_dictionaries({"statement": text.filter(bool)}),
                max_size=2,
            )
        ),
        "tags": draw(st.lists(text, max_size=2)),
    }
    for name in ("name", "test_id", "category", "persona", "configuration", "scenario"):
        if draw(st.booleans()):
            test_case[name] = draw(text.filter(bool))
    if draw(st.booleans()):
        test_case["weight"] = draw(st.floats(0, 10) | st.integers(0, 3))
    body: dict[str, Any] = {
        "test_case": test_case,
        "repetition": draw(st.integers(0, 2)),
        "status": status,
    }
    if status == "pending":
        return body
    if status == "errored":
        body["error"] = {"message": draw(text.filter(bool)), "kind": draw(maybe_text)}
    if status != "completed" and draw(st.booleans()):
        return body
    turns = draw(st.lists(turn(), max_size=3))
    body["transcript"] = turns
    if draw(st.booleans()):
        body["usage"] = draw(usage)
    if draw(st.booleans()):
        body["cost_usd"] = draw(amount)
    if draw(st.booleans()):
        body["started_at"] = draw(instant)
        body["ended_at"] = draw(instant)
    verdicts: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.integers(0, 4)) == 0:
            verdicts.append({"error": "unparseable", "raw_output": draw(text)})
            continue
        verdict: dict[str, Any] = {
            "judge": draw(judge),
            "metric_scores": draw(metric_scores(len(turns))),
            "expected_outcomes": draw(st.lists(outcome, max_size=2)),
        }
        optional: list[tuple[str, st.SearchStrategy[Any]]] = [
            ("prompt", maybe_text),
            ("raw_output", maybe_text),
            ("template_id", maybe_text),
            ("latency_ms", amount),
            ("usage", usage),
            ("cost_usd", amount),
            ("parse_status", st.sampled_from(["parsed", "missing_metrics"])),
        ]
        for name, strategy in optional:
            if draw(st.booleans()):
                verdict[name] = draw(strategy)
        verdicts.append(verdict)
    body["verdicts"] = verdicts
    if draw(st.booleans()):
        body["outcomes"] = [
            {"results": draw(st.lists(outcome, min_size=1, max_size=2)), "judge": draw(judge)}
        ]
    if draw(st.booleans()):
        body["claims"] = [
            {
                "claim": draw(text.filter(bool)),
                "support": draw(st.sampled_from(["supported", "unsupported", "contradicted"])),
                "source": draw(maybe_text),
            }
        ]
    if draw(st.booleans()):
        body["checks"] = [
            {
                "check": draw(text.filter(bool)),
                "status": draw(st.sampled_from(["passed", "failed", "inconclusive"])),
                "evidence": draw(maybe_text),
            }
        ]
    if draw(st.booleans()):
        body["named_scores"] = [
            {
                "scorer": draw(text.filter(bool)),
                "scores": [
                    {"name": "acc", "value": draw(st.floats(0, 1)), "scale": "fraction"},
                    {"name": "grade", "value": draw(st.sampled_from("CPIN")), "scale": "grade"},
                ],
                "answer": draw(maybe_text),
                "metadata": draw(json_object),
                "usage": draw(usage),
                "grader": draw(st.none() | judge),
            }
        ]
    corrected: bool = draw(st.booleans())
    if verdicts and corrected:
        invalidate: bool = draw(st.booleans())
        if invalidate:
            body["overrides"] = [{"kind": "invalidate", "verdict_index": 0, "reason": "bad"}]
        else:
            body["overrides"] = [
                {
                    "verdict_index": 0,
                    "metric_scores": draw(st.none() | metric_scores(len(turns))),
                    "expected_outcomes": draw(st.none() | st.lists(outcome, max_size=1)),
                    "passed": draw(st.none() | st.booleans()),
                    "reason": "reviewed",
                    "actor": draw(st.none() | st.just("reviewer")),
                }
            ]
    return body


@st.composite
def bundles(draw: st.DrawFn) -> RunBundle:
    n = draw(st.integers(1, 4))
    cases = [draw(case_body(f"case-{i}")) for i in range(n)]
    data = bundle()
    data["run"]["labels"] = draw(st.dictionaries(st.sampled_from(["git", "ci"]), text, max_size=2))
    data["cases"] = cases
    try:
        return RunBundle.model_validate(data)
    except Exception:  # a drawn bundle the model refuses is not a test case
        from hypothesis import reject

        reject()
        raise


@contextmanager
def store(tmp: Path, name: str, *, sealed: bool = False) -> Iterator[Services]:
    # Inline by default: two stores' bytes are compared, and sealing salts each payload at
    # random (so its reference, the event's hash and every later link differ between stores);
    # `sealed` stores are compared under `fixed_salts()`.
    services = build_services(Settings(db=f"sqlite:///{tmp / name}/", seal_payloads=sealed))
    tick = itertools.count()
    services.ledger.clock = lambda: T0 + timedelta(microseconds=next(tick))
    try:
        yield services
    finally:
        services.close()


def stored_rows(services: Services) -> list[tuple[str, int, str, bytes]]:
    rows = services.ledger.notifications(1, 1_000_000)
    return [(str(n.originator_id), n.originator_version, n.topic, bytes(n.state)) for n in rows]


@contextmanager
def reference_encoding() -> Iterator[list[DomainEvent]]:
    """Every event validated by pydantic and encoded by `encode_state` (fast paths off)."""
    original = Aggregate._trigger_with
    built: list[DomainEvent] = []

    def reference(self: Aggregate, cls: Any, meta: Any, dumped: Any, fields: Any) -> Any:
        event = original(self, cls, meta, None, fields)
        built.append(event)
        return event

    Aggregate._trigger_with = reference  # type: ignore[method-assign]
    try:
        yield built
    finally:
        Aggregate._trigger_with = original  # type: ignore[method-assign]


@contextmanager
def recording() -> Iterator[list[DomainEvent]]:
    """The events the ledger builds (fast paths on)."""
    original = Aggregate._trigger_with
    built: list[DomainEvent] = []

    def record(self: Aggregate, cls: Any, meta: Any, dumped: Any, fields: Any) -> Any:
        event = original(self, cls, meta, dumped, fields)
        built.append(event)
        return event

    Aggregate._trigger_with = record  # type: ignore[method-assign]
    try:
        yield built
    finally:
        Aggregate._trigger_with = original  # type: ignore[method-assign]


@contextmanager
def fixed_salts(sealed: bool = True) -> Iterator[None]:
    """Sealing salts (and nonces) from a counter: two stores fed the same input in the same
    order seal the same text to the same bytes (distinct per payload, as random salts are)."""
    if not sealed:
        yield
        return
    draws = itertools.count()

    def urandom(n: int) -> bytes:
        return next(draws).to_bytes(n, "big")

    with mock.patch.object(payloads_module, "os", SimpleNamespace(urandom=urandom)):
        yield


def import_both(
    tmp: Path, b: RunBundle, tag: str, *, sealed: bool = False
) -> tuple[list[Any], list[Any]]:
    with store(tmp, f"fast-{tag}", sealed=sealed) as fast:
        with recording() as fast_events, fixed_salts(sealed):
            fast.ledger.import_bundle(b, CTX)
        fast_rows = stored_rows(fast)
        assert verify(fast.ledger).ok
        # (A sealed event decodes with its text put back: not its stored bytes.)
        for stored in [] if sealed else fast.ledger.notifications(1, 1_000_000):
            # Decoding and encoding again (the golden-tested reference) gives the stored bytes.
            assert encode_state(fast.ledger.decode(stored)) == bytes(stored.state)
    with store(tmp, f"reference-{tag}", sealed=sealed) as ref, reference_encoding() as ref_events:
        with fixed_salts(sealed):
            ref.ledger.import_bundle(b, CTX)
        ref_rows = stored_rows(ref)
    # The events built without validation are the validated ones: same class, field values,
    # fields set and (fresh) private caches.
    assert len(fast_events) == len(ref_events)
    for mine, theirs in zip(fast_events, ref_events, strict=True):
        assert type(mine) is type(theirs)
        assert mine.__dict__ == theirs.__dict__
        assert list(mine.__dict__) == list(theirs.__dict__)
        assert mine.model_fields_set == theirs.model_fields_set
        assert mine.__pydantic_extra__ is None and theirs.__pydantic_extra__ is None
        assert mine == theirs and mine.hash() == theirs.hash()
        assert mine.model_dump() == theirs.model_dump()
        assert mine.sealed_payload() == theirs.sealed_payload()
    return fast_rows, ref_rows


counter = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(b=bundles())
def test_states_encoded_from_the_case_dump_equal_the_reference_encoding(
    tmp_path: Path, b: RunBundle
) -> None:
    fast, ref = import_both(tmp_path, b, str(next(counter)))
    assert fast == ref


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(b=bundles())
def test_sealed_states_built_before_encoding_equal_the_sealing_of_the_encoded_state(
    tmp_path: Path, b: RunBundle
) -> None:
    # The fast path seals the state it encodes once (`encode_with(..., seal)`); the reference
    # encodes, decodes that, seals it and encodes again (`seal_payload`). Same salts: the
    # same stored bytes, references and payloads, and the bundle case's own dump untouched.
    dumps = [c.model_dump() for c in b.cases]
    fast, ref = import_both(tmp_path, b, f"sealed-{next(counter)}", sealed=True)
    assert fast == ref
    assert [c.model_dump() for c in b.cases] == dumps
    if any(isinstance(t.content, str) for c in b.cases for t in c.transcript):
        assert any(b'"payload_ref"' in row[3] for row in fast)


def test_the_example_bundle_is_stored_identically_by_both_paths(tmp_path: Path) -> None:
    b = RunBundle.model_validate(example_bundle_data())
    fast, ref = import_both(tmp_path, b, "example")
    assert fast == ref
    assert len(fast) > 5


def test_a_field_that_is_not_plain_and_not_dumped_falls_back_to_the_reference(
    tmp_path: Path,
) -> None:
    b = RunBundle.model_validate({**bundle(), "cases": [case("a", 4)]})
    bc = b.cases[0]
    event = CaseOpened(
        originator_id=UUID(int=1),
        originator_version=1,
        timestamp=T0,
        actor="x",
        prev_hash="0" * 64,
        run_id=UUID(int=2),
        test_case=bc.test_case,
        repetition=0,
    )
    event.encode_with({})  # test_case is a value object and was not given dumped
    assert event.__pydantic_private__ == {"_hash": None, "_state": None}
    assert event.stored_state() == encode_state(event)
    event2 = event.model_copy()
    event2.encode_with({"test_case": bc.test_case.model_dump()})
    assert event2.stored_state() == encode_state(event)


def test_case_digest_is_versioned_and_ignores_key_order() -> None:
    data = case("a", 4)
    one = BundleCase.model_validate(data)
    reordered = BundleCase.model_validate(dict(reversed(list(data.items()))))
    from evaledger.domain.events import case_digest

    assert case_digest(one.model_dump()) == case_digest(reordered.model_dump())
    assert case_digest(one.model_dump()).startswith(CASE_DIGEST_V2)
    other = BundleCase.model_validate(case("a", 3))
    assert case_digest(one.model_dump()) != case_digest(other.model_dump())


def _v1_case_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import as the ledger did before v2: the JSON-mode dump's `request_digest`."""
    from evaledger.domain import ledger as ledger_module

    monkeypatch.setattr(
        ledger_module,
        "case_digest",
        lambda dumped: request_digest(BundleCase.model_validate(dumped).model_dump(mode="json")),
    )


def test_cases_recorded_with_a_v1_digest_still_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = {**bundle(), "cases": [case("a", 4), case("b", 2)]}
    data["run"] = {**data["run"], "status": "running"}
    b = RunBundle.model_validate(data)
    with store(tmp_path, "v1") as s:
        with monkeypatch.context() as m:
            _v1_case_digests(m)
            s.ledger.import_bundle(b, CTX)
        run_id = run_id_for("default", b.run.key)
        opened = s.ledger.get_case(case_id_for(run_id, "a", 0, "")).opened
        assert opened.request_digest is not None
        assert not opened.request_digest.startswith(CASE_DIGEST_V2)
        head = s.ledger.position()
        # The same bundle again, with v2 digests computed now: nothing new is written.
        again = s.ledger.import_bundle(b, CTX)
        assert again.events == 0 and s.ledger.position() == head
        # A changed case is still refused.
        changed = {**data, "cases": [case("a", 1), case("b", 2)]}
        with pytest.raises(ConflictError, match="different content"):
            s.ledger.import_bundle(RunBundle.model_validate(changed), CTX)
        # A new case alongside the old ones gets a v2 digest.
        grown = RunBundle.model_validate({**data, "cases": [case("a", 4), case("c", 5)]})
        s.ledger.import_bundle(grown, CTX)
        c = s.ledger.get_case(case_id_for(run_id, "c", 0, "")).opened
        assert c.request_digest is not None and c.request_digest.startswith(CASE_DIGEST_V2)
        assert verify(s.ledger).ok


def test_reimporting_a_v2_bundle_writes_nothing_and_a_change_conflicts(tmp_path: Path) -> None:
    data = {**bundle(), "cases": [case("a", 4)]}
    data["run"] = {**data["run"], "status": "running"}
    with store(tmp_path, "v2") as s:
        s.ledger.import_bundle(RunBundle.model_validate(data), CTX)
        head = s.ledger.position()
        assert s.ledger.import_bundle(RunBundle.model_validate(data), CTX).events == 0
        assert s.ledger.position() == head
        with pytest.raises(ConflictError):
            s.ledger.import_bundle(RunBundle.model_validate({**data, "cases": [case("a", 2)]}), CTX)


def test_an_escaped_nul_is_still_refused_and_a_literal_backslash_u0000_is_not(
    tmp_path: Path,
) -> None:
    from evaledger.domain.events import ExecutionErrored, check_storable

    def errored(message: str) -> ExecutionErrored:
        return ExecutionErrored(
            originator_id=UUID(int=1),
            originator_version=2,
            timestamp=T0,
            actor="x",
            prev_hash="0" * 64,
            message=message,
        )

    with pytest.raises(ValidationError, match="message"):
        check_storable(errored("a\x00b"))
    check_storable(errored("a\\u0000b"))  # the six characters, escaped: storable
    check_storable(errored("plain"))


# Keep the helper's signature visible to mypy for the monkeypatched function.
_: Callable[[Any], str] = events_module.case_digest


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'{"a": {"b": "x\\u0000y"}}', "a.b: NUL"),
        (b'{"a": ["ok", {"k\\u0000": 1}]}', "a.1.k\\x00: key: NUL"),
        (b'{"n": 9007199254740993}', "n: integers must be"),
        (b'{"n": [-9007199254740993]}', "n.0: integers must be"),
        (b'{"s": "\\ud800"}', "s: lone surrogates"),
    ],
)
def test_parse_input_json_still_names_what_no_store_can_hold(data: bytes, where: str) -> None:
    from evaledger.domain.types import UnstorableJSONError, parse_input_json

    with pytest.raises(UnstorableJSONError) as e:
        parse_input_json(data)
    assert str(e.value).startswith(where)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": "x\\\\u0000y", "f": 0.1234567890123456789, "n": 9007199254740991}',
        b'{"n": -9007199254740991, "t": "\\u00e9\\ud83d\\ude00", "id": "1234567890123456"}',
        b"[]",
    ],
)
def test_parse_input_json_accepts_what_every_store_holds(data: bytes) -> None:
    import json

    from evaledger.domain.types import parse_input_json

    assert parse_input_json(data) == json.loads(data)


def test_the_seal_reads_each_cases_last_stored_hash(
    store_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """complete_run hashes each case's last stored row instead of replaying every case."""
    from evaledger.domain.store import postgres

    monkeypatch.setattr(postgres, "LAST_STORED_BATCH", 3)  # several batches of ids
    from evaledger.domain.aggregates import seal_of
    from evaledger.domain.bundle import BundleRun
    from evaledger.domain.events import RunCompleted, Turn

    ledger = store_services.ledger
    run = BundleRun.model_validate({**bundle()["run"], "status": "running"})
    run_id = ledger.create_run(run, CTX).id
    ledger.ingest_cases(
        run_id, [BundleCase.model_validate(case(k, 3)) for k in ("a", "b", "c")], CTX
    )
    pending = BundleCase.model_validate({"test_case": {"key": "d"}, "status": "pending"})
    ledger.open_case(run_id, pending, CTX)
    d = case_id_for(run_id, "d", 0, "")
    ledger.record_transcript(d, CTX, turns=[Turn(role="user", content="hi")])
    ids = ledger.get_run(run_id).case_ids
    expected = {cid: ledger.get_case(cid).last_hash for cid in ids}
    assert ledger._last_hashes(ids) == expected
    ledger.complete_run(run_id, CTX)
    completed = ledger.events_of(run_id)[-1]
    assert isinstance(completed, RunCompleted)
    assert completed.seal == seal_of(expected) and completed.case_count == 4
    assert verify(ledger).ok
    with pytest.raises(Exception, match="no case"):
        ledger._last_hashes([UUID(int=7)])


def test_a_copy_of_an_aggregate_shares_no_container_with_it(services: Services) -> None:
    import copy

    ledger = services.ledger
    data = {**bundle(), "cases": [case("a", 4)]}
    data["run"] = {**data["run"], "status": "running"}
    result = ledger.import_bundle(RunBundle.model_validate(data), CTX)
    run = ledger.get_run(result.run_id)
    clone = copy.deepcopy(run)
    assert type(clone) is type(run) and clone.__dict__ == run.__dict__
    assert clone.created is run.created  # immutable events are shared
    clone.case_ids.append(UUID(int=9))
    clone._case_set.add(UUID(int=9))
    clone.idempotency["k"] = "v"
    clone.version += 1
    assert UUID(int=9) not in run.case_ids and not run.has_case(UUID(int=9))
    assert "k" not in run.idempotency and run.version == clone.version - 1
    case_agg = ledger.get_case(result.case_ids[0])
    twin = copy.deepcopy(case_agg)
    twin.verdict_ids.add(UUID(int=3))
    assert UUID(int=3) not in case_agg.verdict_ids
    # The cache hands each command its own copy: a failed command leaves the next one clean.
    first = ledger.get_run(result.run_id)
    first.case_ids.append(UUID(int=10))
    assert UUID(int=10) not in ledger.get_run(result.run_id).case_ids


def test_a_trusted_event_refuses_unknown_and_missing_fields() -> None:
    from evaledger.domain.events import ExecutionCanceled

    header = {
        "originator_id": UUID(int=1),
        "originator_version": 2,
        "timestamp": T0,
        "actor": "x",
        "prev_hash": "0" * 64,
    }
    event = ExecutionCanceled.trusted(header)
    assert event == ExecutionCanceled(**header)
    assert event.model_fields_set == ExecutionCanceled(**header).model_fields_set
    with pytest.raises(TypeError, match="unknown fields"):
        ExecutionCanceled.trusted({**header, "nope": 1})
    with pytest.raises(TypeError, match=r"missing fields \['actor'\]"):
        ExecutionCanceled.trusted({k: v for k, v in header.items() if k != "actor"})


def test_the_commands_own_values_are_still_validated(tmp_path: Path) -> None:
    """A bad actor or a naive clock is refused, as before, on the bundle path too."""
    import pydantic

    data = {**bundle(), "cases": [case("a", 4)]}
    with store(tmp_path, "bad") as s:
        with pytest.raises(pydantic.ValidationError, match="actor"):
            s.ledger.import_bundle(RunBundle.model_validate(data), Context(actor=""))
        s.ledger.clock = lambda: datetime(2026, 1, 1)  # noqa: DTZ001 - naive on purpose
        with pytest.raises(pydantic.ValidationError, match="timezone"):
            s.ledger.import_bundle(RunBundle.model_validate(data), CTX)
        assert s.ledger.position() == 0


def test_a_chain_link_is_the_digest_of_its_lines_one_at_a_time() -> None:
    """link_of hashes the joined lines in one update: the same digest as the definition."""
    import hashlib

    from evaledger.domain.store.chain import _canonical, link_of

    def by_line(prev: str, entries: list[tuple[int, Any, int, str]]) -> str:
        h = hashlib.sha256(prev.encode())
        for position, oid, version, ehash in entries:
            h.update(f"\n{position}\x1f{_canonical(oid)}\x1f{version}\x1f{ehash}".encode())
        return h.hexdigest()

    for n in (0, 1, 7, 300):
        entries = [
            (i + 1, UUID(int=i) if i % 3 else UUID(int=i).hex, i % 5 + 1, f"{i:064x}")
            for i in range(n)
        ]
        entries += [(n + 1, "not-a-uuid é", 1, "f" * 64)] if n else []
        assert link_of("0" * 64, entries) == by_line("0" * 64, entries)
        assert link_of("ab" * 32, iter(entries)) == by_line("ab" * 32, entries)
