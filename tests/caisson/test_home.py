"""The operator key pair: created once, whole, however many processes ask for it at once."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from caisson.home import ensure_operator_key, operator_key_paths
from ledger import load_signing_key, load_verify_key


def _first_run(home: str, barrier, out) -> None:
    os.environ["CAISSON_HOME"] = home
    barrier.wait()  # every process looks for the key at the same moment: a fresh machine's parallel cells
    try:
        out.put(ensure_operator_key().verify_key.to_pem())
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put(repr(exc))


@pytest.mark.parametrize("attempt", range(4))
def test_recorders_started_at_once_on_a_fresh_home_share_one_whole_key_pair(tmp_path, attempt, monkeypatch):
    ctx = multiprocessing.get_context("fork")
    n = 8
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_first_run, args=(str(tmp_path), barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    monkeypatch.setenv("CAISSON_HOME", str(tmp_path))
    private, public = operator_key_paths()
    on_disk = load_verify_key(public).to_pem()
    assert load_signing_key(private).verify_key.to_pem() == on_disk  # the files are one pair
    assert got == [on_disk] * n  # and every process signs with it
    assert oct(private.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in private.parent.iterdir()) == [
        ".lock", "operator.key", "operator.pub"]  # no temporary file left behind
