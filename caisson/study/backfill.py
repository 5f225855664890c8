"""`caisson study backfill DIR`: first-party token figures that arrive late, as sealed evidence.

A cell's live token figure comes from its own records (`caisson.report.cell_tokens`, over
the events rebuilt from its blobs by today's parsers, as the report reads them:
`caisson.replay.rebuilt_records`): the agent's report on stdout, else the proxy's sum. Some agents say nothing on stdout (a
plain command running an agent CLI, a transcript cut short), yet leave their usage in
their session files, which the recorder collects as blobs (``agent.session_file``,
caisson/run/sessionfiles.py). Backfill reads those blobs with today's sans-IO parsers
(`caisson.agents.sessionfiles.session_usage`) for every counting cell and baseline whose
live figure is missing or only proxy-observed, and writes what it found to the study's
**backfill ledger**: a signed ledger (the operator's key, like the study ledger) in
segments under ``DIR/backfill/NNN/``. A segment starts with ``backfill.started`` (the
study ledger head it read, the previous segment's last seal, the parser versions), then
one ``token.backfilled`` per figure (the run it comes from, bound by run id and chain head
as the study ledger binds it, the blobs, the parser, the figure it stands in for).

The rules:

- **Never overwrites a first-party figure**: a run whose own records hold one is skipped,
  and the report ignores a backfilled figure for it anyway (`caisson.report.with_backfill`).
- **Idempotent**: a figure equal to the latest record for the same run (parser, usage,
  blobs) is not written again; with nothing new, no segment is written at all.
- **Nothing is replaced**: a new figure for a run (a parser fix) goes into a new segment
  and supersedes the older record in the report; the older segment stays as it was, so
  every earlier state is kept, as a backup would keep it, and verifies. A segment is
  written under a hidden name and renamed once closed, so a crash leaves no half segment;
  then it is announced in the study ledger (``backfill.recorded``,
  `caisson.study.studyledger.announce`), so removing the last segment fails verify.
- `verify_backfill` (run by `caisson verify DIR`) checks every segment against the trusted
  key, the chain of segments, that each record names a run the study ledger binds at the
  same head, and that each blob is a session file that run collected.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import msgspec

from caisson import __version__
from caisson.agents import SESSION_PARSERS, agent_of_file, session_usage
from caisson.errors import UsageError
from caisson.replay import BLOB_ROLES, rebuilt_records
from caisson.report import FIRST_PARTY, PROXY, CellTokens, TokenFigure, backfill_figure, cell_tokens
from caisson.study.backfillledger import BACKFILL_DIR, backfill_segments, read_backfill, verify_backfill
from caisson.study.studyledger import (announce, enrolled_keys, read_study, run_trust, sealed_state, segments,
                                      study_lock)
from caisson.study.verify import verify_study
import ledger
from ledger import BlobStore, Record, SigningKey, VerifyKey, verify_and_read
from ledger.events import (AgentSessionFile, BackfillRecorded, BackfillStarted, BaselineMeasured, CellEnded,
                           StudyPlanned, TokenBackfilled)

__all__ = ["BACKFILL_DIR", "BackfillChange", "BackfillResult", "Target", "backfill_segments", "backfill_study",
           "derive", "read_backfill", "targets", "verify_backfill"]  # reading and verifying: backfillledger

SOURCE = "backfill"


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A run the study ledger binds whose tokens may be backfilled: a counting cell attempt
    or a baseline probe."""

    target: str  # cell | baseline
    name: str  # the cell id, or arm/agent/model of a baseline
    cell_id: str = ""
    arm: str = ""
    agent: str = ""
    model: str | None = None
    run_id: str
    run_dir: str  # relative to the study directory
    ledger_head: str


class BackfillChange(msgspec.Struct, frozen=True, kw_only=True):
    """One line of what backfill did: a figure written, or why a run got none."""

    target: str
    name: str
    old: str  # the figure it stands in for, with its source ("null (why)" when not measured)
    new: str  # the backfilled figure and source, or "unchanged ..." / "no figure: why"
    written: bool = False


class BackfillResult(msgspec.Struct, kw_only=True):
    """What `backfill_study` did: the segment it wrote (None: nothing new) and each line."""

    segment: Path | None = None
    changes: list[BackfillChange] = []

    @property
    def written(self) -> int:
        return sum(1 for c in self.changes if c.written)


def _model(model: str | None) -> str:
    return model or "-"


