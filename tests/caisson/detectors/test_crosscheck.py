"""witness.disagreement playbooks: records of both syscall witnesses in, exact findings out."""

from __future__ import annotations

from caisson.detectors import DEFAULT_DETECTORS, DetectorConfig, Finding
from caisson.detectors.crosscheck import WITNESS_DISAGREEMENT, witness_disagreement
from ledger import Record
from ledger.events import FileOpen, ProcessExec, WitnessGap, WitnessStarted

S = 1_000_000_000
CONFIG = DetectorConfig()


def play(*items: tuple[str, int, object]) -> list[Record]:
    """(source, wall s, event) -> records numbered from 0."""
    return [Record(seq=i, wall_ns=int(t * S), mono_ns=i, source=src, event=e) for i, (src, t, e) in enumerate(items)]


def both(*items):
    return play(("strace", 0, WitnessStarted(witness="strace", detail={})),
                ("ebpf", 0, WitnessStarted(witness="ebpf", detail={})), *items)


def sh(host_pid=None):
    return ProcessExec(pid=1, host_pid=host_pid, path="/usr/bin/sh", argv=["sh"], cwd="/work/sandbox")


def opened(path, host_pid=None, syscall="openat", result=3):
    return FileOpen(pid=1, host_pid=host_pid, syscall=syscall, path=path, result=result,
                    errno=None if result is not None else "ENOENT")


def finding(seq, message):
    return Finding(detector=WITNESS_DISAGREEMENT, kind="witness_disagreement", effect="void", evidence=[seq],
                   message=message)


def test_registered():
    assert (WITNESS_DISAGREEMENT, witness_disagreement) in DEFAULT_DETECTORS


def test_agreeing_witnesses_are_silent_by_host_pid_or_by_time():
    records = both(
        ("ebpf", 0.5, ProcessExec(pid=1, host_pid=50, path="/bin/bash", argv=["bash"], cwd="/")),  # the wrapper
        ("strace", 1, sh(host_pid=51)), ("ebpf", 1.001, sh(host_pid=51)),
        ("ebpf", 2.0, opened("/work/sandbox/a.py", host_pid=51)),  # eBPF's line came first
        ("strace", 2.0002, opened("/work/sandbox/a.py", host_pid=51)),
        ("strace", 3, opened("/etc/passwd")), ("ebpf", 4.5, opened("/etc/passwd", host_pid=51)),  # no host pid: by time
        ("strace", 5, opened("/nope", result=None)),  # failed opens are not compared
    )
    assert list(witness_disagreement(records, CONFIG)) == []


def test_an_open_only_one_witness_saw_is_void_each_way():
    records = both(
        ("strace", 1, sh(host_pid=51)), ("ebpf", 1, sh(host_pid=51)),
        ("ebpf", 2, opened("/work/sandbox/CLAUDE.md", host_pid=51, syscall="io_uring_openat")),
        ("strace", 3, opened("/work/sandbox/b.py", host_pid=51)),
        ("ebpf", 3, opened("/work/sandbox/b.py", host_pid=52)),  # same path, another process
        ("strace", 4, opened("/etc/hosts")), ("ebpf", 9, opened("/etc/hosts")),  # too far apart
    )
    assert list(witness_disagreement(records, CONFIG)) == [
        finding(4, "ebpf saw open /work/sandbox/CLAUDE.md (io_uring_openat, host pid 51); strace did not"),
        finding(5, "strace saw open /work/sandbox/b.py (openat, host pid 51); ebpf did not"),
        finding(6, "ebpf saw open /work/sandbox/b.py (openat, host pid 52); strace did not"),
        finding(7, "strace saw open /etc/hosts (openat, host pid None); ebpf did not"),
        finding(8, "ebpf saw open /etc/hosts (openat, host pid None); strace did not"),
    ]


def test_an_exec_only_one_witness_saw_and_each_fact_matches_once():
    records = both(
        ("strace", 1, sh(host_pid=51)), ("ebpf", 1, sh(host_pid=51)),
        ("strace", 2, ProcessExec(pid=2, host_pid=52, path="/usr/bin/cat", argv=["cat"], cwd="/")),
        ("strace", 3, opened("/etc/hosts")), ("strace", 3.1, opened("/etc/hosts")), ("ebpf", 3, opened("/etc/hosts")),
    )
    assert list(witness_disagreement(records, CONFIG)) == [
        finding(4, "strace saw exec /usr/bin/cat (execve, host pid 52); ebpf did not"),
        finding(6, "strace saw open /etc/hosts (openat, host pid None); ebpf did not"),
    ]


