"""Red team, caisson#28 item 6: what the chamber still tells the agent about the host.

One chamber run (module scope) prints what an unprivileged agent can read; each test
names one fact it should not find. On main each is ``xfail(strict=True)`` on the exception
of its last check (`Told`); remove the mark once the chamber hides it.

Held (not tested here): the container id and host temporary paths are gone from
mountinfo, /etc/hostname, $HOSTNAME and /etc/resolv.conf; the cgroup paths are "/"; the
sandbox's git history names no host user; IPv6 is disabled on the chamber's interface;
/caisson/witness is root's, mode 0700.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from caisson.cli import main
from ledger import read_records

SECTIONS = ("pid1", "mountinfo", "cmdline", "boot_id")
SCRIPT = "; ".join([
    "echo '== pid1'", "tr '\\0' ' ' < /proc/1/cmdline", "echo",
    "echo '== mountinfo'", "cat /proc/self/mountinfo",
    "echo '== cmdline'", "cat /proc/cmdline",
    "echo '== boot_id'", "cat /proc/sys/kernel/random/boot_id",
])


class Told(AssertionError):
    """The chamber told the agent a host fact: raised by the one check each test is about."""


@pytest.fixture(scope="module")
def seen(chamber_image, tmp_path_factory) -> dict[str, str]:
    """What the chamber printed, by section."""
    run_dir = tmp_path_factory.mktemp("host-facts") / "run"
    assert main(["record", "--out", str(run_dir), "--", "sh", "-c", SCRIPT]) == 0
    [stdout] = [r.event for r in read_records(run_dir) if getattr(r.event, "role", None) == "stdout"]
    text = (run_dir / "blobs" / stdout.sha256[:2] / stdout.sha256).read_text()
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("== ") and line[3:] in SECTIONS:
            section = line[3:]
            out.setdefault(section, [])  # a file read as empty has no line
            continue
        out.setdefault(section, []).append(line)
    assert set(out) >= set(SECTIONS), text
    return {k: "\n".join(v) for k, v in out.items()}


@pytest.mark.xfail(strict=True, raises=Told, reason="accepted (docs/architecture.md, what the chamber can see): pid 1's"
                   " command line is world-readable in its pid namespace: the tracer, its FIFO, its filter and the"
                   " chamber's deadline, caisson's own documented set-up; no host path or identity")
def test_the_witness_command_line_is_not_the_agents_to_read(seen):
    pid1 = seen["pid1"]
    if "/caisson/witness" in pid1 or "strace" in pid1 or "timeout" in pid1:
        raise Told(f"/proc/1/cmdline: {pid1[:160]}...")


def test_the_hosts_kernel_identity_is_not_the_chambers(seen):
    told = [name for name, host in (("cmdline", "/proc/cmdline"), ("boot_id", "/proc/sys/kernel/random/boot_id"))
            if seen[name].strip() and seen[name].strip() == Path(host).read_text().strip()]
    if told:
        raise Told(f"the chamber reads the host's {' and '.join(told)}")


@pytest.mark.xfail(strict=True, raises=Told, reason="accepted (docs/architecture.md, what the chamber can see): the root"
                   " overlay's options name the engine's layer directories (/var/lib/docker/overlay2/<layer>/diff),"
                   " as any container's do; recorded in the chamber.mountinfo blob")
def test_mountinfo_names_no_engine_storage_path(seen):
    told = [line for line in seen["mountinfo"].splitlines() if "/var/lib/docker" in line]
    if told:
        raise Told(told[0][:200])
