"""One token figure per cell, chosen by rank, and the agent session identities behind it.

Pure over a run's records (no I/O, no clock). `cell_tokens(records)` returns a
`CellTokens`: one `TokenFigure` (tokens; total = input + output, cache counts excluded)
from the highest-ranked source of `RANKS` (first-party ``agent.usage``, then a backfilled
first-party figure, `with_backfill`, then the proxy's ``llm.call`` sum), never mixed
across sources, None when not measured (never 0) with its ``null_reason``, and the session
identities (`SESSION_HEADERS`) of the calls summed: more than one is ``token_ambiguous``.
The rules: docs/architecture.md, "A cell's token figure".
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from caisson.detectors import ATTRIBUTION_EVENTS, foreign_calls
from ledger import Record
from ledger.events import AgentUsage, HttpExchange, LlmCall, TokenBackfilled

__all__ = ["BACKFILL", "FIRST_PARTY", "PROXY", "RANKS", "SESSION_HEADERS", "TOKEN_EVENTS", "CellTokens",
           "TokenFigure", "backfill_figure", "cell_tokens", "with_backfill"]

FIRST_PARTY = "first_party"
BACKFILL = "first_party_backfill"
PROXY = "proxy"
RANKS = (FIRST_PARTY, BACKFILL, PROXY)
"""Token sources from the most trusted down: live first-party, backfilled first-party, proxy."""
SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "conversation_id")
"""Request headers (lower case) that carry an agent's session identity, in order of trust."""


class TokenFigure(msgspec.Struct, frozen=True, kw_only=True):
    """One cell's token figure from one source.

    Attributes:
        total: input + output tokens (cache counts excluded).
        input: input tokens as the source counts them, or None when it gave no split.
        output: output tokens, or None.
        rank: `FIRST_PARTY`, `BACKFILL` or `PROXY`.
        source: what the figure is, printed beside it: ``"first_party:claude-code
            result.usage"`` or ``"proxy:llm.call"``. Floors and subtractions compare it
            exactly.
        reports: number of reports (first-party) or calls (proxy) summed.
    """

    total: int
    input: int | None = None
    output: int | None = None
    rank: str
    source: str
    reports: int = 1


class CellTokens(msgspec.Struct, frozen=True, kw_only=True):
    """What a cell's records say about its tokens.

    Attributes:
        figure: the chosen figure, or None when nothing comparable was measured.
        null_reason: why ``figure`` is None ("" when it is not).
        sessions: distinct session identities on the calls summed, sorted.
        unidentified_calls: model calls whose exchange carried no session header (or
            whose exchange is not in the ledger).
        token_ambiguous: more than one session identity among the calls summed.
        evidence: seqs of the records the figure and identities rest on.
    """

    figure: TokenFigure | None = None
    null_reason: str = ""
    passed_over: str = ""  # why the agent's own report was no figure (a placeholder), when the proxy's ranked
    proxy_floor: int | None = None  # with no figure: tokens the proxy saw on the calls surely the agent's
    # (attributed to it, with usage, not refused), a lower bound on a backfilled one; None when none were seen
    sessions: tuple[str, ...] = ()
    unidentified_calls: int = 0
    token_ambiguous: bool = False
    evidence: tuple[int, ...] = ()


def _session_of(headers: list[tuple[str, str]]) -> str | None:
    found = {k.lower(): v for k, v in headers if k.lower() in SESSION_HEADERS and v}
    return next((found[h] for h in SESSION_HEADERS if h in found), None)


def _total(report: AgentUsage) -> int | None:
    return report.normalized.total_tokens if report.normalized is not None else None


