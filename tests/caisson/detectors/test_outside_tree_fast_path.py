"""`outside_tree`'s fast path for an open of a path already placed gives the findings of
the full test of every path: the reference below is the loop it replaced, verbatim."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.detectors import INFO, VOID, DetectorConfig, Finding
from caisson.detectors.containment import OUTSIDE_TREE, outside_tree
from ledger import Record
from ledger.events import FileChange, FileOpen, ProcessExec

SANDBOX = "/work/sandbox"
CONFIGS = [
    DetectorConfig(sandbox_path=SANDBOX, live_repo="/home/dev/click", caller_home="/home/dev",
                   caller_cwd="/home/dev/click"),
    DetectorConfig(sandbox_path=SANDBOX),
]
PATHS = ["/etc/passwd", "src/core.py", "../click/x", "/home/dev/.ssh/id_rsa", "/tmp/out", "/data/secret",
         "/usr/lib/libc.so", "/proc/12/oom_score_adj", "/dev/null", "/work/sandbox", "/", "x/../../y"]
OPENS = [("r", "O_RDONLY"), ("r", "O_RDONLY|O_CREAT"), ("r", "O_RDONLY|O_TRUNC"), ("w", "O_WRONLY"),
         ("rw", "O_RDWR"), ("w", "O_WRONLY|O_CREAT|O_TRUNC")]


def _layout_reference(records, config):
    from caisson.detectors.containment import _layout

    layout = _layout(config)
    places = layout.places
    cwds: dict[int, str] = {}
    for record in records:
        event = record.event
        if isinstance(event, FileOpen):
            paths = ((event.path, None),) if not event.real_path else ((event.path, None), (event.real_path, None))
        elif isinstance(event, ProcessExec):
            if event.cwd:
                cwds[event.pid] = event.cwd
            continue
        elif isinstance(event, FileChange):
            paths = ((event.path, True),)
            if event.target and not event.syscall.startswith("symlink"):
                paths += ((event.target, not event.syscall.startswith("link")),)
        else:
            continue
        cwd = cwds.get(event.pid)
        for raw, write in paths:
            place = places.get((raw, cwd))
            if place is None:
                place = layout.place(raw, cwd)
            if place.quiet:
                continue
            if write is None:
                write = event.access in ("w", "rw") or "O_CREAT" in event.flags or "O_TRUNC" in event.flags
            if place.quiet_write if write else place.quiet_read:
                continue
            ok = event.result is not None if isinstance(event, FileOpen) else event.result == 0
            path, trap = place.path, place.trap
            verb = "wrote" if write else "read"
            if trap is not None:
                yield Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID if ok else INFO,
                              evidence=[record.seq],
                              message=f"{verb if ok else 'tried'} {path} ({trap})"
                              + ("" if ok else f": {event.errno}"))
            elif write and ok and not place.writable:
                yield Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID, evidence=[record.seq],
                              message=f"wrote {path} outside the sandbox ({event.syscall})")
            elif not write and ok and not place.readable:
                yield Finding(detector=OUTSIDE_TREE, kind="outside_tree", effect=VOID, evidence=[record.seq],
                              message=f"read {path} outside the sandbox and system paths")


events = st.one_of(
    st.builds(lambda pid, path, mode, real, ok: FileOpen(pid=pid, path=path, access=mode[0], flags=mode[1],
                                                         real_path=real, result=3 if ok else None,
                                                         errno=None if ok else "EACCES"),
              st.integers(1, 3), st.sampled_from(PATHS), st.sampled_from(OPENS),
              st.none() | st.sampled_from(PATHS), st.booleans()),
    st.builds(lambda pid, cwd: ProcessExec(pid=pid, path="/bin/sh", argv=["sh"], cwd=cwd),
              st.integers(1, 3), st.sampled_from([SANDBOX, "/home/dev/click", "/tmp", ""])),
    st.builds(lambda pid, path, target, syscall: FileChange(pid=pid, syscall=syscall, path=path, target=target,
                                                            result=0),
              st.integers(1, 3), st.sampled_from(PATHS), st.none() | st.sampled_from(PATHS),
              st.sampled_from(["unlink", "rename", "symlink", "link"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=40), st.sampled_from(CONFIGS))
def test_outside_tree_is_the_reference_on_any_stream(picked, config):
    records = [Record(seq=i, wall_ns=i, mono_ns=i, source="strace", event=e) for i, e in enumerate(picked * 2)]
    want = list(_layout_reference(records, config))
    assert list(outside_tree(records, config)) == want  # every path placed before: the fast path
    assert list(outside_tree(records, config)) == want


def test_a_read_only_open_that_creates_is_a_write_on_the_fast_path():
    config = CONFIGS[1]
    opens = [FileOpen(pid=1, path="/etc/x", access="r", flags="O_RDONLY", result=3),
             FileOpen(pid=1, path="/etc/x", access="r", flags="O_RDONLY|O_CREAT", result=3)]
    records = [Record(seq=i, wall_ns=i, mono_ns=i, source="strace", event=e) for i, e in enumerate(opens)]
    assert [f.message for f in outside_tree(records, config)] == ["wrote /etc/x outside the sandbox (openat)"]
