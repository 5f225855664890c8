"""The runner's progress display: a live rich panel on a terminal, plain lines otherwise.

Both show what `caisson study status` prints, folded from the study ledger itself
(`caisson.study.status`), plus the host's load: the display never holds a count of its own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from caisson.study.status import StudyStatus, count_line, host_lines, status_lines, study_status
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

    def _status(self) -> StudyStatus | None:
        self._follow()
        return study_status(self._records) if self._records else None

    def update(self) -> None:
        """Redraw (live), or print the status line and the hosts' lines when their counts
        changed (plain)."""
        status = self._status()
        if status is None:
            return
        if self._live is not None:
            from rich.text import Text

            lines = status_lines(status, now_ns=time.time_ns(), load=os.getloadavg())
            self._live.update(Text("\n".join(lines)))
            return
        # counts changed (a cell ended, or the study did), with each host's (under Ray)
        plain = "\n".join([count_line(status), *host_lines(status)])
        if plain != self._last_plain:
            print(plain, file=self.stream, flush=True)
            self._last_plain = plain

    def close(self) -> None:
        """Stop the live display (its last frame stays on screen)."""
        if self._live is not None:
            self.update()
            self._live.stop()
