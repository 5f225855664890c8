"""Changes through a symlink the run made, and the answer key linked or renamed: a change is
placed by its names, so a symlink it goes through makes it unjudged; a hard link or rename of
an excluded file is its leak (the red team's test_redteam_paths.py, items 1 and 7)."""

from __future__ import annotations

from caisson.detectors import INFO, VOID, DetectorConfig
from caisson.detectors.containment import EXCLUDED_READ, PATH_UNJUDGED, excluded_read, path_unjudged
from ledger import Record
from ledger.events import FileChange

W = "/work/sandbox"
CONFIG = DetectorConfig(sandbox_path=W, exclusion_globs=(("answer_key", "benchmark/**"),))


def _records(*events) -> list[Record]:
    return [Record(seq=i, wall_ns=i, mono_ns=i, source="ebpf", event=e) for i, e in enumerate(events)]


def _change(syscall: str, path: str, target: str | None = None, result: int = 0) -> FileChange:
    return FileChange(pid=2, host_pid=9, syscall=syscall, path=path, target=target, result=result,
                      errno=None if result == 0 else "EEXIST")


def _unjudged(*events) -> list[tuple[int, str]]:
    return [(f.evidence[0], f.effect) for f in path_unjudged(_records(*events), CONFIG) if f.detector == PATH_UNJUDGED]


def test_a_change_through_a_symlink_the_run_made_is_unjudged():
    link = _change("symlink", f"{W}/src/lock", target="/run/lock")
    assert _unjudged(link, _change("mkdir", f"{W}/src/lock/kept"), _change("mkdir", f"{W}/src/other"),
                     _change("rename", f"{W}/a", f"{W}/src/lock/a"), _change("unlink", f"{W}/src/lock"),
                     _change("mkdir", f"{W}/src/lock/after")) == [(1, VOID), (3, VOID)]


def test_a_call_that_follows_the_link_itself_is_unjudged_and_a_moved_link_is_followed():
    link = _change("symlinkat", f"{W}/l", target="/run/lock")
    assert _unjudged(link, _change("unlink", f"{W}/l/x", result=-1), _change("chmod", f"{W}/l"),
                     _change("rename", f"{W}/l", f"{W}/src/m"), _change("mkdir", f"{W}/l/y"),
                     _change("mkdir", f"{W}/src/m/z")) == [(1, INFO), (2, VOID), (5, VOID)]
    # a directory holding a link, moved; a link replaced by a rename over it
    assert _unjudged(_change("symlink", f"{W}/d/l", target="/etc"), _change("rename", f"{W}/d", f"{W}/e"),
                     _change("mkdir", f"{W}/e/l/x"), _change("rename", f"{W}/f", f"{W}/e/l"),
                     _change("mkdir", f"{W}/e/l/y")) == [(2, VOID)]


def test_without_a_symlink_the_run_made_nothing_is_unjudged():
    assert _unjudged(_change("mkdir", f"{W}/src/lock/kept"), _change("rename", f"{W}/a", f"{W}/b"),
                     _change("symlink", f"{W}/s", target="x")) == []


def test_a_hard_link_or_rename_of_the_key_is_its_leak():
    found = list(excluded_read(_records(
        _change("link", f"{W}/src/notes.txt", target=f"{W}/benchmark/questions.toml"),
        _change("rename", f"{W}/benchmark/questions.toml", f"{W}/src/moved.txt"),
        _change("linkat", f"{W}/src/again.txt", target=f"{W}/benchmark/questions.toml", result=-1),
        _change("rename", f"{W}/src/a.txt", f"{W}/src/b.txt"),
        _change("symlink", f"{W}/src/s", target=f"{W}/benchmark/questions.toml")), CONFIG))
    assert [(f.detector, f.effect, f.evidence[0], f.message) for f in found] == [
        (EXCLUDED_READ, VOID, 0, "linked benchmark/questions.toml (answer_key) to /work/sandbox/src/notes.txt with link"),
        (EXCLUDED_READ, VOID, 1, "renamed benchmark/questions.toml (answer_key) to /work/sandbox/src/moved.txt with"
                                 " rename"),
        (EXCLUDED_READ, INFO, 2, "tried benchmark/questions.toml (answer_key): EEXIST")]