def _enrolled(study_records: list[Record]) -> dict[bytes, VerifyKey]:
    """The host keys the study enrolled (``--executor ray``), raw public key -> key; empty
    when its runs are signed by the operator's key."""
    planned = next((r.event for r in study_records if isinstance(r.event, StudyPlanned)), None)
    return enrolled_keys(planned.host_keys) if planned is not None else {}


def targets(study_records: list[Record]) -> list[Target]:
    """Every counting cell attempt and every baseline probe the study ledger binds."""
    events = [r.event for r in study_records]
    planned = next((e for e in events if isinstance(e, StudyPlanned)), None)
    places = {c.cell_id: c for c in planned.cells} if planned else {}
    out: list[Target] = []
    for e in events:
        if isinstance(e, BaselineMeasured) and e.run_id and e.run_dir:
            out.append(Target(target="baseline", name=f"{e.arm}/{e.agent}/{_model(e.model)}", arm=e.arm,
                              agent=e.agent, model=e.model, run_id=e.run_id, run_dir=e.run_dir,
                              ledger_head=e.ledger_head))
        elif isinstance(e, CellEnded) and e.counting and e.run_id:
            place = places.get(e.cell_id)
            out.append(Target(target="cell", name=e.cell_id, cell_id=e.cell_id, arm=place.arm if place else "",
                              agent=place.agent if place else "", model=place.model if place else None, run_id=e.run_id,
                              run_dir=e.run_dir, ledger_head=e.ledger_head))
    return out


def _show(figure: TokenFigure | None, why: str = "") -> str:
    return f"{figure.total} ({figure.source})" if figure is not None else f"null ({why or 'not measured'})"


