"""Every sans-IO parser keeps the one contract of `ledger.SansIOParser`: the same events at
any split, ``b""`` harmless, `NEED_DATA` for good once closed and drained, `ParserClosedError`
on a feed after close. A parser class not in `PARSERS` (nor in `NOT_PARSERS`, with its
reason) fails `test_every_parser_class_is_in_the_registry`."""

from __future__ import annotations

import ast
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caisson.agents import claude_code, codex, copilot, mini_swe_agent, opencode
from caisson.agents.sessionfiles import ClaudeSessionParser, CodexRolloutParser
from collectors.ebpf import EbpfParser
from collectors.llm._calls import BedrockEvents
from collectors.llm._eventstream import EventStreamDecoder, encode_message
from collectors.llm._jsonarray import JsonArrayEvents
from collectors.proxy._frames import (Chunk, Dropped, FrameDecoder, Hello, Request, ResponseEnd, ResponseStart,
                                      encode_frame)
from collectors.sse import SseParser
from collectors.strace import StraceParser
from ledger import NEED_DATA, ParserClosedError, SansIOParser, drain
from ledger._format import FrameParser

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


class Case(NamedTuple):
    factory: Callable[[], Any]
    sample: bytes  # input in the parser's real format, from its own tests' fixtures


def _read(path: str) -> bytes:
    return (TESTS / path).read_bytes()


def _bedrock_stream() -> bytes:  # tests/collectors/test_llm_providers.py's chunks of the Anthropic stream
    sse = _read("collectors/test_llm/anthropic_stream.sse").decode()
    events = [block.split("data: ", 1)[1] for block in sse.split("\n\n") if "data: " in block]
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return b"".join(encode_message(headers, json.dumps({"bytes": base64.b64encode(e.encode()).decode()}).encode())
                    for e in events)


def _proxy_frames() -> bytes:  # one streamed exchange, as tests/collectors/test_proxy_assembler.py builds it
    body = _read("collectors/test_llm/anthropic_stream.sse")
    frames = [Hello(pid=1),
              Request(id="f1", ts_ns=1_000, mono_ns=10, method="POST", scheme="https", host="api.anthropic.com",
                      port=443, path="/v1/messages", headers=[("content-type", "application/json")]),
              ResponseStart(id="f1", ts_ns=1_000, mono_ns=10, status=200,
                            headers=[("content-type", "text/event-stream")]),
              *[Chunk(id="f1", data=body[i:i + 97]) for i in range(0, len(body), 97)],
              ResponseEnd(id="f1", ts_ns=2_000, mono_ns=20), Dropped(ts_ns=3_000, count=2)]
    return b"".join(encode_frame(f) for f in frames)


PARSERS: dict[type, Case] = {
    StraceParser: Case(lambda: StraceParser(root_cwd="/tmp/caisson-golden"), _read("collectors/test_strace/audit.strace")),
    EbpfParser: Case(lambda: EbpfParser(clock_offset_ns=10**18, root_cwd="/work/sandbox", root_host_pid=6657),
                     _read("collectors/test_ebpf/probe.libbpf.out")),
    SseParser: Case(SseParser, _read("collectors/test_llm/openai_responses_stream.sse")),
    JsonArrayEvents: Case(JsonArrayEvents, _read("collectors/test_llm_gemini/gemini_stream_array.json")),
    EventStreamDecoder: Case(EventStreamDecoder, _bedrock_stream()),
    BedrockEvents: Case(BedrockEvents, _bedrock_stream()),
    FrameDecoder: Case(FrameDecoder, _proxy_frames()),
    FrameParser: Case(FrameParser, _read("ledger/test_golden/v2/ledger")),
    claude_code.TranscriptParser: Case(claude_code.TranscriptParser,
                                       _read("caisson/test_transcripts_claude/path_deny_read.jsonl")),
    codex.TranscriptParser: Case(codex.TranscriptParser, _read("caisson/test_transcripts_codex/declined.jsonl")),
    copilot.TranscriptParser: Case(copilot.TranscriptParser,
                                   _read("caisson/test_transcripts_copilot/retry_then_answer.jsonl")),
    opencode.TranscriptParser: Case(opencode.TranscriptParser,
                                    _read("caisson/test_transcripts_opencode/refused_errored.jsonl")),
    mini_swe_agent.TranscriptParser: Case(mini_swe_agent.TranscriptParser,
                                          _read("caisson/test_transcripts_mini/refused_errored.json")),
    # the session files' readers emit only the lines they cannot read (their figures are attributes)
    ClaudeSessionParser: Case(ClaudeSessionParser,
                              _read("caisson/test_sessionfiles/claude_session.jsonl") + b"this is not json\n"),
    CodexRolloutParser: Case(CodexRolloutParser,
                             b"not json either\n" + _read("caisson/test_sessionfiles/codex_rollout.jsonl")),
}

