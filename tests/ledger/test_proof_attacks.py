"""Attacks on proofs and held heads by someone who holds a genuine proof (and maybe the
ledger) but not the signing key: each must be refused.

A proof is refused when `verify_proof` reports ``failed``, or when `decode_proof` raises
`LedgerError` (the file is not one our prover writes). A held-heads check is refused when
the ledger is named ``truncated`` or ``tampered`` (exit 1), or the heads file is refused
(`LedgerError`, exit 2).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import msgspec
import pytest

from ledger import (LedgerError, LedgerWriter, Proof, PROOF_VERSION, SigningKey, decode_proof, encode_proof, prove,
                    verify_ledger, verify_proof)
from ledger import _format as F
from ledger._merkle import Tree, leaf_hash, node_hash, verify_inclusion
from ledger._proof import PROOF_MAGIC
from ledger.events import CellEnded, Note

from tests.ledger.conftest import KEY
from tests.ledger.test_proof import _heads_of, _ledger

TRUST = [KEY.verify_key]
replace = msgspec.structs.replace


def _proof(run: Path, seqs, **kw) -> Proof:
    return Proof(proof_version=PROOF_VERSION, run=prove(run, seqs, KEY.verify_key, **kw))


def _refused(proof: Proof, trusted=TRUST) -> bool:
    return verify_proof(proof, trusted).status == "failed"


def _with_run(proof: Proof, **fields) -> Proof:
    return replace(proof, run=replace(proof.run, **fields))


def _with_record(proof: Proof, i: int, **fields) -> Proof:
    records = list(proof.run.records)
    records[i] = replace(records[i], **fields)
    return _with_run(proof, records=records)


@pytest.fixture
def two_runs(tmp_path):
    """Two runs signed by the same key: another run id, and the same run id written twice
    by the key holder (different records)."""
    a = _ledger(tmp_path / "a")
    b = _ledger(tmp_path / "b", run_id="run-other", text="other")
    twin = _ledger(tmp_path / "twin", text="twin")  # same run id and key as a
    return a, b, twin


# -- records swapped -----------------------------------------------------------------------------

def test_a_record_swapped_for_another_record_of_the_same_ledger_is_refused(tmp_path):
    run = _ledger(tmp_path / "run")
    proof = _proof(run, [2, 9])
    other = _proof(run, [3]).run.records[0]
    assert not _refused(proof)
    assert _refused(_with_record(proof, 0, leaf=other.leaf))  # the leaf alone (its seq says 3)
    assert _refused(_with_record(proof, 0, leaf=other.leaf, seq=3))  # leaf and seq, the path of seq 2
    assert _refused(_with_record(proof, 0, leaf=proof.run.records[1].leaf))  # the other proven one
    # seq 3 with its own path is a genuine proof of seq 3, not of seq 2: the report names 3
    honest = _with_record(proof, 0, leaf=other.leaf, seq=3, path=other.path)
    assert verify_proof(honest, TRUST).records == [3, 9]


def test_a_record_of_another_run_signed_by_the_same_key_is_refused(two_runs):
    a, b, twin = two_runs
    proof = _proof(a, [7])
    for source in (b, twin):
        alien = _proof(source, [7]).run.records[0]
        assert alien.leaf != proof.run.records[0].leaf
        assert _refused(_with_record(proof, 0, leaf=alien.leaf))
        assert _refused(_with_record(proof, 0, leaf=alien.leaf, path=alien.path))


def test_a_leaf_whose_seq_field_was_rewritten_is_refused(tmp_path):
    run = _ledger(tmp_path / "run")
    proof = _proof(run, [4])
    rec = msgspec.msgpack.decode(proof.run.records[0].leaf, type=F.WireRecord)
    forged = msgspec.msgpack.encode(replace(rec, seq=6))
    assert _refused(_with_record(proof, 0, leaf=forged))
    assert _refused(_with_record(proof, 0, leaf=forged, seq=6))


# -- second preimages, indexes and sizes ---------------------------------------------------------

def test_an_interior_node_presented_as_a_leaf_is_refused(tmp_path):
    """RFC 9162's 0x00/0x01 prefixes: the 64 bytes of a node's two children, given as a leaf,
    do not hash to that node, so a path from the node up does not lead to the root."""
    run = _ledger(tmp_path / "run", n=16)
    proof = _proof(run, [0])
    seal, rec = proof.run.seal, proof.run.records[0]
    l0, l1 = leaf_hash(rec.leaf), rec.path[0]
    # without the prefixes this would be the attack: the node is what path[1:] expects at level 1
    assert verify_inclusion(0, 8, node_hash(l0, l1), rec.path[1:], seal.head)
    two_children = l0 + l1
    for index in range(seal.upto):
        assert not verify_inclusion(index, seal.upto, leaf_hash(two_children), rec.path[1:], seal.head)
    assert _refused(_with_record(proof, 0, leaf=two_children, path=rec.path[1:]))
    # and a node of the level above, with a path one shorter still
    n23 = rec.path[1]
    assert _refused(_with_record(proof, 0, leaf=node_hash(l0, l1) + n23, path=rec.path[2:]))


def test_no_path_of_one_leaf_computes_at_another_index_of_the_same_tree():
    """The signed size fixes the tree; within it a path proves one index only."""
    for n in range(1, 41):
        tree = Tree(b"".join(leaf_hash(i.to_bytes(2, "big")) for i in range(n)))
        root = tree.root()
        for i in range(n):
            path, leaf = tree.inclusion(i), tree.leaf(i)
            assert verify_inclusion(i, n, leaf, path, root)
            for j in range(n + 2):
                if j != i:
                    assert not verify_inclusion(j, n, leaf, path, root), (n, i, j)


def test_a_tree_size_or_index_altered_is_refused(tmp_path):
    """A path of leaf 0 in a tree of 4 also computes the root at size 3 (RFC 9162 needs the
    size authenticated): the size is the seal's, and the seal is signed."""
    run = _ledger(tmp_path / "run", n=4, flush=4)
    proof = _proof(run, [0])
    seal, rec = proof.run.seal, proof.run.records[0]
    assert seal.upto == 4 and verify_inclusion(0, 3, leaf_hash(rec.leaf), rec.path, seal.head)
    for upto in (3, 5, 8, 2**63):
        assert _refused(_with_run(proof, seal=replace(seal, upto=upto)))
    assert _refused(_with_record(proof, 0, seq=1))


