"""Content-addressed blob store beside a ledger: ``blobs/<aa>/<sha256 hex>``.

The ledger holds only the hash (in a ``blob.stored`` event), so the chain covers the
blob's content; `BlobStore.check` recomputes every hash, and `BlobStore.get` the hash of
what it returns: a reader gets the bytes the chain bound or an error, never other bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from ledger._errors import BlobMismatchError
from ledger._files import write_whole

__all__ = ["BlobStore"]


class BlobStore:
    """Blobs under ``root``; writes are atomic (temp file, fsync, rename)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path_for(self, sha256_hex: str) -> Path:
        """Where the blob with this hex digest lives (whether or not it exists)."""
        return self.root / sha256_hex[:2] / sha256_hex

    def put(self, data: bytes) -> str:
        """Store ``data``; returns its sha256 hex digest. Idempotent."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.path_for(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, data, 0o644)  # a temporary name of its own: threads storing the same bytes at once
        return digest

    def get(self, sha256_hex: str) -> bytes:
        """The blob's bytes, checked against its name: a blob altered after it was stored is
        an error here even for a reader that did not verify the store first.

        Args:
            sha256_hex: the blob's sha256, lowercase hex (as ``blob.stored`` names it).

        Returns:
            The bytes, whose sha256 is ``sha256_hex``.

        Raises:
            FileNotFoundError: no such blob (an `OSError`, as any other read failure).
            BlobMismatchError: the bytes do not hash to ``sha256_hex`` (names the blob and
                its path).
        """
        # the path as a string: replay reads a few blobs of every cell, and pathlib's joins
        # cost more than the read of a small blob
        path = os.path.join(self.root, sha256_hex[:2], sha256_hex)
        with open(path, "rb") as f:
            data = f.read()
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256_hex:
            raise BlobMismatchError(path=path, sha256=sha256_hex, actual=actual)
        return data

    def __iter__(self) -> Iterator[str]:
        """Hex digests of every stored blob, sorted (temp files excluded)."""
        if not self.root.is_dir():
            return iter(())
        return iter(
            sorted(p.name for p in self.root.glob("??/*") if p.is_file() and not p.name.startswith("."))
        )

    def check(self, sha256_hex: str) -> str | None:
        """Recompute one blob's hash. Returns None when intact, else why not."""
        return self.read_checked(sha256_hex)[0]

    def read_checked(self, sha256_hex: str, keep_max: int = 0) -> tuple[str | None, bytes | None]:
        """Recompute one blob's hash, and give back the bytes it hashed when they are few.

        Args:
            sha256_hex: the blob's sha256, lowercase hex.
            keep_max: the largest blob (bytes) whose content is returned; larger ones are
                hashed in 1 MiB chunks and not kept.

        Returns:
            (None, the bytes or None when over ``keep_max``) when intact, else (why not, None).
        """
        path = os.path.join(self.root, sha256_hex[:2], sha256_hex)
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size <= keep_max:
                    whole = f.read()
                    data: bytes | None = whole
                    h = hashlib.sha256(whole)
                else:
                    data, h = None, hashlib.sha256()
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
        except FileNotFoundError:
            return "missing", None
        except OSError as exc:
            return f"unreadable ({exc.strerror})", None
        if h.hexdigest() != sha256_hex:
            return "content does not match its hash", None
        return None, data
