"""Erasure of a case's sealed payloads, and the vault's part of `verify` (issue 34).

`erase_case` records `PayloadErased` (who, when, why, which references) on the case, then has
the store destroy the case's key and ciphertexts (`LedgerRecorder.erase_payloads`). The events
keep their references, so the chain, the Merkle log and every score derived from them stay as
they were. `payload_problems` is what `verify --full` adds: every sealed reference of the log is
either stored and opens to the plaintext it names, or erased by a `PayloadErased` of its case.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson

from evaledger.domain.case_commands import CaseCommands
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import (
    HUMAN_ACTS,
    CaseOpened,
    PayloadErased,
    TraceRecorded,
    split_topic,
)
from evaledger.domain.payloads import (
    SEALED_FIELDS,
    PayloadError,
    decrypt,
    sealed_ref,
    subject_key,
)
from evaledger.domain.store.payloads import Tombstone
from evaledger.domain.writes import Context, LedgerStore, Written, require_reason

PAGE = 1000


@dataclass(frozen=True)
class Erasure:
    """What an erasure did: the event written (None when only finishing an earlier one)."""

    case_id: UUID
    refs: tuple[str, ...]
    erased_at: str
    erased_by: str
    reason: str
    written: Written | None


class ErasureCommands(CaseCommands):
    """The erase commands (mixed into `Ledger`)."""

    def erase_case(self, case_id: UUID, ctx: Context, reason: str | None) -> Erasure:
        """Erase a case's sealed payloads (admin); the log keeps their references.

        Refused, nothing stored: another project's case (as if absent), a case with personal
        text stored inline (written before sealing: its bytes are what the chain covers), a case
        with nothing sealed, a case naming its data subject (its key is the subject's: `erase
        --subject`). Erasing an erased case again finishes its vault step (a crash between the
        event and the vault) and records nothing new.
        """
        why = require_reason(reason, "erasing a case's payloads")
        ctx.scope.require(*HUMAN_ACTS[PayloadErased])
        case = self.get_case(case_id)
        self._run_in_scope(case.run_id, ctx, f"case {case_id}")
        self._require_sealing("case")
        trace = self._source_trace(case_id)
        keys = [case.seal_subject(), *([trace] if trace else [])]
        done = self._erasure_of(case_id)
        if done is not None:
            self._destroy(keys, done)
            return done
        if case.opened.subject:
            raise ValidationError(
                f"case: case {case_id} belongs to data subject {case.opened.subject!r}, whose "
                "cases of the run share one key: erase them with `erase --subject`",
                field="case",
            )
        refs = self._erasable_refs(case_id, trace)
        if not refs:
            raise ValidationError(
                f"case: case {case_id} has no sealed payload to erase", field="case"
            )
        erasure = self._record_erasure(case_id, case.seal_subject(), refs, ctx, why)
        self._destroy(keys, erasure)
        return erasure

    def erase_subject(self, subject: str, ctx: Context, reason: str | None) -> list[Erasure]:
        """Erase every sealed payload of a data subject's cases in the context's project.

        One `PayloadErased` per case holding sealed payloads (each case shows its erasure),
        then each (run, subject) key is destroyed. Everything is checked before anything is
        written: a subject with no case in scope is not found, and one case with inline text
        (or recorded from a trace) refuses the whole erasure. Cases erased before are finished.
        """
        why = require_reason(reason, "erasing a subject's payloads")
        ctx.scope.require(*HUMAN_ACTS[PayloadErased])
        self._require_sealing("subject")
        cases = self._cases_of_subject(subject, ctx)
        if not cases:
            raise NotFoundError(f"subject: no case names data subject {subject!r}", field="subject")
        done: list[Erasure] = []
        todo: list[tuple[UUID, str, list[str]]] = []
        keys: list[str] = []
        for case_id, key in cases:
            trace = self._source_trace(case_id)
            keys.extend([key, *([trace] if trace else [])])
            earlier = self._erasure_of(case_id)
            if earlier is not None:
                done.append(earlier)
            elif refs := self._erasable_refs(case_id, trace):
                todo.append((case_id, key, refs))
        if not todo and not done:
            raise ValidationError(
                f"subject: the cases of data subject {subject!r} have no sealed payload to erase",
                field="subject",
            )
        erasures = [self._record_erasure(c, key, refs, ctx, why) for c, key, refs in todo]
        self._destroy(list(dict.fromkeys(keys)), (erasures or done)[0])
        return [*erasures, *done]

    def _require_sealing(self, field: str) -> None:
        """Refuse erasure on a store that keeps payloads inline (nothing in it is erasable).

        Such a store was created with `EVALEDGER_SEAL_PAYLOADS=0`, or before sealing was the
        default and not switched on since: every personal string is in the events the chain
        covers. Said before looking at the cases, so the reason is the store's, not a case's.
        """
        if not self.seal_payloads:
            raise ValidationError(
                f"{field}: this store does not seal payloads (created with "
                "EVALEDGER_SEAL_PAYLOADS=0, or before sealing was the default), so its "
                "messages, prompts and replies are stored inline in the hash-chained events and "
                "cannot be erased; `evaledger migrate --seal-payloads` seals what is recorded "
                "from then on (see docs/audit.md, Erasure)",
                field=field,
            )

    def _record_erasure(
        self, case_id: UUID, key: str, refs: list[str], ctx: Context, why: str
    ) -> Erasure:
        body = {"subject": key, "refs": refs, "reason": why}
        written = self._fact(case_id, PayloadErased, ctx, body)
        erasure = self._erasure_of(case_id)
        if erasure is None:  # pragma: no cover - the event was just written
            raise ConflictError(f"case {case_id}: the erasure was not recorded")
        return Erasure(case_id, erasure.refs, erasure.erased_at, erasure.erased_by, why, written)

    def _erasable_refs(self, case_id: UUID, trace: str | None) -> list[str]:
        """The sealed references of the case and of the trace it was recorded from (if any).

        Refused when either holds personal text inline (received before sealing was on).
        """
        refs, inline = self._sealed_refs(case_id)
        if trace is not None:
            trace_refs, trace_inline = self._sealed_refs(UUID(trace))
            refs.extend(trace_refs)
            inline.extend(f"{what} of OTLP trace {trace}" for what in trace_inline)
        if inline:
            raise ValidationError(
                f"case: case {case_id} holds personal text stored inline before sealing was on "
                f"({', '.join(inline)}): the chain covers those bytes, so they cannot be erased "
                "without breaking it (see docs/audit.md, Erasure)",
                field="case",
            )
        return refs

    def _cases_of_subject(self, subject: str, ctx: Context) -> list[tuple[UUID, str]]:
        """(case id, vault key name) of the cases naming `subject`, in the context's project."""
        found: list[tuple[UUID, str]] = []
        projects: dict[str, str] = {}
        start = 1
        needle = orjson.dumps(subject)
        while rows := self.log_rows(start, PAGE):
            for _, oid, _, topic, state in rows:
                if topic != CaseOpened.topic() or needle not in state:
                    continue
                opened = orjson.loads(state)
                if opened.get("subject") != subject:
                    continue
                run_id = str(opened["run_id"])
                if run_id not in projects:
                    projects[run_id] = self.get_run(UUID(run_id)).created.project
                if ctx.project is None or projects[run_id] == ctx.project:
                    found.append((UUID(oid), subject_key(run_id, subject, oid)))
            start = rows[-1][0] + 1
        return found

    def unsealed(self, state: dict[str, Any]) -> dict[str, Any]:
        """A decoded stored state with its sealed strings put back (or the erasure's wording)."""
        return self.recorder.unseal(state) if sealed_ref(state) is not None else state

    def opened(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """A copy of a decoded stored state with its sealed strings decrypted, or None.

        None when its payload does not open (erased, missing, damaged); the state itself when
        nothing in it is sealed. The search projection's one way to the plaintext
        (`projections/decode.py`): `state` is left as it was, since the other projections fold
        the same dict.
        """
        if sealed_ref(state) is None:
            return state
        return self.recorder.open_sealed(orjson.loads(orjson.dumps(state)))

    def opened_many(self, states: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """`opened` of each state, the sealed ones' payloads read in one transaction.

        A catch-up opens a page's sealed events together (`projections/decode.py`).
        """
        sealed = [s for s in states if sealed_ref(s) is not None]
        found = iter(self.recorder.open_sealed_many(sealed) if sealed else ())
        return [next(found) if sealed_ref(s) is not None else s for s in states]

    def erasure_of(self, case_id: UUID) -> Erasure | None:
        """The case's erasure (when, by whom, why), if it was erased."""
        return self._erasure_of(case_id)

    def _destroy(self, keys: list[str], erasure: Erasure) -> None:
        """Destroy each key (the case's or subject's, its trace's) and its ciphertexts."""
        tomb = Tombstone(erasure.erased_at, erasure.erased_by, erasure.reason)
        for key in keys:
            self.recorder.erase_payloads(key, tomb)

    def _erasure_of(self, case_id: UUID) -> Erasure | None:
        for event in self.events_of(case_id):
            if isinstance(event, PayloadErased):
                return Erasure(
                    case_id,
                    tuple(event.refs),
                    event.timestamp.isoformat(),
                    event.actor,
                    event.reason,
                    None,
                )
        return None

    def _source_trace(self, case_id: UUID) -> str | None:
        """The Trace aggregate a case was recorded from (its spans' text is erased with it)."""
        start = 1
        wanted = str(case_id).encode()
        while rows := self.log_rows(start, PAGE):
            for _, oid, _, topic, state in rows:
                if (
                    topic == TraceRecorded.topic()
                    and wanted in state
                    and orjson.loads(state).get("case_id") == str(case_id)
                ):
                    return oid
            start = rows[-1][0] + 1
        return None

    def _sealed_refs(self, case_id: UUID) -> tuple[list[str], list[str]]:
        """The case's sealed references, and its events that hold personal text inline."""
        refs: list[str] = []
        inline: list[str] = []
        for stored in self.stored_events_of(case_id):
            name, _ = split_topic(stored.topic)
            paths_of = SEALED_FIELDS.get(name)
            if paths_of is None:
                continue
            state = orjson.loads(stored.state)
            entry = sealed_ref(state)
            if entry is not None:
                refs.append(str(entry["ref"]))
            elif any(True for _ in paths_of(state)):
                inline.append(f"{name.rsplit('.', 1)[-1]} v{stored.originator_version}")
        return refs, inline


def payload_problems(ledger: LedgerStore) -> list[tuple[int, str]]:
    """What a full `verify` finds wrong with the sealed payloads: (log position, finding).

    Each sealed reference in the log must be stored and open, under its subject's key, to the
    plaintext whose SHA-256 it is, unless its case recorded `PayloadErased` naming it. A stored
    payload no event names is reported too (a row written outside evaledger), at position 0.
    """
    named: dict[str, tuple[int, str]] = {}
    erased: set[str] = set()
    for position, oid, state, topic in _sealed_states(ledger):
        if topic == PayloadErased.topic_name:
            erased.update(str(r) for r in state.get("refs", ()))
            continue
        entry = sealed_ref(state)
        if entry is not None:
            where = f"{topic.rsplit('.', 1)[-1]} of {oid} at position {position}"
            named[str(entry["ref"])] = (position, where)
    problems: list[tuple[int, str]] = []
    seen: set[str] = set()
    after = ""
    while page := ledger.recorder.payload_page(after, PAGE):
        for p in page:
            seen.add(p.ref)
            position, where = named.get(p.ref, (0, ""))
            if not where:
                problems.append((0, f"payload {p.ref[:12]}: stored but named by no event"))
            elif p.key is None:
                problems.append((position, f"payload {p.ref[:12]} ({where}): its key is gone"))
            else:
                try:
                    decrypt(p.key, p.ref, p.subject, p.nonce, p.ciphertext)
                except PayloadError as e:
                    problems.append((position, f"{e} ({where})"))
        after = page[-1].ref
    for ref, (position, where) in named.items():
        if ref not in seen and ref not in erased:
            problems.append(
                (position, f"payload {ref[:12]} ({where}): missing, and no erasure names it")
            )
    return problems


def _sealed_states(ledger: LedgerStore) -> Iterator[tuple[int, str, dict[str, Any], str]]:
    """(position, aggregate id, decoded state, topic name) of each sealed or erasure event."""
    start = 1
    wanted = {*SEALED_FIELDS, PayloadErased.topic_name}
    while rows := ledger.log_rows(start, PAGE):
        for position, oid, _, topic, state in rows:
            name, _ = split_topic(topic)
            if name in wanted and (name == PayloadErased.topic_name or b"payload_ref" in state):
                yield position, oid, orjson.loads(state), name
        start = rows[-1][0] + 1
