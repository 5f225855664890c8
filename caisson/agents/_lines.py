"""The line framing shared by the agents' sans-IO transcript parsers, and what they share
in reading an agent's own account: refusal wordings and errors held until the session
says whether it went on."""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any, ClassVar, Literal

import msgspec

from ledger import NEED_DATA, NeedData, ParserClosedError
from ledger.events import AgentError, Event, WitnessRaw

__all__ = ["ANY", "Cause", "JsonLinesParser", "MESSAGE_CHARS", "RAW_CHARS", "says", "wordings"]

RAW_CHARS = 4000
"""A raw line is kept up to this many characters."""
MESSAGE_CHARS = 2000
"""An error's message is kept up to this many characters (``agent.error.message``)."""
Cause = Literal["provider", "agent", "limit", ""]
"""Who failed, as ``agent.error.cause`` names it."""
ANY = "<*>"
"""In a refusal wording, the part the CLI fills in (a tool name, a path): any text on one line."""


def wordings(*templates: str) -> tuple[re.Pattern[str], ...]:
    """Refusal wordings as patterns: each template, `ANY` standing for the filled-in part,
    matches at the start of a text, case-insensitively.

    A wording is anchored at the start: the CLI writes it as the whole tool result, while
    a tool that ran writes its own output first (Claude Code's Bash results begin with
    ``Exit code N``), so a command that prints a refusal's words is not read as refused.
    """
    return tuple(re.compile(r"[^\n]*?".join(map(re.escape, t.split(ANY))), re.IGNORECASE) for t in templates)


def says(text: str, patterns: tuple[re.Pattern[str], ...]) -> bool:
    """Whether ``text`` (leading blanks dropped) begins with one of the wordings."""
    text = text.lstrip()
    return any(p.match(text) for p in patterns)


class JsonLinesParser:
    """Sans-IO JSON-lines reader (`ledger.SansIOParser`): `feed` bytes, `next_event` until
    `NEED_DATA`, `close` at the end, then `next_event` again for what the end decides.

    Subclasses implement `on_object` (one decoded JSON object per line; it returns False
    for an object it does not know) and may override `on_close`. A line that is not a
    JSON object, and an object the parser does not know, become ``witness.raw`` events:
    never dropped. A subclass sets `terminal` when the transcript's terminal event
    arrives; `incomplete` then says whether (and why) the transcript ended early.

    An error the agent reports is held (`hold_error`) until the transcript says whether
    the session went on after it (`went_on`: ``terminal`` False) or ended on it (the end
    of the transcript: ``terminal`` True); then it is emitted. `failed` is the first
    error the session ended on.

    Attributes:
        lines: lines read so far.
        terminal: the terminal event (``TERMINAL``) arrived.
        cut_line: the start of a last line that ended without a newline and did not
            parse (the process exited mid-line), or None.
        failed: the first ``agent.error`` emitted with ``terminal`` True, or None.
    """

    PARSER: ClassVar[str] = "jsonlines@1"
    """``name@version`` of the parser, recorded in ``agent.usage`` and by replay."""
    TERMINAL: ClassVar[str] = "terminal"
    """The name of the event that ends a complete transcript."""

    def __init__(self) -> None:
        self._buf = b""
        self._out: deque[Event] = deque()
        self._closed = False
        self.lines = 0
        self.terminal = False
        self.cut_line: str | None = None
        self.failed: AgentError | None = None
        self._held: list[AgentError] = []

    def feed(self, data: bytes) -> None:
        """Add stdout bytes; complete lines are parsed at once.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError(f"{type(self).__name__}.feed after close")
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._line(line)

    def close(self) -> None:
        """End of the transcript: parse a last unterminated line, then `on_close`."""
        if self._closed:
            return
        self._closed = True
        if self._buf.strip():
            if not self._line(self._buf):
                self.cut_line = self._buf.decode("utf-8", "replace").strip()[:80]
        self._buf = b""
        self._settle(terminal=True)
        self.on_close()

    def next_event(self) -> Event | NeedData:
        """The next event made so far, or `NEED_DATA`."""
        return self._out.popleft() if self._out else NEED_DATA

    def emit(self, event: Event) -> None:
        if isinstance(event, AgentError):
            event = msgspec.structs.replace(event, message=event.message[:MESSAGE_CHARS])
            if event.terminal and self.failed is None:
                self.failed = event
        self._out.append(event)

    def hold_error(self, error: AgentError) -> None:
        """An error whose ``terminal`` the rest of the transcript decides (see the class)."""
        self._held.append(error)

    def went_on(self) -> None:
        """The session did more work: every held error was not the end of it."""
        self._settle(terminal=False)

    def ended(self) -> None:
        """The session ended here (its terminal line): every held error was the end of it."""
        self._settle(terminal=True)

    def _settle(self, *, terminal: bool) -> None:
        held, self._held = self._held, []
        for error in held:
            self.emit(msgspec.structs.replace(error, terminal=terminal))

    @property
    def incomplete(self) -> str | None:
        """Why the transcript is incomplete, or None: no terminal event, a last line cut."""
        reasons = []
        if not self.terminal:
            reasons.append(f"transcript ended without its terminal {self.TERMINAL} event")
        if self.cut_line is not None:
            reasons.append(f"its last line was cut mid-way: {self.cut_line!r}")
        return "; ".join(reasons) or None

    def on_object(self, obj: dict[str, Any]) -> bool:  # pragma: no cover - abstract
        """Consume one JSON object; return False when its type is unknown (kept raw)."""
        raise NotImplementedError

    def on_close(self) -> None:
        """Called once at the end; subclasses emit what only the whole transcript decides."""

    def _line(self, raw: bytes) -> bool:
        """Parse one line; returns whether it was a JSON object."""
        self.lines += 1
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return True
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            if not self.on_object(obj):
                self._out.append(WitnessRaw(witness="transcript", line=text[:RAW_CHARS]))
            return True
        self._out.append(WitnessRaw(witness="transcript", line=text[:RAW_CHARS]))
        return False
