"""ledger/_merkle.py against RFC 9162 as written.

The reference below is an independent implementation of RFC 9162 section 2.1, written from
the RFC's text and sharing no code with ledger._merkle: MTH, PATH and PROOF by their
recursive definitions (2.1.1, 2.1.3.1, 2.1.4.1), and the verification algorithms of
2.1.3.2 (inclusion) and 2.1.4.2 (consistency) step by step.
"""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import _merkle as M


# -- the reference: RFC 9162 section 2.1 -------------------------------------------------------

def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return _h(b"")
    if len(d) == 1:
        return _h(b"\x00" + d[0])
    k = _k(len(d))
    return _h(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:]))


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True) if 0 < m < len(d) else []


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_verify_inclusion(leaf_index: int, tree_size: int, leaf_hash: bytes, inclusion_path: list[bytes],
                         root_hash: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if leaf_index >= tree_size:
        return False
    fn, sn = leaf_index, tree_size - 1
    r = leaf_hash
    for p in inclusion_path:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = _h(b"\x01" + p + r)
            if fn % 2 == 0:
                while not (fn % 2 == 1 or fn == 0):
                    fn //= 2
                    sn //= 2
        else:
            r = _h(b"\x01" + r + p)
        fn //= 2
        sn //= 2
    return sn == 0 and r == root_hash


def ref_verify_consistency(first: int, second: int, first_hash: bytes, second_hash: bytes,
                           consistency_path: list[bytes]) -> bool:
    """RFC 9162 section 2.1.4.2 (first and second both > 0 and first < second there)."""
    if first == second:
        return first_hash == second_hash and not consistency_path
    if not 0 < first < second or not consistency_path:
        return False
    path = list(consistency_path)
    if first & (first - 1) == 0:
        path = [first_hash] + path
    fn, sn = first - 1, second - 1
    while fn % 2 == 1:
        fn //= 2
        sn //= 2
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = _h(b"\x01" + c + fr)
            sr = _h(b"\x01" + c + sr)
            if fn % 2 == 0:
                while not (fn % 2 == 1 or fn == 0):
                    fn //= 2
                    sn //= 2
        else:
            sr = _h(b"\x01" + sr + c)
        fn //= 2
        sn //= 2
    return fr == first_hash and sr == second_hash and sn == 0


# -- helpers -------------------------------------------------------------------------------------

def _leaves(n: int) -> list[bytes]:
    return [msgspec.msgpack.encode([i, 0, 0, "strace", {"kind": "note", "text": "x" * (i % 7)}]) for i in range(n)]


def _tree(d: list[bytes]) -> M.Tree:
    return M.Tree(b"".join(M.leaf_hash(x) for x in d))


def _body(d: list[bytes]) -> bytes:
    return msgspec.msgpack.encode([msgspec.Raw(x) for x in d])


def _flip(b: bytes, bit: int = 0) -> bytes:
    return bytes([b[0] ^ (1 << bit)]) + b[1:]


# -- tests ---------------------------------------------------------------------------------------

def test_rfc_vectors_of_small_trees():
    """The empty tree and a one-leaf tree, as section 2.1.1 defines them."""
    assert M.range_root(0, b"") == M.EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert M.range_root(*M.merkle_frame(0, b"", _body([b"\x01"]))) == hashlib.sha256(b"\x00\x01").digest()


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=140), st.data())
def test_inclusion_proofs_match_the_rfc_and_verify_independently(n, data):
    d = _leaves(n)
    tree = _tree(d)
    size = data.draw(st.integers(min_value=1, max_value=n), label="size")
    index = data.draw(st.integers(min_value=0, max_value=size - 1), label="index")
    root = ref_mth(d[:size])
    assert tree.root(size) == root
    path = tree.inclusion(index, size)
    assert path == ref_path(index, d[:size])
    assert ref_verify_inclusion(index, size, M.leaf_hash(d[index]), path, root)
    assert M.verify_inclusion(index, size, M.leaf_hash(d[index]), path, root)
    # any change fails both verifiers: the leaf, a node, the index, the root
    bad = [(index, size, _flip(M.leaf_hash(d[index])), path, root),
           (index, size, M.leaf_hash(d[index]), path, _flip(root)),
           (index, size, M.leaf_hash(d[index]), path + [root], root)]
    if path:
        k = data.draw(st.integers(min_value=0, max_value=len(path) - 1), label="node")
        bad.append((index, size, M.leaf_hash(d[index]), path[:k] + [_flip(path[k])] + path[k + 1:], root))
        bad.append((index, size, M.leaf_hash(d[index]), path[:-1], root))
    if size > 1:
        bad.append(((index + 1) % size, size, M.leaf_hash(d[index]), path, root))
    # (the size is not bound by the root alone: RFC 9162 signs it beside the root, as a
    # seal signs upto; a changed size is a proof test's business)
    for args in bad:
        if args[0] != index and M.leaf_hash(d[args[0]]) == args[2]:
            continue
        assert not M.verify_inclusion(*args), args
        assert not ref_verify_inclusion(*args), args


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=140), st.data())
def test_consistency_proofs_match_the_rfc_and_verify_independently(n, data):
    d = _leaves(n)
    tree = _tree(d)
    new = data.draw(st.integers(min_value=1, max_value=n), label="new")
    old = data.draw(st.integers(min_value=1, max_value=new), label="old")
    proof = tree.consistency(old, new)
    assert proof == ref_proof(old, d[:new])
    old_root, new_root = ref_mth(d[:old]), ref_mth(d[:new])
    assert ref_verify_consistency(old, new, old_root, new_root, proof)
    assert M.verify_consistency(old, new, old_root, new_root, proof)
    bad = [(old, new, _flip(old_root), new_root, proof), (old, new, old_root, _flip(new_root), proof)]
    if proof:
        k = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="node")
        bad.append((old, new, old_root, new_root, proof[:k] + [_flip(proof[k])] + proof[k + 1:]))
        bad.append((old, new, old_root, new_root, proof[:-1]))
    if old < new:
        bad.append((old, new, old_root, new_root, proof + [new_root]))
        # a tree whose first `old` leaves differ is not consistent with the held head
        other = [_flip(d[0])] + d[1:new]
        bad.append((old, new, old_root, ref_mth(other), _tree(other).consistency(old, new)))
    for args in bad:
        assert not M.verify_consistency(*args), args
        assert not ref_verify_consistency(*args), args