@pytest.mark.parametrize("seqs", [[3, 3], [5, 3], [23], [-1], [2**63], [2**64 - 1]])
def test_a_seq_duplicated_out_of_order_or_out_of_range_is_refused(tmp_path, seqs):
    run = _ledger(tmp_path / "run")
    genuine = _proof(run, [3, 5]).run.records
    by_seq = {r.seq: r for r in genuine}
    records = [by_seq.get(s) or replace(genuine[0], seq=s) for s in seqs]
    proof = _with_run(_proof(run, [3]), records=records)
    assert _refused(proof)
    assert _refused(decode_proof(encode_proof(proof)))


def test_no_records_prove_nothing(tmp_path):
    proof = _proof(_ledger(tmp_path / "run"), [3])
    assert _refused(_with_run(proof, records=[]))


# -- run id, key and seal swapped ----------------------------------------------------------------

def test_the_seal_or_run_id_of_another_run_is_refused(two_runs):
    a, b, twin = two_runs
    proof = _proof(a, [7])
    for source in (b, twin):
        other = _proof(source, [7]).run
        assert _refused(_with_run(proof, seal=other.seal))
        assert _refused(_with_run(proof, seal=other.seal, run_id=other.run_id))
        assert _refused(_with_run(proof, run_id=other.run_id)) or other.run_id == proof.run.run_id
    earlier = prove(a, [3], KEY.verify_key, upto=8).seal  # a genuine seal of the same ledger, of 8 records
    assert _refused(_with_run(proof, seal=earlier))
    assert _refused(_with_run(proof, seal=replace(earlier, upto=proof.run.seal.upto)))


def test_a_key_fingerprint_or_public_key_swapped_is_refused(tmp_path):
    other = SigningKey.generate()
    proof = _proof(_ledger(tmp_path / "run"), [7])
    both = [KEY.verify_key, other.verify_key]
    assert not _refused(proof, both)
    ov = other.verify_key
    assert _refused(_with_run(proof, key_fingerprint=ov.fingerprint), both)
    assert _refused(_with_run(proof, key_fingerprint=ov.fingerprint, public_key=ov.raw), both)
    assert _refused(_with_run(proof, public_key=ov.raw), both)
    assert _refused(proof, [ov])  # the verifier's trust, not the proof's key, decides
    assert _refused(_with_run(proof, format_version=2))


# -- study proofs --------------------------------------------------------------------------------

