"""Playbooks for the token ranking and session identity: records in, exact figure out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from caisson.report import CellTokens, TokenFigure, cell_tokens
from ledger import Record
from ledger.events import AgentUsage, HttpExchange, LlmCall, LlmUsage, Note

CC = "claude-code result.usage"


def _records(*pairs):
    return [Record(seq=i, wall_ns=i, mono_ns=i, source=src, event=ev) for i, (src, ev) in enumerate(pairs)]


def _usage(i, o, source=CC, reported=True):
    view = LlmUsage(input_tokens=i, output_tokens=o, total_tokens=i + o, rule="test")
    return ("agent", AgentUsage(agent="claude-code", token_source=source,
                                usage={"input_tokens": i, "output_tokens": o} if reported else None,
                                normalized=view if reported else None))


def _exchange(session=None, header="X-Claude-Code-Session-Id"):
    headers = [("content-type", "application/json")] + ([(header, session)] if session else [])
    return ("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443,
                                  path="/v1/messages", status=200, request_headers=headers))


def _call(i=None, o=None, missing=None):
    view = LlmUsage(input_tokens=i, output_tokens=o, total_tokens=i + o, rule="test") if i is not None else None
    return ("proxy", LlmCall(provider="anthropic", endpoint="messages", normalized=view,
                             usage={"input_tokens": i, "output_tokens": o} if i is not None else None,
                             usage_missing_reason=missing))


def test_first_party_outranks_the_proxy_and_is_never_replaced():
    out = cell_tokens(_records(_exchange("s1"), _call(100, 10), _exchange("s1"), _call(50, 5), _usage(999, 1)))
    assert out == CellTokens(figure=TokenFigure(total=1000, input=999, output=1, rank="first_party",
                                                source=f"first_party:{CC}", reports=1),
                             sessions=("s1",), evidence=(1, 3, 4))


def test_proxy_figure_when_the_agent_reported_nothing():
    out = cell_tokens(_records(_usage(0, 0, reported=False), _exchange("s1"), _call(100, 10), _exchange("s1"),
                               _call(50, 5)))
    assert out.figure == TokenFigure(total=165, input=150, output=15, rank="proxy", source="proxy:llm.call",
                                     reports=2)
    assert (out.null_reason, out.token_ambiguous) == ("", False)


def test_not_measured_is_null_never_zero():
    assert cell_tokens(_records(("recorder", Note(text="nothing")))) == CellTokens(
        null_reason="no first-party report and no model call seen by the proxy")
    cut = cell_tokens(_records(_exchange("s1"), _call(100, 10), _exchange("s1"), _call(missing="stream cut")))
    assert cut.figure is None
    assert cut.null_reason == "1 of 2 proxy-observed calls without usage (seq 3: stream cut)"


def test_first_party_sources_are_never_mixed_nor_replaced_by_the_proxy():
    mixed = cell_tokens(_records(_usage(10, 1), _usage(20, 2, source="codex turn.completed usage"),
                                 _exchange("s1"), _call(5, 5)))
    assert mixed.figure is None
    assert mixed.null_reason.startswith("first-party reports from 2 sources")
    partial = cell_tokens(_records(_usage(10, 1), _usage(0, 0, reported=False), _exchange("s1"), _call(5, 5)))
    assert partial.figure is None
    assert partial.null_reason == "1 of 2 first-party reports carry no usage"


def test_two_first_party_reports_of_one_source_are_summed():
    out = cell_tokens(_records(_usage(10, 1), _usage(20, 2)))
    assert out.figure == TokenFigure(total=33, input=30, output=3, rank="first_party", source=f"first_party:{CC}",
                                     reports=2)


def test_more_than_one_session_identity_is_token_ambiguous():
    out = cell_tokens(_records(_exchange("s1"), _call(1, 1), _exchange("s2", header="session_id"), _call(2, 2),
                               _exchange(None), _call(3, 3), _usage(10, 10)))
    assert (out.sessions, out.token_ambiguous, out.unidentified_calls) == (("s1", "s2"), True, 1)
    assert out.figure is not None and out.figure.rank == "first_party"  # still the agent's figure, flagged


def test_a_call_belongs_to_the_exchange_before_it_from_its_own_source():
    # another witness's exchange in between does not steal the call; exchange_seq wins when set
    records = _records(_exchange("s1"), ("other", HttpExchange(method="GET", scheme="http", host="x", port=80, path="/",
                                                               request_headers=[("session_id", "zz")])),
                       _call(1, 1))
    assert cell_tokens(records).sessions == ("s1",)
    explicit = _records(_exchange("s1"), _exchange("s9"),
                        ("proxy", LlmCall(provider="anthropic", endpoint="messages", exchange_seq=0,
                                          normalized=LlmUsage(input_tokens=1, output_tokens=1, total_tokens=2))))
    assert cell_tokens(explicit).sessions == ("s1",)


_events = st.lists(st.one_of(
    st.builds(lambda i, o, src, rep: _usage(i, o, source=src, reported=rep), st.integers(0, 10**6),
              st.integers(0, 10**6), st.sampled_from([CC, "codex turn.completed usage"]), st.booleans()),
    st.builds(lambda i, o, cut: _call(None if cut else i, o, missing="cut" if cut else None),
              st.integers(0, 10**6), st.integers(0, 10**6), st.booleans()),
    st.builds(_exchange, st.one_of(st.none(), st.sampled_from(["s1", "s2", "s3"]))),
), max_size=12)


@settings(max_examples=300, deadline=None)
@given(_events)
def test_the_figure_is_one_rank_never_mixed_and_never_a_made_up_zero(pairs):
    out = cell_tokens(_records(*pairs))
    reports = [e for _, e in pairs if isinstance(e, AgentUsage) and e.usage is not None]
    calls = [e for _, e in pairs if isinstance(e, LlmCall)]
    assert out.token_ambiguous == (len(out.sessions) > 1)
    if out.figure is None:
        assert out.null_reason
        return
    assert not out.null_reason
    placeholder = all(r.normalized.total_tokens == 0 for r in reports) and any(c.failed is None for c in calls)
    if reports and not placeholder:  # the agent measured: its figure, from one source, or none at all
        assert out.figure.rank == "first_party" and len({r.token_source for r in reports}) == 1
        assert out.figure.total == sum(r.normalized.total_tokens for r in reports)
    else:
        assert out.figure.rank == "proxy" and all(c.normalized is not None for c in calls)
        assert out.figure.total == sum(c.normalized.total_tokens for c in calls) and calls


def test_backfilled_first_party_ranks_below_live_first_party_and_above_the_proxy():
    from caisson.report import BACKFILL, RANKS, backfill_figure, with_backfill
    from ledger.events import TokenBackfilled

    assert RANKS == ("first_party", "first_party_backfill", "proxy")
    event = TokenBackfilled(target="cell", cell_id="c", run_id="r", run_dir="cells/c/1", ledger_head="ab",
                            token_source="claude-code session files (messages[].usage)", parser="p@1",
                            normalized=LlmUsage(input_tokens=90, output_tokens=10, total_tokens=100))
    late = backfill_figure(event)
    assert late == TokenFigure(total=100, input=90, output=10, rank=BACKFILL,
                               source="first_party_backfill:claude-code session files (messages[].usage)")
    live = cell_tokens(_records(_exchange("s1"), _call(100, 10), _usage(999, 1)))
    assert with_backfill(live, late) == live  # a live first-party figure is never replaced
    proxy = cell_tokens(_records(_exchange("s1"), _call(100, 10)))
    assert with_backfill(proxy, late) == CellTokens(figure=late, sessions=("s1",), evidence=(1,))
    assert with_backfill(proxy, None) == proxy
    none = cell_tokens(_records(_usage(0, 0, reported=False), _exchange("s1"), _call(missing="cut")))
    assert none.figure is None and with_backfill(none, late).figure == late
    assert backfill_figure(TokenBackfilled(target="cell", run_id="r", run_dir="d", ledger_head="h",
                                           token_source="x", parser="p@1")) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_events, st.just([("recorder", Note(text="other"))])), max_size=4))
def test_the_figure_of_a_runs_token_events_is_the_figure_of_the_run(chunks):
    # the report hands cell_tokens only TOKEN_EVENTS records (caisson/report/_evidence.py)
    from caisson.report._tokens import TOKEN_EVENTS

    records = _records(*[pair for chunk in chunks for pair in chunk])
    assert cell_tokens([r for r in records if isinstance(r.event, TOKEN_EVENTS)]) == cell_tokens(records)


def _refused():
    """A model call the provider refused (a 529): its exchange's status, no usage."""
    return [("proxy", HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443,
                                   path="/v1/messages", status=529)),
            ("proxy", LlmCall(provider="anthropic", endpoint="messages", usage_missing_reason="error status 529",
                              failed="error status 529: overloaded_error: Overloaded"))]


