"""RFC 9162 Merkle trees over a ledger's records: tree heads, inclusion and consistency proofs.

Leaves are the records' canonical msgpack bytes. As RFC 9162 section 2.1.1 defines it,
``leaf hash = SHA-256(0x00 || leaf)``, ``node hash = SHA-256(0x01 || left || right)``, the
tree of n > 1 leaves splits at the largest power of two below n, and the empty tree's hash
is SHA-256 of nothing.

The writer and the verifier keep the tree as a *compact range*: the roots of the perfect
subtrees the leaves so far fall into, one per set bit of the size, largest first, as the
concatenation of their 32-byte hashes. Appending a leaf merges at most log2(n) of them
(one on average); the root folds them right to left. `merkle_frame` extends a compact
range over a frame body in native code (``ledger/_chainc.c``) when built, else in the
pure-Python `merkle_frame_py` (same bytes; a property test pins this).

`Tree` holds every level of a whole tree, for proving (built from `merkle_leaves` and
`merkle_parents`, native when built): a proof is O(log n) hashes read from it. The proof verifiers here follow RFC 9162 sections 2.1.3.2 and 2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from ledger._chain import chain_frame_py

__all__ = [
    "EMPTY_ROOT", "NATIVE", "Tree", "leaf_hash", "merkle_frame", "merkle_frame_py", "merkle_leaves",
    "merkle_leaves_py", "merkle_parents", "merkle_parents_py", "node_hash", "range_root", "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256
_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode


def leaf_hash(leaf: bytes) -> bytes:
    """RFC 9162 leaf hash of one record's canonical bytes (32 bytes)."""
    return _sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash (32 bytes)."""
    return _sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def merkle_frame_py(size: int, compact: bytes, body: bytes, max_depth: int = 0) -> tuple[int, bytes]:
    """Extend a compact range over a frame body's records; returns (size, compact range).

    Args:
        size: leaves so far.
        compact: their compact range (32 bytes per set bit of ``size``, largest subtree first).
        body: a frame's canonical bytes, one msgpack array of records.
        max_depth: when not 0 (1 to 255), refuse a record whose arrays and maps nest
            deeper, as `ledger._chain.chain_frame` counts them.

    Raises:
        ValueError: ``body`` is not a well-formed msgpack array, a record nests deeper
            than ``max_depth``, or ``compact`` does not fit ``size``.
    """
    if size < 0 or len(compact) != 32 * size.bit_count():
        raise ValueError("compact range does not fit the tree size")
    chain_frame_py(bytes(32), body, max_depth)  # its checks: the same msgpack and depth rules
    raws = _raw_list(body)
    stack = [compact[i : i + 32] for i in range(0, len(compact), 32)]
    for raw in raws:
        h = _sha256(b"\x00" + raw).digest()
        n = size
        while n & 1:
            h = _sha256(b"\x01" + stack.pop() + h).digest()
            n >>= 1
        stack.append(h)
        size += 1
    return size, b"".join(stack)


def merkle_leaves_py(body: bytes) -> bytes:
    """The leaf hashes of a frame body's records, 32 bytes each, concatenated.

    Raises:
        ValueError: ``body`` is not a well-formed msgpack array.
    """
    try:
        raws = _raw_list(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f"frame body: {exc}") from None
    return b"".join(_sha256(b"\x00" + raw).digest() for raw in raws)


def merkle_parents_py(level: bytes) -> bytes:
    """The node hash of each pair of a level's 32-byte hashes (an odd last one left out).

    Raises:
        ValueError: ``level`` is not a whole number of hashes.
    """
    if len(level) % 32:
        raise ValueError("a level is 32 bytes per hash")
    return b"".join(_sha256(b"\x01" + level[i : i + 64]).digest() for i in range(0, len(level) - 63, 64))


def range_root(size: int, compact: bytes) -> bytes:
    """The tree head's root hash of a compact range (`EMPTY_ROOT` for size 0)."""
    if not size:
        return EMPTY_ROOT
    root = compact[-32:]
    for i in range(len(compact) - 64, -1, -32):
        root = node_hash(compact[i : i + 32], root)
    return root


