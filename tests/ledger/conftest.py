"""Helpers for ledger tests: keys, event strategies, ledger builders."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest
from hypothesis import strategies as st

from ledger import BlobStore, LedgerWriter, SigningKey
from ledger import _format as F
from ledger.events import (
    FileChange,
    FileOpen,
    HttpExchange,
    LlmCall,
    LlmEndpoint,
    LlmUsage,
    NetConnect,
    Note,
    Provider,
    ProcessExec,
    ProcessExit,
    WitnessGap,
)

KEY = SigningKey.generate()

_text = st.text(max_size=40)
_int = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_small = st.integers(min_value=0, max_value=2**31)
_json = st.recursive(
    st.none() | st.booleans() | _int | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)

events = st.one_of(
    st.builds(Note, text=_text),
    st.builds(FileOpen, pid=_small, path=_text, flags=_text, result=st.none() | _small, errno=st.none() | _text),
    st.builds(ProcessExec, pid=_small, path=_text, argv=st.lists(_text, max_size=4), cwd=st.none() | _text,
              env=st.none() | st.dictionaries(_text, _text, max_size=3)),
    st.builds(ProcessExit, pid=_small, code=st.none() | st.integers(0, 255), signal=st.none() | _text),
    st.builds(FileChange, pid=_small, syscall=_text, path=_text, target=st.none() | _text),
    st.builds(NetConnect, pid=_small, family=_text, address=_text, port=st.none() | st.integers(0, 65535)),
    st.builds(WitnessGap, witness=_text, reason=_text, dropped=_small),
    st.builds(HttpExchange, method=_text, scheme=_text, host=_text, port=st.integers(0, 65535), path=_text,
              status=st.none() | st.integers(100, 599),
              request_headers=st.lists(st.tuples(_text, _text), max_size=3)),
    st.builds(LlmCall, provider=st.sampled_from(typing.get_args(Provider)),
              endpoint=st.sampled_from(typing.get_args(LlmEndpoint)), usage=st.none() | st.dictionaries(_text, _json, max_size=4),
              server_tools=st.dictionaries(_text, _small, max_size=2),
              normalized=st.none() | st.builds(LlmUsage, input_tokens=st.none() | _small, rule=_text)),
)

_ns = st.integers(min_value=0, max_value=2**63 - 1)
records = st.lists(
    st.tuples(st.sampled_from(["strace", "proxy", "recorder"]), events, _ns, _ns), max_size=30
)


def write_ledger(run_dir: Path, items, *, flush_records: int = 4, close: bool = True,
                 run_id: str = "run-test", key: SigningKey = KEY) -> LedgerWriter:
    """Write ``items`` ((source, event, wall_ns, mono_ns) tuples) to ``run_dir/ledger``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = LedgerWriter(run_dir / "ledger", run_id=run_id, key=key, blobs=BlobStore(run_dir / "blobs"),
                          flush_records=flush_records, flush_interval_s=3600, created_ns=1)
    for source, event, wall, mono in items:
        writer.append(event, source=source, wall_ns=wall, mono_ns=mono)
    if close:
        writer.close()
    return writer


class Item(msgspec.Struct):
    """The header or one frame of a ledger file, with its byte range."""

    start: int
    end: int
    kind: int  # 0 for the header
    first_seq: int = 0
    count: int = 0
    payload: bytes = b""
    sealed_before: int = 0  # records covered by the seals before this item


def items_of(data: bytes) -> list[Item]:
    """Parse a well-formed ledger into its header and frames."""
    parser = F.FrameParser()
    parser.feed(data)
    out: list[Item] = []
    start = sealed = 0
    while (item := parser.next_event()) is not F.NEED_DATA:
        end = parser.offset
        if isinstance(item, F.Header):
            out.append(Item(0, end, 0))
        else:
            assert isinstance(item, F.Frame)
            out.append(Item(start, end, item.kind, item.first_seq, item.count, item.payload, sealed))
            if item.kind == F.FRAME_SEAL:
                sealed = item.first_seq
        start = end
    assert start == len(data)
    return out


def replace_frame(data: bytes, item: Item, **changes) -> bytes:
    """``data`` with one frame re-encoded (kind, first_seq, count, payload), CRCs recomputed."""
    fields = {"kind": item.kind, "first_seq": item.first_seq, "count": item.count, "payload": item.payload}
    fields.update(changes)
    frame = F.encode_frame(fields["kind"], fields["first_seq"], fields["count"], fields["payload"])
    return data[: item.start] + frame + data[item.end :]


@pytest.fixture
def key() -> SigningKey:
    return KEY
