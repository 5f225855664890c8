"""The witnesses `caisson record` runs, and how each one is wired into the chamber.

A witness has a ``name``, may ``prepare`` the container spec before the chamber starts
(the strace witness wraps the command), and ``start``s its tasks once the chamber runs
(see `caisson.run._session.WitnessContext`). The tasks and their parsers are in
`collectors` (docs/architecture.md); this module only wires them into the chamber: container
spec, FIFOs, CA, addresses. Events go from the collectors to the ledger unchanged.

The strace witness runs *inside* the chamber as root, with the agent started under it
as the unprivileged user (``strace -u agent``): the agent's own first execve is traced,
and the agent can neither signal the tracer (another uid) nor read its output (a FIFO in
a root-only directory). The tracer is the chamber's pid 1, so killing it ends the chamber.
"""

from __future__ import annotations

# The network witnesses' collectors (mitmproxy's CA code, dnspython, dpkt) are imported
# where they start: a chamber without a network never pays for them.
import fcntl
import functools
import os
import shutil
from pathlib import Path

import msgspec
import trio

from caisson._paths import SANDBOX_PATH
from caisson.chamber import ContainerSpec
from collectors.procfs import HostPids, run_procfs_witness
from collectors.strace import StraceParser, run_strace_witness, strace_argv

__all__ = ["StraceWitness", "ProcfsWitness", "ProxyWitness", "DnsWitness", "PcapWitness", "default_witnesses",
           "WITNESS_DIR", "CA_DIR"]

WITNESS_DIR = "/caisson/witness"
"""Where witness FIFOs are mounted in the chamber (a root-only directory)."""
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), absent from older Pythons' fcntl