def _study(tmp_path: Path, bindings: list[tuple[str, str, object]]) -> tuple[Path, list[int]]:
    """A study ledger whose cell.ended events bind (cell id, run id, seal) each."""
    study = tmp_path / "study"
    study.mkdir(parents=True)
    seqs = []
    w = LedgerWriter(study / "ledger", run_id="study-seg", key=KEY, flush_records=1, flush_interval_s=3600)
    w.append(Note(text="planned"), source="study")
    for cell, run_id, seal in bindings:
        seqs.append(w.append(CellEnded(cell_id=cell, attempt=1, run_id=run_id, run_dir=f"cells/{cell}",
                                       status="clean", ledger_records=seal.upto, ledger_head=seal.head.hex(),
                                       ledger_final=seal.final, seal_signature=seal.signature.hex()),
                             source="study"))
    w.close()
    return study, seqs


def test_a_study_binding_of_another_run_or_cell_or_seal_is_refused(tmp_path):
    c1 = _ledger(tmp_path / "c1", run_id="cell-1")
    c2 = _ledger(tmp_path / "c2", run_id="cell-2", text="two")
    p1, p2 = prove(c1, [4], KEY.verify_key), prove(c2, [4], KEY.verify_key)
    early = prove(c1, [3], KEY.verify_key, upto=8)
    study, (s1, s2) = _study(tmp_path, [("c1", "cell-1", p1.seal), ("c2", "cell-2", p2.seal)])
    b1, b2 = prove(study, [s1], KEY.verify_key), prove(study, [s2], KEY.verify_key)
    ok = Proof(proof_version=PROOF_VERSION, run=p1, study=b1)
    assert not _refused(ok)
    assert not _refused(Proof(proof_version=PROOF_VERSION, run=p2, study=b2))
    assert _refused(Proof(proof_version=PROOF_VERSION, run=p1, study=b2))  # the other cell's binding
    assert _refused(Proof(proof_version=PROOF_VERSION, run=p2, study=b1))
    assert _refused(Proof(proof_version=PROOF_VERSION, run=early, study=b1))  # an earlier seal of the cell
    # the binding's record swapped for the other cell's, its path kept; or the study's seal swapped
    assert _refused(replace(ok, study=replace(b1, records=[replace(b1.records[0], leaf=b2.records[0].leaf)])))
    assert _refused(replace(ok, study=replace(b1, records=b2.records)))
    assert _refused(replace(ok, study=replace(b1, seal=p1.seal, run_id=p1.run_id)))
    # the run part's own cell ledger given as the "study" binds nothing
    assert _refused(Proof(proof_version=PROOF_VERSION, run=p1, study=p1))
    # a study ledger binding an earlier seal of the cell: the final seal's proof is not it
    study2, (e1,) = _study(tmp_path / "s2", [("c1", "cell-1", early.seal)])
    assert _refused(Proof(proof_version=PROOF_VERSION, run=p1, study=prove(study2, [e1], KEY.verify_key)))
    # a study signed by a key the verifier does not trust
    rogue = SigningKey.generate()
    w = LedgerWriter(tmp_path / "rogue", run_id="study-seg", key=rogue, flush_records=1, flush_interval_s=3600)
    w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-1", ledger_records=p1.seal.upto,
                       ledger_head=p1.seal.head.hex(), seal_signature=p1.seal.signature.hex()), source="study")
    w.close()
    forged = prove(tmp_path / "rogue", [0], rogue.verify_key)
    assert _refused(Proof(proof_version=PROOF_VERSION, run=p1, study=forged))


