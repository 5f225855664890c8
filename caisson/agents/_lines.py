"""The line framing shared by the agents' sans-IO transcript parsers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ledger.events import Event, WitnessRaw


class JsonLinesParser:
    """Sans-IO JSON-lines reader: `feed` bytes, `close` at the end, then `events()`.

    Subclasses implement `on_object` (one decoded JSON object per line) and may override
    `on_close`. A line that is not a JSON object becomes a ``witness.raw`` event: never
    dropped.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._out: list[Event] = []
        self._closed = False
        self.lines = 0

    def feed(self, data: bytes) -> None:
        """Add stdout bytes; complete lines are parsed at once."""
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
            self._line(self._buf)
        self._buf = b""
        self.on_close()

    def events(self) -> Iterator[Event]:
        """The events made so far (each once)."""
        out, self._out = self._out, []
        yield from out

    def emit(self, event: Event) -> None:
        self._out.append(event)

    def on_object(self, obj: dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_close(self) -> None:
        """Called once at the end; subclasses emit what only the whole transcript decides."""

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            self.on_object(obj)
        else:
            self._out.append(WitnessRaw(witness="transcript", line=text[:4000]))
