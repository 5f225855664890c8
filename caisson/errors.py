"""The errors caisson raises on purpose, all under `CaissonError`.

Bad input (a scenario file, a repository, a missing engine) and our own misuse are
different classes, as h11 splits Remote and Local protocol errors.
"""

from __future__ import annotations

from ledger import CaissonError

__all__ = [
    "CaissonError",
    "UsageError",
    "ScenarioError",
    "SandboxError",
    "ContainmentError",
    "ChamberError",
    "AllHostsDrained",
]


class UsageError(CaissonError):
    """The command line or its inputs are wrong; the message names the cause and the fix."""


class ScenarioError(UsageError):
    """A scenario file is not valid TOML or does not match the schema.

    Attributes:
        path: the scenario file.
        field: the offending field as a JSON path (`$.questions[0].prompt`), or None.
    """

    def __init__(self, message: str, *, path: str, field: str | None = None):
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.field = field


class SandboxError(UsageError):
    """The sandbox cannot be built: missing repository, unknown commit, unknown category."""


class ContainmentError(CaissonError):
    """The containment scan found the question or a leak term in the tree; the run is refused.

    Attributes:
        hits: one human-readable line per hit, `file:line: matched window`.
    """

    def __init__(self, message: str, *, hits: list[str]):
        super().__init__(message + "".join(f"\n  {h}" for h in hits))
        self.hits = hits


class ChamberError(CaissonError):
    """The container runtime failed: engine unreachable, image missing, start failed."""


class AllHostsDrained(CaissonError):
    """Every host of a ray study is drained: nothing is left to run its sessions."""
