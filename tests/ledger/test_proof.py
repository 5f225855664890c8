"""Proofs (ledger/_proof.py) and held heads (ledger/_heads.py).

A proof is checked here twice: by `ledger.verify_proof`, and by hand with the RFC 9162
reference of test_merkle and the key's own signature check, so the verifier is not
trusted to check itself. Every field of a proof, changed, makes it fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from ledger import (BlobStore, LedgerError, LedgerWriter, Proof, PROOF_VERSION, SigningKey, decode_proof,
                    encode_head, encode_proof, load_heads, prove, read_records, verify_ledger, verify_proof)
from ledger import _chain, _format as F
from ledger._merkle import leaf_hash
from ledger.events import BlobStored, CellEnded, Note

from tests.ledger.conftest import KEY, items_of
from tests.ledger.test_merkle import ref_verify_inclusion


def _ledger(run: Path, n: int = 23, *, flush: int = 4, key: SigningKey = KEY, run_id: str = "run-proof",
            text: str = "event", close: bool = True) -> Path:
    run.mkdir(parents=True)
    blobs = BlobStore(run / "blobs")
    w = LedgerWriter(run / "ledger", run_id=run_id, key=key, blobs=blobs, flush_records=flush,
                     flush_interval_s=3600, created_ns=1)
    for i in range(n):
        if i == 5:
            digest = blobs.put(b"the answer\n")
            w.append(BlobStored(sha256=digest, size_bytes=11, role="answer"), source="recorder", wall_ns=i, mono_ns=i)
        else:
            w.append(Note(text=f"{text} {i}"), source="recorder", wall_ns=i, mono_ns=i)
    if close:
        w.close()
    else:
        w.flush()
    return run


def _by_hand(proof: Proof, key=KEY.verify_key) -> bool:
    part = proof.run
    seal = part.seal
    if not key.verify(seal.signature, _chain.seal_message_v3(seal.run_id, seal.upto, seal.head, seal.final,
                                                             seal.wall_ns, seal.size, seal.file_hash)):
        return False
    return all(ref_verify_inclusion(r.seq, seal.upto, leaf_hash(r.leaf), r.path, seal.head) for r in part.records)


def test_a_proof_verifies_alone_and_by_an_independent_check(tmp_path):
    run = _ledger(tmp_path / "run")
    proof = Proof(proof_version=PROOF_VERSION, run=prove(run, [0, 5, 22], KEY.verify_key, blobs=True))
    again = decode_proof(encode_proof(proof))
    assert again == proof
    report = verify_proof(again, [KEY.verify_key])
    assert report.status == "ok" and report.records == [0, 5, 22] and report.blobs == 1, report.problems
    assert report.tree_size == 23 and proof.run.seal.final
    assert _by_hand(again)
    decoded = [msgspec.msgpack.decode(r.leaf, type=F.WireRecord) for r in proof.run.records]
    assert decoded[0].event == Note(text="event 0") and isinstance(decoded[1].event, BlobStored)
    assert proof.run.blobs[0].content == b"the answer\n"


def test_a_proof_against_an_earlier_seal(tmp_path):
    run = _ledger(tmp_path / "run")
    part = prove(run, [3], KEY.verify_key, upto=8)
    assert part.seal.upto == 8 and not part.seal.final
    assert verify_proof(Proof(proof_version=PROOF_VERSION, run=part), [KEY.verify_key]).status == "ok"
    with pytest.raises(LedgerError, match="not covered"):
        prove(run, [9], KEY.verify_key, upto=8)
    with pytest.raises(LedgerError, match="covers exactly 7"):
        prove(run, [3], KEY.verify_key, upto=7)


def test_another_key_or_an_older_format_proves_nothing(tmp_path):
    run = _ledger(tmp_path / "run")
    other = SigningKey.generate().verify_key
    with pytest.raises(LedgerError, match="does not verify"):
        prove(run, [1], other)
    proof = Proof(proof_version=PROOF_VERSION, run=prove(run, [1], KEY.verify_key))
    report = verify_proof(proof, [other])
    assert report.status == "failed" and "not a trusted key" in report.problems[0]
    golden = Path(__file__).parent / "test_golden" / "v2"
    from ledger import load_verify_key

    with pytest.raises(LedgerError, match="format version 2"):
        prove(golden, [1], load_verify_key(golden / "signer.pub"))


def _mutations(value, path=""):
    """(path, mutated value) for every field reachable in ``value``, one change each."""
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            inner = getattr(value, name)
            for where, changed in _mutations(inner, f"{path}.{name}"):
                yield where, msgspec.structs.replace(value, **{name: changed})
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for where, changed in _mutations(item, f"{path}[{i}]"):
                yield where, value[:i] + [changed] + value[i + 1:]
        if value and isinstance(value[0], bytes):  # a path: one node fewer
            yield f"{path} (one dropped)", value[1:]
        if value:  # (fewer records or blobs is another proof, of less)
            yield f"{path} (one repeated)", value + value[-1:]
    elif isinstance(value, bool):
        yield path, not value
    elif isinstance(value, int):
        yield path, value + 1
    elif isinstance(value, bytes):
        yield path, (bytes([value[0] ^ 1]) + value[1:]) if value else b"\x00"
    elif isinstance(value, str):
        yield path, value + "0" if not value[-1:].isdigit() else value[:-1] + str((int(value[-1]) + 1) % 10)
    elif value is None:
        return
    else:
        raise AssertionError(f"{path}: {type(value)}")


def test_every_field_of_a_proof_changed_makes_it_fail(tmp_path):
    run = _ledger(tmp_path / "run")
    proof = Proof(proof_version=PROOF_VERSION, run=prove(run, [2, 5, 17], KEY.verify_key, blobs=True))
    assert verify_proof(proof, [KEY.verify_key]).status == "ok"
    changed = 0
    for where, mutant in _mutations(proof):
        report = verify_proof(mutant, [KEY.verify_key])
        assert report.status == "failed", where
        changed += 1
    assert changed > 40


def test_a_study_proof_binds_the_cell_seal_and_fails_when_the_binding_is_changed(tmp_path):
    cell = _ledger(tmp_path / "cell", run_id="cell-run")
    cell_part = prove(cell, [4], KEY.verify_key)
    seal = cell_part.seal
    study = tmp_path / "study"
    study.mkdir()
    w = LedgerWriter(study / "ledger", run_id="study-seg", key=KEY, flush_records=1, flush_interval_s=3600)
    w.append(Note(text="planned"), source="study")
    seq = w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-run", run_dir="cells/c1", status="clean",
                             ledger_records=seal.upto, ledger_head=seal.head.hex(), ledger_final=True,
                             seal_signature=seal.signature.hex()), source="study")
    w.close()
    proof = Proof(proof_version=PROOF_VERSION, run=cell_part, study=prove(study, [seq], KEY.verify_key))
    report = verify_proof(proof, [KEY.verify_key])
    assert report.status == "ok" and report.study_run_id == "study-seg", report.problems
    for where, mutant in _mutations(proof):
        assert verify_proof(mutant, [KEY.verify_key]).status == "failed", where
    unbound = Proof(proof_version=PROOF_VERSION, run=cell_part, study=prove(study, [0], KEY.verify_key))
    assert "no proven cell.ended" in verify_proof(unbound, [KEY.verify_key]).problems[0]


def test_a_malformed_proof_file_is_named(tmp_path):
    with pytest.raises(LedgerError, match="bad magic"):
        decode_proof(b"not a proof", "p.proof")
    run = _ledger(tmp_path / "run")
    data = msgspec.msgpack.decode(encode_proof(Proof(proof_version=1, run=prove(run, [1], KEY.verify_key)))[8:])
    data["run"]["seal"]["upto"] = "many"
    with pytest.raises(LedgerError, match=r"p\.proof.*\$\.run\.seal\.upto"):
        decode_proof(b"\x89CSNPRF\n" + msgspec.msgpack.encode(data), "p.proof")


# -- held heads ----------------------------------------------------------------------------------

def _heads_of(run: Path) -> list:
    heads: list = []
    for _ in read_records(run, on_seal=heads.append):
        pass
    return heads


def test_a_ledger_cut_below_a_held_head_is_named_truncated(tmp_path):
    run = _ledger(tmp_path / "run")
    heads = _heads_of(run)
    assert [h.upto for h in heads] == [4, 8, 12, 16, 20, 23]
    file = tmp_path / "heads.jsonl"
    file.write_bytes(b"".join(encode_head(h) + b"\n" for h in heads))
    assert load_heads(file) == heads
    report = verify_ledger(run, KEY.verify_key, heads=load_heads(file), heads_path=str(file))
    assert (report.status, report.heads_checked) == ("ok", 6)
    # cut after the seal of 12 records: a crash would look the same without the held heads
    data = (run / "ledger").read_bytes()
    cut = next(i.end for i in items_of(data) if i.kind == F.FRAME_SEAL and i.first_seq == 12)
    (run / "ledger").write_bytes(data[:cut])
    assert verify_ledger(run, KEY.verify_key).status == "unclosed"
    report = verify_ledger(run, KEY.verify_key, heads=heads, heads_path=str(file))
    assert (report.status, report.truncated_at, report.sealed, report.exit_code) == ("truncated", 23, 12, 1)
    assert "TRUNCATED" in report.describe() and "23 records" in report.describe()
    # heads it still holds are consistent
    assert verify_ledger(run, KEY.verify_key, heads=heads[:3]).status == "unclosed"


def test_a_ledger_rewritten_below_a_held_head_is_tampered(tmp_path):
    original = _ledger(tmp_path / "a")
    heads = _heads_of(original)
    rewritten = _ledger(tmp_path / "b", text="other")  # same run id and key: a rewrite by the key holder
    report = verify_ledger(rewritten, KEY.verify_key, heads=heads[:1])
    assert report.status == "tampered" and "not those of the signed head of 4 records" in report.reason


def test_bad_held_heads_are_refused_by_file_and_line(tmp_path):
    run = _ledger(tmp_path / "run")
    heads = _heads_of(run)
    file = tmp_path / "heads.jsonl"
    file.write_bytes(encode_head(heads[0]) + b'\n{"head": {"run_id": 3}}\n')
    with pytest.raises(LedgerError, match="heads.jsonl.*line 2"):
        load_heads(file)
    forged = msgspec.structs.replace(heads[0], upto=99)
    with pytest.raises(LedgerError, match="signature does not verify"):
        verify_ledger(run, KEY.verify_key, heads=[forged], heads_path=str(file))
    other = _ledger(tmp_path / "other", run_id="another")
    with pytest.raises(LedgerError, match="is of run 'another'"):
        verify_ledger(run, KEY.verify_key, heads=_heads_of(other)[:1])


def test_proving_a_ledger_of_many_frames_reads_it_once(tmp_path):
    run = _ledger(tmp_path / "run", n=3000, flush=512)
    seqs = sorted({int.from_bytes(os.urandom(2), "big") % 3000 for _ in range(5)})
    proof = Proof(proof_version=PROOF_VERSION, run=prove(run, seqs, KEY.verify_key))
    assert verify_proof(proof, [KEY.verify_key]).status == "ok" and _by_hand(proof)
