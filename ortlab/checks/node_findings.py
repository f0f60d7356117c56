"""What a per-node analysis (:func:`ortlab.checks.analyze.analyze`) says: the bars its SQNR is read against, the
culprit node, the values of the graph overlay, and the recipe that keeps chosen nodes in float.

Plain functions on the analysis, no drawing: the app's Per-node error tab and any other front end ask these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from collections.abc import Iterable

from ortlab.checks.analyze import NodeAnalysis, NodeError
from ortlab.checks.eval_report import EvalReport
from ortlab.checks.verdict import VerdictPolicy
from ortlab.settings.config import Recipe

ACCUMULATED = "accumulated"
ADDED = "added by the node"
MODES = (ACCUMULATED, ADDED)
OK_MARGIN_DB = 10.0  # the ok bar: this far above the verdict policy's broken bar


@dataclass(frozen=True)
class SqnrBars:
    """The absolute scale per-node SQNR is read on: below ``broken`` dB (the verdict policy's min SQNR, where a
    result is broken) red, from ``ok`` dB green, amber between."""

    broken: float
    ok: float

    def where(self, sqnr_db: float) -> str:
        """Where ``sqnr_db`` stands against the bars, as words."""
        if sqnr_db < self.broken:
            return f"below the verdict's broken bar of {self.broken:g} dB"
        return f"under the ok bar of {self.ok:g} dB" if sqnr_db < self.ok else f"above the ok bar of {self.ok:g} dB"


def sqnr_bars(policy: VerdictPolicy) -> SqnrBars:
    """The bars of ``policy``: broken at its ``min_sqnr_db``, ok ``OK_MARGIN_DB`` above it."""
    return SqnrBars(float(policy.min_sqnr_db), float(policy.min_sqnr_db) + OK_MARGIN_DB)


def node_sqnr(e: NodeError, mode: str = ACCUMULATED) -> float | None:
    """The node's accumulated SQNR, or (``ADDED``) its local one where measured, else the accumulated one."""
    return e.sqnr_db if mode == ACCUMULATED or e.local_sqnr_db is None else e.local_sqnr_db


def overlay_values(analysis: NodeAnalysis, mode: str = ACCUMULATED) -> dict[str, float]:
    """``{node name: SQNR dB}`` (:func:`node_sqnr` for ``mode``); finite values only."""
    out = {}
    for e in analysis.nodes:
        v = node_sqnr(e, mode)
        if v is not None and math.isfinite(v):
            out[e.name] = float(v)
    return out


def culprit(analysis: NodeAnalysis) -> NodeError | None:
    """The node with the lowest accumulated SQNR (the first in the graph's order among equals), or None."""
    nodes = [e for e in analysis.nodes if e.sqnr_db is not None and not math.isnan(e.sqnr_db)]
    return min(nodes, key=lambda e: e.sqnr_db) if nodes else None


def db_text(x: float | None) -> str:
    """``12.3 dB``, ``identical`` for an infinite SQNR, ``–`` for none."""
    if x is None:
        return "–"
    return "identical" if math.isinf(x) else f"{x:.1f} dB"


def culprit_sentence(analysis: NodeAnalysis, bars: SqnrBars) -> str | None:
    """One sentence naming the worst node by accumulated error, against ``bars``; None without one."""
    e = culprit(analysis)
    if e is None:
        return None
    if math.isinf(e.sqnr_db):
        return "Every quantized node's output is identical to the fp32 model's."
    local = f"; alone it adds {db_text(e.local_sqnr_db)}" if e.local_sqnr_db is not None else ""
    return f"Worst accumulated error: {e.name} ({e.op_type}) at {db_text(e.sqnr_db)}, {bars.where(e.sqnr_db)}{local}."


def ranked_nodes(analysis: NodeAnalysis, by: str = ACCUMULATED, top: int | None = None) -> list[NodeError]:
    """The nodes worst first by :func:`node_sqnr` for ``by`` (unmeasured last), the first ``top`` of them."""
    def key(e: NodeError) -> float:
        v = node_sqnr(e, by)
        return math.inf if v is None or math.isnan(v) else v

    return sorted(analysis.nodes, key=key)[:top]


def excluded_recipe(recipe: Recipe, nodes: Iterable[str], base_run_id: int | None = None) -> Recipe:
    """``recipe`` with ``nodes`` (added to any it already excludes) kept in float, named after what changed
    (``#1 + 3 nodes kept in float``)."""
    merged = tuple(dict.fromkeys([*recipe.quant.nodes_to_exclude, *nodes]))
    added = len(merged) - len(recipe.quant.nodes_to_exclude)
    base = f"#{base_run_id}" if base_run_id is not None else recipe.label()
    name = f"{base} + {added} node{'s' if added != 1 else ''} kept in float"
    return replace(recipe, quant=replace(recipe.quant, nodes_to_exclude=merged), name=name)


def worst_output_sqnr(evaluation: EvalReport | None) -> float | None:
    """The lowest output SQNR of an evaluation (None without one or without outputs)."""
    if evaluation is None or not evaluation.outputs:
        return None
    return min(o.sqnr_db for o in evaluation.outputs)


def exclusion_sentence(before: float | None, after: float | None, nodes: tuple[str, ...] | list[str]) -> str:
    """One sentence: did keeping ``nodes`` in float help? (worst output SQNR ``before`` → ``after``)."""
    names = ", ".join(nodes) if len(nodes) <= 3 else f"{', '.join(list(nodes)[:3])} and {len(nodes) - 3} more"
    if before is None or after is None:
        return f"Keeping {names} in float: no evaluation to compare the SQNR with."
    if after < before - 0.05:
        return (f"Keeping {names} in float lowered SQNR from {db_text(before)} to {db_text(after)}: "
                f"keep {'it' if len(nodes) == 1 else 'them'} quantized.")
    if after > before + 0.05:
        return f"Keeping {names} in float raised SQNR from {db_text(before)} to {db_text(after)}."
    return f"Keeping {names} in float left SQNR unchanged ({db_text(before)} → {db_text(after)})."