def _first_party(reports: list[tuple[int, AgentUsage]], calls_made: int) -> tuple[TokenFigure | None, str]:
    """The first-party figure; (None, "") when the agent measured nothing (the next source
    ranks), (None, why) when what it measured cannot be summed (nothing ranks below it)."""
    measured = [(s, r) for s, r in reports if _total(r) is not None]
    if not measured:  # no report, or only placeholders (a usage object without counts): not a figure
        return None, ""
    sources = sorted({r.token_source for _, r in measured})
    if len(sources) > 1:
        return None, f"first-party reports from {len(sources)} sources ({', '.join(sources)}): not summed"
    if len(measured) < len(reports):
        return None, f"{len(reports) - len(measured)} of {len(reports)} first-party reports carry no usage"
    total = sum(_total(r) for _, r in measured)  # type: ignore[misc]
    if total == 0 and calls_made:  # a placeholder: the proxy saw the calls it made
        return None, ""
    ins = [r.normalized.input_tokens for _, r in measured]  # type: ignore[union-attr]
    outs = [r.normalized.output_tokens for _, r in measured]  # type: ignore[union-attr]
    return TokenFigure(
        total=total,
        input=None if any(i is None for i in ins) else sum(ins),  # type: ignore[arg-type]
        output=None if any(o is None for o in outs) else sum(outs),  # type: ignore[arg-type]
        rank=FIRST_PARTY, source=f"{FIRST_PARTY}:{sources[0]}", reports=len(measured)), ""


def _placeholders(reports: list[tuple[int, AgentUsage]], calls_made: int) -> str:
    """Why the agent's reports are no figure, when they are placeholders ("" otherwise)."""
    why = sorted({r.usage_missing_reason for _, r in reports if r.usage is not None and _total(r) is None
                  and r.usage_missing_reason})
    if why:
        return f"the agent's usage is no figure ({'; '.join(why)})"
    if reports and calls_made and all(_total(r) == 0 for _, r in reports):
        return f"the agent reported 0 tokens where the proxy saw {calls_made} model call(s): a placeholder"
    return ""


def _proxy(calls: list[tuple[int, LlmCall]], refused: set[int] = frozenset()) -> tuple[TokenFigure | None, str]:
    """The proxy's sum over ``calls`` less those the provider refused with an error status
    (``refused``: seqs of calls whose exchange's status was 4xx or 5xx: it generated
    nothing and sent no usage; a stream cut after a 200 did, and is unknown)."""
    calls = [(s, c) for s, c in calls if s not in refused]
    if not calls:
        return None, "no first-party report and no model call seen by the proxy" + (
            f" ({len(refused)} refused by the provider)" if refused else "")
    missing = [s for s, c in calls if c.normalized is None or c.normalized.total_tokens is None]
    if missing:
        first = next(c for s, c in calls if s == missing[0])
        why = first.usage_missing_reason or "no usage"
        return None, f"{len(missing)} of {len(calls)} proxy-observed calls without usage (seq {missing[0]}: {why})"
    ins = [c.normalized.input_tokens for _, c in calls]  # type: ignore[union-attr]
    outs = [c.normalized.output_tokens for _, c in calls]  # type: ignore[union-attr]
    return TokenFigure(
        total=sum(c.normalized.total_tokens for _, c in calls),  # type: ignore[union-attr,misc]
        input=None if any(i is None for i in ins) else sum(ins),  # type: ignore[arg-type]
        output=None if any(o is None for o in outs) else sum(outs),  # type: ignore[arg-type]
        rank=PROXY, source=f"{PROXY}:llm.call", reports=len(calls)), ""


TOKEN_EVENTS = (AgentUsage, LlmCall, HttpExchange, *ATTRIBUTION_EVENTS)
"""The only events `cell_tokens` reads: it gives the same figure over a run's records of
these types (in ledger order) as over all of them."""