_raws = st.lists(st.binary(max_size=300).map(msgspec.msgpack.encode), max_size=40)  # leaves of 1 to 6 blocks


@settings(max_examples=150, deadline=None)
@given(st.lists(_raws, max_size=6))
def test_the_compact_range_gives_the_rfc_root_over_any_framing(frames):
    """Native and pure-Python twins agree, and the compact range's root is MTH, however the
    records are split into frames (the native code hashes two leaves or nodes at once, level
    by level, with the SHA extensions where the CPU has them)."""
    size, compact = 0, b""
    py = (0, b"")
    seen: list[bytes] = []
    for records in frames:
        if not records:
            continue
        body = _body(records)
        size, compact = M.merkle_frame(size, compact, body)
        py = M.merkle_frame_py(*py, body)
        assert M.merkle_leaves(body) == M.merkle_leaves_py(body) == b"".join(map(M.leaf_hash, records))
        seen += records
        assert (size, compact) == py
        assert M.range_root(size, compact) == ref_mth(seen)
        level = M.merkle_leaves(body)
        assert M.merkle_parents(level) == M.merkle_parents_py(level)


@pytest.mark.parametrize("fn", [M.merkle_frame, M.merkle_frame_py])
def test_malformed_input_is_a_value_error(fn):
    for size, compact, body in [(1, b"", _body([b"\x01"])), (0, b"", b"\x92\x01"), (0, b"", b"\x91\xc1"),
                                (0, b"", b""), (0, b"", b"\x01")]:
        with pytest.raises(ValueError):
            fn(size, compact, body)
    deep = _body([b"\x91" * 10 + b"\x01"])
    with pytest.raises(ValueError):
        fn(0, b"", deep, 5)
    assert fn(0, b"", deep, 20)[0] == 1



def test_a_frame_of_thousands_from_any_size_gives_the_rfc_root():
    d = _leaves(3000)
    for start in (0, 1, 2, 3, 5, 8, 1023, 1024, 1025):
        size, compact = M.merkle_frame_py(0, b"", _body(d[:start])) if start else (0, b"")
        assert M.merkle_frame(size, compact, _body(d[start:])) == M.merkle_frame_py(size, compact, _body(d[start:]))
    assert M.range_root(*M.merkle_frame(0, b"", _body(d))) == ref_mth(d)
