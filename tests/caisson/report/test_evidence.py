"""A cell's evidence from its sealed run directory: replay and tokens from one read."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from caisson.detectors import DEFAULT_DETECTORS, VOID, Finding
from caisson.home import ensure_operator_key
from tests._fixtures.cells import CellSpec, write_cell
from caisson.errors import ScenarioError
from caisson.report import TokenFigure, build_report, read_cell, read_cells, render_json, report_cell
from ledger import SigningKey
from ledger.events import AgentAnswer, RunStarted
from tests.caisson.report.study import study

PLACE = dict(arm="read-only", agent="claude-code", model="m1", question_id="q-context", question_kind="locate",
             gating="enforced", elicitation="default")


def _cell(evidence, cell_id="c0", repetition=0):
    return report_cell(evidence, cell_id=cell_id, repetition=repetition, **PLACE)


def test_an_honest_cell_is_clean_scored_and_measured_first_party(tmp_path):
    key = ensure_operator_key()
    run = write_cell(tmp_path / "honest", CellSpec(run_id="honest"), key)
    cell = _cell(read_cell(run, key.verify_key))
    assert (cell.status, cell.score, cell.verified, cell.contained, cell.run_id) == ("clean", 1.0, True, True, "honest")
    assert cell.tokens == TokenFigure(total=4050, input=3600, output=450, rank="first_party",
                                      source="first_party:claude-code result.usage", reports=1)
    assert (cell.sessions, cell.token_ambiguous) == (("session-1",), False)


def test_two_sessions_without_a_first_party_report_are_a_proxy_figure_flagged_ambiguous(tmp_path):
    key = ensure_operator_key()
    run = write_cell(tmp_path / "two", CellSpec(run_id="two", sessions=("s-a", "s-b"), first_party=False), key)
    cell = _cell(read_cell(run, key.verify_key))
    assert cell.tokens.source == "proxy:llm.call" and cell.tokens.total == 4050
    assert (cell.sessions, cell.token_ambiguous) == (("s-a", "s-b"), True)


def test_the_token_figure_comes_from_the_calls_rebuilt_from_their_bodies_not_the_live_ones(tmp_path):
    # the live llm.call says 5 input tokens a turn (a parser bug); the bodies say 1200
    key = ensure_operator_key()
    run = write_cell(tmp_path / "fixed", CellSpec(run_id="fixed", first_party=False, live_input_tokens=5), key)
    evidence = read_cell(run, key.verify_key)
    assert evidence.tokens.figure == TokenFigure(total=3 * (1200 + 150), input=3600, output=450, rank="proxy",
                                                 source="proxy:llm.call", reports=3)
    assert any("input_tokens 5 -> 1200" in change for change in evidence.replay.rederived.changed)
    assert evidence.replay.rederived.usage == []  # counted in the figure, not carried


@pytest.mark.parametrize("size", [0, 300, 44_000])
def test_padded_request_bodies_reach_their_size_and_replay_to_the_same_calls(tmp_path, size):
    """`CellSpec.request_bytes` (the report bench's agent-sized requests): each request body
    kept is at least that long, still the model's request (model, not streamed), and the
    calls rebuilt from it are the ones the bare request gives."""
    key = ensure_operator_key()
    run = write_cell(tmp_path / "padded", CellSpec(run_id="padded", first_party=False, request_bytes=size), key)
    bodies = [b.read_bytes() for b in (run / "blobs").rglob("*") if b.is_file()]
    requests = [msgspec.json.decode(b) for b in bodies if b.startswith(b'{"model"')]
    assert len(requests) == 3
    assert all(len(msgspec.json.encode(r)) >= size for r in requests)
    assert all(r["model"] == "claude-sonnet-4-5" and r["stream"] is False for r in requests)
    assert [bool(size > 1000) == ("tools" in r) and bool(size > 0) == ("system" in r) for r in requests] == [True] * 3
    evidence = read_cell(run, key.verify_key)
    assert evidence.replay.status == "clean" and evidence.replay.rederived.llm_calls == 3
    assert evidence.tokens.figure == TokenFigure(total=3 * (1200 + 150), input=3600, output=450, rank="proxy",
                                                 source="proxy:llm.call", reports=3)


def test_streamed_responses_give_the_same_calls_and_figures_as_json_ones(tmp_path):
    """`CellSpec.streamed`: the scripted model's event stream of each turn is kept and rebuilt
    into the calls a JSON body gives: streamed, the same tokens."""
    key = ensure_operator_key()
    run = write_cell(tmp_path / "sse", CellSpec(run_id="sse", first_party=False, streamed=True), key)
    bodies = [b.read_bytes() for b in (run / "blobs").rglob("*") if b.is_file()]
    assert sum(b.startswith(b"event: message_start") for b in bodies) == 3
    evidence = read_cell(run, key.verify_key)
    assert evidence.replay.status == "clean" and evidence.replay.rederived.llm_calls == 3
    assert evidence.replay.rederived.changed == [] and evidence.replay.rederived.kept_live == []
    assert evidence.tokens.figure == TokenFigure(total=3 * (1200 + 150), input=3600, output=450, rank="proxy",
                                                 source="proxy:llm.call", reports=3)


def test_a_ledger_that_does_not_verify_is_void_and_unmeasured(tmp_path):
    key = ensure_operator_key()
    run = write_cell(tmp_path / "bad", CellSpec(run_id="bad"), key)
    data = bytearray((run / "ledger").read_bytes())
    data[len(data) // 2] ^= 1
    (run / "ledger").write_bytes(bytes(data))
    cell = _cell(read_cell(run, key.verify_key))
    assert (cell.status, cell.void_reason, cell.verified, cell.tokens) == ("void", "unverified", False, None)
    assert not cell.contained  # nothing from an unverified ledger counts as evidence
    assert cell.tokens_null_reason == "ledger tampered"
    item = next(i for i in build_report(study([cell], [])).checklist if i.name == "ledgers_verified")
    assert (item.status, item.cells) == ("FAIL", ["c0"])


def test_an_answer_citing_the_key_scores_null_and_is_flagged(tmp_path):
    key = ensure_operator_key()
    run = write_cell(tmp_path / "cite", CellSpec(run_id="cite", answer="Per benchmark/questions.toml, `Context` is"
                                                                       " in src/click/core.py."), key)
    cell = _cell(read_cell(run, key.verify_key))
    assert (cell.status, cell.score, "leak" in cell.findings) == ("clean", None, True)
    item = next(i for i in build_report(study([cell], [])).checklist if i.name == "contamination")
    assert item.status == "WARN"


def test_a_changed_detector_changes_the_report_and_never_the_ledger(tmp_path):
    key = ensure_operator_key()
    runs = [write_cell(tmp_path / f"r{i}", CellSpec(run_id=f"r{i}", seed=i), key) for i in range(3)]
    digests = [hashlib.sha256((r / "ledger").read_bytes()).hexdigest() for r in runs]

    def answer_check(records, config):  # version 2 of a detector: an answer mentioning core.py now voids
        for r in records:
            if isinstance(r.event, AgentAnswer) and "core.py" in r.event.text:
                yield Finding(detector="answers.check@2", kind="answer_check", effect=VOID, evidence=[r.seq],
                              message="v2 rule")

    def report(detectors):
        cells = [_cell(read_cell(r, key.verify_key, detectors), cell_id=f"c{i}", repetition=i)
                 for i, r in enumerate(runs)]
        names = tuple(name for name, _ in detectors)
        return build_report(msgspec.structs.replace(study(cells, []), detector_versions=names))

    before = report(DEFAULT_DETECTORS)
    after = report((*DEFAULT_DETECTORS, ("answers.check@2", answer_check)))
    assert render_json(before) != render_json(after)
    assert after.detector_versions[-1] == "answers.check@2"
    assert [r.void_by_reason for r in after.agents[0].rows] == [{"answer_check": 3}]
    assert [r.void_by_reason for r in before.agents[0].rows] == [{}]
    assert [hashlib.sha256((r / "ledger").read_bytes()).hexdigest() for r in runs] == digests
    assert not any((r / "findings.json").exists() for r in runs)  # the report writes nothing beside the runs


def _varied_runs(root, key):
    """Cells of every kind read_cell tells apart: clean, ambiguous, proxy-only, citing the
    key, wrong, tampered, signed by another key, and no run at all."""
    specs = [CellSpec(run_id="clean"), CellSpec(run_id="two", sessions=("s-a", "s-b"), first_party=False),
             CellSpec(run_id="proxy", first_party=False, turns=5),
             CellSpec(run_id="cite", answer="Per benchmark/questions.toml, `Context` is in src/click/core.py."),
             CellSpec(run_id="wrong", answer="I could not find it.", strace_events=400, seed=3),
             CellSpec(run_id="bad"), CellSpec(run_id="other-key")]
    runs = [(write_cell(root / s.run_id, s, key), key.verify_key) for s in specs]
    data = bytearray((root / "bad" / "ledger").read_bytes())
    data[len(data) // 2] ^= 1
    (root / "bad" / "ledger").write_bytes(bytes(data))
    runs[-1] = (runs[-1][0], SigningKey.generate().verify_key)
    return runs + [(root / "absent", key.verify_key)]


def test_read_cells_in_workers_is_read_cell_of_each_in_order(tmp_path):
    key = ensure_operator_key()
    runs = _varied_runs(tmp_path, key)
    serial = [read_cell(run_dir, trusted) for run_dir, trusted in runs]
    assert len({(e.replay.verified, e.replay.score, e.tokens.null_reason, e.tokens.token_ambiguous,
                 e.tokens.figure.source if e.tokens.figure else None) for e in serial}) >= 6  # varied
    assert read_cells(runs, jobs=2) == serial
    assert read_cells(runs[::-1], jobs=3) == serial[::-1]
    assert read_cells(runs, jobs=1) == serial


def test_read_cells_in_workers_runs_the_detectors_it_is_given(tmp_path):
    key = ensure_operator_key()
    runs = [(write_cell(tmp_path / f"r{i}", CellSpec(run_id=f"r{i}", seed=i), key), key.verify_key) for i in range(6)]

    def answer_check(records, config):  # a local function: the workers inherit it, nothing is pickled
        for r in records:
            if isinstance(r.event, AgentAnswer) and "core.py" in r.event.text:
                yield Finding(detector="answers.check@2", kind="answer_check", effect=VOID, evidence=[r.seq],
                              message="v2 rule")

    bumped = (*DEFAULT_DETECTORS, ("answers.check@2", answer_check))
    read = read_cells(runs, bumped, jobs=2)
    assert read == [read_cell(r, k, bumped) for r, k in runs]
    assert all(e.replay.status == "void" and e.replay.detectors[-2] == "answers.check@2" for e in read)
    assert all(e.replay.status == "clean" for e in read_cells(runs, jobs=2))


def test_an_error_reading_a_cell_in_a_worker_reaches_the_caller_with_its_class(tmp_path):
    key = ensure_operator_key()
    runs = [(write_cell(tmp_path / f"r{i}", CellSpec(run_id=f"r{i}", seed=i), key), key.verify_key) for i in range(6)]

    def refuse_r4(records, config):  # ScenarioError's keyword-only fields do not survive pickling
        if any(isinstance(r.event, RunStarted) and r.event.run_id == "r4" for r in records):
            raise ScenarioError("no longer parses", path="r4:scenario", field="$.questions")
        yield from ()

    with pytest.raises(ScenarioError, match=r"r4:scenario: \$\.questions: no longer parses"):
        read_cells(runs, (*DEFAULT_DETECTORS, ("refuse@1", refuse_r4)), jobs=2)