def cell_tokens(records: Iterable[Record]) -> CellTokens:
    """Choose one cell's token figure by rank and collect its session identities.

    Args:
        records: the cell's ledger records, in order (a verified ledger's).

    Returns:
        The figure (first-party over proxy-observed, never mixed, None when not
        measured, with the reason), the session identities of the summed calls and
        whether they make the figure ambiguous; docs/architecture.md, "A cell's token figure".
    """
    records = list(records)
    foreign, unattributed = foreign_calls(records)  # a tool's calls are not the agent's
    reports: list[tuple[int, AgentUsage]] = []
    calls: list[tuple[int, LlmCall]] = []
    exchanges: dict[int, HttpExchange] = {}
    last_exchange: dict[str, int] = {}  # source -> seq of its latest http.exchange
    owner: dict[int, int | None] = {}  # llm.call seq -> http.exchange seq
    made = 0
    for record in records:
        event = record.event
        if isinstance(event, AgentUsage):
            reports.append((record.seq, event))
        elif isinstance(event, LlmCall):
            if record.seq not in foreign:
                calls.append((record.seq, event))
            made += event.failed is None
            owner[record.seq] = (event.exchange_seq if event.exchange_seq is not None
                                 else last_exchange.pop(record.source, None))
        elif isinstance(event, HttpExchange):
            exchanges[record.seq] = event
            last_exchange[record.source] = record.seq
    calls_made = made  # every successful call the proxy saw, a tool's too: a placeholder's test
    figure, reason = _first_party(reports, calls_made)
    evidence = [s for s, r in reports if r.usage is not None]
    passed_over = ""
    if figure is None and not reason:  # the agent measured nothing (or only placeholders): the proxy ranks next
        refused = {seq for seq, _ in calls if (x := exchanges.get(owner[seq]) if owner[seq] is not None else None)
                   is not None and x.status is not None and x.status >= 400}
        figure, reason = _proxy(calls, refused)
        if figure is not None and (unsure := [s for s, _ in calls if s in unattributed]):
            figure, reason = None, (f"{len(unsure)} of {len(calls)} proxy-observed calls the proxy could not"
                                    f" attribute to a process (seq {unsure[0]}): the sum may hold a tool's calls")
        evidence = []
        passed_over = _placeholders(reports, calls_made)
        if passed_over and reason:
            reason = f"{passed_over}; {reason}"
    refused_seqs = {seq for seq, _ in calls if (x := exchanges.get(owner[seq]) if owner[seq] is not None else None)
                    is not None and x.status is not None and x.status >= 400}
    surely = [c.normalized.total_tokens for s, c in calls if s not in unattributed and s not in refused_seqs
              and c.normalized is not None and c.normalized.total_tokens is not None]
    sessions: set[str] = set()
    unidentified = 0
    for seq, call in calls:
        exchange_seq = owner[seq]
        exchange = exchanges.get(exchange_seq) if exchange_seq is not None else None
        session = _session_of(exchange.request_headers) if exchange is not None else None
        evidence.append(seq)
        if session is None:
            unidentified += 1
        else:
            sessions.add(session)
    return CellTokens(figure=figure, null_reason=reason, passed_over=passed_over if figure is None or
                      figure.rank != FIRST_PARTY else "", sessions=tuple(sorted(sessions)),
                      unidentified_calls=unidentified, token_ambiguous=len(sessions) > 1,
                      evidence=tuple(sorted(evidence)),
                      proxy_floor=sum(surely) if surely and figure is None else None)


def backfill_figure(event: TokenBackfilled) -> TokenFigure | None:
    """The `TokenFigure` of a ``token.backfilled`` record (rank `BACKFILL`), or None
    when it carries no normalised total."""
    view = event.normalized
    if view is None or view.total_tokens is None:
        return None
    return TokenFigure(total=view.total_tokens, input=view.input_tokens, output=view.output_tokens, rank=BACKFILL,
                       source=f"{BACKFILL}:{event.token_source}")


def with_backfill(live: CellTokens, backfilled: TokenFigure | None) -> CellTokens:
    """A cell's tokens once a backfilled figure is taken into the rank (pure).

    Args:
        live: what the cell's own records give (`cell_tokens`).
        backfilled: the backfill ledger's figure for the same run, or None.

    Returns:
        ``live`` unchanged when it holds a live first-party figure (never replaced) or
        there is no backfilled figure; otherwise ``live`` with the backfilled figure in
        place of the proxy's or of none (sessions and ambiguity stay the live ones: the
        same calls).
    """
    if backfilled is None or (live.figure is not None and live.figure.rank == FIRST_PARTY):
        return live
    return msgspec.structs.replace(live, figure=backfilled, null_reason="")