def test_nothing_unless_both_witnesses_ran_and_nothing_after_a_gap():
    lone = play(("strace", 0, WitnessStarted(witness="strace", detail={})), ("strace", 1, sh(51)))
    assert list(witness_disagreement(lone, CONFIG)) == []
    gapped = both(("strace", 1, sh(51)), ("ebpf", 2, WitnessGap(witness="ebpf", reason="lost", missing="syscalls",
                                                                  since_ns=2 * S)))
    assert list(witness_disagreement(gapped, CONFIG)) == []


def test_a_configuration_built_from_the_run_gives_the_same_findings_and_ends_early_with_one_witness():
    """`config_from_records` reads the run's witness.started: with it, a run where one of the
    two never started is answered without a walk of its opens; every run gives the findings
    it gives with a configuration that does not know (read from the records themselves)."""
    from caisson.detectors import config_from_records

    runs = [
        both(("strace", 1, sh(51)), ("ebpf", 1, sh(51)), ("strace", 2, opened("/etc/hosts", 51))),
        both(("strace", 1, sh()), ("ebpf", 1.1, sh()), ("ebpf", 2, opened("/etc/passwd"))),
        play(("strace", 0, WitnessStarted(witness="strace", detail={})), ("strace", 1, sh(51)),
             ("ebpf", 1, sh(51))),
        play(("ebpf", 0, WitnessStarted(witness="ebpf", detail={})), ("proxy", 0, WitnessStarted(witness="proxy",
                                                                                              detail={}))),
    ]
    for records in runs:
        config = config_from_records(records)
        assert config.witnesses == tuple(sorted({r.event.witness for r in records
                                                 if isinstance(r.event, WitnessStarted)}))
        assert list(witness_disagreement(records, config)) == list(witness_disagreement(records, CONFIG))
    assert list(witness_disagreement(runs[1], CONFIG))  # the runs above hold findings too
    # the shortcut trusts the configuration: one that names a single syscall witness is no walk
    assert list(witness_disagreement(runs[1], DetectorConfig(witnesses=("strace",)))) == []
    # a configuration built from records that hold no witness.started does not know: it reads them
    assert config_from_records([]).witnesses is None
    assert list(witness_disagreement(runs[1], config_from_records([]))) == list(witness_disagreement(runs[1], CONFIG))


def test_an_open_is_matched_by_the_kernels_path_when_one_witness_kept_the_name_as_given():
    # /proc/self/fd/4/a: strace's parser places it through its fd map; the eBPF witness keeps
    # it as given and gives the kernel's path. A symlink: both give the same name and real path.
    key = "/work/sandbox/key/a"
    records = both(
        ("strace", 1, sh(host_pid=51)), ("ebpf", 1, sh(host_pid=51)),
        ("strace", 2, opened(key, host_pid=51)),
        ("ebpf", 2, FileOpen(pid=1, host_pid=51, path="/proc/self/fd/4/a", result=3, real_path=key, unresolved=True)),
        ("strace", 3, FileOpen(pid=1, host_pid=51, path="/work/sandbox/l", result=4, real_path=key)),
        ("ebpf", 3, FileOpen(pid=1, host_pid=51, path="/work/sandbox/l", result=4, real_path=key)),
        # a real path names the file, not another open: a second open of it still needs its own match
        ("strace", 4, opened(key, host_pid=51)),
    )
    assert list(witness_disagreement(records, CONFIG)) == [
        finding(8, f"strace saw open {key} (openat, host pid 51); ebpf did not")]


def test_a_dirfd_one_witness_placed_elsewhere_is_still_a_disagreement():
    # issue #28's moved fd: the eBPF witness of before resolved openat(3, "answers.json") from a
    # stale map; strace from fd 3's -yy path
    records = both(
        ("strace", 1, sh(host_pid=51)), ("ebpf", 1, sh(host_pid=51)),
        ("strace", 2, opened("/work/sandbox/key/answers.json", host_pid=51)),
        ("ebpf", 2, opened("/work/sandbox/src/answers.json", host_pid=51)),
    )
    assert [f.evidence for f in witness_disagreement(records, CONFIG)] == [[4], [5]]
