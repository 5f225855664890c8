"""The scripted model endpoint as a separate process, for the recorder's own callers
(selftest, preflight, demo, tests): it must outlive nothing and answer on a free port."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from collectors.children import clear_signal_mask
from caisson.errors import CaissonError

__all__ = ["scripted_model"]


@contextlib.contextmanager
def scripted_model(script: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Run `caisson model serve --script SCRIPT` on a free port; yield its ``host:port``.

    Raises:
        CaissonError: the server did not print its address (a bad script, say).
    """
    proc = subprocess.Popen([sys.executable, "-m", "caisson.cli", "model", "serve", "--script", str(script),
                             "--host", host, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, preexec_fn=clear_signal_mask)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        address = line.rsplit("http://", 1)[-1].strip()
        if ":" not in address:
            raise CaissonError(f"the scripted model {script} did not start: {line!r}")
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)
