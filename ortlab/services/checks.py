"""Checks: evaluate a result against its source, judge it, and find the nodes int8 hurts most."""

from __future__ import annotations

from ortlab.checks.analyze import analyze
from ortlab.checks.evaluate import evaluate
from ortlab.checks.node_findings import ACCUMULATED, ADDED, MODES, culprit_sentence, db_text, excluded_recipe
from ortlab.checks.node_findings import exclusion_sentence, overlay_values, ranked_nodes, sqnr_bars, worst_output_sqnr
from ortlab.checks.task_kind import kinds_of
from ortlab.checks.verdict import judge, not_evaluated, worse_or_equal


class Checks:
    """Evaluating and judging a result, and the per-node int8 error with what it says."""

    ACCUMULATED = ACCUMULATED
    ADDED = ADDED
    NODE_ERROR_MODES = MODES

    evaluate = staticmethod(evaluate)
    judge = staticmethod(judge)
    not_evaluated = staticmethod(not_evaluated)
    worse_or_equal = staticmethod(worse_or_equal)
    analyze = staticmethod(analyze)
    ranked_nodes = staticmethod(ranked_nodes)
    overlay_values = staticmethod(overlay_values)
    sqnr_bars = staticmethod(sqnr_bars)
    worst_output_sqnr = staticmethod(worst_output_sqnr)
    culprit_sentence = staticmethod(culprit_sentence)
    excluded_recipe = staticmethod(excluded_recipe)
    exclusion_sentence = staticmethod(exclusion_sentence)
    db_text = staticmethod(db_text)
    task_kinds = staticmethod(kinds_of)  # the task kinds a report's metrics hold, in the verdict's order


checks = Checks()
