"""The Merkle tree against the RFC 6962 test vectors (Certificate Transparency / Trillian).

Vectors: transparency-dev/merkle `testonly/constants.go` and `proof/verify_test.go` (Apache-2.0,
see tests/fixtures/README.md). Corruptions follow the same file's probes: every one must fail.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaledger.domain.merkle import (
    EMPTY_ROOT,
    Frontier,
    ProofError,
    Tree,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(h) for h in hexes]


# (leaf number from 1, tree size, proof) as in verify_test.go
INCLUSION = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (3, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (
        2,
        5,
        _h(
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
]
CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (
        2,
        5,
        _h(
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
    (
        6,
        7,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
]
HASHES = [leaf_hash(d) for d in LEAVES]
SOME = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def test_roots_of_every_size_match_the_vectors_frontier_and_tree_alike() -> None:
    assert Frontier().root() == EMPTY_ROOT == ROOTS[0]
    tree, frontier = Tree(), Frontier()
    for n, leaf in enumerate(HASHES, 1):
        tree.append(leaf)
        frontier.append(leaf)
        assert frontier.root() == ROOTS[n]
        assert tree.root() == ROOTS[n]
        assert len(frontier.nodes) == n.bit_count()
    for n in range(9):
        assert tree.root(n) == ROOTS[n]


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_inclusion_proofs_are_the_vectors_and_verify(
    leaf: int, size: int, proof: list[bytes]
) -> None:
    tree = Tree(HASHES)
    assert tree.inclusion_proof(leaf - 1, size) == proof
    verify_inclusion(leaf - 1, size, HASHES[leaf - 1], proof, ROOTS[size])


@pytest.mark.parametrize(("first", "second", "proof"), CONSISTENCY)
def test_consistency_proofs_are_the_vectors_and_verify(
    first: int, second: int, proof: list[bytes]
) -> None:
    tree = Tree(HASHES)
    assert tree.consistency_proof(first, second) == proof
    verify_consistency(first, second, proof, ROOTS[first], ROOTS[second])


def _inclusion_probes(
    i: int, n: int, proof: list[bytes], root: bytes, leaf: bytes
) -> list[tuple[int, int, bytes, list[bytes], bytes]]:
    probes = [
        (i - 1, n, leaf, proof, root),
        (i + 1, n, leaf, proof, root),
        (i ^ 2, n, leaf, proof, root),
        (i, n * 2, leaf, proof, root),
        (i, n // 2, leaf, proof, root),
        (i, n, leaf_hash(b"WrongLeaf"), proof, root),
        (i, n, leaf, proof, EMPTY_ROOT),
        (i, n, leaf, proof, SOME),
        (i, n, leaf, [*proof, root], root),
        (i, n, leaf, [root, *proof], root),
    ]
    for k in range(len(proof)):
        wrong = list(proof)
        wrong[k] = bytes([wrong[k][0] ^ 8]) + wrong[k][1:]
        probes.append((i, n, leaf, wrong, root))
    if proof:
        probes.append((i, n, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append((i, n, leaf, [proof[0], SOME, *proof[1:]], root))
    return probes


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION[1:])
def test_every_corrupted_inclusion_proof_fails(leaf: int, size: int, proof: list[bytes]) -> None:
    for probe in _inclusion_probes(leaf - 1, size, proof, ROOTS[size], HASHES[leaf - 1]):
        with pytest.raises(ProofError):
            verify_inclusion(*probe)


@pytest.mark.parametrize(("first", "second", "proof"), CONSISTENCY[1:])
def test_every_corrupted_consistency_proof_fails(
    first: int, second: int, proof: list[bytes]
) -> None:
    r1, r2 = ROOTS[first], ROOTS[second]
    probes = [
        (first - 1, second, proof, r1, r2),
        (first + 1, second, proof, r1, r2),
        (first ^ 2, second, proof, r1, r2),
        (first, second * 2, proof, r1, r2),
        (first, second // 2, proof, r1, r2),
        (first, second, proof, SOME, r2),
        (first, second, proof, r1, SOME),
        (first, second, proof, r2, r1),
        (first, second, [], r1, r2),
        (first, second, [*proof, r1], r1, r2),
        (first, second, [*proof, r2], r1, r2),
        (first, second, [r1, *proof], r1, r2),
        (first, second, [r2, *proof], r1, r2),
        (first, second, [proof[0], *proof], r1, r2),
        (first, second, proof[:-1], r1, r2),
    ]
    for k in range(len(proof)):
        wrong = list(proof)
        wrong[k] = bytes([wrong[k][0] ^ 16]) + wrong[k][1:]
        probes.append((first, second, wrong, r1, r2))
    for probe in probes:
        if probe[0] == probe[1] == first and probe[3] == probe[4]:
            continue
        with pytest.raises(ProofError):
            verify_consistency(*probe)


def test_sizes_that_are_always_or_never_consistent() -> None:
    verify_consistency(0, 0, [], SOME, SOME)
    verify_consistency(0, 5, [], SOME, ROOTS[5])
    verify_consistency(3, 3, [], ROOTS[3], ROOTS[3])
    for args in (
        (1, 1, [], ROOTS[1], ROOTS[2]),
        (2, 1, [], ROOTS[2], ROOTS[1]),
        (1, 2, [], ROOTS[1], ROOTS[2]),
        (1, 1, [EMPTY_ROOT], ROOTS[1], ROOTS[1]),
    ):
        with pytest.raises(ProofError):
            verify_consistency(*args)


def test_a_stored_frontier_round_trips_and_a_wrong_one_is_refused() -> None:
    f = Frontier()
    f.extend(HASHES[:7])
    again = Frontier.from_hex(7, f.to_hex())
    again.append(HASHES[7])
    assert again.root() == ROOTS[8]
    with pytest.raises(ValueError, match="frontier"):
        Frontier.from_hex(8, f.to_hex())


def _reference_mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH written as the RFC states it (recursion over the data)."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(_reference_mth(leaves[:k]), _reference_mth(leaves[k:]))


@given(st.integers(1, 70), st.data())
def test_every_proof_of_random_trees_verifies(n: int, data: st.DataObject) -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    tree = Tree(leaves)
    assert tree.root() == _reference_mth(leaves)
    i = data.draw(st.integers(0, n - 1))
    m = data.draw(st.integers(1, n))
    verify_inclusion(i, n, leaves[i], tree.inclusion_proof(i), tree.root())
    verify_consistency(m, n, tree.consistency_proof(m), tree.root(m), tree.root())
    if m < n:
        with pytest.raises(ProofError):
            verify_consistency(m, n, tree.consistency_proof(m), tree.root(m), SOME)
