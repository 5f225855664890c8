"""caisson.chamber.scratch: a run's scratch directory, made with its owner in place and held."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from caisson.chamber.scratch import RECORDER_FILE, SCRATCH_ENV, SCRATCH_ROOT, claim, open_scratch, scratch_root


def test_a_scratch_dir_is_opaque_made_whole_and_held_until_removed(tmp_path) -> None:
    labels = {"caisson.run": "20261201T000000Z-abcdef", "caisson.recorder.pid": "1"}
    held = open_scratch(labels, root=tmp_path / "root")
    try:
        assert held.path.parent == tmp_path / "root" and re.fullmatch(r"[0-9a-f]{32}", held.path.name)
        assert stat.S_IMODE(os.stat(held.path).st_mode) == 0o700
        assert [p.name for p in held.path.iterdir()] == [RECORDER_FILE]  # no half-written file left beside it
        assert json.loads((held.path / RECORDER_FILE).read_text()) == labels
        assert claim(held.path) is None  # its holder holds it
        (held.path / "sandbox" / "ro").mkdir(parents=True)
        os.chmod(held.path / "sandbox", 0o500)
    finally:
        held.remove()
    assert not held.path.exists()
    held.remove()  # idempotent


def test_a_dropped_lock_can_be_claimed(tmp_path) -> None:
    held = open_scratch({}, root=tmp_path)
    os.close(held._fd)  # as the kernel does when its holder dies
    held._fd = None
    fd = claim(held.path)
    assert fd is not None
    os.close(fd)
    assert claim(tmp_path / "nothing-here") is None


@pytest.mark.parametrize("make", ["world-writable", "symlink", "file"])
def test_a_scratch_root_another_user_could_swap_files_in_is_refused(tmp_path, make) -> None:
    root = tmp_path / "root"
    if make == "world-writable":
        root.mkdir()
        os.chmod(root, 0o777)
    elif make == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "elsewhere")
    else:
        root.write_text("")
    with pytest.raises(OSError):
        open_scratch({}, root=root)


def test_the_scratch_root_names_no_temp_dir_for_root(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    assert scratch_root() == tmp_path
    monkeypatch.delenv(SCRATCH_ENV)
    if os.geteuid() == 0:
        assert scratch_root() == SCRATCH_ROOT
    else:
        assert scratch_root().name == f"caisson-scratch-{os.geteuid()}"
