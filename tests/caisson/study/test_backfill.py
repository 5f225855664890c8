"""`caisson study backfill DIR` on a study directory of real signed ledgers (written here
with the ledger writer, no chamber): first-party figures from the collected session files
fill the proxy-only cell and baseline, never a live first-party one; a second run changes
nothing; a parser change writes a new segment and keeps the old; verify checks it all;
the report ranks and prints the backfilled source."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import msgspec
import pytest

from caisson.agents import sessionfiles
from caisson.cli import main
from caisson.errors import UsageError
from caisson.home import ensure_operator_key
from caisson.report import build_report, render_text
from caisson.study.backfill import BACKFILL_DIR, backfill_study, read_backfill
from caisson.study.report_input import load_study_report
from caisson.study.studyledger import StudyLedger, read_study, sealed_state
from caisson.study.verify import verify_study
from ledger import BlobStore, LedgerWriter
from ledger.events import (AgentSessionFile, AgentUsage, BackfillRecorded, BaselineMeasured, BlobStored, CellEnded,
                           CellStarted, Combo, HttpExchange, LlmCall, LlmUsage, PlannedCell, RunEnded, RunStarted,
                           StudyEnded, StudyPlanned, StudyResumed, TokenBackfilled)

GOLDEN = Path(__file__).parents[1] / "test_sessionfiles"
CLAUDE = (GOLDEN / "claude_session.jsonl").read_bytes()  # 5956 in + 52 out = 6008
BASE = CLAUDE.replace(b'"output_tokens":12', b'"output_tokens":2')  # the baseline's: 5998
PATH = ".claude/projects/-work-sandbox/s.jsonl"
LATE = "first_party_backfill:claude-code session files (messages[].usage)"


def _response(session: bytes | None) -> bytes:
    """The response the proxy kept: the calls the session file counts (the files must agree
    with the proxy to be backfilled), or 700 + 7 for a run without one."""
    i, o = {CLAUDE: (5956, 52), BASE: (5956, 42)}.get(session, (700, 7))  # type: ignore[arg-type]
    return (b'{"type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],'
            b' "stop_reason": "end_turn", "usage": {"input_tokens": %d, "output_tokens": %d}}' % (i, o))


def _run(run_dir: Path, key, *, session: bytes | None = None, first_party: int | None = None) -> tuple[str, int, str]:
    run_id = f"run-{run_dir.parent.name}-{run_dir.name}"
    run_dir.mkdir(parents=True)
    blobs = BlobStore(run_dir / "blobs")
    with LedgerWriter(run_dir / "ledger", run_id=run_id, key=key, blobs=blobs) as w:
        w.append(RunStarted(run_id=run_id, caisson_version="test"), source="recorder")
        # the bodies the proxy kept: replay and the report rebuild the call from them
        request = w.put_blob(b'{"model": "claude-sonnet-4-5", "messages": []}', role="http.request_body",
                             media_type="application/json")
        body = _response(session)
        response = w.put_blob(body, role="http.response_body", media_type="application/json")
        w.append(HttpExchange(method="POST", scheme="https", host="api.anthropic.com", port=443, path="/v1/messages",
                              status=200, request_headers=[("x-claude-code-session-id", "s1")],
                              response_headers=[("content-type", "application/json")],
                              request_bytes=46, response_bytes=len(body), request_body_sha256=request,
                              response_body_sha256=response), source="proxy")
        # as a parser with a bug wrote it live (70 for 700): backfill and the report read the call
        # rebuilt from the bodies (the figures below say so)
        w.append(LlmCall(provider="anthropic", endpoint="messages", usage={"input_tokens": 70, "output_tokens": 7},
                         normalized=LlmUsage(input_tokens=70, output_tokens=7, total_tokens=77)), source="proxy")
        if first_party is not None:
            w.append(AgentUsage(agent="claude-code", token_source="claude-code result.usage", usage={"x": 1},
                                normalized=LlmUsage(input_tokens=first_party, output_tokens=0,
                                                    total_tokens=first_party)), source="transcript")
        if session is not None:
            digest = blobs.put(session)
            w.append(BlobStored(sha256=digest, size_bytes=len(session), role="agent.session_file"), source="recorder")
            w.append(AgentSessionFile(agent="claude-code", path=PATH, size_bytes=len(session), sha256=digest,
                                      blob_sha256=digest), source="recorder")
        w.append(RunEnded(exit_code=0), source="recorder")
    state = sealed_state(run_dir, key.verify_key)
    return run_id, state.records, state.head


@pytest.fixture
def study(tmp_path) -> Path:
    """Three cells of one (arm, agent, model): proxy + session file, live first-party +
    session file, proxy only; a baseline with proxy + session file."""
    key = ensure_operator_key()
    out = tmp_path / "study"
    cells = {"late": dict(session=CLAUDE), "live": dict(session=CLAUDE, first_party=4000), "none": {}}
    ledger = StudyLedger(out, key, run_id="study-test")
    place = dict(arm="a", agent="claude-code", model="m")
    ledger.append(StudyPlanned(study="t", study_sha256="", combos=[Combo(**place, gating="enforced", cells=3)],
                               cells=[PlannedCell(**place, cell_id=c, question_id="q", repetition=1) for c in cells]))
    run_id, records, head = _run(out / "baselines/a--claude-code--m/1", key, session=BASE)
    ledger.append(BaselineMeasured(**place, run_id=run_id, run_dir="baselines/a--claude-code--m/1",
                                   ledger_records=records, ledger_head=head, status="ok", tools_discovered=["Bash"]))
    for cell, kw in cells.items():
        rel = f"cells/{cell}/1"
        ledger.append(CellStarted(cell_id=cell, attempt=1, run_dir=rel))
        run_id, records, head = _run(out / rel, key, **kw)
        ledger.append(CellEnded(cell_id=cell, attempt=1, run_id=run_id, run_dir=rel, status="clean", counting=True,
                                ledger_records=records, ledger_head=head, ledger_final=True))
    ledger.append(StudyEnded(cells=3, counted=3))
    ledger.close()
    return out


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_backfill_fills_proxy_only_figures_once_and_never_a_first_party_one(study, capsys):
    key = ensure_operator_key()
    before = _digest(study)
    assert main(["study", "backfill", str(study)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"BACKFILL baseline a/claude-code/m: 5998 (proxy:llm.call) -> 5998 ({LATE})",
        f"BACKFILL cell late: 6008 (proxy:llm.call) -> 6008 ({LATE})",
        "         cell none: 707 (proxy:llm.call) -> no figure: no session file collected",
        f"wrote 2 figure(s) to {study / BACKFILL_DIR / '000'}",
    ]  # cell live (first-party 4000) is not even listed: never touched
    after = _digest(study)
    announcement = "study/001/"  # the study ledger segment announcing backfill/000
    assert {k: v for k, v in after.items() if not k.startswith((BACKFILL_DIR, announcement))} == before
    assert [type(r.event) for r in read_study(study, key.verify_key)][-2:] == [StudyResumed, BackfillRecorded]
    assert verify_study(study, key.verify_key).status == "ok"
    latest = read_backfill(study, key.verify_key)
    assert sorted((e.target, e.cell_id, e.previous_total, e.normalized.total_tokens) for e in latest.values()) == [
        ("baseline", "", 5998, 5998), ("cell", "late", 6008, 6008)]
    # Twice: nothing new, no new segment, no byte changed.
    assert main(["study", "backfill", str(study)]) == 0
    again = capsys.readouterr().out.splitlines()
    assert again[-1] == f"nothing changed in {study}" and not any(line.startswith("BACKFILL") for line in again)
    assert _digest(study) == after
    # The report: backfilled above the proxy, the live first-party figure kept, the source printed.
    _, data = load_study_report(study, key.verify_key)
    tokens = {c.cell_id: (c.tokens.total, c.tokens.source) for c in data.cells}
    assert tokens == {"late": (6008, LATE), "live": (4000, "first_party:claude-code result.usage"),
                      "none": (707, "proxy:llm.call")}
    [base] = data.baselines
    assert (base.floor.total, base.floor.source) == (5998, LATE)
    assert f"5,998 ({LATE})" in render_text(build_report(data)) or f"5998 ({LATE})" in render_text(build_report(data))


def test_a_parser_change_writes_a_new_segment_and_keeps_the_old(study, monkeypatch):
    key = ensure_operator_key()
    assert backfill_study(study, key).written == 2
    first = _digest(study / BACKFILL_DIR / "000")
    monkeypatch.setattr(sessionfiles.ClaudeSessionParser, "PARSER", "claude-code.session@2")
    result = backfill_study(study, key)
    assert result.segment == study / BACKFILL_DIR / "001" and result.written == 2
    assert [c.old for c in result.changes if c.written][0].endswith(f"({LATE})")  # old backfilled -> new
    assert _digest(study / BACKFILL_DIR / "000") == first  # the earlier segment is kept as it was
    assert verify_study(study, key.verify_key).status == "ok"  # chained: 001 names 000's last seal
    assert {e.parser for e in read_backfill(study, key.verify_key).values()} == {"claude-code.session@2"}


def test_verify_catches_a_tampered_or_unbound_backfill(study, tmp_path):
    key = ensure_operator_key()
    backfill_study(study, key)
    seg = study / BACKFILL_DIR / "000" / "ledger"
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    report = verify_study(study, key.verify_key)
    assert report.status == "tampered" and "backfill" in report.problems[0]
    assert load_study_report(study, key.verify_key)[1] is None
    # A correctly signed record that names a run at a head the study does not bind (the
    # segment and its announcement gone first: a state as old as the study's, that verifies).
    (study / BACKFILL_DIR / "000").rename(tmp_path / "gone")
    (study / "study" / "001").rename(tmp_path / "gone-announcement")
    backfill_study(study, key)
    [event] = [e for e in read_backfill(study, key.verify_key).values() if e.target == "cell"]
    forged = study / BACKFILL_DIR / "001"
    forged.mkdir()
    with LedgerWriter(forged / "ledger", run_id="forged", key=key, blobs=BlobStore(forged / "blobs")) as w:
        from caisson.study.backfill import sealed_state as _state
        from ledger.events import BackfillStarted

        prev = _state(study / BACKFILL_DIR / "000", key.verify_key)
        w.append(BackfillStarted(study_head="", previous_run_id=prev.run_id, previous_records=prev.records,
                                 previous_head=prev.head), source="backfill")
        w.append(msgspec.structs.replace(event, ledger_head="00" * 32), source="backfill")
    report = verify_study(study, key.verify_key)
    assert report.status == "tampered"
    assert any("is not bound by the study ledger" in p for p in report.problems), report.problems
    assert isinstance(event, TokenBackfilled)


def test_the_last_backfill_segment_removed_is_seen(study, tmp_path, monkeypatch):
    """Each segment is announced in the study ledger once closed: removing the last one
    (the report would silently read the one before) fails verify, naming it."""
    key = ensure_operator_key()
    backfill_study(study, key)
    monkeypatch.setattr(sessionfiles.ClaudeSessionParser, "PARSER", "claude-code.session@2")
    assert backfill_study(study, key).segment == study / BACKFILL_DIR / "001"
    announced_ = [r.event for r in read_study(study, key.verify_key) if isinstance(r.event, BackfillRecorded)]
    assert [(e.run_dir, e.ledger_head) for e in announced_] == [
        (f"{BACKFILL_DIR}/{n}", sealed_state(study / BACKFILL_DIR / n, key.verify_key).head) for n in ("000", "001")]
    assert verify_study(study, key.verify_key).status == "ok"
    (study / BACKFILL_DIR / "001").rename(tmp_path / "gone")
    report = verify_study(study, key.verify_key)
    assert report.status == "tampered"
    assert report.problems == [f"announced backfill segment {BACKFILL_DIR}/001: dropped (no ledger where the study"
                               " ledger says it is)"]
    assert main(["verify", str(study)]) == 1
    with pytest.raises(UsageError, match="does not verify"):
        backfill_study(study, key)


def test_a_backfill_segment_the_study_ledger_does_not_announce_is_a_note(study, tmp_path):
    """A study directory from before schema 12 (no announcement): it verifies, and verify
    says what it cannot prove."""
    key = ensure_operator_key()
    backfill_study(study, key)
    shutil.rmtree(study / "study" / "001")  # the announcement: as a study written before it existed
    report = verify_study(study, key.verify_key)
    assert (report.status, report.problems) == ("ok", [])
    assert report.notes == [f"{BACKFILL_DIR}/000: not announced by the study ledger (written before schema 12, or"
                            " its run stopped before announcing it): its removal could not have been seen"]


def test_a_recorded_claude_code_run_collects_its_session_file_and_backfill_fills_its_proxy_only_cell(
        agent_image, tmp_path, capsys):
    """Claude Code run as a plain command (no adapter: nothing read from stdout, so the live
    figure is the proxy's) on the scripted model; the recorder collects its session file,
    and backfill turns the cell first-party with the figure its own transcript would give."""
    import os

    from caisson.model._process import scripted_model
    from caisson.resources import resource_dir
    from ledger import read_records

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("def answer():\n    return 42\n")
    from tests.helpers import commit_all

    commit_all(repo, "code")
    key = ensure_operator_key()
    with scripted_model(resource_dir("scenarios") / "model" / "grep_then_answer.toml") as address:
        scenario = tmp_path / "s.toml"
        scenario.write_text(f'''
name = "backfill"
pass_credentials = ["ANTHROPIC_API_KEY"]
[[questions]]
id = "q"
prompt = "In which file and line is the function `answer` defined? Use grep."
required = [{{ subject = "answer", pattern = "src/app.py" }}]
[egress]
allow_hosts = ["api.anthropic.com"]
upstream = {{ "api.anthropic.com" = "http://{address}" }}
[limits]
wall_seconds = 120
''')
        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-scripted-test-0000"
        try:
            run = tmp_path / "study" / "cells" / "c" / "1"
            assert main(["record", "--scenario", str(scenario), "--repo", str(repo), "--question", "q",
                         "--image", agent_image, "--out", str(run), "--", "sh", "-c",
                         'claude -p "$CAISSON_PROMPT" --output-format text --allowedTools Bash'
                         ' --model claude-sonnet-4-5']) == 0
        finally:
            os.environ.pop("ANTHROPIC_API_KEY")
    events = [r.event for r in read_records(run, key.verify_key)]
    [collected] = [e for e in events if isinstance(e, AgentSessionFile)]
    assert collected.agent == "claude-code" and collected.path.startswith(".claude/projects/-work-sandbox/")
    assert collected.blob_sha256 == collected.sha256 and collected.size_bytes > 0 and collected.skipped is None
    assert not any(isinstance(e, AgentUsage) for e in events)
    state = sealed_state(run, key.verify_key)
    ledger = StudyLedger(tmp_path / "study", key, run_id="study-e2e")
    place = dict(arm="a", agent="claude", model="claude-sonnet-4-5")
    ledger.append(StudyPlanned(study="t", study_sha256="", combos=[Combo(**place, gating="ungated", cells=1)],
                               cells=[PlannedCell(**place, cell_id="c", question_id="q", repetition=1)]))
    ledger.append(CellStarted(cell_id="c", attempt=1, run_dir="cells/c/1"))
    ledger.append(CellEnded(cell_id="c", attempt=1, run_id=state.run_id, run_dir="cells/c/1", status="clean",
                            counting=True, ledger_records=state.records, ledger_head=state.head, ledger_final=True))
    ledger.append(StudyEnded(cells=1, counted=1))
    ledger.close()
    _, data = load_study_report(tmp_path / "study", key.verify_key)
    [cell] = data.cells
    assert (cell.tokens.total, cell.tokens.source) == (2988 + 3020, "proxy:llm.call")  # the two calls, as seen
    capsys.readouterr()
    assert main(["study", "backfill", str(tmp_path / "study")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"BACKFILL cell c: 6008 (proxy:llm.call) -> 6008 ({LATE})"
    _, data = load_study_report(tmp_path / "study", key.verify_key)
    [cell] = data.cells
    # the agent's own count (5956 in, 52 out: test_agents.py's live result.usage), now first-party
    assert (cell.tokens.input, cell.tokens.output, cell.tokens.source) == (5956, 52, LATE)
    assert main(["verify", str(tmp_path / "study")]) == 0


def test_session_files_the_proxy_contradicts_are_not_backfilled(tmp_path):
    """The files are written in the chamber, where the agent's tools can rewrite them (the
    red team's test_a_session_file_the_agent_rewrote...): where the proxy measured the run's
    calls, a backfilled figure must agree with it, else it is not taken."""
    from caisson.report import CellTokens, TokenFigure
    from caisson.study.backfill import derive
    from ledger import read_records

    key = ensure_operator_key()
    run = tmp_path / "run"
    _run(run, key, session=CLAUDE)
    records = list(read_records(run, key.verify_key))
    agree = CellTokens(figure=TokenFigure(total=6008, rank="proxy", source="proxy:llm.call"))
    event, why = derive(run, records, agree)
    assert event is not None and event.normalized.total_tokens == 6008 and why == ""
    measured = CellTokens(figure=TokenFigure(total=2988, rank="proxy", source="proxy:llm.call"))
    event, why = derive(run, records, measured)
    assert event is None and why.startswith("the agent's session files give 6008 tokens where the proxy measured 2988")
    nothing = CellTokens(null_reason="1 of 1 proxy-observed calls without usage (seq 3: stream cut)")
    assert derive(run, records, nothing)[0] is not None  # nothing measured: the files fill the null


def test_with_no_live_figure_the_proxys_own_calls_still_bound_the_backfill_from_below(tmp_path):
    """The proxy's figure is null when one call could not be attributed (it may be a tool's):
    the calls it did attribute to the agent are still the agent's, so files that give fewer
    tokens than those were rewritten, and are not taken."""
    from caisson.report import CellTokens
    from caisson.study.backfill import derive
    from ledger import read_records

    key = ensure_operator_key()
    run = tmp_path / "run"
    _run(run, key, session=CLAUDE)
    records = list(read_records(run, key.verify_key))
    unsure = "1 of 3 proxy-observed calls the proxy could not attribute to a process (seq 9)"
    event, why = derive(run, records, CellTokens(null_reason=unsure, proxy_floor=9000))
    assert event is None and why.startswith("the agent's session files give 6008 tokens, fewer than the 9000")
    event, why = derive(run, records, CellTokens(null_reason=unsure, proxy_floor=5000))  # at least those: taken
    assert event is not None and event.normalized.total_tokens == 6008 and why == ""
