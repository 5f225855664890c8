"""Importing the engine adapter: aiohttp's default SSL contexts skip the trust store,
nothing else changes (see `caisson._docker._import_aiohttp`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CHECK = """
import os, ssl
before = dict(os.environ)
import caisson._docker
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
