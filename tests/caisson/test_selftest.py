"""The selftest itself, end to end: every detector fires on its probe, none on the honest one."""

from __future__ import annotations

from caisson.cli import main
from caisson.probes.selftest import cases_for


def test_selftest_matrix_discriminates(chamber_image, tmp_path, capsys):
    code = main(["selftest", "--out", str(tmp_path / "selftest")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "selftest passed" in out
    for case in cases_for("strace"):
        assert case.name in out
