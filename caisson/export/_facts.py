"""What an export needs from one run directory, read once: its records, the chain head
its last valid seal covers, its verification, and the replay's findings and grade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from caisson.replay import FINDINGS_FILE
from ledger import LedgerChecker, LedgerError, Record, VerifyKey, locate, verify_ledger
from ledger.events import AgentAnswer, AgentToolCall, AgentToolResult, LlmCall, RunEnded, RunStarted

__all__ = ["RunFacts", "read_run", "run_dirs"]


class RunFacts(msgspec.Struct, kw_only=True):
    """One run as an export sees it.

    ``ledger_head`` is the hex chain head at the ledger's last valid seal and
    ``ledger_records`` the records that seal covers: the export names them, so it can be
    traced back to (and checked against) the signed ledger it was derived from.
    """

    run_dir: str
    run_id: str | None
    verified: str  # ok | tampered | unclosed (ledger.verify_ledger against the trusted key)
    verify_reason: str | None = None
    ledger_head: str = ""
    ledger_records: int = 0
    key_fingerprint: str | None = None
    records: list[Record] = []
    findings: dict[str, Any] | None = None  # findings.json, when `caisson replay` wrote it

    def first(self, kind: type):
        """The first event of a type, or None."""
        return next((r.event for r in self.records if isinstance(r.event, kind)), None)

    @property
    def started(self) -> RunStarted | None:
        return self.first(RunStarted)

    @property
    def ended(self) -> RunEnded | None:
        return next((r.event for r in reversed(self.records) if isinstance(r.event, RunEnded)), None)

    @property
    def answer(self) -> str | None:
        answers = [r.event.text for r in self.records if isinstance(r.event, AgentAnswer)]
        return answers[-1] if answers else None

    def agent_steps(self) -> list[Record]:
        """Tool calls, their results, LLM calls and answers, in ledger order."""
        kinds = (AgentToolCall, AgentToolResult, LlmCall, AgentAnswer)
        return [r for r in self.records if isinstance(r.event, kinds)]


def read_run(run_dir: Path, trusted: VerifyKey) -> RunFacts:
    """Verify and read one run (the whole ledger, decoded).

    Raises:
        LedgerError: the ledger is not readable at all (names the file).
    """
    report = verify_ledger(run_dir, trusted)
    ledger_path, _ = locate(run_dir)
    checker = LedgerChecker(trusted, decode=True)
    checker.feed(ledger_path.read_bytes())
    records = list(checker.records())
    facts = RunFacts(run_dir=str(run_dir), run_id=report.run_id, verified=report.status, verify_reason=report.reason,
                     key_fingerprint=report.key_fingerprint, records=records)
    seal = getattr(checker, "last_seal", None)
    if seal is not None:
        facts.ledger_head, facts.ledger_records = bytes(seal.head).hex(), seal.upto
    elif checker.sealed == checker.expected and checker.tampered is None:
        facts.ledger_head, facts.ledger_records = bytes(checker.head).hex(), checker.sealed
    else:  # records follow the last seal: this reader does not keep that seal's head
        facts.ledger_records = checker.sealed
    findings = Path(run_dir) / FINDINGS_FILE
    if findings.is_file():
        try:
            facts.findings = msgspec.json.decode(findings.read_bytes())
        except msgspec.DecodeError as exc:
            raise LedgerError(f"findings.json is not valid JSON: {exc}", path=str(findings)) from None
    return facts


def run_dirs(path: Path, trusted: VerifyKey | None = None) -> list[Path]:
    """The run directories of ``path``: itself when it holds a ledger; for a study, the
    run of each cell's counting attempt (else its last attempt) as its study ledger
    names them, in plan order (preflight baselines and superseded attempts left out);
    else every directory below ``path`` that holds a ledger.

    Raises:
        FileNotFoundError: no run under ``path``.
        LedgerError: the study ledger fails a check.
    """
    from caisson.view import read_grid, segments

    path = Path(path)
    if (path / "ledger").is_file():
        return [path]
    if segments(path):
        grid = read_grid(path, trusted)
        cells = [path / c.run_dir for c in grid.cells.values() if c.run_dir and (path / c.run_dir / "ledger").is_file()]
        if not cells:
            raise FileNotFoundError(f"{path}: the study ledger names no cell run with a ledger yet")
        return cells
    found = sorted(p.parent for p in path.rglob("ledger") if p.is_file() and "study" not in p.relative_to(path).parts[:1])
    if not found:
        raise FileNotFoundError(f"{path}: no run directory (a directory holding a ledger) in it")
    return found
