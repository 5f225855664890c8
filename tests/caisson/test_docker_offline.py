"""The engine adapter without an engine: its import (aiohttp's default SSL contexts skip
the trust store, nothing else changes) and its sans-IO output demultiplexer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.chamber._docker import demux_stdcopy

ROOT = Path(__file__).resolve().parents[2]

_CHECK = """
import os, ssl
before = dict(os.environ)
import caisson.chamber._docker
import aiohttp.connector as connector
assert dict(os.environ) == before, "the environment changed"
for context in (connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED):
    assert context.cert_store_stats()["x509_ca"] == 0, "aiohttp's default context loaded CAs"
assert ssl.create_default_context().cert_store_stats()["x509_ca"] > 0, "the process lost its trust store"
"""


@pytest.mark.parametrize("ssl_vars", ["unset", "set"])
def test_adapter_import_skips_aiohttp_trust_store_and_restores_the_environment(ssl_vars):
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    if ssl_vars == "set":
        env.update(SSL_CERT_FILE="/etc/ssl/certs/ca-certificates.crt", SSL_CERT_DIR="/etc/ssl/certs")
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=300)), max_size=20))
def test_demux_splits_frames_byte_for_byte(frames):
    data = b"".join(_frame(stream, payload) for stream, payload in frames)
    expected = tuple(b"".join(p for s, p in frames if s == stream) for stream in (1, 2))
    assert demux_stdcopy(data) == expected


@pytest.mark.parametrize("data, message", [
    (_frame(1, b"ok")[:5], "frame header is 8"),
    (_frame(1, b"ok")[:-1], "declares 2 bytes, 1 follow"),
    (_frame(0, b"stdin"), "stream 0"),
    (_frame(1, b"ok") + _frame(3, b"x"), "offset 10 is for stream 3"),
])
def test_demux_refuses_a_malformed_stream(data, message):
    with pytest.raises(ValueError, match=message):
        demux_stdcopy(data)


def test_an_https_engine_is_verified_against_the_system_trust_store(monkeypatch):
    import trio
    import trio_asyncio

    import caisson.chamber._docker as adapter

    seen = {}

    class FakeDocker:
        def __init__(self, url, ssl_context=None):
            seen[url] = ssl_context

    monkeypatch.setattr(adapter.aiodocker, "Docker", FakeDocker)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)

    async def connect_both():
        async with trio_asyncio.open_loop():
            for url in ("https://engine.example:2376", "unix:///var/run/docker.sock"):
                await trio_asyncio.aio_as_trio(adapter._connect)(url)

    trio.run(connect_both)
    assert seen["https://engine.example:2376"].cert_store_stats()["x509_ca"] > 0
    assert seen["unix:///var/run/docker.sock"] is None


def test_the_create_config_binds_the_chambers_own_etc_files_and_cgroup_namespace():
    from caisson.chamber._docker import ContainerSpec, _create_config

    spec = ContainerSpec(image="i", cmd=["x"], etc_dir="/s/etc", dns=["10.0.0.1"], binds=[("/s/sb", "/work", False)])
    config = _create_config(spec, "r")
    assert config["Hostname"] == "chamber" and config["HostConfig"]["CgroupnsMode"] == "private"
    assert config["HostConfig"]["Binds"] == ["/s/sb:/work:rw", "/s/etc/resolv.conf:/etc/resolv.conf:ro",
                                             "/s/etc/hostname:/etc/hostname:ro", "/s/etc/hosts:/etc/hosts:ro"]
    assert "Dns" not in config["HostConfig"]  # its resolv.conf names them
    plain = _create_config(ContainerSpec(image="i", cmd=["x"], dns=["10.0.0.1"]), "r")
    assert plain["HostConfig"]["Dns"] == ["10.0.0.1"] and plain["HostConfig"]["Binds"] == []


@pytest.mark.parametrize("nameservers, resolv", [([], b""), (["172.18.0.1"], b"nameserver 172.18.0.1\n"),
                                                 (["a", "b"], b"nameserver a\nnameserver b\n")])
def test_etc_files_give_no_nameserver_without_one(nameservers, resolv):
    from caisson.chamber._view import etc_files

    files = etc_files("chamber", nameservers)
    assert files == {"resolv.conf": resolv, "hostname": b"chamber\n",
                     "hosts": b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tchamber\n"}
