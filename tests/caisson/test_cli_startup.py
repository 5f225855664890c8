"""`caisson --help`, each command's help and its usage errors import only the parser: the
modules a command runs are imported when it runs (docs/benchmarks.md, "Import time of each command")."""

from __future__ import annotations

import pytest

from caisson.cli import _COMMANDS, build_parser, main
from caisson.errors import UsageError
from tests._fixtures.startup import imported_modules, startup_cases

# Each costs a bare interpreter's start or more (trio 180 ms, aiodocker's aiohttp 90 ms,
# msgspec's typing machinery 50 ms, rich 60 ms). The ledger's reader, writer and format
# need msgspec and zstandard, its keys cryptography: a command imports them when it reads,
# writes or signs. What is left is argparse, the CLI, `caisson.errors` and the ledger's
# errors: about 2-4x `python -c pass` (benchmarks/startup_bench.py).
HEAVY = ("trio", "aiodocker", "aiohttp", "mitmproxy", "numpy", "cryptography", "zstandard", "msgspec", "rich",
         "psutil", "platformdirs", "collectors", "ledger.events")

CASES = startup_cases()


def test_every_command_and_verb_is_covered():
    assert ["--help"] in [argv for argv, _ in CASES]
    assert {argv[0] for argv, _ in CASES if argv and argv[-1] == "--help"} >= {"record", "verify", "study"}
    assert ["study", "report", "--help"] in [argv for argv, _ in CASES]


def test_caisson_help_lists_the_summary_each_command_registers():
    """`caisson --help` imports no command: it lists `_COMMANDS`, which must say what each registers."""
    for name, summary in _COMMANDS.items():
        sub = next(a for a in build_parser(name)._actions if a.dest == "command")
        assert [c.help for c in sub._choices_actions if c.dest == name] == [summary], name


@pytest.mark.parametrize(("argv", "code"), CASES, ids=[" ".join(argv) or "(none)" for argv, _ in CASES])
def test_help_and_usage_errors_import_nothing_heavy(argv, code, tmp_path):
    exit_code, modules = imported_modules(argv, tmp_path)
    assert exit_code == code
    assert sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)) == []


@pytest.mark.parametrize("argv", [["record"], ["record", "--"], ["record", "--timeout", "5"]])
def test_a_bare_record_is_told_what_plan_run_tells(argv, capsys):
    """`caisson record` checks for a command before it imports `plan_run`: the same words."""
    from caisson.run import RecordOptions, plan_run

    with pytest.raises(UsageError) as planned:
        plan_run(RecordOptions(command=[]))
    assert main(argv) == 2
    assert capsys.readouterr().err == f"caisson record: {planned.value}\n"


def test_a_bare_record_with_commit_is_told_plan_runs_first_complaint(capsys):
    assert main(["record", "--commit", "HEAD"]) == 2
    assert capsys.readouterr().err == "caisson record: --commit needs --repo\n"
