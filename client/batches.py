"""Cases buffered and sent in batches (issue 32): one request and one transaction per batch.

A batch is sent when it holds `size` cases, `interval` seconds after its first case arrived (a
timer thread), and whenever the recorder flushes: before it closes the run, before a pytest-xdist
worker leaves, and at interpreter exit for whatever is still buffered (nothing is lost on a
normal exit). Sending is the recorder's (`RunRecorder`): a batch the store refuses as a whole
(one bad case refuses its transaction) is sent again case by case, so every good case is stored
and the bad one's error is raised; a batch the store could not be reached for stays buffered.
An error met by the timer thread is raised by the next `add` or `flush`.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections.abc import Callable

from evaledger.domain.bundle import BundleCase
from evaledger.domain.errors import InfrastructureError

DEFAULT_SIZE = 100
"""Cases per batch of the pytest plugin and the Inspect hook."""
DEFAULT_INTERVAL = 2.0
"""Seconds a case waits at most before its batch is sent."""

Send = Callable[[list[BundleCase]], None]


class CaseBatches:
    """The cases of one run waiting to be sent, and the timer that sends them."""

    def __init__(self, send: Send, size: int = DEFAULT_SIZE, interval: float = DEFAULT_INTERVAL):
        if size < 1 or not interval > 0:
            raise ValueError("a batch holds at least one case and waits more than 0 seconds")
        self._send = send
        self.size = size
        self.interval = interval
        self._pending: list[BundleCase] = []
        self._lock = threading.Lock()
        self._sending = threading.Lock()  # one batch at a time: batches arrive in order
        self._timer: threading.Timer | None = None
        self._error: BaseException | None = None
        self._closed = False
        atexit.register(self._at_exit)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def add(self, case: BundleCase) -> None:
        """Buffer a case; send the batch when it is full."""
        self._raise_kept()
        with self._lock:
            self._pending.append(case)
            full = len(self._pending) >= self.size
            if not full and self._timer is None:
                self._timer = threading.Timer(self.interval, self._on_timer)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.flush()

    def flush(self) -> None:
        """Send every buffered case now (raises what the store refused)."""
        self._raise_kept()
        with self._sending:
            while True:
                with self._lock:
                    batch, self._pending = self._pending[: self.size], self._pending[self.size :]
                    if not self._pending and self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
                if not batch:
                    return
                try:
                    self._send(batch)
                except InfrastructureError:
                    # Not sent (the store or server unreachable): kept to be sent again, in
                    # order. A refused case is not: its batch's good cases were stored one by
                    # one, and it would be refused again.
                    with self._lock:
                        self._pending[:0] = batch
                    raise

    def close(self) -> None:
        """Stop the timer and the exit hook (the caller flushed what it wanted sent)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        atexit.unregister(self._at_exit)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self.flush()
        except BaseException as e:  # raised in the recorder's thread by its next call
            self._error = e

    def _raise_kept(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _at_exit(self) -> None:
        if self._closed or not len(self):
            return
        try:
            self.flush()
        except BaseException as e:  # at exit nobody is left to catch it
            sys.stderr.write(f"evaledger: {len(self)} cases not recorded: {e}\n")
