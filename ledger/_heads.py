"""Signed tree heads held outside a ledger, and the ledger's consistency with them.

A monitor that follows a ledger (`caisson tail --follow --heads FILE`, or one that reads the
``{"head": ...}`` lines of `caisson record --monitor`'s stream) keeps each seal it saw as a
`HeldHead` JSON line, ``{"head": <ledger.Seal>}`` (bytes as base64, msgspec's JSON). A format version 3
seal is a signed RFC 9162 tree head, so a verifier holding one can tell a ledger cut below
it (truncated at that size) from one that merely was not closed, and a ledger rewritten
below it (inconsistent), with RFC 9162 consistency proofs (`ledger._merkle`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from ledger import _chain, _merkle
from ledger._errors import LedgerError
from ledger._format import Header, Seal
from ledger._keys import VerifyKey

__all__ = ["HeadCheck", "HeldHead", "check_heads", "encode_head", "load_heads"]


class HeldHead(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a heads file, and of a monitor stream's head lines."""

    head: Seal


_line = msgspec.json.Decoder(HeldHead)
_json = msgspec.json.Encoder()


class HeadCheck(msgspec.Struct, kw_only=True):
    """What `check_heads` found: the ledger is consistent with every held head (``ok``), is
    cut below one (``truncated``: ``truncated_at`` is the largest held size it lacks), or
    disagrees with one (``inconsistent``: ``reason`` says which)."""

    status: str = "ok"
    checked: int = 0  # held heads checked
    truncated_at: int | None = None
    reason: str | None = None


def encode_head(seal: Seal) -> bytes:
    """One line of a heads file (without its newline)."""
    return _json.encode(HeldHead(head=seal))


def load_heads(path: Path) -> list[Seal]:
    """The signed heads of a heads file.

    Raises:
        LedgerError: unreadable, or a line that is not a seal (naming the line and field).
    """
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", path=str(path)) from None
    heads = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            heads.append(_line.decode(line).head)
        except msgspec.DecodeError as exc:
            raise LedgerError(f"line {n} is not a signed head: {exc}", path=str(path)) from None
    return heads


def check_heads(header: Header | None, sealed: int, leaf_hashes: bytes, heads: Iterable[Seal], trusted: VerifyKey,
                heads_path: str = "<heads>") -> HeadCheck:
    """Check a ledger's records against signed heads held outside it.

    Args:
        header: the ledger's header; None when the file ends inside it (or is empty): the
            ledger is then cut below every held head of one record or more, and the heads
            must all be of one run (the run id the cut header no longer names).
        sealed: records covered by the ledger's last valid seal: the tree each held head
            must be a prefix of.
        leaf_hashes: the leaf hashes of at least those records, 32 bytes each.
        heads: the held heads, in any order.
        trusted: the key each head must be signed with.
        heads_path: named in errors and reasons.

    Raises:
        LedgerError: a head of another run, not signed by ``trusted``, or not a format
            version 3 seal (naming ``heads_path`` and the head's position).
    """
    if header is None:
        sealed, leaf_hashes = 0, b""
    tree = _merkle.Tree(leaf_hashes[: 32 * sealed])
    root = tree.root(sealed)
    result = HeadCheck()
    run_id = header.run_id if header is not None else None
    for i, head in enumerate(heads):
        where = f"head {i + 1} (size {head.upto})"
        run_id = head.run_id if run_id is None else run_id
        if head.run_id != run_id:
            raise LedgerError(f"{where} is of run {head.run_id!r}, not {run_id!r}", path=heads_path)
        try:
            message = _chain.signed_message(head, 3)
        except ValueError as exc:
            raise LedgerError(f"{where}: {exc} (a held head is a format version 3 seal)", path=heads_path) from None
        if not trusted.verify(head.signature, message):
            raise LedgerError(f"{where}: signature does not verify with {trusted.fingerprint}", path=heads_path)
        result.checked += 1
        if head.upto > sealed:
            result.truncated_at = max(result.truncated_at or 0, head.upto)
            continue
        if not _merkle.verify_consistency(head.upto, sealed, head.head, root, tree.consistency(head.upto, sealed)):
            result.status = "inconsistent"
            result.reason = (f"records 0..{head.upto - 1} are not those of the signed head of {head.upto} records"
                             f" held in {heads_path}")
            return result
    if result.truncated_at is not None:
        result.status = "truncated"
    return result
