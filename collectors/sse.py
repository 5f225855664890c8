"""Sans-IO parser of a Server-Sent Events stream (``text/event-stream``).

Follows the WHATWG HTML Living Standard, section "Server-sent events", subsection
"Interpreting an event stream":

- lines end in CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of
  the next are one line end);
- a UTF-8 byte order mark at the very start of the stream is dropped;
- an empty line dispatches the event being built; a line starting with ``:`` is a
  comment; ``field:value`` drops one space after the colon; a line with no colon is a
  field with an empty value;
- fields: ``event`` (the type, default ``"message"``), ``data`` (lines joined with
  ``\\n``), ``id`` (ignored if it contains NUL; it persists across events) and ``retry``
  (ASCII digits only, milliseconds); other fields are ignored;
- an event whose data buffer is empty is not dispatched;
- at the end of the stream an incomplete event is discarded, never dispatched.

The spec decodes with U+FFFD replacement; so does this parser, but it also counts the
lines that were not valid UTF-8 (`SseParser.invalid_utf8_lines`) so a witness can
say the stream was damaged instead of silently repairing it.

With ``stray_json=True`` (off by default) the parser also keeps what the spec ignores when
it is JSON written outside the framing: from a line that is not a field of the spec and
starts with ``{`` or ``[`` (after blanks), the non-blank lines up to the one that closes
its brackets are dispatched as one event with ``framed=False``. Google's APIs end an SSE
stream that way with a pretty-printed ``{"error": ...}`` object, one line at a time
(google-genai 3.6.1 ``_api_client.py``: "When API returns an error message, it comes line
by line"). A field line (``data:``, ``event:``, ``id:``, ``retry:``) or a comment before the
brackets close ends that value early; it is dispatched as it is (not valid JSON).

Usage::

    parser = SseParser()
    parser.feed(chunk)                     # as bytes pass
    while (event := parser.next_event()) is not NEED_DATA:
        ...
    parser.close()
    parser.cut                             # True: the stream ended mid-event
"""

from __future__ import annotations

from collections import deque
from typing import Final

import msgspec

from ledger import NEED_DATA, NeedData, ParserClosedError

__all__ = ["NEED_DATA", "ParserClosedError", "SseEvent", "SseParser"]


