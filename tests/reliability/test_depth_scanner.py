"""The depth scanner (issue 23 item 5) reduces each chunk in C; held here to the byte-by-byte
state machine it replaced (issue 32 item 4: the scan was a sixth of `evaledger import`).

The reference walks every bracket, quote and backslash as the product did before; the product's
`DepthScanner` must agree with it on any bytes split into any chunks: the same error at the same
chunk, the same depth and string state after every chunk.
"""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaledger.domain.errors import ValidationError
from evaledger.domain.input_limits import DepthScanner

pytestmark = pytest.mark.reliability


class ReferenceScanner:
    """The state machine `DepthScanner.feed` was until session 12 (one Python step per token)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.depth = 0
        self.in_string = False
        self.skip_first = False

    def feed(self, chunk: bytes) -> None:
        skip_until = 1 if self.skip_first else 0
        self.skip_first = False
        depth, in_string = self.depth, self.in_string
        for i, c in enumerate(chunk):
            if i < skip_until or c not in b'[]{}"\\':
                continue
            if in_string:
                if c == ord("\\"):
                    skip_until = i + 2
                    if skip_until > len(chunk):
                        self.skip_first = True
                elif c == ord('"'):
                    in_string = False
            elif c == ord('"'):
                in_string = True
            elif c in b"[{":
                depth += 1
                if depth > self.limit:
                    raise ValidationError("too deep", field="x")
            elif c in b"]}":
                depth -= 1
        self.depth, self.in_string = depth, in_string


def _outcomes(scanner: DepthScanner | ReferenceScanner, chunks: list[bytes]) -> list[object]:
    seen: list[object] = []
    for chunk in chunks:
        try:
            scanner.feed(chunk)
        except ValidationError:
            seen.append("refused")
            return seen
        seen.append((scanner.depth, scanner.in_string))
    return seen


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(alphabet='[]{}"\\ab\n'),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text('[]"\\k'), inner, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200)
    | st.lists(st.sampled_from(list(b'[]{}"\\a ')), max_size=300).map(bytes),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    limit=st.integers(min_value=0, max_value=8),
)
def test_any_bytes_in_any_chunks_scan_as_the_reference(
    data: bytes, cuts: list[int], limit: int
) -> None:
    chunks = _split(data, cuts)
    expected = _outcomes(ReferenceScanner(limit), chunks)
    assert _outcomes(DepthScanner("x", limit=limit), chunks) == expected


@settings(max_examples=200, deadline=None)
@given(value=JSON, cuts=st.lists(st.integers(min_value=0), max_size=8), limit=st.integers(0, 6))
def test_json_documents_scan_as_the_reference(value: object, cuts: list[int], limit: int) -> None:
    data = orjson.dumps(value)
    chunks = _split(data, cuts)
    expected = _outcomes(ReferenceScanner(limit), chunks)
    assert _outcomes(DepthScanner("x", limit=limit), chunks) == expected
    if expected[-1] != "refused":
        assert expected[-1] == (0, False)  # a whole document closes every bracket and string


def test_a_long_balanced_nest_is_walked_not_reduced_round_by_round() -> None:
    # 50,000 pairs nested: reducing one pair per round would be 50,000 rounds over the chunk.
    scanner = DepthScanner("x")
    with pytest.raises(ValidationError, match="nested deeper than 64"):
        scanner.feed(b"[" * 50_000 + b"]" * 50_000)
    at_limit = DepthScanner("x")
    at_limit.feed(b"[" * 64 + b"]" * 64)
    assert (at_limit.depth, at_limit.in_string) == (0, False)
