"""Issue 28, item 4: whether the command started is the engine's and the witnesses' to say.

A command can print anything and exit with any status: ``timeout: failed to run command
'agent': No such file or directory`` and exit 127 is what ``timeout`` says when it cannot
execute the command, and what an agent can say to have an attempt it does not like
discarded as an infrastructure failure (a study retries those). The run is recorded as it
ended, its output and answer kept; the infra.failure detector decides from the syscall
witness's record of the exec.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.detectors import config_from_records
from caisson.detectors.health import infra_failure
from caisson.run.record import RecordOptions, record
from caisson.run.witnesses import ProcfsWitness, default_witnesses
from ledger import read_records
from ledger.events import BlobStored, ProcessExec, RunEnded

pytestmark = pytest.mark.docker

SCENARIO = 'name = "start"\nanswer_file = "ANSWER.md"\n'


def _record(tmp_path: Path, command: list[str], witnesses) -> tuple[object, list, dict[str, bytes]]:
    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO)
    out = tmp_path / "run"
    outcome = record(RecordOptions(command=command, scenario=sc, out=out, timeout_s=60), witnesses=witnesses)
    records = list(read_records(out))
    blobs = {r.event.role: (out / "blobs" / r.event.sha256[:2] / r.event.sha256).read_bytes()
             for r in records if isinstance(r.event, BlobStored)}
    return outcome, records, blobs


FAKES = [
    ("timeout: failed to run command 'agent': No such file or directory", 127),  # GNU coreutils
    ("timeout: failed to run command './agent': Permission denied", 126),
    ("timeout: can't execute 'agent': No such file or directory", 127),  # busybox
    ("strace: Can't stat 'agent': No such file or directory", 1),  # the tracer's own words
]


@pytest.mark.parametrize("line, code", FAKES)
def test_a_command_that_says_it_never_started_is_a_completed_run_with_its_output(chamber_image, tmp_path, line, code):
    script = f"echo src/app.py > ANSWER.md; echo the answer; echo \"{line}\" >&2; exit {code}"
    outcome, records, blobs = _record(tmp_path, ["sh", "-c", script], default_witnesses())
    end = next(r.event for r in records if isinstance(r.event, RunEnded))
    assert (end.status, end.exit_code) == ("completed", code) and outcome.status == "completed"
    assert blobs["answer"] == b"src/app.py\n" and blobs["stdout"] == b"the answer\n"
    assert line.encode() in blobs["stderr"]
    assert any(isinstance(r.event, ProcessExec) and r.event.result == 0 for r in records)  # the exec, witnessed
    assert list(infra_failure(records, config_from_records(records))) == []


@pytest.mark.parametrize("syscall", ["strace", "ebpf"])
def test_a_command_that_truly_never_started_is_an_infra_failure_by_the_witness(chamber_image, tmp_path, syscall):
    if syscall == "ebpf":
        from caisson.run import ebpf as ebpf_run

        if (problem := ebpf_run.ebpf_problem()) is not None:
            pytest.skip(f"the eBPF witness cannot run here: {problem}")
    _, records, blobs = _record(tmp_path, ["/opt/agent/bin/not-installed"], default_witnesses(syscall=syscall))
    assert "stdout" in blobs and "stderr" in blobs  # kept, whatever they say
    found = list(infra_failure(records, config_from_records(records)))
    assert [f.kind for f in found] == ["infra_failure"] and "did not start" in found[0].message


def test_with_no_syscall_witness_the_exit_status_is_recorded_and_nothing_is_inferred(chamber_image, tmp_path):
    outcome, records, blobs = _record(tmp_path, ["/opt/agent/bin/not-installed"], [ProcfsWitness()])
    end = next(r.event for r in records if isinstance(r.event, RunEnded))
    assert (end.status, end.exit_code) == ("completed", 127)
    assert b"failed to run command" in blobs["stderr"]
