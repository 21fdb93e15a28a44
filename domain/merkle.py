"""A Merkle tree over a sequence of leaves, hashed as RFC 6962 (Certificate Transparency) says.

Lane-agnostic: the tree knows leaves in order, nothing of events, positions or projects (a lane's
log, or the heads of several lanes, are both sequences of leaves). SHA-256 throughout:

- leaf hash  `H(0x00 ‖ data)`, node hash `H(0x01 ‖ left ‖ right)`, the empty tree `H()`;
- `Frontier`: the roots of the complete subtrees of a tree of size N (one per set bit of N),
  enough to append leaves and to compute the root without the leaves (the stored, incremental
  state: appending costs one leaf hash and O(log N) node hashes at most);
- `Tree`: every level of a tree held as packed bytes, for the proofs (RFC 6962 §2.1.1 PATH,
  §2.1.2 PROOF/SUBPROOF);
- `verify_inclusion` / `verify_consistency`: the verification algorithms of RFC 9162
  §2.1.3.2 and §2.1.4.2 (RFC 6962's successor, same hashing), which need no tree at all.

Checked against the RFC 6962 test vectors that Certificate Transparency's and Trillian's
implementations share (`tests/domain/test_merkle.py`, `tests/fixtures/README.md`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof that does not verify: the message says how."""


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 ‖ data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 ‖ left ‖ right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


@dataclass
class Frontier:
    """The roots of the complete subtrees of a tree of `size` leaves, largest (leftmost) first."""

    size: int = 0
    nodes: list[bytes] = field(default_factory=list)

    def append(self, leaf: bytes) -> None:
        """Append one leaf hash (not the leaf's data)."""
        self.nodes.append(leaf)
        self.size += 1
        n = self.size
        while n & 1 == 0:  # each trailing zero bit merges two equal subtrees
            right = self.nodes.pop()
            self.nodes[-1] = node_hash(self.nodes[-1], right)
            n >>= 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append leaf hashes in order."""
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """The tree's root (RFC 6962 MTH): the subtrees folded from the right."""
        if not self.nodes:
            return EMPTY_ROOT
        root = self.nodes[-1]
        for node in reversed(self.nodes[:-1]):
            root = node_hash(node, root)
        return root

    def to_hex(self) -> list[str]:
        """The subtree roots as hex, for storing."""
        return [n.hex() for n in self.nodes]

    @classmethod
    def from_hex(cls, size: int, nodes: Sequence[str]) -> Frontier:
        """A stored frontier; refused when it cannot be one of a tree of `size` leaves."""
        parsed = [bytes.fromhex(n) for n in nodes]
        if size < 0 or len(parsed) != size.bit_count() or any(len(n) != HASH_SIZE for n in parsed):
            raise ValueError(f"not the frontier of a tree of {size} leaves")
        return cls(size, parsed)


class Tree:
    """Every level of a tree over leaf hashes, packed: inclusion and consistency proofs.

    Memory: about 64 bytes a leaf (the leaves and the complete nodes above them).
    """

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self.levels: list[bytearray] = [bytearray()]
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        """How many leaves."""
        return len(self.levels[0]) // HASH_SIZE

    def append(self, leaf: bytes) -> None:
        """Append one leaf hash; complete the nodes it finishes."""
        if len(leaf) != HASH_SIZE:
            raise ValueError("a leaf hash is 32 bytes")
        self.levels[0] += leaf
        level, index = 0, self.size - 1
        while index & 1:
            below = self.levels[level]
            parent = node_hash(
                bytes(below[(index - 1) * HASH_SIZE : index * HASH_SIZE]),
                bytes(below[index * HASH_SIZE : (index + 1) * HASH_SIZE]),
            )
            level, index = level + 1, index >> 1
            if len(self.levels) == level:
                self.levels.append(bytearray())
            self.levels[level] += parent

    def leaf(self, index: int) -> bytes:
        """The leaf hash at `index`."""
        return bytes(self.levels[0][index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def subtree(self, lo: int, hi: int) -> bytes:
        """MTH of the leaves [lo, hi): a stored node when complete and aligned, else computed."""
        n = hi - lo
        if n <= 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            level = n.bit_length() - 1
            i = lo >> level
            return bytes(self.levels[level][i * HASH_SIZE : (i + 1) * HASH_SIZE])
        k = _split(n)
        return node_hash(self.subtree(lo, lo + k), self.subtree(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """The root of the tree of the first `size` leaves (default: all)."""
        return self.subtree(0, self.size if size is None else self._size(size))

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PATH(index, D[size]): the audit path of one leaf."""
        size = self.size if size is None else self._size(size)
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
        return self._path(index, 0, size)

    def _path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = _split(n)
        if m < k:
            return [*self._path(m, lo, lo + k), self.subtree(lo + k, hi)]
        return [*self._path(m - k, lo + k, hi), self.subtree(lo, lo + k)]

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(first, D[second]): the tree of `first` leaves is a prefix of this one."""
        second = self.size if second is None else self._size(second)
        if not 0 <= first <= second:
            raise ValueError(f"no consistency proof from {first} leaves to {second}")
        if first in (0, second):
            return []
        return self._subproof(first, 0, second, True)

    def _subproof(self, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if whole else [self.subtree(lo, hi)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, lo, lo + k, whole), self.subtree(lo + k, hi)]
        return [*self._subproof(m - k, lo + k, hi, False), self.subtree(lo, lo + k)]

    def _size(self, size: int) -> int:
        if not 0 <= size <= self.size:
            raise ValueError(f"the tree holds {self.size} leaves, not {size}")
        return size


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root an inclusion proof leads to (RFC 9162 §2.1.3.2); ProofError when malformed."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of {size} leaves")
    if len(leaf) != HASH_SIZE or any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("a hash in the proof is not 32 bytes")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise ProofError unless `leaf` is leaf `index` of the tree of `size` leaves with `root`."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root")


def verify_consistency(
    first: int, second: int, proof: Sequence[bytes], first_root: bytes, second_root: bytes
) -> None:
    """Raise ProofError unless the tree (first, first_root) is a prefix of (second, second_root).

    RFC 9162 §2.1.4.2; an empty first tree is a prefix of every tree (with an empty proof).
    """
    if _trivially_consistent(first, second, proof, first_root, second_root):
        return
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the consistency proof is shorter than the tree is deep")
    if fr != first_root:
        raise ProofError(f"the consistency proof does not lead to the root of the first {first}")
    if sr != second_root:
        raise ProofError(f"the consistency proof does not lead to the root of {second} leaves")


def _trivially_consistent(
    first: int, second: int, proof: Sequence[bytes], first_root: bytes, second_root: bytes
) -> bool:
    """True for equal sizes or an empty first tree (checked); ProofError for a malformed proof."""
    if not 0 <= first <= second:
        raise ProofError(f"a tree of {second} leaves cannot extend one of {first}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("a hash in the proof is not 32 bytes")
    if first == second:
        if proof or first_root != second_root:
            raise ProofError(f"two different roots for the same size {first}")
        return True
    if first == 0:
        if proof:
            raise ProofError("a proof from the empty tree must be empty")
        return True
    if not proof:
        raise ProofError("an empty consistency proof between different sizes")
    return False
