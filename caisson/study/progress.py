"""The runner's progress display: a live rich panel on a terminal, plain lines otherwise.

Both show what `caisson study status` prints, folded from the study ledger itself
(`caisson.study.status`), plus the host's load: the display never holds a count of its own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from caisson.study.status import status_lines, study_status
from caisson.study.studyledger import segments
from ledger import LEDGER_FILE, LedgerChecker, Record

__all__ = ["Progress"]


class Progress:
    """Call `update` after each study event; `close` at the end.

    Args:
        study_dir: the study directory being written.
        live: a rich live display (default: when stdout is a terminal).
        stream: where plain lines go (default stdout).
    """

    def __init__(self, study_dir: Path, *, live: bool | None = None, stream=None):
        self.study_dir = Path(study_dir)
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self._live = None
        self._last_plain = ""
        self._records: list[Record] = []
        self._read: dict[Path, tuple[LedgerChecker, int]] = {}  # segment -> (its checker, bytes fed)
        if self.live:
            from rich.live import Live

            self._live = Live("", refresh_per_second=2, transient=False)
            self._live.start()

    def _follow(self) -> None:
        """Feed each segment's new bytes to its checker (the study ledger is read once, as it grows)."""
        for seg in segments(self.study_dir):
            checker, fed = self._read.get(seg, (None, 0))
            if checker is None:
                checker = LedgerChecker(None, decode=True)
            try:
                with open(seg / LEDGER_FILE, "rb") as handle:
                    handle.seek(fed)
                    data = handle.read()
            except FileNotFoundError:
                continue
            checker.feed(data)
            self._records.extend(checker.records())
            self._read[seg] = (checker, fed + len(data))

    def _lines(self) -> list[str]:
        self._follow()
        if not self._records:
            return []
        return status_lines(study_status(self._records), now_ns=time.time_ns(), load=os.getloadavg())

    def update(self) -> None:
        """Redraw (live), or print the status line and the hosts' lines when their counts
        changed (plain)."""
        lines = self._lines()
        if not lines:
            return
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text("\n".join(lines)))
            return
        # counts changed (a cell ended, or the study did), with each host's (under Ray)
        plain = "\n".join([lines[0], *(line for line in lines[1:] if line.startswith("  host "))])
        if plain != self._last_plain:
            print(plain, file=self.stream, flush=True)
            self._last_plain = plain

    def close(self) -> None:
        """Stop the live display (its last frame stays on screen)."""
        if self._live is not None:
            self.update()
            self._live.stop()