def test_a_study_part_signed_by_the_cells_host_key_is_refused(tmp_path):
    """A cell signed by an enrolled host's key needs that key trusted for the run part; the host
    then signs a study ledger of its own binding its cell. The study part is checked against the
    study's key alone, and with several keys trusted and none named for it, it is refused."""
    host = SigningKey.generate()  # the cell's host key, enrolled by the study; KEY is the operator's
    cell = _ledger(tmp_path / "cell", run_id="cell-1", key=host)
    part = prove(cell, [4], host.verify_key)
    w = LedgerWriter(tmp_path / "fake-study", run_id="study-seg", key=host, flush_records=1, flush_interval_s=3600)
    w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-1", ledger_records=part.seal.upto,
                       ledger_head=part.seal.head.hex(), seal_signature=part.seal.signature.hex()), source="study")
    w.close()
    forged = Proof(proof_version=PROOF_VERSION, run=part, study=prove(tmp_path / "fake-study", [0], host.verify_key))
    both = [KEY.verify_key, host.verify_key]
    report = verify_proof(forged, both, study_trusted=[KEY.verify_key])
    assert report.status == "failed" and "study: key_fingerprint" in report.problems[0]
    unnamed = verify_proof(forged, both)
    assert unnamed.status == "failed" and "none is named for the study part" in unnamed.problems[0]
    # the same cell bound by the operator's real study ledger verifies, naming both keys
    w = LedgerWriter(tmp_path / "study", run_id="study-real", key=KEY, flush_records=1, flush_interval_s=3600)
    w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-1", ledger_records=part.seal.upto,
                       ledger_head=part.seal.head.hex(), seal_signature=part.seal.signature.hex()), source="study")
    w.close()
    honest = Proof(proof_version=PROOF_VERSION, run=part, study=prove(tmp_path / "study", [0], KEY.verify_key))
    ok = verify_proof(honest, [host.verify_key], study_trusted=[KEY.verify_key])
    assert ok.status == "ok", ok.problems
    assert (ok.run_key, ok.study_key) == (host.verify_key.fingerprint, KEY.verify_key.fingerprint)
    assert host.verify_key.fingerprint in ok.describe() and KEY.verify_key.fingerprint in ok.describe()


# -- blobs -----------------------------------------------------------------------------------------

def test_blobs_swapped_truncated_or_unnamed_are_refused(tmp_path):
    run = _ledger(tmp_path / "run")
    proof = _proof(run, [5], blobs=True)
    blob = proof.run.blobs[0]
    assert not _refused(proof) and blob.content == b"the answer\n"
    lie = b"another answer\n"
    for blobs in ([replace(blob, content=lie)],  # swapped
                  [replace(blob, content=blob.content[:-1])],  # truncated
                  [replace(blob, content=b"")],
                  [replace(blob, content=lie, sha256=hashlib.sha256(lie).hexdigest())],  # renamed to fit: unnamed
                  [blob, blob],  # twice
                  [replace(blob, sha256=blob.sha256.upper())]):
        assert _refused(_with_run(proof, blobs=blobs)), blobs
    # a blob named only by a record the proof does not prove
    unproven = _with_run(_proof(run, [4]), blobs=[blob])
    assert _refused(unproven)


# -- the proof file's encoding ---------------------------------------------------------------------

def _file(proof: Proof) -> dict:
    return msgspec.msgpack.decode(encode_proof(proof)[len(PROOF_MAGIC):])


def _refused_file(body: bytes) -> bool:
    try:
        proof = decode_proof(PROOF_MAGIC + body)
    except LedgerError:
        return True
    return _refused(proof)


def _map(*pairs: tuple[str, bytes]) -> bytes:
    """A msgpack map of already-encoded values, in this order, duplicates kept."""
    assert len(pairs) < 16
    return bytes([0x80 | len(pairs)]) + b"".join(msgspec.msgpack.encode(k) + v for k, v in pairs)


def test_the_genuine_file_decodes_to_what_it_holds(tmp_path):
    proof = _proof(_ledger(tmp_path / "run"), [2, 5], blobs=True)
    data = encode_proof(proof)
    assert decode_proof(data) == proof and not _refused(decode_proof(data))


def test_a_proof_file_with_a_field_given_twice_is_refused(tmp_path):
    """Two ``records`` keys: msgspec keeps the last (genuine, verified), a reader that keeps
    the first shows records that were never checked. The file must be refused whole."""
    run = _ledger(tmp_path / "run")
    proof = _proof(run, [2])
    enc = msgspec.msgpack.encode
    run_part = _file(proof)["run"]
    bogus = [{"seq": 2, "leaf": enc([2, 0, 0, "recorder", {"type": "note", "text": "never signed"}]), "path": []}]
    fields = [(k, enc(v)) for k, v in run_part.items() if k != "records"]
    dup = _map(*fields, ("records", enc(bogus)), ("records", enc(run_part["records"])))
    body = _map(("proof_version", enc(1)), ("run", dup), ("study", enc(None)))
    assert _refused_file(body)


def test_a_proof_file_with_unknown_fields_is_refused(tmp_path):
    proof = _proof(_ledger(tmp_path / "run"), [2])
    data = _file(proof)
    data["run"]["redacted"] = {"records": "seq 2 says something else"}
    assert _refused_file(msgspec.msgpack.encode(data))
    data = _file(proof)
    data["note"] = "verified by the auditor"
    assert _refused_file(msgspec.msgpack.encode(data))


