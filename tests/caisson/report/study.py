"""Hand-made study inputs for the report's playbook tests."""

from __future__ import annotations

from collections.abc import Callable

from caisson.report import ReportBaseline, ReportCell, StudyReportInput, TokenFigure

SOURCE = "first_party:claude-code result.usage"


_SPLIT = -1


def figure(total: int, source: str = SOURCE, *, input: int | None = _SPLIT, output: int | None = _SPLIT) -> TokenFigure:
    """A token figure (input/output default to a 3:1 split of ``total``; None: no split)."""
    if input == _SPLIT and output == _SPLIT:
        input, output = total * 3 // 4, total - total * 3 // 4
    return TokenFigure(total=total, input=input, output=output, rank=source.split(":")[0], source=source)


def cells(agent: str, arm: str, questions: int, reps: int, value: Callable[[int, int], float], *,
          model: str = "m1", metric: str = "score", gating: str = "enforced", kind: str = "locate",
          floor: int = 1000) -> list[ReportCell]:
    """Clean cells whose score (or content tokens, ``metric="tokens"``) is ``value(q, r)``."""
    out = []
    for q in range(questions):
        for r in range(reps):
            v = value(q, r)
            score, tokens = (v, figure(floor + 500)) if metric == "score" else (1.0, figure(floor + int(v)))
            out.append(ReportCell(cell_id=f"{agent}-{arm}-{model}-q{q}-r{r}", arm=arm, agent=agent, model=model,
                                  question_id=f"q{q}", question_kind=kind, repetition=r, status="clean",
                                  score=score, tokens=tokens, gating=gating, elicitation="default"))
    return out


def baselines(agent: str, arms: list[str], *, model: str = "m1", floor: int = 1000,
              isolation: str = "passed") -> list[ReportBaseline]:
    """One measured baseline per arm."""
    return [ReportBaseline(arm=a, agent=agent, model=model, floor=figure(floor), isolation=isolation,
                           tools=("Read", "Grep") if isolation != "unavailable" else None) for a in arms]


def study(cell_list: list[ReportCell], base: list[ReportBaseline], **kw) -> StudyReportInput:
    """A study input with a fixed head and detector list."""
    return StudyReportInput(study_id="playbook", study_head="ab" * 32, detector_versions=("x@1",),
                            cells=tuple(cell_list), baselines=tuple(base), **kw)
