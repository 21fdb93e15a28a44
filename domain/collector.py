"""Pausing the cyclic garbage collector around bulk work.

Imports, rebuilds and rescores allocate hundreds of thousands of short-lived pydantic objects,
none in reference cycles; the collector's generation scans then cost 25-55% of the time
(measured in bench/ingest.py and bench/replay.py). Reference counting still frees everything;
cycles wait until the block ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = True


@contextmanager
def paused() -> Iterator[None]:
    """Run the block with the cyclic collector off (re-entrant and thread-safe)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
