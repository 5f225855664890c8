"""`caisson prove`, `caisson verify PROOF`, `tail --heads` and `verify --heads`, as a user runs
them; and the demo's last step (prove one tool call of a study cell) on a study written here,
without a chamber."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
from rich.console import Console

from caisson._cli.demo import prove_tool_call
from caisson.cli import main
from caisson.home import operator_key_paths
from ledger import LedgerWriter, SigningKey, decode_proof, encode_proof
from ledger import _format as F
from ledger.events import AgentToolCall, CellEnded, Note, RunEnded

ROOT = Path(__file__).resolve().parents[2]


def _run(path: Path, key: SigningKey, *, run_id: str = "prove-cli", n: int = 10) -> Path:
    path.mkdir(parents=True)
    with LedgerWriter(path / "ledger", run_id=run_id, key=key, flush_records=3, flush_interval_s=3600) as w:
        for i in range(n - 2):
            w.append(Note(text=f"note {i}"), source="recorder", wall_ns=i, mono_ns=i)
        w.append(AgentToolCall(agent="claude-code", call_id="c1", tool="Bash", input={"command": "grep -rn x src"}),
                 source="agent", wall_ns=n, mono_ns=n)
        w.append(RunEnded(exit_code=0), source="recorder", wall_ns=n + 1, mono_ns=n + 1)
    return path


def _alone(work: Path, *args: str) -> subprocess.CompletedProcess:
    """`caisson ARGS` in ``work`` with an empty $CAISSON_HOME: nothing but what is in ``work``."""
    env = dict(os.environ, CAISSON_HOME=str(work / "empty-home"), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "caisson.cli", *args], cwd=work, env=env, capture_output=True,
                          text=True)


def test_a_proof_verifies_in_a_fresh_directory_with_only_the_public_key(op_key, tmp_path, capsys):
    run = _run(tmp_path / "run", op_key)
    out = tmp_path / "two.proof"
    assert main(["prove", str(run), "--seq", "2", "--seq", "8", "--out", str(out)]) == 0
    assert "records 2, 8 of a signed tree head of 10 records" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "two.proof").write_bytes(out.read_bytes())
    (fresh / "op.pub").write_bytes(operator_key_paths()[1].read_bytes())
    done = _alone(fresh, "verify", "two.proof", "--key", "op.pub")
    assert done.returncode == 0 and "PROOF OK" in done.stdout, done
    # a record changed: exit 1, naming the failing field
    proof = decode_proof(out.read_bytes())
    leaf = proof.run.records[0].leaf.replace(b"note 2", b"note 3")
    bad = msgspec.structs.replace(proof, run=msgspec.structs.replace(
        proof.run, records=[msgspec.structs.replace(proof.run.records[0], leaf=leaf)] + proof.run.records[1:]))
    (fresh / "bad.proof").write_bytes(encode_proof(bad))
    done = _alone(fresh, "verify", "bad.proof", "--key", "op.pub")
    assert done.returncode == 1 and "records[0] (seq 2): the inclusion proof does not lead" in done.stdout, done
    # another key: exit 1
    (fresh / "other.pub").write_bytes(SigningKey.generate().verify_key.to_pem())
    done = _alone(fresh, "verify", "two.proof", "--key", "other.pub")
    assert done.returncode == 1 and "not a trusted key" in done.stdout
    # garbage: exit 2, naming the file
    (fresh / "junk.proof").write_bytes(b"\x89CSNPRF\n\xc1")
    done = _alone(fresh, "verify", "junk.proof", "--key", "op.pub")
    assert done.returncode == 2 and "junk.proof" in done.stderr


def test_prove_refuses_what_it_cannot_prove(op_key, tmp_path, capsys):
    run = _run(tmp_path / "run", op_key)
    assert main(["prove", str(run), "--seq", "10", "--out", str(tmp_path / "p")]) == 2
    assert "seq 10 is not covered" in capsys.readouterr().err
    golden = ROOT / "tests" / "ledger" / "test_golden" / "v2"
    assert main(["prove", str(golden), "--seq", "1", "--out", str(tmp_path / "p"),
                 "--key", str(golden / "signer.pub")]) == 2
    assert "format version 2" in capsys.readouterr().err


def test_tail_keeps_heads_and_verify_names_a_cut_ledger_truncated(op_key, tmp_path, capsys):
    run = _run(tmp_path / "run", op_key)
    heads = tmp_path / "heads.jsonl"
    assert main(["tail", str(run), "--follow", "--heads", str(heads)]) == 0
    assert len(heads.read_bytes().splitlines()) == 4  # seals at 3, 6, 9 and the final one at 10
    capsys.readouterr()
    assert main(["verify", str(run), "--heads", str(heads)]) == 0
    assert "consistent with 4 held signed heads" in capsys.readouterr().out
    data = (run / "ledger").read_bytes()
    parser = F.FrameParser()
    parser.feed(data)
    items = list(iter(parser.next_event, F.NEED_DATA))
    cut = next(f.offset for f in items[1:] if f.kind == F.FRAME_SEAL and f.first_seq == 9)
    (run / "ledger").write_bytes(data[:cut])  # the seal of 9 records and everything after it gone
    assert main(["verify", str(run)]) == 3
    capsys.readouterr()
    assert main(["verify", str(run), "--heads", str(heads)]) == 1
    out = capsys.readouterr().out
    assert "TRUNCATED" in out and "cut at 6 sealed records, below a signed head of 10 records" in out, out
    heads.write_bytes(heads.read_bytes() + b"not json\n")
    assert main(["verify", str(run), "--heads", str(heads)]) == 2
    assert "line 5 is not a signed head" in capsys.readouterr().err


def test_the_demo_proves_a_tool_call_of_a_study_cell(op_key, tmp_path):
    study = tmp_path / "study"
    cell = _run(study / "cells" / "c1", op_key, run_id="cell-c1")
    seals = []
    from ledger import read_records

    for _ in read_records(cell, on_seal=seals.append):
        pass
    final = seals[-1]
    (study / "study" / "000").mkdir(parents=True)
    with LedgerWriter(study / "study" / "000" / "ledger", run_id="study-seg", key=op_key, flush_records=1) as w:
        w.append(Note(text="the study"), source="study")
        w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-c1", run_dir="cells/c1", status="clean",
                           counting=True, ledger_records=final.upto, ledger_head=final.head.hex(),
                           ledger_final=True, seal_signature=final.signature.hex()), source="study")
    out = tmp_path / "cell.proof"
    assert main(["prove", str(cell), "--seq", "8", "--study", str(study), "--out", str(out)]) == 0
    assert main(["verify", str(out)]) == 0
    assert main(["prove", str(_run(tmp_path / "stray", op_key)), "--seq", "1", "--study", str(study),
                 "--out", str(out)]) == 2  # a run the study ledger does not bind
    console = Console(width=150, record=True)
    assert prove_tool_call(console, study, tmp_path / "proof")
    text = console.export_text()
    assert "--seq 8 --study" in text and "PROOF OK call.proof" in text and "bound as a cell by study ledger study-seg" in text
    assert sorted(p.name for p in (tmp_path / "proof").iterdir() if p.name != "home") == ["call.proof", "operator.pub"]


def test_verify_checks_a_study_proofs_parts_against_their_own_keys(op_key, tmp_path, capsys):
    """A cell signed by a host's key and bound by the operator's study ledger: with both keys
    trusted, `verify` needs `--study-key` to say which signs the study, and a study part the
    host signed itself fails against it; `--study-key` on anything but a study proof is refused."""
    from ledger import PROOF_VERSION, Proof, generate_keypair, prove, read_records

    host = generate_keypair(tmp_path / "host.key", tmp_path / "host.pub")
    cell = _run(tmp_path / "cell", host, run_id="cell-c1")
    seals = []
    for _ in read_records(cell, on_seal=seals.append):
        pass
    final = seals[-1]

    def study_proof(key: SigningKey, name: str) -> Path:
        with LedgerWriter(tmp_path / name, run_id="study-seg", key=key, flush_records=1) as w:
            w.append(CellEnded(cell_id="c1", attempt=1, run_id="cell-c1", run_dir="cells/c1", status="clean",
                               counting=True, ledger_records=final.upto, ledger_head=final.head.hex(),
                               ledger_final=True, seal_signature=final.signature.hex()), source="study")
        proof = Proof(proof_version=PROOF_VERSION, run=prove(cell, [8], host.verify_key),
                      study=prove(tmp_path / name, [0], key.verify_key))
        (out := tmp_path / f"{name}.proof").write_bytes(encode_proof(proof))
        return out

    op_pub = str(operator_key_paths()[1])
    both = ["--key", str(tmp_path / "host.pub"), "--key", op_pub]
    honest = study_proof(op_key, "study")
    capsys.readouterr()
    assert main(["verify", str(honest), *both]) == 1
    assert "none is named for the study part" in capsys.readouterr().out
    assert main(["verify", str(honest), *both, "--study-key", op_pub]) == 0
    said = capsys.readouterr().out
    assert f"signed by {host.verify_key.fingerprint}" in said and f"signed by {op_key.verify_key.fingerprint}" in said
    forged = study_proof(host, "fake-study")  # the host signs a study ledger of its own binding its cell
    assert main(["verify", str(forged), *both]) == 1
    assert main(["verify", str(forged), *both, "--study-key", op_pub]) == 1
    assert "study: key_fingerprint" in capsys.readouterr().out
    assert main(["verify", str(cell), "--study-key", op_pub]) == 2
    assert "--study-key applies to a study proof" in capsys.readouterr().err
