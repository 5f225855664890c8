"""Tests for collectors/sse.py: the WHATWG event-stream interpretation, at any split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.sse import NEED_DATA, ParserClosedError, SseEvent, SseParser


def parse(chunks: list[bytes], *, stray_json: bool = False) -> tuple[list[SseEvent], bool, SseParser]:
    parser = SseParser(stray_json=stray_json)
    events = []
    for chunk in chunks:
        parser.feed(chunk)
        while (event := parser.next_event()) is not NEED_DATA:
            events.append(event)
    parser.close()
    cut = parser.cut
    while (event := parser.next_event()) is not NEED_DATA:
        events.append(event)
    return events, cut, parser


def whole(data: bytes) -> tuple[list[SseEvent], bool]:
    events, cut, _ = parse([data])
    return events, cut


def bytewise(data: bytes) -> tuple[list[SseEvent], bool]:
    events, cut, _ = parse([data[i : i + 1] for i in range(len(data))])
    return events, cut


def events_of(data: bytes) -> list[tuple[str, str, str]]:
    events, cut = whole(data)
    assert bytewise(data) == (events, cut)
    return [(e.event, e.data, e.id) for e in events]


def test_basic_fields_and_default_type():
    data = b"event: add\ndata: 73857293\n\ndata: plain\n\n"
    assert events_of(data) == [("add", "73857293", ""), ("message", "plain", "")]


def test_multiline_data_joined_with_lf_and_one_space_stripped():
    data = b"data:  two spaces\ndata:none\ndata\n\n"
    assert events_of(data) == [("message", " two spaces\nnone\n", "")]


def test_comments_unknown_fields_and_blank_lines_ignored():
    data = b": keep-alive\n\n\nfoo: bar\n: comment\ndata: x\n\n"
    assert events_of(data) == [("message", "x", "")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes):
    data = eol.join([b"event: e", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert events_of(data) == [("e", "a\nb", ""), ("message", "c", "")]


def test_mixed_line_endings_and_cr_lf_split_across_feeds():
    data = b"data: a\r\n\rdata: b\n\r\n"
    assert events_of(data) == [("message", "a", ""), ("message", "b", "")]
    events, cut, _ = parse([b"data: a\r", b"\ndata: b\r", b"\r"])
    assert [e.data for e in events] == ["a\nb"] and cut is False


def test_cr_at_chunk_end_then_lf_is_one_line_end():
    events, cut, _ = parse([b"data: a\r", b"\n", b"\r", b"\n"])
    assert [e.data for e in events] == ["a"]
    assert cut is False


def test_bom_dropped_only_at_start():
    assert events_of(b"\xef\xbb\xbfdata: x\n\n") == [("message", "x", "")]
    events, _ = whole(b"data: x\n\n\xef\xbb\xbfdata: y\n\n")
    assert [e.data for e in events] == ["x"]  # field name "\ufeffdata" is unknown


def test_bom_split_across_feeds():
    events, cut, _ = parse([b"\xef", b"\xbb", b"\xbfdata: x\n\n"])
    assert [e.data for e in events] == ["x"] and cut is False


def test_id_persists_and_nul_id_ignored():
    data = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x00\ndata: c\n\nid\ndata: d\n\n"
    assert events_of(data) == [
        ("message", "a", "1"),
        ("message", "b", "1"),
        ("message", "c", "1"),
        ("message", "d", ""),
    ]


def test_retry_digits_only():
    events, _ = whole(b"retry: 3000\ndata: a\n\nretry: 5s\ndata: b\n\nretry\ndata: c\n\n")
    assert [e.retry for e in events] == [3000, 3000, 3000]


def test_event_without_data_is_not_dispatched_and_type_reset():
    assert events_of(b"event: x\n\ndata: y\n\n") == [("message", "y", "")]


def test_empty_data_line_dispatches_empty_string():
    assert events_of(b"data\n\n") == [("message", "", "")]


def test_close_reports_cut_mid_event_and_discards_it():
    assert whole(b"data: a\n\ndata: b\n") == (whole(b"data: a\n\n")[0], True)
    events, cut = whole(b"data: a\n\ndata: partial-line")
    assert [e.data for e in events] == ["a"] and cut is True
    assert whole(b"data: a\n\n")[1] is False
    assert whole(b"data: a\n\n: trailing comment\n")[1] is False
    assert whole(b"")[1] is False


def test_trailing_junk_after_last_event_is_a_cut():
    events, cut = whole(b"data: a\n\n\x00\xffjunk")
    assert [e.data for e in events] == ["a"] and cut is True


def test_invalid_utf8_replaced_and_counted():
    events, cut, parser = parse([b"data: caf\xe9\n\ndata: ok\n\n"])
    assert [e.data for e in events] == ["caf\ufffd", "ok"]
    assert parser.invalid_utf8_lines == 1 and cut is False


def test_utf8_split_across_feeds_is_valid():
    events, _, parser = parse([b"data: caf\xc3", b"\xa9\n\n"])
    assert [e.data for e in events] == ["caf\u00e9"] and parser.invalid_utf8_lines == 0


def test_counters_and_index():
    events, _, parser = parse([b": c\ndata: a\n\ndata: b\n\n"])
    assert [e.index for e in events] == [0, 1]
    assert (parser.events, parser.lines, parser.bytes_fed) == (2, 5, 22)


def test_feed_after_close_is_misuse():
    parser = SseParser()
    parser.close()
    with pytest.raises(ParserClosedError):
        parser.feed(b"data: x\n\n")
    parser.close()  # idempotent
    assert parser.cut is False


def test_long_line_byte_at_a_time_is_linear_enough():
    data = b"data: " + b"x" * 200_000 + b"\n\n"
    events, cut, _ = parse([data[i : i + 7] for i in range(0, len(data), 7)])
    assert len(events[0].data) == 200_000 and cut is False


_LINE = st.one_of(
    st.sampled_from(
        [b"", b": c", b"data", b"data:", b"data: x", b"event: e", b"id: 7", b"retry: 9",
         b"{", b"}", b'  "k": [1, "]\\"",', b"[{}]"]
    ),
    st.binary(max_size=12).filter(lambda b: b"\r" not in b and b"\n" not in b),
)


@st.composite
def streams(draw) -> bytes:
    lines = draw(st.lists(_LINE, max_size=25))
    eols = draw(
        st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=len(lines), max_size=len(lines))
    )
    data = b"".join(line + eol for line, eol in zip(lines, eols, strict=True))
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data + draw(st.binary(max_size=6))


@st.composite
def splits(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=300)
@given(st.data(), st.booleans())
def test_any_split_gives_the_same_events(data, stray_json):
    stream = data.draw(streams())
    chunks = data.draw(splits(stream))
    expected = parse([stream], stray_json=stray_json)[:2]
    assert parse(chunks, stray_json=stray_json)[:2] == expected
    assert parse([stream[i:i + 1] for i in range(len(stream))], stray_json=stray_json)[:2] == expected


@settings(max_examples=300)
@given(st.binary(max_size=300), st.data(), st.booleans())
def test_arbitrary_bytes_never_raise(blob, data, stray_json):
    chunks = data.draw(splits(blob))
    assert parse(chunks, stray_json=stray_json)[:2] == parse([blob], stray_json=stray_json)[:2]


# --- JSON outside the framing (stray_json): Google's mid-stream errors ----------------------

# as Google ends a stream with an error: pretty-printed, one line at a time, blank lines between
STRAY = (b'data: {"a": 1}\r\n\r\n{\n\n  "error": {\n\n    "code": 429,\n\n'
         b'    "message": "Resource exhausted. {x} [y] \\"z\\"",\n\n    "status": "RESOURCE_EXHAUSTED"\n\n  }\n\n}\n\n')
STRAY_TEXT = ('{\n  "error": {\n    "code": 429,\n    "message": "Resource exhausted. {x} [y] \\"z\\"",\n'
              '    "status": "RESOURCE_EXHAUSTED"\n  }\n}')


def test_json_outside_the_framing_is_ignored_by_default_as_the_spec_says():
    events, cut = whole(STRAY)
    assert [(e.data, e.framed) for e in events] == [('{"a": 1}', True)] and cut is False


@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_stray_json_is_one_unframed_event_whole_and_byte_at_a_time(split):
    chunks = [STRAY] if split == "whole" else [STRAY[i:i + 1] for i in range(len(STRAY))]
    events, cut, _ = parse(chunks, stray_json=True)
    assert [(e.data, e.framed, e.index) for e in events] == [('{"a": 1}', True, 0), (STRAY_TEXT, False, 1)]
    assert cut is False


def test_stray_json_on_one_line_then_the_stream_goes_on():
    events = parse([b'[{"error": {"code": 500}}]\ndata: x\n\n'], stray_json=True)[0]
    assert [(e.data, e.framed) for e in events] == [('[{"error": {"code": 500}}]', False), ("x", True)]


def test_a_field_line_or_comment_before_the_brackets_close_ends_the_value_as_it_is():
    for line in (b"data: x", b": keepalive", b"event: e", b"id: 1", b"retry: 5"):
        events = parse([b'{\n  "error": {\n' + line + b"\ndata: y\n\n"], stray_json=True)[0]
        assert [(e.data, e.framed) for e in events][0] == ('{\n  "error": {', False)
        assert events[-1].data.endswith("y") and events[-1].framed


def test_a_stream_cut_inside_stray_json_is_cut_and_the_value_discarded():
    events, cut, _ = parse([b'{\n  "error": {\n'], stray_json=True)
    assert events == [] and cut is True


def test_stray_json_past_the_cap_is_dispatched_as_it_is():
    from collectors.sse import STRAY_MAX_CHARS

    line = b'  "' + b"x" * 1000 + b'",\n'
    events = parse([b"{\n" + line * (STRAY_MAX_CHARS // 1000 + 1)], stray_json=True)[0]
    assert len(events) == 1 and not events[0].framed and len(events[0].data) > STRAY_MAX_CHARS
