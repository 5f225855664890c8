"""compress(1)'s `.Z` format (LZW), decoded as gzip 1.12's `zcat` and `uncompress` do (sans-IO).

The format, as gzip's `unlzw.c` reads it: the magic `1F 9D`; a flags byte, its low five
bits the largest code width (9 to 16 bits), bit 7 block mode (code 256 clears the table;
bits 5 and 6 must be 0); then codes packed least significant bit first, 9 bits wide at
first, one bit wider each time the next free code would not fit, up to the largest width.
Codes are read in groups of eight, so a group is as many bytes as its codes have bits:
when the width grows, and after a clear, the rest of the current group is skipped.
There is no end marker and no checksum: the stream ends with the file.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MAGIC", "unlzw"]

MAGIC = b"\x1f\x9d"

_CLEAR = 256


def unlzw(data: bytes, charge: Callable[[int], None]) -> bytes | None:
    """The bytes a `.Z` stream decodes to, as far as it decodes.

    Args:
        data: the stream, from its magic on.
        charge: called with the length of each piece of output before it is kept; it may
            raise to stop the decoding (a budget).

    Returns:
        The decoded bytes up to the end or to the first invalid code (`zcat` prints as
        much before it reports the damage); None when `data` has no valid header.
    """
    if not data.startswith(MAGIC) or len(data) < 3:
        return None
    flags = data[2]
    max_bits, block = flags & 0x1F, bool(flags & 0x80)
    if flags & 0x60 or not 9 <= max_bits <= 16:
        return None
    limit = 1 << max_bits
    table = [bytes([i]) for i in range(256)] + [b""]  # 256 is CLEAR in block mode: never read
    if not block:
        table.pop()
    out: list[bytes] = []
    bits, mask = 9, 0x1FF
    group = 3 * 8  # bit position where the current width started (groups are counted from it)
    pos = group
    end = len(data) * 8
    previous = b""
    while pos + bits <= end:
        if len(table) > mask and bits < max_bits:  # the next code needs one more bit
            pos = _next_group(pos, group, bits)
            bits, mask, group = bits + 1, (1 << (bits + 1)) - 1, pos
            continue
        at = pos >> 3
        code = (int.from_bytes(data[at : at + 3], "little") >> (pos & 7)) & mask
        pos += bits
        if block and code == _CLEAR and previous:
            del table[257:]
            pos = _next_group(pos, group, bits)
            bits, mask, group = 9, 0x1FF, pos
            previous = b""
            continue
        if not previous:
            if code > 255:
                break  # the first code of a table is a literal
            entry = table[code]
        elif code < len(table):
            entry = table[code]
            if len(table) < limit:
                table.append(previous + entry[:1])
        elif code == len(table):  # the code being defined: previous + its own first byte
            entry = previous + previous[:1]
            if len(table) < limit:
                table.append(entry)
        else:
            break  # corrupt input
        charge(len(entry))
        out.append(entry)
        previous = entry
    return b"".join(out)


def _next_group(pos: int, group: int, bits: int) -> int:
    """The bit position of the next group of eight `bits`-bit codes counted from `group`
    (pos itself when it starts one)."""
    size = bits * 8
    return group + -(-(pos - group) // size) * size
