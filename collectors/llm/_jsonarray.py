"""Sans-IO reader of a response streamed as one JSON array, element by element.

The Gemini API's ``streamGenerateContent`` without ``alt=sse`` answers
``application/json``: a JSON array whose elements (``GenerateContentResponse`` objects,
pretty-printed and joined by ``\\n,\\r\\n``) are sent as generation proceeds. `JsonArrayEvents`
cuts the array into its elements as bytes pass, without parsing them, and hands each one
on as the `collectors.sse.SseEvent` an SSE stream of the same objects would give, so
`collectors.llm.LlmCallBuilder` reads both forms alike.

The scan follows RFC 8259's grammar only as far as it needs to: whitespace, ``[``, ``,``
and ``]`` between elements; inside an element, brackets outside strings (a ``\\`` escapes
the next byte of a string). An element must be an object or an array. UTF-8 bytes past
ASCII never equal a bracket or a quote, so bytes are scanned as they are.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Final

from collectors.sse import SseEvent
from ledger import NEED_DATA, NeedData, ParserClosedError

__all__ = ["JsonArrayEvents"]

_WS: Final = b" \t\r\n"
_SPECIAL: Final = re.compile(rb'["{}\[\]]')  # what changes the depth outside a string
_IN_STRING: Final = re.compile(rb'["\\]')
_BEFORE, _FIRST, _ELEMENT, _AFTER, _NEXT, _END = range(6)
_DETAIL_CHARS: Final = 200


class JsonArrayEvents:
    """One JSON array's elements as events (`ledger.SansIOParser`): `feed` bytes, then
    `next_event` until NEED_DATA, `close` at the end.

    Same interface as `collectors.sse.SseParser` for `collectors.llm.LlmCallBuilder`.

    Attributes:
        broken: why the body is not a JSON array of objects or arrays (the first reason:
            nothing after it is read), or None.
        invalid_utf8_lines: always 0 (an element that is not UTF-8 makes the body broken).
    """

    invalid_utf8_lines = 0

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # bytes of _buf scanned
        self._state = _BEFORE
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._events: deque[SseEvent] = deque()
        self._index = 0
        self._offset = 0  # stream offset of _buf[0]
        self._started = False  # a byte other than whitespace arrived
        self._closed = False
        self.broken: str | None = None

    def feed(self, data: bytes) -> None:
        """Append received bytes and cut out every element they complete.

        Raises:
            ParserClosedError: after `close`.
        """
        if self._closed:
            raise ParserClosedError("JsonArrayEvents.feed after close")
        if self.broken is None and data:
            self._buf += data
            self._scan()

    def next_event(self) -> SseEvent | NeedData:
        """The next element as an event (``data`` its JSON text), or `NEED_DATA`."""
        return self._events.popleft() if self._events else NEED_DATA

    def close(self) -> None:
        """The body ended (`cut` then says whether before the array's ``]``)."""
        self._closed = True

    @property
    def cut(self) -> bool:
        """After `close`: the body was cut (not broken, and the array's ``]`` never came)."""
        return self._closed and self.broken is None and self._started and self._state != _END

    def _fail(self, at: int, what: str) -> None:
        self.broken = f"{what} at byte {self._offset + at}"[:_DETAIL_CHARS]
        self._buf.clear()

    def _scan(self) -> None:
        buf, pos = self._buf, self._pos
        while pos < len(buf) and self.broken is None:
            if self._state == _ELEMENT:
                pos = self._element(pos)
                continue
            byte = buf[pos]
            if byte in _WS:
                pos += 1
                continue
            self._started = True
            state = self._state
            if state == _BEFORE and byte == 0x5B:  # [
                self._state = _FIRST
            elif state in (_FIRST, _NEXT) and byte in (0x7B, 0x5B):  # { [
                del buf[:pos]
                self._offset += pos
                pos, self._depth, self._state = 0, 0, _ELEMENT
                continue
            elif state in (_FIRST, _AFTER) and byte == 0x5D:  # ]
                self._state = _END
            elif state == _AFTER and byte == 0x2C:  # ,
                self._state = _NEXT
            else:
                expected = {_BEFORE: "'['", _FIRST: "an object, an array or ']'", _AFTER: "',' or ']'",
                            _NEXT: "an object or an array", _END: "nothing after the array's ']'"}[state]
                self._fail(pos, f"response body is not a JSON array of objects: {expected} expected")
                return
            pos += 1
        if self._state != _ELEMENT and self.broken is None:  # nothing kept between elements
            del buf[:pos]
            self._offset += pos
            pos = 0
        self._pos = pos

    def _element(self, pos: int) -> int:
        """Scan an element from ``pos``; at its end, queue it. Returns the next position."""
        buf = self._buf
        while pos < len(buf):
            if self._escaped:  # the byte a backslash at the end of the last chunk escapes
                self._escaped = False
                pos += 1
                continue
            if self._in_string:
                found = _IN_STRING.search(buf, pos)
                if found is None:
                    return len(buf)
                pos = found.end()
                if found.group() == b"\\":
                    self._escaped = True
                else:
                    self._in_string = False
                continue
            found = _SPECIAL.search(buf, pos)
            if found is None:
                return len(buf)
            pos = found.end()
            char = found.group()
            if char == b'"':
                self._in_string = True
            elif char in (b"{", b"["):
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    self._emit(pos)
                    return 0
        return pos

    def _emit(self, end: int) -> None:
        data = bytes(self._buf[:end])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._fail(exc.start, f"invalid UTF-8 in array element #{self._index}")
            return
        self._events.append(SseEvent(data=text, index=self._index))
        self._index += 1
        del self._buf[:end]
        self._offset += end
        self._state = _AFTER
