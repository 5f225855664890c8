"""The package layout is the architecture: dependency direction and public surfaces."""

from __future__ import annotations

import ast
from pathlib import Path

import ledger

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"ledger": {"collectors", "caisson"}, "collectors": {"caisson"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependency_direction_ledger_collectors_caisson():
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _imports(path) & forbidden
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: breaks ledger <- collectors <- caisson"


def test_asyncio_is_confined_to_the_docker_adapter():
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts or path.name == "_docker.py" or "tests" in path.parts:
            continue
        assert not _imports(path) & {"asyncio", "aiodocker", "trio_asyncio"}, path


def test_ledger_public_surface_is_pinned():
    assert sorted(ledger.__all__) == sorted([
        "BLOBS_DIR", "BlobStore", "CaissonError", "FORMAT_VERSION", "Header", "KeyFileError", "LEDGER_FILE",
        "LedgerChecker", "LedgerError", "LedgerWriter", "NotALedgerError", "Record", "Seal", "SigningKey",
        "Submission", "VerifyKey", "VerifyReport", "WriterClosedError", "fingerprint", "fingerprint_secret", "follow_records",
        "generate_keypair", "load_signing_key", "load_verify_key", "locate", "read_records", "run_writer",
        "verify_and_read", "verify_ledger",
    ])
    for name in ledger.__all__:
        assert getattr(ledger, name) is not None
