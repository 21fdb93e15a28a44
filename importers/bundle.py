"""Run bundles (`evaledger.run-bundle/1`), the ledger's own interchange format.

A bundle file is streamed: its cases are parsed one by one with ijson (the C backend when
installed), so memory stays flat however many cases the file holds. The file is read twice: a
header pass (everything but the cases, which checks the whole file is well-formed JSON holding
no lone surrogate escape), then the ledger's one pass over the cases (each validated and built
once, the chunks written once the whole stream was built; issue 32). `run` may come before or
after `cases`.

Each case gets the checks a whole-file parse gives (`parse_input_json`: NUL characters, integers
beyond 2^53, lone surrogates, non-finite numbers, malformed JSON) with the field's path in the
error. ijson's floats are parsed to the same doubles orjson gives, so a streamed import stores
the same bytes as a whole-file one. Bad input in a file of at most `WHOLE_FILE_MAX` bytes is
re-read whole, so its error is the whole-file parse's, naming the field; in a larger file the
error names the case and the byte offset.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, Any

import pydantic

from evaledger.domain import collector
from evaledger.domain.bundle import BUNDLE_FORMAT, BundleCase, RunBundle
from evaledger.domain.input_limits import check_json_stream
from evaledger.domain.types import (
    UnstorableJSONError,
    may_be_unstorable,
    parse_input_json,
    unstorable,
)
from evaledger.importers.base import Format, PeerImport, fail

WHOLE_FILE_MAX = 64 * 2**20
"""Bad input in a bundle up to this size is re-read whole for the whole-file parse's error."""
CASES = "cases.item"
_BLOCK = 2**16

_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A surrogate escape (backslash, u, D800 to DFFF); a real escape only after an even run of
backslashes (possibly none), else an escaped backslash followed by text."""
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_MARGIN = 256
"""Bytes at the end of a block left for the next one (an escape may straddle two blocks)."""


def _surrogate_escapes(buf: bytes, start: int, stop: int) -> Iterator[tuple[int, int, bool]]:
    """(offset, end, lone) of each surrogate escape starting in buf[start:stop].

    A high escape followed by a low one is one pair (`end` after both); any other is lone.
    """
    skip = start
    for m in _ESCAPE.finditer(buf, start):
        at = m.start()
        if at >= stop:
            return
        if at < skip:
            continue  # the low half of a pair already judged
        run = 0
        while at - run > 0 and buf[at - run - 1] == 0x5C:  # a backslash
            run += 1
        if run % 2:
            continue  # an escaped backslash, then text
        end = m.end()
        if buf[at + 2] in b"89abAB" and _LOW.match(buf, end):
            skip = end + 6
            yield at, skip, False
        else:
            yield at, end, True


def describe(e: pydantic.ValidationError, prefix: str = "") -> str:
    """Every offending field of a pydantic error, one per line."""
    return "\n".join(
        f"{prefix}{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()
    )


def read_bundle(data: bytes, name: str) -> RunBundle:
    """A validated bundle from JSON bytes; errors name the source and every bad field."""
    try:
        with collector.paused():  # a whole file of small objects, no cycles (validation 3x faster)
            parsed = parse_input_json(data)
    except UnstorableJSONError as e:
        raise fail(name, str(e)) from None
    if isinstance(parsed, dict) and parsed.get("format") != BUNDLE_FORMAT:
        raise fail(
            name,
            f"format: expected {BUNDLE_FORMAT!r}, got {parsed.get('format')!r}",
            field="format",
        )
    try:
        with collector.paused():
            return RunBundle.model_validate(parsed)
    except pydantic.ValidationError as e:
        raise fail(name, f"invalid run bundle:\n{describe(e, '  ')}") from None


class _Scanning:
    """A binary file whose blocks are searched for lone surrogate escapes as they are read.

    ijson's C backend turns a lone high surrogate escape into `?` (and a lone low one into an
    error), so the bytes are checked before the parser sees them.
    """

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.tail = b""
        self.base = 0  # file offset of tail[0]
        self.judged = 0  # escapes starting before this offset are judged
        self.lone: int | None = None  # offset of the first lone surrogate escape
        self.suspect = False  # a NUL escape or a 16-digit run may be in the file

    def read(self, n: int = -1) -> bytes:
        block = self.f.read(n)
        buf = self.tail + block
        stop = len(buf) - (_MARGIN if block else 0)
        # Blocks overlap by the kept tail, so an escape or a digit run across two is seen.
        self.suspect = self.suspect or may_be_unstorable(buf)
        for at, end, lone in _surrogate_escapes(buf, max(0, self.judged - self.base), stop):
            if lone and self.lone is None:
                self.lone = self.base + at
            self.judged = self.base + end
        self.judged = max(self.judged, self.base + stop)
        keep = min(len(buf), 2 * _MARGIN)
        self.base += len(buf) - keep
        self.tail = buf[len(buf) - keep :]
        return block


def _surrogate_problem(data: bytes) -> int | None:
    """The offset of the first lone surrogate escape in JSON bytes, if any (whole-buffer scan)."""
    return next((at for at, _, lone in _surrogate_escapes(data, 0, len(data)) if lone), None)


class _BadInput(Exception):
    """The header pass met bad input; `detail` says what, for a file too large to re-read."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _header(f: IO[bytes]) -> tuple[dict[str, Any], int, bool]:
    """Everything but the cases (kept as an empty list), its case count and a suspect flag.

    One whole read. The flag says whether any value may be unstorable (a NUL escape or a
    16-digit run in the bytes); yajl refuses raw control characters and the scan finds lone
    surrogates, so without either the per-case walk of `unstorable` can be skipped.
    """
    # lazy: ijson, imported by the two functions that parse: the CLI's console imports this
    # module (for `describe`) on every command, and only `import` reads a bundle (issue 19).
    import ijson

    scan = _Scanning(f)
    builder = ijson.ObjectBuilder()
    count = 0
    try:
        for prefix, event, value in ijson.parse(scan, use_float=True):
            if prefix.startswith("cases."):
                if prefix == CASES and event == "start_map":
                    count += 1
                continue
            if prefix == "cases" and event == "start_map":
                raise _BadInput("invalid run bundle:\n  cases: Input should be a valid list")
            builder.event(event, value)
    except (ijson.common.JSONError, UnicodeDecodeError) as e:
        if scan.lone is None:
            raise _BadInput(f"malformed JSON: {e}") from None
    if scan.lone is not None:
        raise _BadInput(
            "lone surrogates are not allowed (not valid Unicode): a \\u escape without its "
            f"pair at byte {scan.lone}"
        )
    head = getattr(builder, "value", None)
    if not isinstance(head, dict):
        raise _BadInput("invalid run bundle:\n  Input should be a valid dictionary")
    return head, count, scan.suspect