class Tree:
    """A whole Merkle tree, every level kept: proofs for any leaf and any earlier size.

    Args:
        leaf_hashes: the leaves' hashes in order, 32 bytes each, concatenated (as
            `merkle_leaves` gives them).

    Raises:
        ValueError: ``leaf_hashes`` is not a whole number of hashes.
    """

    def __init__(self, leaf_hashes: bytes):
        if len(leaf_hashes) % 32:
            raise ValueError("leaf hashes are 32 bytes each")
        self.size = len(leaf_hashes) // 32
        levels = [bytes(leaf_hashes)]
        while len(levels[-1]) > 32:
            levels.append(merkle_parents(levels[-1]))
        self._levels = levels  # levels[k][32*i:32*i+32]: the perfect subtree of leaves i*2**k .. (i+1)*2**k - 1

    def leaf(self, index: int) -> bytes:
        """The hash of leaf ``index``."""
        return self._levels[0][32 * index : 32 * index + 32]

    def _hash(self, lo: int, hi: int) -> bytes:
        """MTH of leaves lo .. hi-1 (RFC 9162 section 2.1.1)."""
        n = hi - lo
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            i = 32 * (lo // n)
            return self._levels[n.bit_length() - 1][i : i + 32]
        k = _split(n)
        return node_hash(self._hash(lo, lo + k), self._hash(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """The root hash of the first ``size`` leaves (default: all)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"tree size {size} outside 0 .. {self.size}")
        return self._hash(0, size)

    def inclusion(self, index: int, size: int | None = None) -> list[bytes]:
        """The audit path of leaf ``index`` in the tree of the first ``size`` leaves
        (RFC 9162 section 2.1.3.1), leaf side first.

        Raises:
            ValueError: ``index`` is not below ``size``, or ``size`` exceeds the tree.
        """
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ValueError(f"leaf {index} is not in a tree of {size} leaves (of {self.size})")
        path: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                path.append(self._hash(lo + k, hi))
                hi = lo + k
            else:
                path.append(self._hash(lo, lo + k))
                lo += k
        path.reverse()
        return path

    def consistency(self, old: int, new: int | None = None) -> list[bytes]:
        """The consistency proof from the tree of ``old`` leaves to that of ``new``
        (RFC 9162 section 2.1.4.1); empty when ``old`` is 0 or equals ``new``.

        Raises:
            ValueError: not 0 <= old <= new <= size.
        """
        new = self.size if new is None else new
        if not 0 <= old <= new <= self.size:
            raise ValueError(f"no consistency proof from {old} to {new} leaves (of {self.size})")
        if old == 0 or old == new:
            return []
        proof: list[bytes] = []
        lo, hi, complete = 0, new, True  # SUBPROOF(m, D[lo:hi], b)
        m = old
        while True:
            n = hi - lo
            if m == n:
                if not complete:
                    proof.append(self._hash(lo, hi))
                break
            k = _split(n)
            if m <= k:
                proof.append(self._hash(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._hash(lo, lo + k))
                lo += k
                m -= k
                complete = False
        proof.reverse()
        return proof


def verify_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> bool:
    """Whether ``path`` proves leaf hash ``leaf`` at ``index`` in the tree of ``size``
    leaves whose root is ``root`` (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size or any(len(p) != 32 for p in path):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """Whether ``proof`` shows the tree of ``old`` leaves (root ``old_root``) is a prefix of
    the tree of ``new`` leaves (root ``new_root``) (RFC 9162 section 2.1.4.2)."""
    if not 0 <= old <= new or any(len(p) != 32 for p in proof):
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0 or not proof:
        return old == 0 and not proof
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old root is the first node of the proof
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


try:
    from ledger._chainc import merkle_frame, merkle_leaves, merkle_parents
except ImportError:  # built without a C compiler or OpenSSL headers: same bytes, slower
    merkle_frame, merkle_leaves, merkle_parents = merkle_frame_py, merkle_leaves_py, merkle_parents_py
NATIVE = merkle_frame is not merkle_frame_py