class StraceWitness:
    """strace in the chamber, started before the agent; see the module docstring.

    Args:
        seccomp: use ``--seccomp-bpf`` (stop only on traced syscalls).
        weaken_user: run the tracer as the agent's user (selftest only: the agent can
            then kill it, and the witness gap must show).
    """

    name = "strace"
    needs_network = False

    def __init__(self, *, seccomp: bool = True, weaken_user: bool = False, leave_out: tuple[str, ...] = ()):
        self.seccomp = seccomp
        self.weaken_user = weaken_user
        self.leave_out = leave_out  # selftest only: syscalls left out of the filter
        self._fifo: Path | None = None
        self._fds: tuple[int, int] | None = None
        self._argv: list[str] = []

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        """Wrap the command in strace writing to a FIFO in a root-only directory."""
        user = ctx.scenario.user
        wdir = ctx.scratch / "witness"
        wdir.mkdir(mode=0o700)
        self._fifo = wdir / "strace.fifo"
        os.mkfifo(self._fifo, 0o600)
        rfd = os.open(self._fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        wfd = os.open(self._fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(rfd, _F_SETPIPE_SZ, 1 << 20)  # room for bursts while the writer task is busy
        except OSError:
            pass
        self._fds = (rfd, wfd)
        self._argv = ["strace", *strace_argv(f"{WITNESS_DIR}/strace.fifo", seccomp=self.seccomp,
                                             verbose_env=True, leave_out=self.leave_out)]
        argv = list(self._argv)
        if self.weaken_user:
            os.chown(wdir, 1000, 1000)
            os.chown(self._fifo, 1000, 1000)
            run_as = spec.user
        else:
            if user != "root":
                argv += ["-u", user]
            run_as = "0:0"
        return msgspec.structs.replace(
            spec, cmd=[*argv, "--", *spec.cmd], user=run_as,
            binds=[*spec.binds, (str(wdir), WITNESS_DIR, False)],
            cap_add=[] if self.weaken_user else ["SYS_PTRACE"],
            # Weakened, the tracer is not the chamber's pid 1 either (init ignores signals
            # from inside its namespace), so nothing but the uid protected it.
            init=self.weaken_user or spec.init,
        )

    async def start(self, ctx) -> None:
        """Start reading the trace; the FIFO's ends were opened in `prepare`."""
        assert self._fds is not None
        rfd, wfd = self._fds
        ctx.nursery.start_soon(_hold_until_stop, ctx, wfd)
        host_pids = HostPids(ctx.started.host_pid if ctx.started else 0)
        parser = StraceParser(root_cwd=SANDBOX_PATH, host_pid=host_pids, fingerprint_key=ctx.fingerprint_key,
                              credential_patterns=tuple(ctx.scenario.credential_patterns))
        ctx.nursery.start_soon(functools.partial(
            run_strace_witness, ctx.send, trace=trio.lowlevel.FdStream(rfd), parser=parser, host_pids=host_pids.resolve,
            detail={"argv": self._argv, "seccomp": self.seccomp,
                    "tracer_user": "agent" if self.weaken_user else "root"},
            root_exit_expected=lambda: ctx.end_status not in ("timeout", "interrupted")))


async def _hold_until_stop(ctx, wfd: int) -> None:
    """Our own write end keeps the FIFO from reading as EOF before strace opens it; once
    the chamber has ended, it goes, and the reader drains to the real EOF."""
    try:
        await ctx.stop.wait()
    finally:
        os.close(wfd)


class ProcfsWitness:
    """Samples the host and the chamber's process tree (see `collectors.procfs`)."""

    name = "procfs"
    needs_network = False

    def __init__(self, *, interval_s: float = 0.25):
        self.interval_s = interval_s

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        return spec

    async def start(self, ctx) -> None:
        """Sample from now until the chamber has ended."""
        await ctx.nursery.start(_serve_until_stop, ctx, functools.partial(
            run_procfs_witness, ctx.send, root_host_pid=ctx.started.host_pid, interval_s=self.interval_s))


CA_DIR = "/caisson/ca"
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
_CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")


class ProxyWitness:
    """The chamber's only HTTP(S) route: mitmdump with our addon on the network's gateway.

    The chamber trusts the run's own CA (a fresh one per run, its key never enters the
    chamber): it replaces the system trust store and is named by every variable agents
    and libraries read. The egress policy is the scenario's ``[egress]``.

    Args:
        open_tunnels: the proxy answers every CONNECT and relays what is not HTTP as raw
            TCP, anywhere (selftest only: the tunnels must then void the run).
    """

    name = "proxy"
    needs_network = True

    def __init__(self, *, open_tunnels: bool = False) -> None:
        self.open_tunnels = open_tunnels
        self._info = None  # collectors.proxy.ProxyInfo once mitmdump listens
        self._ca_dir: Path | None = None
        self.listen_ports: list[tuple[str, int]] = []

    async def before_start(self, ctx) -> None:
        """Create the CA and start mitmdump on the gateway; wait until it listens. Each
        client connection is attributed to the chamber processes holding it (`ClientResolver`)."""
        from collectors.proxy import ClientResolver, ensure_ca, run_proxy_witness

        assert ctx.network is not None
        confdir = ctx.scratch / "mitmproxy"
        confdir.mkdir(mode=0o700)
        ca = await trio.to_thread.run_sync(ensure_ca, confdir)
        self._ca_dir = ctx.scratch / "ca"
        self._ca_dir.mkdir()
        shutil.copyfile(ca, self._ca_dir / "caisson-ca.pem")
        egress = ctx.scenario.egress

        resolver = ClientResolver(lambda: ctx.started.host_pid if ctx.started is not None else None,
                                  proxy=lambda: f"{self._info.host}:{self._info.port}" if self._info else None)
        self._info = await ctx.nursery.start(_serve_until_stop, ctx, functools.partial(
            _closing, resolver, functools.partial(
                run_proxy_witness, ctx.send, blobs=ctx.blobs, fingerprint_key=ctx.fingerprint_key,
                confdir=confdir, listen_host=ctx.network.gateway, listen_port=0,
                allow_hosts=list(egress.allow_hosts), upstream=dict(egress.upstream),
                upstream_trusted_ca=Path(egress.upstream_ca) if egress.upstream_ca else None,
                open_tunnels=self.open_tunnels, resolve_client=resolver)))
        ctx.facts["proxy"] = self._info
        self.listen_ports = [("tcp", self._info.port)]

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        """Point every proxy variable at the witness and make the run's CA the only trusted one."""
        assert self._info is not None and self._ca_dir is not None
        url = f"http://{self._info.host}:{self._info.port}"
        pem = f"{CA_DIR}/caisson-ca.pem"
        env = {**spec.env, **{v: url for v in _PROXY_VARS}, "NO_PROXY": "", "no_proxy": "",
               **{v: pem for v in _CA_VARS}}
        binds = [*spec.binds, (str(self._ca_dir), CA_DIR, True),
                 (str(self._ca_dir / "caisson-ca.pem"), "/etc/ssl/certs/ca-certificates.crt", True)]
        return msgspec.structs.replace(spec, env=env, binds=binds)

    async def start(self, ctx) -> None:
        """Nothing more once the chamber runs: the proxy has been listening since before."""


async def _closing(resource, task, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run ``task`` (taking task_status); close ``resource`` once it ends."""
    try:
        await task(task_status=task_status)
    finally:
        resource.close()


async def _serve_until_stop(ctx, task, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run ``task`` (a witness task taking task_status) until the chamber has ended."""
    async with trio.open_nursery() as inner:
        value = await inner.start(task)
        task_status.started(value)
        await ctx.stop.wait()
        inner.cancel_scope.cancel()


class DnsWitness:
    """The chamber's resolver on the network's gateway: the egress policy for names.

    Names allowed by the scenario's ``[egress]`` are answered from ``static_hosts``, or
    with the gateway address (where the proxy listens) for the other allowed names;
    every other name is REFUSED, and every query is recorded.
    """

    name = "dns"
    needs_network = True

    def __init__(self) -> None:
        self.listen_ports: list[tuple[str, int]] = []

    async def before_start(self, ctx) -> None:
        from collectors.dns import DnsPolicy, run_dns_witness
        from collectors.egress import canonical_host, parse_allow

        assert ctx.network is not None
        egress = ctx.scenario.egress
        static = {canonical_host(name): list(addrs) for name, addrs in egress.static_hosts.items()}
        for entry in parse_allow(egress.allow_hosts):
            if not entry.pattern.startswith("*.") and entry.pattern not in static:
                static[entry.pattern] = [ctx.network.gateway]  # clients that resolve reach the proxy
        policy = DnsPolicy(allow=list(egress.allow_hosts), static=static)
        port = await ctx.nursery.start(_serve_until_stop, ctx, functools.partial(
            run_dns_witness, ctx.send, listen_host=ctx.network.gateway, listen_port=53, policy=policy))
        self.listen_ports = [("udp", port), ("tcp", port)]

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        return spec  # the session points the chamber's resolver at the gateway

    async def start(self, ctx) -> None:
        """Nothing more once the chamber runs."""


SNAPLEN = 96
"""Bytes kept of each packet: link, IP and TCP/UDP headers. Payloads stay out of the pcap:
what goes through the proxy is recorded by the proxy witness, secrets fingerprinted, and a
plain-HTTP request's Authorization header must not reach the ledger through the capture."""


class PcapWitness:
    """Every packet on the chamber network's bridge, headers only (`SNAPLEN`), kept as a
    blob; flows as events."""

    name = "pcap"
    needs_network = True

    async def before_start(self, ctx) -> None:
        from collectors.pcap import run_pcap_witness

        assert ctx.network is not None
        await ctx.nursery.start(_serve_until_stop, ctx, functools.partial(
            run_pcap_witness, ctx.send, interface=ctx.network.bridge, pcap_path=ctx.scratch / "chamber.pcap",
            blobs=ctx.blobs, snaplen=SNAPLEN))

    def prepare(self, spec: ContainerSpec, ctx) -> ContainerSpec:
        return spec

    async def start(self, ctx) -> None:
        """Nothing more once the chamber runs."""


def default_witnesses(*, weaken: list[str] | tuple[str, ...] = (), syscall: str = "strace") -> list:
    """The witnesses of a `caisson record` run, in start order (the network ones run only
    when the chamber has a network: see `caisson.scenario.Egress.witnessed`).

    Args:
        weaken: controls weakened on purpose (selftest only).
        syscall: the syscall witness: ``strace``, ``ebpf`` (`caisson.run.ebpf`) or ``both``.

    Raises:
        ValueError: an unknown ``syscall``.
    """
    if syscall not in ("strace", "ebpf", "both"):
        raise ValueError(f"syscall witness {syscall!r}: strace, ebpf or both")
    syscall_witnesses: list = []
    if syscall in ("strace", "both"):
        syscall_witnesses.append(StraceWitness(weaken_user="tracer_user" in weaken,
                                               leave_out=("openat",) if "strace_openat" in weaken else ()))
    if syscall in ("ebpf", "both"):
        from caisson.run.ebpf import EbpfWitness

        small = "ebpf_buffer" in weaken  # a flood of syscalls overflows it; the command's exec still fits
        syscall_witnesses.append(EbpfWitness(beside_strace=syscall == "both", perf_rb_pages=1 if small else 1024,
                                             ring_bytes=1 << 16 if small else None))
    return [PcapWitness(), DnsWitness(), ProxyWitness(open_tunnels="proxy_tunnels" in weaken), *syscall_witnesses,
            ProcfsWitness()]