def derive(run_dir: Path, records: list[Record], live: CellTokens) -> tuple[TokenBackfilled | None, str]:
    """What a run's collected session files give (pure but for reading the run's blob
    store): (the figure as a record, its target fields still empty; or None and why)."""
    files = [r.event for r in records if isinstance(r.event, AgentSessionFile)]
    skipped = [f for f in files if f.skipped and agent_of_file(f.path)]
    if skipped:
        return None, f"session file {skipped[0].path} not stored: {skipped[0].skipped}"
    stored = [f for f in files if f.blob_sha256]
    if not stored:
        return None, "no session file collected"
    store = BlobStore(run_dir / "blobs")
    usage = session_usage([(f.path, store.get(f.blob_sha256)) for f in stored])  # type: ignore[arg-type]
    if usage is None:
        return None, "no session file of a known layout"
    if usage.normalized is None or usage.normalized.total_tokens is None:
        return None, usage.usage_missing_reason or "no figure"
    total, seen = usage.normalized.total_tokens, live.figure
    if seen is not None and seen.rank == PROXY and abs(total - seen.total) > max(10, seen.total // 100):
        # The files are written in the chamber, where the agent's tools can rewrite them; the
        # proxy's figure is what the provider sent for the same calls: the files must agree.
        return None, (f"the agent's session files give {total} tokens where the proxy measured {seen.total} for its"
                      " calls: not backfilled (the files are the agent's to write, the proxy's figure is the"
                      " provider's)")
    floor = live.proxy_floor
    if seen is None and floor is not None and total < floor - max(10, floor // 100):
        # no figure to agree with (a call not attributed, a placeholder): the agent's own calls the
        # proxy measured still bound it from below
        return None, (f"the agent's session files give {total} tokens, fewer than the {floor} the proxy measured on"
                      " its own calls: not backfilled (the files are the agent's to write)")
    event = TokenBackfilled(target="cell", run_id="", run_dir="", ledger_head="", token_source=usage.token_source,
                            parser=usage.parser, usage=usage.usage, normalized=usage.normalized,
                            cost_usd=usage.cost_usd, blobs=sorted({f.blob_sha256 for f in stored
                                                                    if agent_of_file(f.path)}),  # type: ignore[misc]
                            previous_total=live.figure.total if live.figure else None,
                            previous_source=live.figure.source if live.figure else live.null_reason)
    return event, ""


def _same(a: TokenBackfilled, b: TokenBackfilled) -> bool:
    return (a.parser, a.usage, a.normalized, a.blobs, a.ledger_head) == (b.parser, b.usage, b.normalized, b.blobs,
                                                                          b.ledger_head)


def backfill_study(study_dir: Path, key: SigningKey) -> BackfillResult:
    """Backfill a finished study's token figures from its runs' session files.

    Args:
        study_dir: the study directory.
        key: the operator's signing key (its public half is the trusted key).

    Returns:
        The segment written (None when nothing changed) and one line per run that has,
        or could have, a backfilled figure.

    Raises:
        UsageError: ``study_dir`` is not a study directory, does not verify, or is not
            closed (a study still running or crashed: resume it first); another process
            writes it (`caisson.study.studyledger.study_lock`).
    """
    study_dir = Path(study_dir)
    with study_lock(study_dir, "backfill"):  # one writer of the study at a time (segment numbers)
        return _backfill_study(study_dir, key)


def _backfill_study(study_dir: Path, key: SigningKey) -> BackfillResult:
    trusted = key.verify_key
    verified = verify_study(study_dir, trusted)
    if verified.status != "ok":
        raise UsageError(f"{study_dir}: the study does not verify ({verified.status}); nothing is backfilled:"
                         + "".join(f"\n  {p}" for p in verified.problems))
    latest = read_backfill(study_dir, trusted)
    result = BackfillResult()
    new: list[TokenBackfilled] = []
    study_records = read_study(study_dir, trusted)
    enrolled = _enrolled(study_records)
    for t in targets(study_records):
        run_dir = study_dir / t.run_dir
        kept: dict[str, bytes] = {}
        report, records = verify_and_read(run_dir, run_trust(run_dir, trusted, enrolled), kept_blobs=kept,
                                          keep_roles=BLOB_ROLES)
        if report.status != "ok":
            continue  # verify_study passed, so this is an attempt bound unclosed: nothing sealed to read
        # the figure the report reads: from the events rebuilt with today's parsers
        live = cell_tokens(rebuilt_records(report, records, kept))
        if live.figure is not None and live.figure.rank == FIRST_PARTY:
            continue  # a live first-party figure is never replaced
        found, why = derive(run_dir, records, live)
        old = _show(live.figure, live.null_reason)
        if found is None:
            result.changes.append(BackfillChange(target=t.target, name=t.name, old=old, new=f"no figure: {why}"))
            continue
        found = msgspec.structs.replace(found, target=t.target, cell_id=t.cell_id, arm=t.arm, agent=t.agent,
                                        model=t.model, run_id=t.run_id, run_dir=t.run_dir, ledger_head=t.ledger_head)
        shown = _show(backfill_figure(found))
        before = latest.get(t.run_id)
        if before is not None and _same(before, found):
            result.changes.append(BackfillChange(target=t.target, name=t.name, old=old, new=f"unchanged {shown}"))
            continue
        if before is not None:
            old = _show(backfill_figure(before))
        new.append(found)
        result.changes.append(BackfillChange(target=t.target, name=t.name, old=old, new=shown, written=True))
    if new:
        result.segment = _write_segment(study_dir, key, new)
    return result


def _write_segment(study_dir: Path, key: SigningKey, events: list[TokenBackfilled]) -> Path:
    existing = backfill_segments(study_dir)
    previous = sealed_state(existing[-1], key.verify_key) if existing else None
    segs = segments(study_dir)
    head = sealed_state(segs[-1], key.verify_key).head
    seg = study_dir / BACKFILL_DIR / f"{len(existing):03d}"
    partial = seg.with_name(f".{seg.name}.partial")  # not a segment until closed and renamed
    if partial.exists():
        shutil.rmtree(partial)  # a backfill that crashed before its segment was closed
    partial.mkdir(parents=True)
    run_id = time.strftime("backfill-%Y%m%dT%H%M%SZ", time.gmtime())
    with ledger.LedgerWriter(partial / "ledger", run_id=run_id, key=key, blobs=BlobStore(partial / "blobs"),
                      flush_records=1 << 20, flush_interval_s=float("inf")) as writer:
        writer.append(BackfillStarted(
            study_head=head, previous_run_id=(previous.run_id or "") if previous else "",
            previous_records=previous.records if previous else 0, previous_head=previous.head if previous else "",
            parsers=sorted(p.PARSER for p in SESSION_PARSERS.values()), caisson_version=__version__),
            source=SOURCE, wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())
        for event in events:
            writer.append(event, source=SOURCE, wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())
    partial.rename(seg)
    announce(study_dir, key, seg, BackfillRecorded, run_id=f"study-{run_id}")  # so its removal is seen
    return seg