def test_a_placeholder_is_no_figure_and_the_proxy_ranks_next():
    """Issue 29, item 3: Copilot's result.usage holds no token count; OpenCode's step_finish
    tokens are all 0 with a cost; Claude Code's zeroed error result: none is a measurement,
    where the proxy saw the calls."""
    copilot = ("agent", AgentUsage(agent="copilot", token_source="copilot result.usage",
                                   usage={"premiumRequests": 0, "totalApiDurationMs": 213},
                                   usage_missing_reason="result.usage holds no token counts"))
    out = cell_tokens(_records(copilot, _exchange("s1"), _call(100, 10)))
    assert out.figure == TokenFigure(total=110, input=100, output=10, rank="proxy", source="proxy:llm.call")
    zeros = cell_tokens(_records(_usage(0, 0), _exchange("s1"), _call(100, 10)))
    assert zeros.figure is not None and zeros.figure.rank == "proxy"
    none = cell_tokens(_records(copilot))  # no call seen either: null, and why
    assert none.figure is None and none.null_reason.startswith(
        "the agent's usage is no figure (result.usage holds no token counts); no first-party report")
    alone = cell_tokens(_records(_usage(0, 0)))  # no call the proxy saw: the agent's 0 stands
    assert alone.figure is not None and (alone.figure.rank, alone.figure.total) == ("first_party", 0)


def test_a_call_the_provider_refused_generated_nothing_and_is_left_out_of_the_proxy_sum():
    out = cell_tokens(_records(*_refused(), *_refused(), _exchange("s1"), _call(100, 10)))
    assert out.figure == TokenFigure(total=110, input=100, output=10, rank="proxy", source="proxy:llm.call")
    only = cell_tokens(_records(*_refused()))
    assert only.figure is None and only.null_reason.endswith("(1 refused by the provider)")
    cut = cell_tokens(_records(_exchange("s1"), _call(missing="stream cut before message_stop")))
    assert cut.figure is None  # a stream cut after a 200 did generate: unknown, never 0
