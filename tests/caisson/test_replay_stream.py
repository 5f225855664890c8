"""Replay streams a run: the same findings as the detectors over the whole list of its
records, and memory that does not grow with the run (caisson/replay/_replay.py)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import msgspec

from tests._fixtures.cells import ENV, SCENARIO, CellSpec, write_cell
from tests._fixtures.synthetic import strace_like
from caisson.detectors import DEFAULT_DETECTORS, config_from_records, run_detectors
from caisson.replay import WEAKENED, rebuilt_records, replay_records, replay_run
from caisson.replay._replay import _HOLD
from caisson.scenario import parse_scenario
from ledger import BlobStore, LedgerWriter, SigningKey, verify_and_read
from ledger.events import (BlobStored, FileOpen, HostSample, ProcessExec, ProcSample, RunEnded, RunStarted,
                           WitnessStarted, WitnessStopped)


def _whole_list_findings(run: Path, key: SigningKey):
    """The findings of the detectors run over the whole list of a run's rebuilt records, with
    the configuration of all of its records (the reference the stream must equal)."""
    report, records = verify_and_read(run, key.verify_key)
    rebuilt = rebuilt_records(report, records)
    scenario = next((BlobStore(run / "blobs").get(r.event.sha256) for r in reversed(rebuilt)
                     if isinstance(r.event, BlobStored) and r.event.role == "scenario"), None)
    config = config_from_records(rebuilt, parse_scenario(scenario, "scenario") if scenario else None)
    return run_detectors(rebuilt, config, DEFAULT_DETECTORS)


def _late_witness_run(run: Path, key: SigningKey) -> Path:
    """A run whose procfs witness starts only after more records than replay holds back:
    the configuration taken from the run's first records is not the whole run's."""
    run.mkdir()
    with LedgerWriter(run / "ledger", run_id="late", key=key, blobs=BlobStore(run / "blobs")) as w:
        w.append(RunStarted(run_id="late", caisson_version="0", witnesses=["strace", "procfs"]), source="recorder")
        w.append(WitnessStarted(witness="strace"), source="strace")
        for wall, mono, event in strace_like(_HOLD + 500):
            w.append(event, source="strace", wall_ns=wall, mono_ns=mono)
        w.append(WitnessStarted(witness="procfs"), source="procfs")
        w.append(FileOpen(pid=7, path="/work/sandbox/x", result=3), source="strace")
        w.append(RunEnded(exit_code=0), source="recorder")
    return run


def test_replay_streamed_from_the_file_equals_the_detectors_over_the_whole_list(tmp_path, monkeypatch):
    """The findings of a run streamed from its file are those of the detectors over the
    whole list of its records; a run whose configuration its first records do not give
    whole is walked twice, the second time knowing the whole run's."""
    import caisson.replay._replay as replay_module

    walks: list[bool] = []
    walk = replay_module._walk

    def counted(*args):
        walked = walk(*args)
        walks.append(walked.exact)
        return walked

    monkeypatch.setattr(replay_module, "_walk", counted)
    key = SigningKey.generate()
    runs = [write_cell(tmp_path / "clean", CellSpec(run_id="clean", strace_events=3_000), key),
            write_cell(tmp_path / "ambiguous", CellSpec(run_id="ambiguous", sessions=("s1", "s2"), streamed=True,
                                                         live_input_tokens=9), key),
            _late_witness_run(tmp_path / "late", key)]
    for run in runs:
        walks.clear()
        streamed = replay_run(run, key.verify_key)
        assert streamed.verified == "ok"
        assert [f for f in streamed.findings if f.detector != WEAKENED] == _whole_list_findings(run, key)
        assert walks == ([True] if run.name != "late" else [False, True])
        report, records = verify_and_read(run, key.verify_key)
        assert msgspec.to_builtins(replay_records(run, report, records)) == msgspec.to_builtins(streamed)


def _long_run(run: Path, key: SigningKey, opens: int) -> Path:
    """A run of a few long-lived processes opening the same 2,000 files over and over, with
    the procfs witness's samples: ``opens`` sets its length, nothing else grows with it."""
    run.mkdir()
    blobs = BlobStore(run / "blobs")
    clock = [1_767_225_600_000_000_000]

    def put(event, source):
        clock[0] += 5_000
        w.append(event, source=source, wall_ns=clock[0], mono_ns=clock[0])

    with LedgerWriter(run / "ledger", run_id=run.name, key=key, blobs=blobs) as w:
        put(RunStarted(run_id=run.name, caisson_version="0", witnesses=["strace", "procfs"]), "recorder")
        put(BlobStored(sha256=blobs.put(SCENARIO), size_bytes=len(SCENARIO), role="scenario"), "recorder")
        for witness in ("strace", "procfs"):
            put(WitnessStarted(witness=witness), witness)
        for pid in range(2, 12):
            put(ProcessExec(pid=pid, host_pid=pid + 1000, ppid=1, path="/usr/bin/python3", argv=["python3"],
                            cwd="/work/sandbox", env=ENV), "strace")
        for i in range(opens):
            put(FileOpen(pid=2 + i % 10, host_pid=1002 + i % 10, path=f"/work/sandbox/src/m{i % 2000}.py",
                         result=3), "strace")
            if i % 500 == 0:
                put(HostSample(load1=1.0, interval_ns=250_000_000), "procfs")
                put(ProcSample(pid=2, host_pid=1002, ppid=1, start_time_ns=1, name="python3"), "procfs")
        for witness in ("strace", "procfs"):
            put(WitnessStopped(witness=witness), witness)
        put(RunEnded(exit_code=0), "recorder")
    return run


def _peak_bytes(run: Path, key: SigningKey) -> int:
    replay_run(run, key.verify_key)  # the configuration's memos, the imports: not the run's
    tracemalloc.start()
    try:
        replay_run(run, key.verify_key)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_replay_memory_does_not_grow_with_the_run(tmp_path):
    """The peak of Python allocations while a run is replayed is about the same for a run
    four times as long: what is held is what the detectors must remember (the run's
    distinct paths, its processes), not its records (held, 60,000 more opens cost about
    15 MB more)."""
    key = SigningKey.generate()
    small, large = _long_run(tmp_path / "small", key, 20_000), _long_run(tmp_path / "large", key, 80_000)
    small_peak, large_peak = _peak_bytes(small, key), _peak_bytes(large, key)
    assert large_peak < 1.25 * small_peak, (small_peak, large_peak)