def test_a_proof_file_with_a_non_shortest_integer_is_refused(tmp_path):
    proof = _proof(_ledger(tmp_path / "run"), [2])
    body = encode_proof(proof)[len(PROOF_MAGIC):]
    old = msgspec.msgpack.encode("proof_version") + b"\x01"
    assert body.count(old) == 1
    assert _refused_file(body.replace(old, msgspec.msgpack.encode("proof_version") + b"\xcf" + (1).to_bytes(8, "big")))


@pytest.mark.parametrize("where,value", [
    (("run", "records", 0, "seq"), 2.0),
    (("run", "seal", "final"), 1),
    (("run", "seal", "upto"), True),
    (("run", "public_key"), "not bytes"),
    (("run", "records", 0, "path"), "x" * 32),
    (("proof_version",), "1"),
])
def test_type_coercions_in_a_proof_file_are_refused(tmp_path, where, value):
    data = _file(_proof(_ledger(tmp_path / "run"), [2]))
    inner = data
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    assert _refused_file(msgspec.msgpack.encode(data))


def test_trailing_bytes_or_another_magic_are_refused(tmp_path):
    data = encode_proof(_proof(_ledger(tmp_path / "run"), [2]))
    for bad in (data + b"\x00", data + data[len(PROOF_MAGIC):], b"\x89CSNPRF\r\n" + data[len(PROOF_MAGIC):]):
        with pytest.raises(LedgerError):
            decode_proof(bad)


# -- denial of service -----------------------------------------------------------------------------

def test_deep_nesting_huge_sizes_and_long_paths_are_refused_quickly(tmp_path):
    proof = _proof(_ledger(tmp_path / "run"), [2])
    rec = proof.run.records[0]
    deep = b"\x95\x02\x00\x00\xa8recorder" + b"\x91" * 1_000_000 + b"\xc0"
    started = time.monotonic()
    assert _refused(_with_record(proof, 0, leaf=deep))
    assert _refused_file(_map(("proof_version", b"\x01"), ("zz", b"\x91" * 1_000_000 + b"\xc0")))
    assert _refused(_with_record(proof, 0, path=rec.path * 100_000))
    assert _refused(_with_record(proof, 0, path=[b"\x00" * 31] + rec.path[1:]))
    big = 2**64 - 1
    assert _refused(_with_run(proof, seal=replace(proof.run.seal, upto=big),
                              records=[replace(rec, seq=big - 1, path=[bytes(32)] * 64)]))
    many = _with_run(proof, records=[replace(rec, seq=s) for s in range(20_000)])
    assert _refused(many)
    assert time.monotonic() - started < 30


# -- held heads --------------------------------------------------------------------------------------

def test_a_held_head_of_another_run_or_key_is_refused(two_runs, tmp_path):
    a, b, _ = two_runs
    with pytest.raises(LedgerError, match="is of run 'run-other'"):
        verify_ledger(a, KEY.verify_key, heads=_heads_of(b)[-1:])
    other = SigningKey.generate()
    c = _ledger(tmp_path / "c", key=other)  # same run id, another key
    with pytest.raises(LedgerError, match="signature does not verify"):
        verify_ledger(a, KEY.verify_key, heads=_heads_of(c)[-1:])
    # a head of another run relabelled with this run's id: its signature binds the run id
    relabelled = replace(_heads_of(b)[-1], run_id="run-proof")
    with pytest.raises(LedgerError, match="signature does not verify"):
        verify_ledger(a, KEY.verify_key, heads=[relabelled])


def test_a_ledger_re_signed_shorter_is_truncated(tmp_path):
    """The key holder rewrites the run with fewer records and closes it with a final seal."""
    heads = _heads_of(_ledger(tmp_path / "long"))
    short = _ledger(tmp_path / "short", n=14)  # same run id, key and first 14 records
    assert verify_ledger(short, KEY.verify_key).status == "ok"
    report = verify_ledger(short, KEY.verify_key, heads=heads)
    assert (report.status, report.truncated_at, report.exit_code) == ("truncated", 23, 1)
    # only the heads it still covers: consistent
    assert verify_ledger(short, KEY.verify_key, heads=[h for h in heads if h.upto <= 14]).status == "ok"