def _check_header(head: dict[str, Any], name: str) -> RunBundle:
    """The bundle's format and run (with no cases), checked as a whole-file parse would."""
    found = unstorable(head)
    if found is not None:
        raise fail(name, f"{found[0]}: {found[1]}")
    if head.get("format") != BUNDLE_FORMAT:
        raise fail(
            name, f"format: expected {BUNDLE_FORMAT!r}, got {head.get('format')!r}", "format"
        )
    try:
        return RunBundle.model_validate(head)
    except pydantic.ValidationError as e:
        raise fail(name, f"invalid run bundle:\n{describe(e, '  ')}") from None


def stream_cases(f: IO[bytes], name: str, suspect: bool = True) -> Iterator[BundleCase]:
    """The cases of a bundle file, parsed, checked and validated one by one.

    `suspect=False` (the header pass found no NUL escape and no 16-digit run in the file) skips
    the walk over each case for unstorable values: it could find nothing.
    """
    import ijson  # lazy: ijson, see `_header`

    i = 0
    try:
        for i, raw in enumerate(ijson.items(f, CASES, use_float=True)):
            found = unstorable(raw, f"cases.{i}") if suspect else None
            if found is not None:
                raise fail(name, f"{found[0]}: {found[1]}")
            try:
                case = BundleCase.model_validate(raw)
            except pydantic.ValidationError as e:
                raise fail(name, f"invalid run bundle:\n{describe(e, f'  cases.{i}.')}") from None
            del raw
            yield case
    except (ijson.common.JSONError, UnicodeDecodeError) as e:
        # The header pass read the same bytes: only a file changed under us gets here.
        raise fail(name, f"cases.{i}: malformed JSON: {e}") from None


def open_bundle(path: Path) -> PeerImport:
    """A bundle file (`-` reads standard input, spooled to a temporary file), streamed."""
    if str(path) != "-":
        try:
            size = path.stat().st_size
        except OSError as e:
            raise fail(path, e.strerror or "cannot be read") from None
        return _open_bundle(str(path), size, lambda: _open(path))
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the import
    try:
        shutil.copyfileobj(sys.stdin.buffer, spool, _BLOCK * 16)
        spool.seek(0)
        check_json_stream(spool, "-")  # nesting depth, as `detect` checks a named file
        spool.seek(0, 2)

        def opened() -> AbstractContextManager[IO[bytes]]:
            spool.seek(0)
            return nullcontext(spool)

        found = _open_bundle("-", spool.tell(), opened)
    except BaseException:
        spool.close()
        raise
    # The spooled input lives as long as the import can be read again.
    weakref.finalize(found, spool.close)
    return found


def _open_bundle(
    name: str, size: int, opened: Callable[[], AbstractContextManager[IO[bytes]]]
) -> PeerImport:
    try:
        with opened() as f:
            head, count, suspect = _header(f)
    except _BadInput as e:
        if size > WHOLE_FILE_MAX:
            raise fail(name, e.detail) from None
        # Small enough to parse whole: the whole-file parse names the field.
        with opened() as f:
            bundle = read_bundle(f.read(), name)
        return PeerImport(
            format=Format.BUNDLE,
            sources=(name,),
            run=bundle.run,
            cases=lambda: bundle.cases,
            count=len(bundle.cases),
        )
    run = _check_header(head, name).run

    def cases() -> Iterator[BundleCase]:
        with opened() as f:
            yield from stream_cases(f, name, suspect)

    return PeerImport(format=Format.BUNDLE, sources=(name,), run=run, cases=cases, count=count)


@contextmanager
def _open(path: Path) -> Iterator[IO[bytes]]:
    try:
        f = path.open("rb")
    except OSError as e:
        raise fail(path, e.strerror or "cannot be read") from None
    with f:
        yield f
