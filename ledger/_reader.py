"""Reading and verifying ledgers.

`LedgerChecker` is sans-IO: `feed` it the file's bytes (all at once or as the file
grows) and it checks frames, the hash chain and seals as they arrive, yielding records.
`verify_ledger` and `read_records` drive it from a file; `follow_records` drives it
from a file that is still being written.
"""

from __future__ import annotations

import bisect
import operator
import time
from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
import zstandard

from ledger import _chain, _merkle
from ledger._blobs import BlobStore
from ledger._errors import LedgerError, NotALedgerError
from ledger._heads import check_heads
from ledger._format import (
    BLOBS_DIR,
    FRAME_RECORDS,
    LEDGER_FILE,
    MAGIC,
    NEED_DATA,
    Damage,
    Envelope,
    Frame,
    FrameParser,
    Header,
    Record,
    Seal,
    WireRecord,
    decompress_records,
    envelope_list_decoder,
    msgpack_array_header,
    record_encoder,
    seal_decoder,
    wire_list_decoder,
)
from ledger._keys import VerifyKey
from ledger.events import BlobStored, WitnessRaw, decode_event

__all__ = [
    "LedgerChecker",
    "VerifyReport",
    "locate",
    "verify_ledger",
    "verify_and_read",
    "read_records",
    "follow_records",
    "VerifiedStream",
]

_READ_CHUNK = 1 << 20
_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
_WALL_DELTA = operator.attrgetter("wall_delta_ns")
_MONO_DELTA = operator.attrgetter("mono_delta_ns")
V1_NOTE = ("format version 1: its seals do not bind the file's raw bytes, only the records' hash chain;"
           " the same records recompressed, or a seal's time changed, still verify")


class VerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_ledger` found.

    ``status`` is ``ok`` (intact and closed by a final seal), ``tampered`` (some complete
    bytes fail a check: ``bad_seq``, ``bad_offset`` and ``reason`` say the first; for a
    fork, two records claiming one sequence number, ``fork_seq`` and ``fork_offsets``
    say which and where) or ``unclosed`` (intact, but no final seal: a crash or a run
    still going; ``unsealed`` records follow the last seal and ``torn_bytes`` of a torn
    frame were cut; a file that ends inside its header is unclosed with ``run_id`` None).
    """

    path: str
    status: str = "ok"
    format_version: int | None = None  # from the header; None when the header is torn
    run_id: str | None = None
    key_fingerprint: str | None = None
    records: int = 0  # records in complete, checksum-valid frames
    sealed: int = 0  # records covered by the last valid seal
    head: str = ""  # hex chain head at the last valid seal ("" when no seal checked out)
    signature: str = ""  # hex Ed25519 signature of that seal ("" likewise)
    unsealed: int = 0  # records after the last valid seal
    torn_bytes: int = 0  # bytes of an incomplete last frame (cut by the reader)
    final: bool = False
    bad_seq: int | None = None  # first record whose integrity cannot be established
    bad_offset: int | None = None  # byte offset of the frame where it was found
    reason: str | None = None
    fork_seq: int | None = None  # a sequence number two records claim
    fork_offsets: list[int] | None = None  # byte offsets of the frames holding them: [first, second]
    blobs_checked: int = 0
    note: str | None = None  # what the format version does not guarantee (version 1)
    heads_checked: int = 0  # held signed heads the ledger was checked against
    truncated_at: int | None = None  # status truncated: the largest held head's size the ledger lacks

    @property
    def exit_code(self) -> int:
        """0 ok, 1 tampered or truncated, 3 intact but not closed (the `caisson verify` contract)."""
        return {"ok": 0, "tampered": 1, "truncated": 1, "unclosed": 3}[self.status]

    def describe(self) -> str:
        """Human-readable lines, as `caisson verify` prints them: one, and one per detail that
        applies (records verified before a failure, the two frames of a fork, a format
        version's note)."""
        lines = []
        if self.status == "ok":
            lines.append(
                f"OK {self.path}: run {self.run_id}, {self.records} records sealed and closed,"
                f" signed by {self.key_fingerprint}, {self.blobs_checked} blobs checked"
            )
        elif self.status == "tampered":
            where = f" at byte {self.bad_offset}" if self.bad_offset is not None else ""
            lines.append(f"TAMPERED {self.path}: first bad record seq {self.bad_seq}{where}: {self.reason}")
            if self.fork_seq is not None and self.fork_offsets is not None:
                first, second = self.fork_offsets
                lines.append(f"  fork: two records claim seq {self.fork_seq}, in the frames at byte {first}"
                             f" and byte {second}")
            if self.sealed:
                lines.append(f"  records 0..{self.sealed - 1} verified before it")
        elif self.status == "truncated":
            run = f"run {self.run_id}" if self.run_id is not None else "the header is cut"
            lines.append(f"TRUNCATED {self.path}: {run}: cut at {self.sealed} sealed records, below a"
                         f" signed head of {self.truncated_at} records held outside it ({self.records} records remain)")
        elif self.run_id is None:
            lines.append(
                f"NOT CLOSED {self.path}: the file ends inside its header ({self.torn_bytes} bytes):"
                " no records; a crash as the ledger was created"
            )
        else:
            torn = f"a torn frame of {self.torn_bytes} bytes was cut" if self.torn_bytes else "no torn frame"
            lines.append(
                f"NOT CLOSED {self.path}: run {self.run_id}, {self.sealed} records sealed and intact;"
                f" {self.unsealed} records follow the last seal; {torn}; no final seal (crash or still running)"
            )
        if self.heads_checked and self.status != "truncated":
            lines.append(f"  consistent with {self.heads_checked} held signed heads" if self.status != "tampered"
                         else f"  checked against {self.heads_checked} held signed heads")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)


def _decode_events(body: bytes, envelopes: list[Envelope]) -> list:
    """Typed records of a frame. An authentic record whose event does not decode (a newer
    kind, or a field of the wrong type written by a buggy witness) is read as a
    ``witness.raw`` describing it: signed evidence is never dropped, and never fatal."""
    try:
        return wire_list_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        pass
    out = []
    for env in envelopes:
        try:
            event = decode_event(env.event)
        except (msgspec.DecodeError, RecursionError) as exc:
            event = WitnessRaw(witness=env.source, line=f"undecodable event ({exc}): {bytes(env.event)[:2000]!r}")
        out.append(WireRecord(env.seq, env.wall_delta_ns, env.mono_delta_ns, env.source, event))
    return out


def _try_decode(raw: msgspec.Raw) -> object:
    try:
        return decode_event(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


class _Tampered(Exception):
    def __init__(self, reason: str, offset: int, seq: int, fork: tuple[int, int, int] | None = None):
        super().__init__(reason)
        self.reason, self.offset, self.seq, self.fork = reason, offset, seq, fork


class LedgerChecker:
    """Sans-IO ledger checker: `feed` bytes, iterate `records()`; checks as it goes.

    Args:
        trusted: the key seals must be signed with; None skips signature checks (a
            viewer such as `caisson tail`), never use None to verify.
        decode: decode each record into a `Record` and yield it (True), or only check
            records without decoding events and yield nothing (False, faster; used by
            verify, which reads the count from ``expected``).
        skip_before: with ``decode``, records whose seq is below it are checked (chain,
            seals) like the others but neither decoded nor yielded: a reader that starts
            at record N pays the cost of verifying the frames before it, not decoding them.
        keep_leaves: keep every record's Merkle leaf hash in `leaf_hashes` (32 bytes each,
            concatenated; for proofs), and the canonical bytes of the records whose seq is
            in ``keep_records`` in `kept`.
        on_seal: called with each seal that checks out (a monitor keeping signed heads).

    After a check fails, `tampered` holds (reason, offset, seq) and no more records
    are yielded; when the failure is a fork, `fork` holds (seq, offset of the frame
    that first held it, offset of the frame that claims it again).

    Raises:
        NotALedgerError: from `records()`, when the bytes are not a ledger at all.
        LedgerError: unsupported format version.
    """

    def __init__(self, trusted: VerifyKey | None, *, decode: bool = True, skip_before: int = 0,
                 keep_leaves: bool = False, keep_records: Container[int] = (),
                 on_seal: Callable[[Seal], object] | None = None):
        self._parser = FrameParser()
        self._trusted = trusted
        self._decode = decode
        self._skip_before = skip_before  # records below this seq are checked but not decoded nor yielded
        self._dctx = zstandard.ZstdDecompressor()
        self.header: Header | None = None
        self.head = b""
        self.tree: tuple[int, bytes] = (0, b"")  # version 3: the records' Merkle tree (size, compact range)
        # self.head: the chain head (versions 1, 2) or that tree's root (3), after the records read so far
        self.expected = 0  # next sequence number
        self.sealed = 0
        self.final = False
        self.final_offset: int | None = None
        self.last_seal: Seal | None = None  # the last seal that checked out
        self.seals: list[Seal] = []  # every seal that checked out, in order
        self._seal_listener = on_seal
        self._keep_leaves = keep_leaves
        self._keep_records = keep_records
        self.leaf_hashes = bytearray()  # with keep_leaves: 32 bytes per record
        self.kept: dict[int, bytes] = {}  # with keep_leaves: seq -> canonical bytes of the records asked for
        self.tampered: tuple[str, int, int] | None = None
        self.fork: tuple[int, int, int] | None = None
        self.blob_refs: list[tuple[int, BlobStored]] = []
        self._frame_seqs: list[int] = []  # first seq of each records frame read, ascending
        self._frame_offsets: list[int] = []  # and its byte offset
        self._merkle = False  # keep the Merkle tree (format version 3)
        self._bound_offset = 0  # the bytes before it are bound by a verified version 2 seal
        self._wall = 0  # running sums restoring absolute times
        self._mono = 0

    def feed(self, data: bytes) -> None:
        """Give the checker more of the file."""
        self._parser.feed(data)

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame at the end of what was fed."""
        return self._parser.pending

    def records(self) -> Iterator[Record]:
        """Yield each record (or envelope) from the frames completed so far."""
        while self.tampered is None:
            item = self._parser.next_event()
            if item is NEED_DATA:
                return
            try:
                if isinstance(item, Damage):
                    raise _Tampered(item.reason, item.offset, self.sealed)
                if isinstance(item, Header):
                    self._on_header(item)
                    continue
                assert isinstance(item, Frame)
                if self.final:
                    if item.kind == FRAME_RECORDS and 0 <= item.first_seq < self.expected:
                        raise self._fork(item.first_seq, item.offset, " after the final seal")
                    raise _Tampered("data after the final seal", item.offset, self.expected)
                if item.kind == FRAME_RECORDS:
                    yield from self._on_records(item)
                else:
                    self._on_seal(item)
            except _Tampered as exc:
                self.tampered = (exc.reason, exc.offset, exc.seq)
                self.fork = exc.fork
                self._parser.damaged = True

    def _fork(self, seq: int, offset: int, where: str = "") -> _Tampered:
        """The error for a frame at ``offset`` holding ``seq`` again (0 <= seq < expected,
        or a seq earlier in that same frame)."""
        i = bisect.bisect_right(self._frame_seqs, seq) - 1
        first = self._frame_offsets[i] if i >= 0 and seq < self.expected else offset
        return _Tampered(
            f"fork: seq {seq} is recorded twice, in the frame at byte {first} and the frame at byte {offset}{where}",
            offset, self.sealed, (seq, first, offset),
        )

    def _on_header(self, header: Header) -> None:
        self.header = header
        self._merkle = header.format_version >= 3
        assert self._parser.header_payload is not None
        self.head = _merkle.EMPTY_ROOT if self._merkle else _chain.genesis(self._parser.header_payload)
        trusted = self._trusted
        if trusted is not None and (header.key_fingerprint != trusted.fingerprint or header.public_key != trusted.raw):
            raise _Tampered(
                f"key not trusted: ledger is signed by {header.key_fingerprint},"
                f" the trusted key is {trusted.fingerprint}",
                0,
                0,
            )

    def _on_records(self, frame: Frame) -> Iterator[Record]:
        if 0 <= frame.first_seq < self.expected:
            raise self._fork(frame.first_seq, frame.offset)
        if frame.first_seq != self.expected:
            raise _Tampered(
                f"sequence gap: expected seq {self.expected}, frame starts at {frame.first_seq}",
                frame.offset,
                self.expected,
            )
        if frame.count == 0:
            raise _Tampered("records frame holds no records (the writer never writes one)", frame.offset,
                            self.sealed)
        try:
            body = decompress_records(self._dctx, frame.payload)
        except ValueError as exc:
            raise _Tampered(f"frame payload is not exactly one zstd frame: {exc}", frame.offset,
                            self.sealed) from None
        try:
            # envelopes (events Raw), then, when decoded, the frame's records (events typed)
            stored: list[Any] = envelope_list_decoder.decode(body)
        except msgspec.DecodeError as exc:
            raise _Tampered(f"frame undecodable: {exc}", frame.offset, self.sealed) from None
        except RecursionError:  # msgspec's depth limit; our writer stays under MAX_RECORD_DEPTH
            raise _Tampered("frame undecodable: msgpack nested deeper than the reader's limit",
                            frame.offset, self.sealed) from None
        n = len(stored)
        if n != frame.count:
            raise _Tampered(f"frame holds {n} records, header says {frame.count}", frame.offset, self.sealed)
        if not body.startswith(msgpack_array_header(n)):  # the records are chained, not this prefix
            raise _Tampered("frame's record array header is not in its shortest form", frame.offset, self.sealed)
        first = self.expected
        if [r.seq for r in stored] != list(range(first, first + n)):
            bad = next(i for i, r in enumerate(stored) if r.seq != first + i)
            seq = stored[bad].seq
            if 0 <= seq < first + bad:  # this seq was read before: here or in an earlier frame
                raise self._fork(seq, frame.offset)
            raise _Tampered(f"sequence gap: expected seq {first + bad}, found {seq}", frame.offset, self.sealed)
        skipped = self._decode and first + n <= self._skip_before
        if self._decode and not skipped:
            stored = _decode_events(body, stored)  # Records' events decoded (the envelopes' were Raw)
        try:
            if self._merkle:
                self.tree = _merkle.merkle_frame(*self.tree, body)
                self.head = _merkle.range_root(*self.tree)
            else:
                self.head, _ = _chain.chain_frame(self.head, body)
        except ValueError as exc:  # msgspec read it, so this is unexpected; still never fatal
            raise _Tampered(f"frame undecodable: {exc}", frame.offset, self.sealed) from None
        if self._keep_leaves:
            self.leaf_hashes += _merkle.merkle_leaves(body)
            if any(seq in self._keep_records for seq in range(first, first + n)):
                for seq, raw in enumerate(_raw_list(body), first):
                    if seq in self._keep_records:
                        self.kept[seq] = bytes(raw)
        self.expected = first + n
        self._frame_seqs.append(first)
        self._frame_offsets.append(frame.offset)
        if b"blob.stored" in body:
            for r in stored:
                event = r.event if self._decode and not skipped else _try_decode(r.event)
                if isinstance(event, BlobStored):
                    self.blob_refs.append((r.seq, event))
        if not self._decode:
            return
        wall, mono = self._wall, self._mono
        if skipped:
            self._wall = wall + sum(map(_WALL_DELTA, stored))
            self._mono = mono + sum(map(_MONO_DELTA, stored))
            return
        skip = self._skip_before
        for r in stored:
            wall += r.wall_delta_ns
            mono += r.mono_delta_ns
            if r.seq >= skip:
                yield Record(seq=r.seq, wall_ns=wall, mono_ns=mono, source=r.source, event=r.event)
        self._wall, self._mono = wall, mono

    def _on_seal(self, frame: Frame) -> None:
        try:
            seal = seal_decoder.decode(frame.payload)
        except (msgspec.DecodeError, RecursionError) as exc:  # msgspec recurses into unknown keys
            raise _Tampered(f"seal undecodable: {exc}", frame.offset, self.sealed) from None
        assert self.header is not None
        if frame.count != 0:
            raise _Tampered(f"seal frame header says {frame.count} records, not 0", frame.offset, self.sealed)
        if seal.run_id != self.header.run_id:
            raise _Tampered(f"seal is bound to run {seal.run_id!r}, not {self.header.run_id!r}", frame.offset, self.sealed)
        if seal.upto != self.expected or frame.first_seq != seal.upto:
            raise _Tampered(
                f"seal covers {seal.upto} records, the ledger has {self.expected} at this point",
                frame.offset,
                self.sealed,
            )
        if seal.head != self.head:
            raise _Tampered(
                f"hash mismatch: chain head (Merkle root in version 3) over records {self.sealed}..{self.expected - 1}"
                " does not match the seal",
                frame.offset,
                self.sealed,
            )
        if self.header.format_version >= 2:
            message = self._seal_message_v2(seal, frame)
        else:
            message = _chain.seal_message(seal.run_id, seal.upto, seal.head, seal.final)
        if self._trusted is not None and not self._trusted.verify(seal.signature, message):
            raise _Tampered("bad signature on seal", frame.offset, self.sealed)
        self.sealed = seal.upto
        if seal.size is not None:
            self._bound_offset = seal.size
        self.last_seal = seal
        self.seals.append(seal)
        if self._seal_listener is not None:
            self._seal_listener(seal)
        if seal.final:
            self.final = True
            self.final_offset = frame.offset

    def _seal_message_v2(self, seal, frame: Frame) -> bytes:
        """Check a version 2 or 3 seal's binding to the file's bytes; returns what it signs."""
        if record_encoder.encode(seal) != frame.payload:
            raise _Tampered("seal is not in canonical form (bytes our writer would not write)", frame.offset,
                            self.sealed)
        if seal.size != frame.offset:
            raise _Tampered(f"file bytes inserted or removed: the seal binds the first {seal.size} bytes"
                            f" of the file, and starts at byte {frame.offset}", frame.offset, self.sealed)
        if seal.file_hash != frame.prefix_sha256:
            raise _Tampered(f"file bytes changed between byte {self._bound_offset} and byte {frame.offset}:"
                            " their sha256 is not the one the seal signs", frame.offset, self.sealed)
        try:
            assert self.header is not None
            return _chain.signed_message(seal, self.header.format_version)
        except ValueError as exc:
            raise _Tampered(f"seal undecodable: {exc}", frame.offset, self.sealed) from None


def locate(path: Path) -> tuple[Path, BlobStore]:
    """Resolve a run directory or a ledger file to (ledger file, blob store).

    Raises:
        LedgerError: nothing readable at ``path``.
    """
    path = Path(path)
    if path.is_dir():
        ledger_path = path / LEDGER_FILE
        if not ledger_path.is_file():
            raise LedgerError(f"no {LEDGER_FILE} file in this directory; is it a run directory?", path=str(path))
    elif path.is_file():
        ledger_path = path
    else:
        raise LedgerError("no such file or directory", path=str(path))
    return ledger_path, BlobStore(ledger_path.parent / BLOBS_DIR)


def _read_all(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", path=str(path)) from None


def verify_ledger(path: Path, trusted: VerifyKey, *, heads: Sequence[Seal] | None = None,
                  heads_path: str = "<heads>") -> VerifyReport:
    """Verify a ledger's frames, chain, seals and signatures, and its blobs.

    Args:
        path: a run directory or a ledger file.
        trusted: the key the ledger must be signed with (the header's key alone
            proves nothing: anyone can re-sign a rewritten ledger).
        heads: signed heads held outside the ledger (`ledger.load_heads`): the ledger must
            be consistent with each (RFC 9162), and one it is cut below makes it
            ``truncated``; one it disagrees with, ``tampered``. A file that is empty or
            ends inside its header is cut below every held head of one record or more.
        heads_path: where ``heads`` came from, for messages.

    Returns:
        A `VerifyReport`; its ``exit_code`` is the `caisson verify` exit status. A file
        that ends inside its header is ``unclosed`` (torn), with ``run_id`` None, or
        ``truncated`` below a held head.

    Raises:
        NotALedgerError: the file is empty (and no head is held), or does not start with
            the ledger magic.
        LedgerError: unreadable, or an unsupported format version; a held head of
            another run, not signed by ``trusted`` or not a format version 3 seal.
    """
    return _verify(path, trusted, decode=False, heads=heads, heads_path=heads_path)[0]


KEPT_BLOB_MAX = 4 << 20
"""The largest blob (bytes) whose verified content `verify_and_read` hands back."""
KEPT_TOTAL_MAX = 64 << 20
"""The most blob bytes `verify_and_read` hands back for one ledger; past it, blobs are only checked."""


def verify_and_read(path: Path, trusted: VerifyKey, *, kept_blobs: dict[str, bytes] | None = None,
                    keep_roles: Sequence[str] = ()) -> tuple[VerifyReport, list[Record]]:
    """`verify_ledger` and the decoded records, from one read of the file (for replay).

    The records are those of complete frames, whatever the report says; use them only
    when ``report.status`` is what the caller accepts.

    Args:
        path: a run directory or a ledger file.
        trusted: the key the ledger must be signed with.
        kept_blobs: when given, filled with sha256 hex -> bytes of the referenced blobs
            whose ``blob.stored`` role starts with one of ``keep_roles``, as the check read
            them and found them intact: a reader that goes on to read them (replay) gets
            the very bytes that were hashed, without a second read. At most `KEPT_BLOB_MAX`
            bytes a blob and `KEPT_TOTAL_MAX` in all; the others are only checked. Blobs are
            checked only once the records are: a ledger tampered (or torn) before them
            leaves it empty; one whose blob fails its check leaves it holding the intact
            blobs checked before that one (the report says the ledger is tampered).
        keep_roles: role prefixes of the blobs to hand back (``"http."``, ``"answer"``).

    Raises:
        As `verify_ledger`.
    """
    return _verify(path, trusted, decode=True, kept_blobs=kept_blobs, keep_roles=tuple(keep_roles))


def _read_ledger(ledger_path: Path) -> bytes:
    """The bytes of a whole ledger file.

    Raises:
        NotALedgerError: the file is empty. A ledger begins with a header, fsynced as the
            file is created; a file that ends inside its header is torn (a crash), but a
            file with no byte at all holds no evidence that it was ever a ledger.
        LedgerError: the file cannot be read.
    """
    data = _read_all(ledger_path)
    if not data:
        raise NotALedgerError("empty file: not a caisson ledger (no header)", path=str(ledger_path))
    return data


def _verify(path: Path, trusted: VerifyKey, *, decode: bool, kept_blobs: dict[str, bytes] | None = None,
            keep_roles: tuple[str, ...] = (), heads: Sequence[Seal] | None = None,
            heads_path: str = "<heads>") -> tuple[VerifyReport, list[Record]]:
    ledger_path, blobs = locate(path)
    try:
        data = _read_ledger(ledger_path)
    except NotALedgerError:  # empty: with held heads, a ledger cut to nothing
        if not heads:
            raise
        data = b""
    checker = LedgerChecker(trusted, decode=decode, keep_leaves=heads is not None)
    checker.feed(data)
    records = list(checker.records())
    report = _report(checker, data, ledger_path, blobs, kept_blobs, keep_roles)
    if heads is not None:
        found = check_heads(checker.header, checker.sealed, bytes(checker.leaf_hashes), heads, trusted, heads_path)
        report.heads_checked = found.checked
        if found.status == "inconsistent" and report.status != "tampered":
            report.status, report.reason, report.bad_seq = "tampered", found.reason, 0
        elif found.status == "truncated" and report.status in ("ok", "unclosed"):
            report.status, report.truncated_at = "truncated", found.truncated_at
    return report, records


def _report(checker: LedgerChecker, data: bytes, ledger_path: Path, blobs: BlobStore,
            kept_blobs: dict[str, bytes] | None = None, keep_roles: tuple[str, ...] = ()) -> VerifyReport:
    seal = checker.last_seal
    report = VerifyReport(path=str(ledger_path), records=checker.expected, sealed=checker.sealed, final=checker.final,
                          head=seal.head.hex() if seal else "", signature=seal.signature.hex() if seal else "")
    if checker.header is not None:
        report.format_version = checker.header.format_version
        report.run_id = checker.header.run_id
        report.key_fingerprint = checker.header.key_fingerprint
        if report.format_version == 1:
            report.note = V1_NOTE
    if checker.tampered is not None:
        reason, offset, seq = checker.tampered
        if not checker.final and offset >= len(MAGIC) and not data[offset:].strip(b"\0"):
            # Zeros where the next frame would begin, to the end: space the file system
            # allocated but a crash never filled (ext4, XFS after power loss). A torn tail.
            report.unsealed = checker.expected - checker.sealed
            report.torn_bytes = len(data) - offset
            report.status = "unclosed"
            return report
        report.status = "tampered"
        report.reason, report.bad_offset, report.bad_seq = reason, offset, seq
        if checker.fork is not None:
            seq, first, second = checker.fork
            report.fork_seq, report.fork_offsets = seq, [first, second]
        return report
    room = KEPT_TOTAL_MAX if kept_blobs is not None and keep_roles else 0  # bytes still to hand back
    for seq, ref in checker.blob_refs:
        keep = min(KEPT_BLOB_MAX, room) if room and ref.role.startswith(keep_roles) else 0
        problem, content = blobs.read_checked(ref.sha256, keep)
        if content is not None and keep and kept_blobs is not None:
            kept_blobs[ref.sha256] = content
            room -= len(content)
        report.blobs_checked += 1
        if problem is not None:
            report.status = "tampered"
            report.bad_seq, report.reason = seq, f"blob {ref.sha256} ({ref.role}): {problem}"
            return report
    referenced = {ref.sha256 for _, ref in checker.blob_refs}
    for digest in blobs:
        if digest not in referenced and blobs.check(digest) is not None:
            report.status = "tampered"
            report.reason = f"blob {digest}: content does not match its hash"
            return report
    report.unsealed = checker.expected - checker.sealed
    report.torn_bytes = checker.pending_bytes
    if checker.final and checker.pending_bytes:
        report.status = "tampered"
        report.bad_seq, report.bad_offset = checker.expected, len(data) - checker.pending_bytes
        report.reason = f"{checker.pending_bytes} bytes after the final seal"
        report.torn_bytes = 0
    elif not checker.final:
        report.status = "unclosed"
    return report


def read_records(path: Path, trusted: VerifyKey | None = None, *, start: int = 0,
                 on_seal: Callable[[Seal], object] | None = None) -> Iterator[Record]:
    """Yield every decoded record of a ledger in order, from seq ``start`` on.

    Records of an unsealed tail are yielded too (check `verify_ledger` first when
    that matters). The records before ``start`` are checked but not decoded, so a
    page deep in a large ledger costs about what verifying up to it costs.

    Raises:
        NotALedgerError: the file is empty, or does not start with the ledger magic.
        LedgerError: a check fails (the message names the offset and reason).
    """
    ledger_path, _ = locate(path)
    checker = LedgerChecker(trusted, decode=True, skip_before=start, on_seal=on_seal)
    checker.feed(_read_ledger(ledger_path))
    yield from checker.records()
    if checker.tampered is not None:
        reason, offset, seq = checker.tampered
        raise LedgerError(f"{reason} (first bad record seq {seq})", path=str(ledger_path), offset=offset)


def follow_records(path: Path, *, poll_s: float = 0.2, timeout_s: float | None = None,
                   on_seal: Callable[[Seal], object] | None = None) -> Iterator[Record]:
    """Yield records of a ledger that is still being written, until its final seal.

    Waits for the file to appear. Stops early after ``timeout_s`` seconds without
    new bytes, when given. ``on_seal`` is called with each seal as it is read (its
    signature unchecked: a held head is checked when it is used).

    Raises:
        NotALedgerError / LedgerError: as `read_records`.
    """
    path = Path(path)
    ledger_path = path / LEDGER_FILE if path.is_dir() else path
    checker = LedgerChecker(None, decode=True, on_seal=on_seal)
    idle_since = time.monotonic()
    handle = None
    try:
        while True:
            if handle is None:
                try:
                    handle = open(ledger_path, "rb")
                except FileNotFoundError:
                    handle = None
            chunk = handle.read(_READ_CHUNK) if handle is not None else b""
            if chunk:
                idle_since = time.monotonic()
                checker.feed(chunk)
                yield from checker.records()
                if checker.tampered is not None:
                    reason, offset, seq = checker.tampered
                    raise LedgerError(f"{reason} (first bad record seq {seq})", path=str(ledger_path), offset=offset)
                if checker.final:
                    return
                continue
            if timeout_s is not None and time.monotonic() - idle_since > timeout_s:
                return
            time.sleep(poll_s)
    finally:
        if handle is not None:
            handle.close()


class _FileTail:
    """A ledger file as `_report` reads it when it was streamed, not held: its length, and
    its bytes from an offset on (read again from the file; only for a damaged tail)."""

    def __init__(self, path: Path, size: int):
        self._path, self._size = path, size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key: slice) -> bytes:
        with open(self._path, "rb") as f:
            f.seek(key.start or 0)
            return f.read(self._size - (key.start or 0))


class VerifiedStream:
    """`verify_and_read` with the records streamed, not held: iterate it once, then `report`.

    The file is read in chunks of `_READ_CHUNK` bytes, checked as `verify_and_read` checks
    it; the records are those of complete frames, yielded as they are checked, whatever the
    report will say: use what was computed from them only when ``report().status`` is what
    the caller accepts. Blobs are checked by `report` (none is handed back).

    Raises:
        NotALedgerError: at construction, for an empty file; from iteration, for bytes that
            are not a ledger.
        LedgerError: at construction, nothing readable at the path; from iteration, an
            unsupported format version or a read error.
    """

    def __init__(self, path: Path, trusted: VerifyKey):
        self.path, self._blobs = locate(path)
        try:
            empty = self.path.stat().st_size == 0
        except OSError as exc:
            raise LedgerError(f"cannot read: {exc.strerror}", path=str(self.path)) from None
        if empty:
            raise NotALedgerError("empty file: not a caisson ledger (no header)", path=str(self.path))
        self._checker = LedgerChecker(trusted, decode=True)
        self._size: int | None = None

    def __iter__(self) -> Iterator[Record]:
        checker = self._checker
        size = 0
        try:
            with open(self.path, "rb") as f:
                while chunk := f.read(_READ_CHUNK):
                    size += len(chunk)
                    checker.feed(chunk)
                    yield from checker.records()
        except OSError as exc:
            raise LedgerError(f"cannot read: {exc.strerror}", path=str(self.path)) from None
        self._size = size

    @property
    def complete(self) -> bool:
        """Whether the records were iterated to the end (then `report` can be asked)."""
        return self._size is not None

    def report(self) -> VerifyReport:
        """The verification report, once the records were iterated to the end.

        Raises:
            RuntimeError: the records were not iterated to the end.
        """
        if self._size is None:
            raise RuntimeError("VerifiedStream.report() before its records were read to the end")
        tail = cast(bytes, _FileTail(self.path, self._size))  # _report reads len() and [offset:] only
        return _report(self._checker, tail, self.path, self._blobs)