def test_a_rollback_that_keeps_a_final_seal_of_an_earlier_size_is_truncated(tmp_path):
    """The heads of a ledger still running (4, 8, 12) are held; the key holder rolls it back
    to 8 records and closes it there, a final seal of a size below a held head."""
    running = _ledger(tmp_path / "running", n=12, close=False)
    held = _heads_of(running)
    assert [h.upto for h in held] == [4, 8, 12] and not any(h.final for h in held)
    rolled = _ledger(tmp_path / "rolled", n=8)
    assert _heads_of(rolled)[-1].final and _heads_of(rolled)[-1].upto == 8
    report = verify_ledger(rolled, KEY.verify_key, heads=held)
    assert (report.status, report.truncated_at) == ("truncated", 12)
    # rolled back and changed below the held head: tampered
    changed = _ledger(tmp_path / "changed", n=8, text="changed")
    assert verify_ledger(changed, KEY.verify_key, heads=held).status == "tampered"


def test_two_held_heads_of_one_size_that_disagree_are_tampered(two_runs):
    a, _, twin = two_runs
    heads = _heads_of(a)[:2] + _heads_of(twin)[1:2]
    assert verify_ledger(a, KEY.verify_key, heads=heads).status == "tampered"


@pytest.mark.parametrize("keep", [1, 9, 30])
def test_a_ledger_cut_inside_its_header_is_truncated_below_a_held_head(tmp_path, keep):
    run = _ledger(tmp_path / "run")
    heads = _heads_of(run)
    data = (run / "ledger").read_bytes()
    (run / "ledger").write_bytes(data[:keep])
    assert verify_ledger(run, KEY.verify_key).status == "unclosed"  # without held heads: a crash at creation
    report = verify_ledger(run, KEY.verify_key, heads=heads)
    assert (report.status, report.truncated_at, report.exit_code) == ("truncated", 23, 1), report
    assert "TRUNCATED" in report.describe()


def test_an_emptied_ledger_is_truncated_below_a_held_head(tmp_path):
    run = _ledger(tmp_path / "run")
    heads = _heads_of(run)
    (run / "ledger").write_bytes(b"")
    with pytest.raises(LedgerError, match="empty file"):
        verify_ledger(run, KEY.verify_key)
    report = verify_ledger(run, KEY.verify_key, heads=heads)
    assert (report.status, report.truncated_at, report.exit_code) == ("truncated", 23, 1), report


# -- what a proof discloses ---------------------------------------------------------------------------

def test_a_proof_discloses_its_neighbours_leaf_hashes(tmp_path):
    """Leaves are not salted (RFC 9162): the path of seq 8 holds seq 9's leaf hash, so whoever
    holds the proof can test a guess of record 9's exact bytes. README "Proofs" says so."""
    run = _ledger(tmp_path / "run")
    proof = _proof(run, [8])
    guess = msgspec.msgpack.encode(F.WireRecord(9, 1, 1, "recorder", Note(text="event 9")))
    assert proof.run.records[0].path[0] == leaf_hash(guess)
    assert proof.run.records[0].path[0] != leaf_hash(guess.replace(b"event 9", b"event 8"))


def test_a_format_version_2_seal_passed_off_as_a_tree_head_is_refused(tmp_path):
    """A version 2 seal signs a hash chain's head under another tag: given as version 3 (or as
    2) with a record and a path computed to reach its head, it proves nothing."""
    from ledger import LedgerProof, ProvenRecord, load_verify_key, read_records

    golden = Path(__file__).parent / "test_golden" / "v2"
    key = load_verify_key(golden / "signer.pub")
    seals: list = []
    records = list(read_records(golden, on_seal=seals.append))
    seal = seals[-1]
    first = records[0]
    leaf = msgspec.msgpack.encode(F.WireRecord(0, first.wall_ns, first.mono_ns, first.source, first.event))
    for version in (3, 2):
        part = LedgerProof(run_id=seal.run_id, key_fingerprint=key.fingerprint, public_key=key.raw,
                           format_version=version, seal=seal,
                           records=[ProvenRecord(seq=0, leaf=leaf, path=[])])
        # a tree of one leaf whose root is the chain head: the seal's size is not 1, and the signature's tag is 2
        assert _refused(Proof(proof_version=PROOF_VERSION, run=part), [key])
        one = replace(part, seal=replace(seal, upto=1, head=leaf_hash(leaf)))
        assert _refused(Proof(proof_version=PROOF_VERSION, run=one), [key])
