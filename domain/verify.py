"""Tamper evidence: recompute every hash chain and every run seal from the stored bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import orjson

from evaledger.domain.aggregates import seal_of
from evaledger.domain.events import GENESIS_HASH, CasesAttached, RunCompleted, stored_hash
from evaledger.domain.ledger import Ledger

PAGE = 5000


@dataclass
class VerifyReport:
    """What `evaledger verify` found."""

    events: int = 0
    aggregates: int = 0
    runs_sealed: int = 0
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No broken link, no broken seal."""
        return not self.broken


def verify(ledger: Ledger, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Walk the whole log once: check each event's prev_hash, then each RunCompleted's seal."""
    report = VerifyReport()
    last_hash: dict[str, str] = {}
    last_version: dict[str, int] = {}
    run_cases: dict[str, list[UUID]] = {}
    head = ledger.position()
    start = 1
    attached_topic = CasesAttached.topic()
    completed_topic = RunCompleted.topic()
    while True:
        page = ledger.notifications(start, PAGE)
        if not page:
            break
        for n in page:
            oid = str(n.originator_id)
            state = orjson.loads(n.state)
            expected = last_hash.get(oid, GENESIS_HASH)
            if state.get("prev_hash") != expected:
                report.broken.append(
                    f"aggregate {oid} version {n.originator_version} (position {n.id}): prev_hash "
                    f"{str(state.get('prev_hash'))[:12]}… does not match the hash of version "
                    f"{last_version.get(oid, 0)} ({expected[:12]}…)"
                )
            if n.originator_version != last_version.get(oid, 0) + 1:
                report.broken.append(
                    f"aggregate {oid}: version {n.originator_version} "
                    f"follows {last_version.get(oid, 0)}"
                )
            if n.topic == attached_topic:
                run_cases.setdefault(oid, []).extend(UUID(c) for c in state["case_ids"])
            elif n.topic == completed_topic:
                hashes = {
                    cid: last_hash.get(str(cid), GENESIS_HASH) for cid in run_cases.get(oid, [])
                }
                if seal_of(hashes) != state["seal"]:
                    report.broken.append(
                        f"run {oid} (position {n.id}): seal does not match its cases' hashes"
                    )
                report.runs_sealed += 1
            last_hash[oid] = stored_hash(n.topic, n.state)
            last_version[oid] = n.originator_version
            report.events += 1
        start = page[-1].id + 1
        if progress is not None:
            progress(page[-1].id, head)
    report.aggregates = len(last_hash)
    return report
