"""Cached evaluations of two variants for the Compare and History pages (model files: :mod:`ortlab.ui.session.model_cache`)."""

from __future__ import annotations

from pathlib import Path

from ortlab.api import EvalReport
from ortlab.ui.session import actions, state
from ortlab.ui.session.model_cache import cache_key
from ortlab import api
from ortlab.core.errors import DataError


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
    return state.cache().get(cache_key("eval", ref.path, cand.path))


def evaluate_pair(ref: actions.Variant, cand: actions.Variant) -> EvalReport:
    """Evaluate the candidate against the reference on the chosen evaluation samples; cached."""

    ds = actions.evaluation_subset(state.eval_dataset())
    if ds is None:

        raise DataError("No evaluation data: choose data on the Data page (or allow random data there).")
    pp = state.preprocess() if ds.kind == "images" else None
    report = api.checks.evaluate(ref.path, cand.path, ds, pp, policy=actions.verdict_policy())
    state.cache()[cache_key("eval", ref.path, cand.path)] = report
    return report
