"""The native chain loop (ledger/_chainc.c) gives the same bytes as its pure-Python twin.

Valid frames must chain identically; on arbitrary or damaged bytes both must refuse with
ValueError or agree, since a reader feeds the native loop untrusted input. With
``CI=true`` the native module must be built: a slow ledger is not a green run.
"""

from __future__ import annotations

import hashlib
import os

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import _chain

if os.environ.get("CI") != "true":  # in CI a missing native module fails the tests below
    pytest.importorskip("ledger._chainc", reason="built without a C compiler or OpenSSL headers")


def test_the_ledger_uses_the_native_chain():
    assert _chain.NATIVE and _chain.chain_frame is _native()


def _native():
    from ledger._chainc import chain_frame

    return chain_frame


def _outcome(fn, head, body, *max_depth):
    try:
        return fn(head, body, *max_depth)
    except ValueError:
        return "refused"


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=300) | st.binary(max_size=300),
    lambda children: st.lists(children, max_size=20)
    | st.dictionaries(st.text(max_size=10), children, max_size=10),
    max_leaves=60,
)
ext_values = st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=300))
heads = st.binary(min_size=32, max_size=32)


@settings(max_examples=300, deadline=None)
@given(heads, st.lists(msgpack_values | ext_values, max_size=40))
def test_valid_frames_chain_identically(head, records):
    body = msgspec.msgpack.encode(records)
    expected = head
    for raw in msgspec.msgpack.decode(body, type=list[msgspec.Raw]):
        expected = hashlib.sha256(expected + raw).digest()
    assert _native()(head, body) == (expected, len(records))
    assert _chain.chain_frame_py(head, body) == (expected, len(records))


@settings(max_examples=300, deadline=None)
@given(heads, st.binary(max_size=400))
def test_arbitrary_bytes_refused_or_agree(head, body):
    assert _outcome(_native(), head, body) == _outcome(_chain.chain_frame_py, head, body)


@settings(max_examples=200, deadline=None)
@given(heads, st.lists(msgpack_values, min_size=1, max_size=10), st.data())
def test_damaged_frames_refused_or_agree(head, records, data):
    body = bytearray(msgspec.msgpack.encode(records))
    i = data.draw(st.integers(0, len(body) - 1))
    body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    damaged = bytes(body[:cut])
    assert _outcome(_native(), head, damaged) == _outcome(_chain.chain_frame_py, head, damaged)


def test_head_must_be_32_bytes():
    for fn in (_native(), _chain.chain_frame_py):
        with pytest.raises(ValueError, match="32 bytes"):
            fn(b"short", msgspec.msgpack.encode([1]))


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=200, deadline=None)
@given(heads, st.lists(st.integers(0, 80).map(_nested) | msgpack_values, min_size=1, max_size=5),
       st.integers(1, 70))
def test_the_depth_cap_is_the_same_in_both(head, records, max_depth):
    body = msgspec.msgpack.encode(records)
    assert _outcome(_native(), head, body, max_depth) == _outcome(_chain.chain_frame_py, head, body, max_depth)


def test_the_writer_keeps_an_event_at_the_depth_cap_and_salvages_one_over(tmp_path):
    from ledger import LedgerWriter, read_records
    from ledger._writer import MAX_RECORD_DEPTH
    from ledger.events import AgentToolCall, WitnessRaw
    from tests.ledger.conftest import KEY

    def call(depth: int) -> AgentToolCall:  # record 1, event 2, input 3, then the lists
        return AgentToolCall(agent="a", call_id="c", tool="Bash", input={"x": _nested(depth - 4)})

    with LedgerWriter(tmp_path / "ledger", run_id="r", key=KEY) as w:
        w.append(call(MAX_RECORD_DEPTH), source="t")
        w.append(call(MAX_RECORD_DEPTH + 1), source="t")
    kept, salvaged = [r.event for r in read_records(tmp_path / "ledger")]
    assert kept == call(MAX_RECORD_DEPTH)
    assert isinstance(salvaged, WitnessRaw) and f"deeper than {MAX_RECORD_DEPTH}" in salvaged.line
