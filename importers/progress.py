"""A rich progress bar counting imported cases, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def case_progress(label: str, enabled: bool | None = None) -> Iterator[Callable[[int, int], None]]:
    """A `(done, total)` callback drawing a bar on stderr (a no-op when not a TTY)."""
    if not (sys.stderr.isatty() if enabled is None else enabled):
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cases"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    ) as bar:
        task = bar.add_task(f"checking · {label}", total=None)

        def update(done: int, total: int) -> None:
            # A total of 0 is the validating first pass (length unknown); then the writes.
            if total:
                bar.update(task, description=f"writing · {label}", completed=done, total=total)
            else:
                bar.update(task, completed=done)

        yield update
