"""The server's trace completion loop: complete OTLP traces become cases of online runs.

In a thread of its own, every few seconds, `complete_traces` records the traces whose root span
has arrived and that got no span for the quiet period (`Settings.trace_quiet_s`,
EVALEDGER_TRACE_QUIET). Several server processes may run it at once: a trace is recorded in one
transaction with its case, and a second recording of it writes nothing.
"""

from __future__ import annotations

import logging
import threading

from evaledger.application.ports import Services
from evaledger.application.traces import TraceCursor, complete_traces
from evaledger.domain.ledger import Context

log = logging.getLogger(__name__)

ACTOR = "otlp"
"""Who records the cases of received traces."""


def every_s(quiet_s: float) -> float:
    """How often the loop looks: half the quiet period, between 0.2 s and 5 s."""
    return min(5.0, max(0.2, quiet_s / 2))


class TraceCompletion:
    """Runs `complete_traces` periodically until stopped."""

    def __init__(self, services: Services, quiet_s: float) -> None:
        self.services, self.quiet_s = services, quiet_s
        self.cursor = TraceCursor()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evaledger-traces", daemon=True)

    def start(self) -> None:
        """Start looking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the pass in progress, if any."""
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        ctx = Context(actor=ACTOR)
        while not self._stop.wait(every_s(self.quiet_s)):
            try:
                done = complete_traces(self.services, ctx, quiet_s=self.quiet_s, cursor=self.cursor)
            except Exception:
                log.exception("completing traces failed; trying again at the next pass")
                self.cursor = TraceCursor()
                continue
            if done.cases:
                log.info("recorded %d trace(s) as online cases", done.cases)
