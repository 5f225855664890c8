"""Helpers shared by test modules: git repositories made with a fixed identity and none of
the machine's git configuration, so a test sees the same repository everywhere; an
image as the Docker engine reports it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str) -> str:
    """Run ``git ARGS`` in ``cwd``; its stdout. Raises CalledProcessError on failure."""
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True,
                          capture_output=True, text=True).stdout


def commit_all(repo: Path, message: str) -> str:
    """Make ``repo`` a git repository (branch main) if it is not one, commit every file in
    it, and return the new commit's full hash."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def image_inspect(tag: str) -> dict:
    """What ``docker image inspect TAG`` says of the image (``Id``, ``Config`` with its
    labels, user, working dir, ...). Raises CalledProcessError when there is no such image."""
    out = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=True).stdout
    [info] = json.loads(out)
    return info


class HostListener:
    """A TCP (or UDP) service on the host, as another run's page or a host daemon is: it
    answers each connection with a banner and keeps what reached it. Use as a context
    manager; ``port`` once made.

    Attributes:
        accepted: connections accepted (TCP) or datagrams received (UDP).
        received: every byte that reached it.
    """

    BANNER = b"SSH-2.0-caisson-host-listener\r\n"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, udp: bool = False):
        import socket
        import threading

        self.udp = udp
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        if not udp:
            self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.accepted = 0
        self.received = bytearray()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                if self.udp:
                    data, peer = self._sock.recvfrom(65535)
                    self.accepted += 1
                    self.received += data
                    self._sock.sendto(self.BANNER, peer)
                    continue
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.accepted += 1
            with conn:
                conn.settimeout(2)
                try:
                    conn.sendall(self.BANNER)
                    while data := conn.recv(65536):
                        self.received += data
                except OSError:
                    pass

    def __enter__(self) -> "HostListener":
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self._sock.close()
