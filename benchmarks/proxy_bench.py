"""Latency the proxy witness adds to LLM-shaped HTTPS calls, from the chamber.

Usage: python benchmarks/proxy_bench.py [--requests 200] [--fresh] [--host-level]

A local HTTPS server (tests/collectors/llm_server.py) answers Anthropic Messages calls in
recorded shapes, half of them streamed (SSE). ``--host-level``: each request is made twice, alternately:
straight to the server and through the proxy witness (mitmdump + addon + recorder, the
ledger side being a memory channel drained at once and a real blob store). Connections
are kept alive, as model SDKs do (``--fresh``: a new connection, and so new TLS
handshakes, per request). Host-level: 127.0.0.1, no Docker bridge.

By default the proxied client runs *inside the chamber*, through the run's witnessed
network (mitmdump on the bridge gateway, the chamber's trust store), recorded by `caisson
record`; the direct client is the same code on the host, straight to the server. Requests
go in alternating batches of 20 (a chamber run, then a host run), paired by index.

Last line: ``proxy_latency_ratio=R p50_ms=A p99_ms=B`` where R is the median proxied
latency over the median direct latency and A/B the 50th/99th percentiles of the added
latency (proxied - direct, per pair), ms. Target: A <= 15.
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from collectors.proxy import ProxyInfo, run_proxy_witness  # noqa: E402
from ledger import BlobStore, Submission  # noqa: E402
from tests.collectors.llm_server import FIXTURES, LlmServer  # noqa: E402

HOST = "api.anthropic.com"


def start_witness(tmp: Path, server: LlmServer) -> tuple[ProxyInfo, threading.Event, list[int]]:
    """Run the witness in a thread; returns its info, a stop event and an event counter."""
    ready, stop, counter, box = threading.Event(), threading.Event(), [0], []

    async def main() -> None:
        send, receive = trio.open_memory_channel[Submission](100_000)

        async def drain() -> None:
            async for _ in receive:
                counter[0] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            box.append(await nursery.start(lambda task_status: run_proxy_witness(
                send, blobs=BlobStore(tmp / "blobs"), fingerprint_key=b"bench", confdir=tmp / "conf",
                allow_hosts=(HOST,), upstream={HOST: f"127.0.0.1:{server.port}"},
                upstream_trusted_ca=server.cert, task_status=task_status)))
            ready.set()
            await trio.to_thread.run_sync(stop.wait)
            nursery.cancel_scope.cancel()

    threading.Thread(target=trio.run, args=(main,), daemon=True).start()
    if not ready.wait(60):
        raise SystemExit("proxy witness did not start")
    return box[0], stop, counter


class Client:
    """One keep-alive HTTPS connection, direct or tunnelled through the proxy."""

    def __init__(self, port: int, ctx: ssl.SSLContext, proxy: ProxyInfo | None, fresh: bool):
        self.port, self.ctx, self.proxy, self.fresh = port, ctx, proxy, fresh
        self.conn: http.client.HTTPSConnection | None = None

    def _connect(self) -> http.client.HTTPSConnection:
        if self.proxy is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)
        else:
            conn = http.client.HTTPSConnection(self.proxy.host, self.proxy.port, context=self.ctx, timeout=30)
            conn.set_tunnel(HOST, 443)
        return conn

    def post(self, path: str, body: bytes) -> float:
        """One request; returns the latency to the last body byte, seconds."""
        if self.conn is None or self.fresh:
            self.conn = self._connect()
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                            "Authorization": "Bearer sk-bench", "Host": HOST})
        resp = self.conn.getresponse()
        resp.read()
        elapsed = time.perf_counter() - t0
        if self.fresh:
            self.conn.close()
        return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


CLIENT = r"""
import http.client, json, os, ssl, sys, time
mode, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fresh = mode.endswith("-fresh")
bodies = [open(p, "rb").read() for p in sys.argv[4:6]]
def connect():
    if mode.startswith("proxy"):  # inside the chamber: through HTTPS_PROXY, trusting the chamber's store
        proxy = os.environ["HTTPS_PROXY"].split("//", 1)[1].rstrip("/")
        host, _, pport = proxy.rpartition(":")
        ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
        conn = http.client.HTTPSConnection(host, int(pport), context=ctx)
        conn.set_tunnel("api.anthropic.com", 443)
        return conn
    ctx = ssl.create_default_context(cafile=sys.argv[6])
    ctx.check_hostname = False
    return http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
