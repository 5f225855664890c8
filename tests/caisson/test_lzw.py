"""caisson.chamber._lzw: compress(1)'s .Z, decoded as gzip's zcat decodes it.

The golden files are compress(1)'s own output (ncompress 4.2.4.6, `compress -c -b12` and
`-b16`, Debian 12) of `corpus()`: text, then random bytes, then text again, so the code
width grows to the largest and, at 12 bits, the table is cleared twice.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.chamber._lzw import unlzw

HERE = Path(__file__).parent / "test_lzw"


def corpus() -> bytes:
    rng = random.Random(28)
    words = b"the answer key lists config loads file where defined function which canary".split()
    text = b" ".join(rng.choice(words) for _ in range(12000)) + b"\n"
    return text + rng.randbytes(20000) + text[:30000]


GOLDEN = sorted(HERE.glob("*.Z"))


def _all(data: bytes) -> bytes | None:
    return unlzw(data, lambda n: None)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_compress_output_decodes_to_its_input(path):
    assert _all(path.read_bytes()) == corpus()


@pytest.mark.skipif(shutil.which("zcat") is None, reason="gzip's zcat is the reference")
@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_a_cut_stream_decodes_as_zcat_prints_it(path):
    data = path.read_bytes()
    for cut in (3, 4, 100, 4097, len(data) // 2, len(data) - 1):
        zcat = subprocess.run(["zcat"], input=data[:cut], capture_output=True).stdout
        assert _all(data[:cut]) == zcat, cut


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_prefix_decodes_to_a_prefix(data):
    z = GOLDEN[0].read_bytes()
    cut = data.draw(st.integers(3, len(z)))
    assert corpus().startswith(_all(z[:cut]))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_after_the_magic_decode_without_error(junk):
    out = _all(b"\x1f\x9d\x90" + junk)
    assert out is not None and len(out) <= len(junk) * 8 * 65536  # bounded, never raises


@pytest.mark.parametrize("header", [b"", b"\x1f", b"\x1f\x9d", b"\x1f\x8b\x90", b"\x1f\x9d\x88", b"\x1f\x9d\x91",
                                    b"\x1f\x9d\xb0", b"\x1f\x9d\xd0"])
def test_no_valid_header_is_none(header):
    """Too short, not the magic, fewer than 9 or more than 16 bits, or the reserved bits set."""
    assert _all(header + b"\x41\x00") is None


def test_the_charge_is_made_before_the_output_and_can_stop_it():
    z = GOLDEN[-1].read_bytes()
    spent: list[int] = []

    def charge(n: int) -> None:
        spent.append(n)
        if sum(spent) > 1000:
            raise OverflowError

    with pytest.raises(OverflowError):
        unlzw(z, charge)
    assert 1000 < sum(spent) < 1000 + 65536
