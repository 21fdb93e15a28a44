"""Bounded input: JSON depth and zip members checked on raw bytes, YAML loaded within limits.

Parsers spend memory on nesting (a 200 KB body of `[` × 100,000 cost 10 GB through the streamed
import path), on inflated bytes (a 4 MB `.eval` member inflating to 524 MB) and on YAML aliases
(a 625-byte "billion laughs" expanding past 8 GB). JSON and zips are checked on the raw bytes, in
constant memory, before any parser sees them: every importer (`detect` runs first on every file)
and every JSON request body (api/limits.py) go through here. Every YAML the product reads
(promptfoo outputs, rubric files) is loaded by `load_yaml`, which counts nodes as it composes
them, each alias counted as the whole subtree it stands for.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml._yaml import CParser
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import Node
from yaml.resolver import Resolver

from evaledger.domain.errors import ValidationError

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (bundles need about 8)."""
MEMBER_BYTES_ENV = "EVALEDGER_MAX_ZIP_MEMBER_BYTES"
MAX_MEMBER_BYTES = 64 * 1024 * 1024
"""Largest inflated zip member (overridden by EVALEDGER_MAX_ZIP_MEMBER_BYTES)."""
MAX_ARCHIVE_BYTES = 2 * 1024 * 1024 * 1024
"""Largest inflated total of one archive."""
MAX_RATIO = 200
"""Largest inflated/compressed ratio of a member past RATIO_FLOOR bytes (JSON logs reach ~20)."""
RATIO_FLOOR = 16 * 1024 * 1024
CHUNK = 1024 * 1024

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A whole JSON string, escapes included (a backslash and the byte after it, any byte)."""
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
"""The rest of a string begun in an earlier chunk, up to its closing quote (or a lone final
backslash, or the end of the chunk)."""
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_QUOTE_BYTE, _BACKSLASH_BYTE = b'"', b"\\"
_BACKSLASH, _OPEN_PAREN = ord("\\"), ord("(")


class DepthScanner:
    """Counts JSON nesting over chunks of bytes, outside strings; refuses past the limit.

    Each chunk is reduced in C (regular expressions, `bytes.translate`, `bytes.replace`): its
    strings are removed, what is left is kept to its brackets, and the innermost pairs are
    removed until none is left; the depth it can reach is then bounded by the depth before it,
    the brackets left open and the rounds of removal. Only a chunk whose bound passes the limit
    (never a real bundle: they nest about 8 deep) is walked bracket by bracket, which decides.
    The byte-by-byte state machine this replaces is the reference in the tests
    (`tests/reliability/test_depth_scanner.py`).
    """

    def __init__(self, where: str, field: str = "file", limit: int = MAX_JSON_DEPTH) -> None:
        self.where, self.field, self.limit = where, field, limit
        self.depth = 0
        self.in_string = False
        self.skip_first = False  # the chunk before ended on a backslash inside a string

    def feed(self, chunk: bytes) -> None:
        """Scan the next bytes."""
        start = 0
        if self.in_string:
            if not chunk:
                return
            start = 1 if self.skip_first else 0
            self.skip_first = False
            end = _STRING_REST.match(chunk, start).end()  # type: ignore[union-attr]  # always
            if end >= len(chunk):
                return  # the string goes on in the next chunk
            if chunk[end] == _BACKSLASH:  # a lone backslash at the very end: it escapes on
                self.skip_first = True
                return
            start, self.in_string = end + 1, False  # past the closing quote
        outside = _STRING.sub(b"", chunk[start:] if start else chunk)
        opened = outside.find(_QUOTE_BYTE)
        if opened >= 0:
            # A string left open at the end of the chunk: no quote is unescaped in it, so no
            # string was removed from within it. An odd run of backslashes ends it on an escape.
            rest = outside[opened + 1 :]
            self.in_string = True
            self.skip_first = (len(rest) - len(rest.rstrip(_BACKSLASH_BYTE))) % 2 == 1
            outside = outside[:opened]
        brackets = outside.translate(_PARENS, _NOT_BRACKETS)
        if not brackets:
            return
        left, rounds = brackets, 0
        while b"()" in left:
            if rounds > self.limit:  # deeper than the limit somewhere, or nearly: walk
                self._walk(brackets)
                return
            left = left.replace(b"()", b"")
            rounds += 1
        unopened = len(left) - len(left.lstrip(b")"))
        unclosed = len(left) - unopened
        # Any prefix of the chunk reaches at most its unclosed brackets plus one pair's depth.
        if self.depth + unclosed + rounds > self.limit:
            self._walk(brackets)
        else:
            self.depth += unclosed - unopened

    def _walk(self, brackets: bytes) -> None:
        depth = self.depth
        for c in brackets:
            if c == _OPEN_PAREN:
                depth += 1
                if depth > self.limit:
                    raise ValidationError(
                        f"{self.where}: JSON nested deeper than {self.limit} levels",
                        field=self.field,
                    )
            else:
                depth -= 1
        self.depth = depth


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
    limit = max_member_bytes()
    if size > limit:
        raise ValidationError(
            f"{where}: inflates past {limit} bytes (a zip bomb? the limit is {MEMBER_BYTES_ENV})",
            field="file",
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


def max_member_bytes() -> int:
    """The largest inflated zip member: EVALEDGER_MAX_ZIP_MEMBER_BYTES, else MAX_MEMBER_BYTES."""
    text = os.environ.get(MEMBER_BYTES_ENV, "").strip()
    if not text:
        return MAX_MEMBER_BYTES
    if not text.isdigit() or int(text) < 1:
        raise ValidationError(
            f"{MEMBER_BYTES_ENV}: a whole number of bytes above 0, got {text!r}",
            field=MEMBER_BYTES_ENV,
        )
    return int(text)


# ---------------------------------------------------------------------------------------------
# YAML

MAX_YAML_BYTES = 16 * 1024 * 1024
"""Largest YAML document read (promptfoo's JSON output is streamed and has no such limit)."""
MAX_YAML_NODES = 250_000
"""Most nodes in one YAML document, every alias counted as the whole subtree it repeats."""
MAX_YAML_ALIASES = 10_000
"""Most aliases (`*name`) in one YAML document."""
_YAML_1_2_BOOLEANS = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_BOOL = "tag:yaml.org,2002:bool"


class YamlLimitError(ValueError):
    """A YAML document past MAX_YAML_NODES, MAX_YAML_ALIASES or MAX_YAML_BYTES."""


class _BoundedComposer(Composer):
    """PyYAML's composer, counting nodes as composed and aliases as what they expand to.

    Composition itself keeps one node per event of the input, but every consumer (the
    constructor's objects serialised again, a validator walking them) pays for the expansion:
    an alias is counted as the subtree it names, measured when that subtree was composed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.nodes = 0
        self.aliases = 0
        self.sizes: dict[str, int] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[attr-defined]  # the parser's (mixin)
        if isinstance(event, AliasEvent):
            if event.anchor is not None and event.anchor in self.anchors:
                size = self.sizes.get(event.anchor)
                if size is None:
                    raise YamlLimitError(f"the alias *{event.anchor} refers to itself")
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise YamlLimitError(f"more than {MAX_YAML_ALIASES} aliases")
                self._count(size)
            return super().compose_node(parent, index)
        before = self.nodes
        self._count(1)
        node = super().compose_node(parent, index)
        if isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None:
            self.sizes[event.anchor] = self.nodes - before
        return node

    def compose_document(self) -> Node | None:
        node = super().compose_document()
        self.sizes = {}
        return node

    def _count(self, nodes: int) -> None:
        self.nodes += nodes
        if self.nodes > MAX_YAML_NODES:
            raise YamlLimitError(
                f"more than {MAX_YAML_NODES} nodes once its aliases are expanded "
                '(a "billion laughs"?)'
            )


class BoundedYamlLoader(_BoundedComposer, CParser, SafeConstructor, Resolver):
    """A safe loader (libyaml's parser, PyYAML's composer and safe constructor) with limits."""

    def __init__(self, stream: str | bytes) -> None:
        CParser.__init__(self, stream)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


class _Yaml12BooleansLoader(BoundedYamlLoader):
    """`yes`, `no`, `on`, `off` are strings; only `true` and `false` are booleans (YAML 1.2)."""


_Yaml12BooleansLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}
_Yaml12BooleansLoader.add_implicit_resolver(_BOOL, _YAML_1_2_BOOLEANS, list("tTfF"))


def load_yaml(
    source: Path | str, where: str, field: str = "file", *, yaml_1_2: bool = False
) -> Any:
    """The one YAML loader of the product: a file (or text) within the limits above, loaded safely.

    `yaml_1_2`: `yes`/`no`/`on`/`off` stay strings (rubric labels), as YAML 1.2 reads them.
    A document past a limit raises ValidationError naming `where`; a malformed one raises
    ValueError (`not valid YAML at line L, column C: problem`) for the caller to name.
    """
    if isinstance(source, Path):
        with source.open("rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            raise ValidationError(f"{where}: YAML larger than {MAX_YAML_BYTES} bytes", field=field)
        # utf-8-sig: a byte order mark (editors on Windows write one) is not part of the text.
        text = data.decode("utf-8-sig")
    else:
        text = source
        if len(text) > MAX_YAML_BYTES:
            raise ValidationError(f"{where}: YAML larger than {MAX_YAML_BYTES} bytes", field=field)
    loader = (_Yaml12BooleansLoader if yaml_1_2 else BoundedYamlLoader)(text)
    try:
        return loader.get_single_data()
    except YamlLimitError as e:
        raise ValidationError(f"{where}: YAML refused: {e}", field=field) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ValueError(f"not valid YAML{at}: {problem}") from None
    finally:
        loader.dispose()