_BOM: Final = b"\xef\xbb\xbf"
_FIELDS: Final = frozenset({"event", "data", "id", "retry"})
STRAY_MAX_CHARS: Final = 1 << 16
"""Characters of stray JSON buffered at most; past it the value is dispatched as it is."""


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One dispatched event of an event stream."""

    event: str = "message"  # the ``event`` field, or "message" when absent/empty
    data: str = ""  # ``data`` lines joined with "\n" (no trailing newline)
    id: str = ""  # the last event ID as of this event (persists across events)
    retry: int | None = None  # latest ``retry`` value seen so far, milliseconds
    index: int = 0  # 0-based ordinal of this event among those dispatched
    framed: bool = True  # False: not an SSE event but JSON found outside the framing (``stray_json``)


class SseParser:
    """Incremental event-stream parser (`ledger.SansIOParser`): `feed` bytes, then
    `next_event` until NEED_DATA; `close` at the end, then `cut` says whether it cut an event.

    Args:
        stray_json: also dispatch JSON written outside the framing (module docstring).

    Attributes:
        invalid_utf8_lines: lines that were not valid UTF-8 (decoded with U+FFFD).
        lines: complete lines processed, including empty and comment lines.
        events: events dispatched so far (stray JSON values included).
        bytes_fed: total bytes given to `feed`.
    """

    def __init__(self, *, stray_json: bool = False) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already searched for a line end
        self._bom_checked = False
        self._skip_lf = False  # the last line ended in CR: drop one leading LF
        self._closed = False
        self._cut = False  # what `close` found: an event cut by the end of the stream
        self._queue: deque[SseEvent] = deque()
        # per-event buffers (spec: "event type buffer", "data buffer")
        self._event_type = ""
        self._data: list[str] = []
        self._pending_fields = False  # a field line was seen since the last blank line
        self._last_id = ""
        self._retry: int | None = None
        self._stray_json = stray_json
        self._stray: list[str] = []  # lines of a JSON value outside the framing, not yet closed
        self._stray_chars = 0
        self._stray_depth = 0  # brackets open in those lines
        self.invalid_utf8_lines = 0
        self.lines = 0
        self.events = 0
        self.bytes_fed = 0

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    @property
    def cut(self) -> bool:
        """After `close`: the stream ended mid-event (an unterminated line, field lines not
        yet followed by the blank line that dispatches them, or stray JSON whose brackets
        never closed). Per the spec that incomplete event is discarded. False before `close`."""
        return self._cut

    @property
    def retry(self) -> int | None:
        """The reconnection time most recently set by a ``retry`` field, milliseconds."""
        return self._retry

    def feed(self, data: bytes) -> None:
        """Append bytes from the stream and parse every complete line in them.

        Args:
            data: the next bytes of the (already content-decoded) body; may be empty.

        Raises:
            ParserClosedError: `close` was already called (our misuse).
        """
        if self._closed:
            raise ParserClosedError("SseParser.feed after close")
        self.bytes_fed += len(data)
        self._buf += data
        self._parse_lines()

    def next_event(self) -> SseEvent | NeedData:
        """Return the next dispatched `SseEvent`, or `NEED_DATA` when none is buffered."""
        if self._queue:
            return self._queue.popleft()
        return NEED_DATA

    def close(self) -> None:
        """Mark the end of the stream; events already dispatched stay available, and `cut`
        says whether an incomplete one was discarded. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._cut = len(self._buf) > 0 or self._pending_fields or bool(self._stray)
        self._buf.clear()
        self._stray = []
        self._data = []
        self._event_type = ""

    # --- internals -----------------------------------------------------------------

    def _parse_lines(self) -> None:
        buf = self._buf
        if not self._bom_checked:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return  # could still be a BOM
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._bom_checked = True
        start = 0
        while True:
            if self._skip_lf and start < len(buf):
                self._skip_lf = False
                if buf[start] == 0x0A:
                    start += 1
                    continue
            pos = max(start, self._scan)
            cr = buf.find(b"\r", pos)
            lf = buf.find(b"\n", pos)
            if cr < 0 and lf < 0:
                self._scan = len(buf)
                break
            if cr < 0 or (0 <= lf < cr):
                end, next_start = lf, lf + 1
            else:
                end, next_start = cr, cr + 1
                if cr + 1 < len(buf):
                    if buf[cr + 1] == 0x0A:
                        next_start = cr + 2
                else:
                    self._skip_lf = True  # the LF, if any, is in the next chunk
            self._line(bytes(buf[start:end]))
            start = next_start
            self._scan = start
        del buf[:start]
        self._scan -= start

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.invalid_utf8_lines += 1
            line = raw.decode("utf-8", errors="replace")
        if self._stray_json and self._strayed(line):
            return
        if not line:
            self._dispatch()
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        self._pending_fields = True
        if name == "event":
            self._event_type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)

    def _strayed(self, line: str) -> bool:
        """Take ``line`` as part of a JSON value outside the framing; False: it is SSE's."""
        if not self._stray:
            if not line.lstrip(" \t").startswith(("{", "[")):
                return False
        elif line.startswith(":") or line.partition(":")[0] in _FIELDS:
            self._stray_event()  # the framing resumed before the value closed
            return False
        elif not line.strip(" \t"):
            return True  # Google separates the value's lines by blank lines
        self._stray.append(line)
        self._stray_chars += len(line)
        self._stray_depth += _bracket_change(line)
        if self._stray_depth <= 0 or self._stray_chars > STRAY_MAX_CHARS:
            self._stray_event()
        return True

    def _stray_event(self) -> None:
        self._queue.append(SseEvent(data="\n".join(self._stray), id=self._last_id, retry=self._retry,
                                    index=self.events, framed=False))
        self.events += 1
        self._stray, self._stray_chars, self._stray_depth = [], 0, 0

    def _dispatch(self) -> None:
        self._pending_fields = False
        if not self._data:
            self._event_type = ""
            return
        event = SseEvent(
            event=self._event_type or "message",
            data="\n".join(self._data),
            id=self._last_id,
            retry=self._retry,
            index=self.events,
        )
        self.events += 1
        self._queue.append(event)
        self._data = []
        self._event_type = ""


def _bracket_change(line: str) -> int:
    """Brackets ``line`` opens minus those it closes, outside JSON strings (a JSON string
    never spans lines)."""
    depth = 0
    in_string = escaped = False
    for char in line:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
    return depth
