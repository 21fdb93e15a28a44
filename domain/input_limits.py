"""Bounded input: JSON nesting depth checked before parsing, zip members checked while inflating.

Parsers spend memory on nesting (a 200 KB body of `[` × 100,000 cost 10 GB through the streamed
import path) and on inflated bytes (a 1 MB `.eval` member inflating to 1 GiB). Both are checked
on the raw bytes, in constant memory, before any parser sees them: every importer (`detect`
runs first on every file) and every JSON request body (api/limits.py) go through here.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import BinaryIO

from evaledger.domain.errors import ValidationError

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (bundles need about 8)."""
MAX_MEMBER_BYTES = 512 * 1024 * 1024
"""Largest inflated zip member."""
MAX_ARCHIVE_BYTES = 2 * 1024 * 1024 * 1024
"""Largest inflated total of one archive."""
MAX_RATIO = 200
"""Largest inflated/compressed ratio of a member past RATIO_FLOOR bytes (JSON logs reach ~20)."""
RATIO_FLOOR = 16 * 1024 * 1024
CHUNK = 1024 * 1024

_TOKENS = re.compile(rb'[\[\]{}"\\]')
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = frozenset(b"[{"), frozenset(b"]}"), ord('"'), ord("\\")


class DepthScanner:
    """Counts JSON nesting over chunks of bytes, outside strings; refuses past the limit."""

    def __init__(self, where: str, field: str = "file", limit: int = MAX_JSON_DEPTH) -> None:
        self.where, self.field, self.limit = where, field, limit
        self.depth = 0
        self.in_string = False
        self.skip_first = False  # the chunk before ended on a backslash inside a string

    def feed(self, chunk: bytes) -> None:
        """Scan the next bytes."""
        skip_until = 1 if self.skip_first else 0
        self.skip_first = False
        depth, in_string = self.depth, self.in_string
        for m in _TOKENS.finditer(chunk):
            i = m.start()
            if i < skip_until:
                continue
            c = chunk[i]
            if in_string:
                if c == _BACKSLASH:
                    skip_until = i + 2
                    if skip_until > len(chunk):
                        self.skip_first = True
                elif c == _QUOTE:
                    in_string = False
            elif c == _QUOTE:
                in_string = True
            elif c in _OPEN:
                depth += 1
                if depth > self.limit:
                    raise ValidationError(
                        f"{self.where}: JSON nested deeper than {self.limit} levels",
                        field=self.field,
                    )
            elif c in _CLOSE:
                depth -= 1
        self.depth, self.in_string = depth, in_string


def check_json_stream(f: BinaryIO, where: str) -> None:
    """Scan a whole JSON (or JSON lines) stream for its nesting depth."""
    scanner = DepthScanner(where)
    while chunk := f.read(CHUNK):
        scanner.feed(chunk)


def check_json_file(path: Path) -> None:
    """Scan a JSON file (nesting depth) before any parser reads it."""
    with path.open("rb") as f:
        check_json_stream(f, str(path))


def check_zip(path: Path) -> None:
    """Inflate every member once, counting: size, total and ratio limits, JSON depth of `.json`.

    Declared sizes can lie, so the inflated bytes themselves are counted as they stream.
    """
    total = 0
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            where = f"{path} member {info.filename}"
            scanner = DepthScanner(where) if info.filename.endswith(".json") else None
            size = 0
            try:
                member = z.open(info)
            except NotImplementedError:
                # A method this Python cannot inflate (zstd): Inspect's reader brings its own;
                # the declared sizes are checked instead.
                total += info.file_size
                _check_sizes(where, info.file_size, total, info.compress_size)
                continue
            with member:
                while chunk := member.read(CHUNK):
                    size += len(chunk)
                    total += len(chunk)
                    _check_sizes(where, size, total, info.compress_size)
                    if scanner is not None:
                        scanner.feed(chunk)


def _check_sizes(where: str, size: int, total: int, compressed: int) -> None:
    if size > MAX_MEMBER_BYTES:
        raise ValidationError(
            f"{where}: inflates past {MAX_MEMBER_BYTES} bytes (a zip bomb?)", field="file"
        )
    if total > MAX_ARCHIVE_BYTES:
        raise ValidationError(
            f"{where}: the archive inflates past {MAX_ARCHIVE_BYTES} bytes", field="file"
        )
    if size > RATIO_FLOOR and size > MAX_RATIO * max(compressed, 1):
        raise ValidationError(
            f"{where}: inflates more than {MAX_RATIO} times its compressed size (a zip bomb?)",
            field="file",
        )
