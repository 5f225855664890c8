"""Line framing shared by the line-oriented witness parsers (strace, eBPF): sans-IO."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["take_lines"]


def take_lines(buf: bytearray, max_line: int) -> Iterator[bytes]:
    """Remove and yield each complete line of ``buf`` (without its ``\\n``), in order.

    A line longer than ``max_line`` bytes is cut: its first ``max_line`` bytes come out as
    a line of their own and the rest stays for the next one, so a witness that never
    writes a newline cannot make the parser hold unbounded memory. What is left in ``buf``
    afterwards is an incomplete line of at most ``max_line`` bytes.
    """
    while True:
        nl = buf.find(b"\n", 0, max_line + 1)
        if nl < 0 and len(buf) <= max_line:
            return
        cut = nl if nl >= 0 else max_line
        line = bytes(buf[:cut])
        del buf[: cut + 1 if nl >= 0 else cut]
        yield line