conn = connect()
out = []
for i in range(n + 5):
    if fresh and i:
        conn.close()
        conn = connect()
    t0 = time.perf_counter()
    conn.request("POST", f"/v1/messages?i={i}", body=bodies[i % 2],
                 headers={"content-type": "application/json", "host": "api.anthropic.com"})
    conn.getresponse().read()
    if i >= 5:  # the first five warm connections and caches
        out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def chamber(args: argparse.Namespace) -> None:
    """The proxied client in the chamber, the direct one on the host; see the module docstring."""
    import json
    import subprocess

    from caisson.run.record import RecordOptions, record
    from caisson.run.witnesses import default_witnesses
    from ledger import read_records
    from ledger.events import BlobStored

    batch, batches = 20, max(1, args.requests // 20)
    with tempfile.TemporaryDirectory() as tmp_name, LlmServer(Path(tmp_name)) as server:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        repo.mkdir()
        for name in ("anthropic_request.json", "anthropic_request_stream.json"):
            (repo / name).write_bytes((FIXTURES / name).read_bytes())
        env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x.invalid", "GIT_COMMITTER_NAME": "b",
               "GIT_COMMITTER_EMAIL": "b@x.invalid", "PATH": "/usr/bin:/bin"}
        for git in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bodies"]):
            subprocess.run(["git", *git], cwd=repo, env=env, check=True)
        scenario = tmp / "bench.toml"
        scenario.write_text(f'name = "proxy-bench"\n[egress]\nallow_hosts = ["{HOST}"]\n'
                            f'upstream = {{ "{HOST}" = "127.0.0.1:{server.port}" }}\nupstream_ca = "{server.cert}"\n')
        d_lat, p_lat = [], []
        for b in range(batches):
            run_dir = tmp / f"run{b}"
            fresh = "-fresh" if args.fresh else ""
            record(RecordOptions(command=["python3", "-c", CLIENT, f"proxy{fresh}", str(batch), "0",
                                          "anthropic_request.json", "anthropic_request_stream.json"],
                                 scenario=scenario, repo=repo, out=run_dir, timeout_s=120), witnesses=default_witnesses())
            out = next(r.event for r in read_records(run_dir) if isinstance(r.event, BlobStored) and r.event.role == "stdout")
            p_lat += json.loads((run_dir / "blobs" / out.sha256[:2] / out.sha256).read_text())
            direct = subprocess.run([sys.executable, "-c", CLIENT, f"direct{fresh}", str(batch), str(server.port),
                                     str(repo / "anthropic_request.json"), str(repo / "anthropic_request_stream.json"),
                                     str(server.cert)], capture_output=True, text=True, check=True)
            d_lat += json.loads(direct.stdout)
    added_ms = [(p - d) * 1000 for p, d in zip(p_lat, d_lat)]
    print(f"chamber: {len(p_lat)} requests from the chamber through the proxy witness (half streamed,"
          f" {'a new connection each' if args.fresh else 'keep-alive'}),"
          f" paired with the same client on the host straight to the server")
    print(f"direct median {statistics.median(d_lat) * 1000:.2f} ms; proxied median {statistics.median(p_lat) * 1000:.2f} ms")
    print(f"proxy_latency_ratio={statistics.median(p_lat) / statistics.median(d_lat):.2f}"
          f" p50_ms={percentile(added_ms, 0.5):.2f} p99_ms={percentile(added_ms, 0.99):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--fresh", action="store_true", help="a new connection per request")
    parser.add_argument("--host-level", action="store_true",
                        help="no chamber: the proxied client runs on the host (pairs alternate per request)")
    args = parser.parse_args()
    if not args.host_level:
        chamber(args)
        return
    bodies = [(FIXTURES / "anthropic_request.json").read_bytes(), (FIXTURES / "anthropic_request_stream.json").read_bytes()]
    with tempfile.TemporaryDirectory() as tmp_name, LlmServer(Path(tmp_name)) as server:
        tmp = Path(tmp_name)
        info, stop, counter = start_witness(tmp, server)
        direct_ctx = ssl.create_default_context(cafile=str(server.cert))
        direct_ctx.check_hostname = False
        proxy_ctx = ssl.create_default_context(cafile=str(info.ca_cert_path))
        direct = Client(server.port, direct_ctx, None, args.fresh)
        proxied = Client(server.port, proxy_ctx, info, args.fresh)
        for i in range(10):  # warm-up: connections, certificate generation, caches
            direct.post("/v1/messages", bodies[i % 2])
            proxied.post("/v1/messages", bodies[i % 2])
        d_lat, p_lat = [], []
        for i in range(args.requests):
            body = bodies[i % 2]  # half streamed
            first, second = (direct, proxied) if i % 4 < 2 else (proxied, direct)  # alternate the order
            a = first.post(f"/v1/messages?i={i}", body)
            b = second.post(f"/v1/messages?i={i}", body)
            d, p = (a, b) if first is direct else (b, a)
            d_lat.append(d)
            p_lat.append(p)
        time.sleep(0.5)
        stop.set()
    added_ms = [(p - d) * 1000 for p, d in zip(p_lat, d_lat)]
    ratio = statistics.median(p_lat) / statistics.median(d_lat)
    print(f"host-level (127.0.0.1, no chamber); {args.requests} requests, half streamed; "
          f"{'fresh connections' if args.fresh else 'keep-alive'}; events recorded: {counter[0]}")
    print(f"direct median {statistics.median(d_lat) * 1000:.2f} ms; proxied median {statistics.median(p_lat) * 1000:.2f} ms")
    print(f"proxy_latency_ratio={ratio:.2f} p50_ms={percentile(added_ms, 0.5):.2f} p99_ms={percentile(added_ms, 0.99):.2f}")


if __name__ == "__main__":
    main()