NOT_PARSERS: dict[str, str] = {  # module.qualname -> why the contract does not apply
    "collectors._strace_parser.SyscallParserOutput": "base class: its parsers (strace's, eBPF's) are registered",
    "caisson.agents._lines.JsonLinesParser": "abstract base (on_object): its subclasses are registered",
    "collectors.proxy._bodies.BodyDecoder": "bytes -> bytes transform: feed returns the decoded bytes",
    "collectors.proxy._bodies._Zlib": "a BodyDecoder stage: bytes -> bytes",
    "collectors.proxy._bodies._Brotli": "a BodyDecoder stage: bytes -> bytes",
    "collectors.proxy._bodies._Zstd": "a BodyDecoder stage: bytes -> bytes",
    "collectors.proxy._exchange._Body": "one body direction over BodyDecoder: bytes -> bytes",
    "collectors.proxy._exchange.ExchangeAssembler": "fed decoded frames, not bytes; close takes the end's time",
    "ledger._reader.LedgerChecker": "a verifier over FrameParser (registered): records() yields checked records",
    "caisson.detectors._runner.Streamed": "a detector runner fed decoded records, not bytes",
    "caisson.detectors.attribution.Attribution": "a projection fed decoded records, not bytes",
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _parse(case: Case, chunks: list[bytes]) -> list:
    parser = case.factory()
    events: list = []
    for chunk in chunks:
        parser.feed(chunk)
        events += drain(parser)
    parser.close()
    events += drain(parser)
    return events


def _cut(data: bytes, points: list[int]) -> list[bytes]:
    points = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in zip(points, points[1:])]


CASES = pytest.mark.parametrize("cls", list(PARSERS), ids=_name)


@CASES
def test_is_the_protocol_and_close_returns_nothing(cls):
    parser = PARSERS[cls].factory()
    assert type(parser) is cls and isinstance(parser, SansIOParser)
    assert parser.feed(b"") is None and parser.next_event() is NEED_DATA
    assert parser.close() is None and parser.close() is None  # a second close does nothing


@CASES
def test_whole_byte_at_a_time_and_empty_feeds_give_the_same_events(cls):
    case = PARSERS[cls]
    whole = _parse(case, [case.sample])
    assert whole, "the sample gives no event: pick one that exercises the parser"
    assert _parse(case, [case.sample[i:i + 1] for i in range(len(case.sample))]) == whole
    assert _parse(case, [b"", case.sample[:1], b"", case.sample[1:], b""]) == whole


@CASES
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_gives_the_same_events(cls, data):
    case = PARSERS[cls]
    points = data.draw(st.lists(st.integers(0, len(case.sample)), max_size=12))
    assert _parse(case, _cut(case.sample, points)) == _parse(case, [case.sample])


@CASES
def test_after_close_feed_raises_and_next_event_stays_need_data(cls):
    case = PARSERS[cls]
    parser = case.factory()
    parser.feed(case.sample)
    parser.close()
    list(drain(parser))
    assert [parser.next_event() for _ in range(3)] == [NEED_DATA] * 3
    with pytest.raises(ParserClosedError):
        parser.feed(b"x")
    parser.close()
    assert parser.next_event() is NEED_DATA


def _candidates() -> dict[str, str]:
    """Classes of caisson, collectors and ledger that define ``feed`` or ``next_event`` (or
    inherit from one that does, by a base named in the source), Protocols aside:
    module.qualname -> file."""
    classes: list[tuple[str, str, set[str], set[str], str]] = []  # (name, qualname, bases, methods, file)
    for package in ("caisson", "collectors", "ledger"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
                             else getattr(getattr(b, "value", None), "id", "") for b in node.bases}
                    methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                    classes.append((node.name, f"{module}.{node.name}", bases, methods, str(path)))
    found = {name for name, _, _, methods, _ in classes if methods & {"feed", "next_event"}}
    while True:  # subclasses of those, by name
        more = {name for name, _, bases, _, _ in classes if bases & found} - found
        if not more:
            break
        found |= more
    return {qual: file for name, qual, bases, _, file in classes if name in found and "Protocol" not in bases}


def test_every_parser_class_is_in_the_registry():
    registered = {_name(cls) for cls in PARSERS}
    unknown = sorted(set(_candidates()) - registered - set(NOT_PARSERS))
    assert not unknown, f"parser classes outside the contract test (add them to PARSERS or NOT_PARSERS): {unknown}"
    gone = sorted((registered | set(NOT_PARSERS)) - set(_candidates()))
    assert not gone, f"registered classes no longer found: {gone}"
