"""Cached comparisons of two variants (graph diff, model info, evaluation) for the Compare and History pages."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortlab.checks.eval_report import EvalReport
from ortlab.ui import actions, state

if TYPE_CHECKING:
    from ortlab.model.diff import GraphDiff


def _key(*parts) -> tuple:
    return tuple(str(p) for p in parts)


def model_info(path: Path):
    """``inspect_model`` of ``path`` (in a child process when it is large: ``isolated``), cached per session."""
    from ortlab.model.isolated import model_info as inspect_model

    c = state.cache()
    k = _key("info", path)
    if k not in c:
        c[k] = inspect_model(path)
    return c[k]


def graph_diff(ref: Path, cand: Path) -> GraphDiff:
    """``diff.graph_diff`` of two files (in a child process when they are large: ``isolated``), cached per
    session."""
    from ortlab.model.isolated import graph_diff as _diff

    c = state.cache()
    k = _key("diff", ref, cand)
    if k not in c:
        c[k] = _diff(ref, cand)
    return c[k]


def graph_description(ref: Path, cand: Path) -> dict:
    """``diff.graph_description`` of two files (the merged before/after graph, as plain data; in a child process
    when they are large: ``isolated``), cached per session."""
    from ortlab.model.isolated import graph_description as _description

    c = state.cache()
    k = _key("description", ref, cand)
    if k not in c:
        c[k] = _description(ref, cand)
    return c[k]


def stored_evaluation(ref: actions.Variant, cand: actions.Variant) -> EvalReport | None:
    """The evaluation saved with the candidate's run when it was made from the reference model, else one made
    on this page (cached)."""
    a = cand.artifact
    if a is not None and a.evaluation is not None:
        try:
            same = Path(a.source_path).resolve() == Path(ref.path).resolve()
        except OSError:
            same = False
        if same:
            return a.evaluation
    return state.cache().get(_key("eval", ref.path, cand.path))


def evaluate_pair(ref: actions.Variant, cand: actions.Variant) -> EvalReport:
    """Evaluate the candidate against the reference on the chosen evaluation samples; cached."""
    from ortlab.checks.evaluate import evaluate

    ds = actions.evaluation_subset(state.eval_dataset())
    if ds is None:
        from ortlab.core.errors import DataError

        raise DataError("No evaluation data: choose data on the Data page (or allow random data there).")
    pp = state.preprocess() if ds.kind == "images" else None
    report = evaluate(ref.path, cand.path, ds, pp, policy=actions.verdict_policy())
    state.cache()[_key("eval", ref.path, cand.path)] = report
    return report
