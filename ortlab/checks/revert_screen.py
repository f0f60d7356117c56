"""Screen float reverts of a QDQ model on the task's metric, in process: what keeping a node (with its producer chain)
in float would do to the evaluation, without a quantize or a child process.

:class:`RevertScreen` runs the fp32 model once on a small split of the evaluation data (:data:`SCREEN_SAMPLES`
samples, stratified; or, given a ``pool``, the ones of that many where the QDQ model errs most by
:func:`ortlab.checks.task_kind.worst_sqnr_db` — the ranking subset of NNCF's accuracy control, Kozlov et al., "Neural
Network Compression Framework for fast model inference", 2020: what a float set mends, it mends there, where an
average over easy samples no int8 error reaches hides it), keeps its outputs, and for each set of nodes asked about
builds the QDQ model with those nodes in float (:class:`ortlab.transforms.float_revert.FloatReverter`), runs it on
the same samples and compares the outputs as ``evaluate`` does (:class:`ortlab.checks.evaluate.OutputComparison`:
each output's error and the task's metrics — detections' F1, decoded strings, confident flips, nearest-neighbour
agreement, else SQNR). What a report is worth is for the caller to judge (tune ranks it as it ranks a trial).
:meth:`RevertScreen.rank` screens units one by one, each alone, within a time limit.

The screened model is the QDQ graph with ORT's in-session fusions, the trial's is ORT's quantize with the same nodes
excluded and then optimized: the figures agree closely but not exactly (a node's float bias replaces its
bias-corrected one; ops that share their input's scale, such as MaxPool or Concat, may get other scales when a
neighbour is excluded). A screen ranks; a trial confirms.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ortlab.checks.eval_report import EvalReport
from ortlab.checks.task_kind import worst_sqnr_db
from ortlab.checks.evaluate import OutputComparison, session_inputs
from ortlab.checks.verdict import VerdictPolicy
from ortlab.core.errors import Cancelled, DataError, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.data.dataset import Dataset, stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits, sample_copies
from ortlab.data.inputs import resolve_feed
from ortlab.model.node_cost import node_costs
from ortlab.runtime.providers import ORT_ERRORS, create_session, explain_ort_error
from ortlab.settings.config import PreprocessConfig
from ortlab.transforms.float_revert import FloatReverter, producer_chain

SCREEN_SAMPLES = 16  # evaluation samples a screen runs: a ranking, confirmed by a trial on the full split
RANKING_POOL = 96  # evaluation samples the hardest SCREEN_SAMPLES are chosen from


@dataclass
class Screened:
    """One screened set of nodes: the ``unit`` (its head first), the :class:`EvalReport` on the screening split, and
    the caller's ``score`` of it (higher is better)."""

    unit: tuple[str, ...]
    report: EvalReport
    score: Any = None


@dataclass
class Ranking:
    """:meth:`RevertScreen.rank`'s answer: ``units`` best first, the ``base`` (nothing reverted), how many
    ``candidates`` were asked about and how many ``screened`` before the time limit, and the seconds it took."""

    base: Screened
    units: list[Screened] = field(default_factory=list)
    candidates: int = 0
    screened: int = 0
    seconds: float = 0.0


class RevertScreen:
    """The fp32 model's outputs on ``n`` samples of ``dataset`` and the QDQ model they judge (see the module).
    ``shapes``: ``--shape`` for open dims; ``policy``: the task, margin and threshold of the metrics;
    ``float_path``: the float model the QDQ model was quantized from, when not the reference itself (ORT's
    pre-processing folds BatchNormalization into the Conv weights): reverted nodes take their float weights there;
    ``op_types``: the op types the quantizer was asked for (None: all it supports); ``pool``: screen the ``n``
    samples where the QDQ model errs most among this many (stratified) instead of ``n`` stratified ones —
    :attr:`pool_size` says how many were looked at, :attr:`hardest` whether the pick was by error."""

    def __init__(self, reference_path, qdq_path, dataset: Dataset, preprocess: PreprocessConfig | None,
                 n: int = SCREEN_SAMPLES, *, shapes: dict[str, list[int]] | None = None,
                 policy: VerdictPolicy | None = None, cancel: CancelToken | None = None,
                 float_path=None, op_types: Iterable[str] | None = None, pool: int | None = None) -> None:
        self.policy = policy or VerdictPolicy()
        self.cancel = cancel
        self.qdq = onnx.load(str(qdq_path))
        self.float_model = onnx.load(str(float_path or reference_path))
        self.reverter = FloatReverter(self.qdq, self.float_model, op_types)
        looked = max(n, pool or 0)
        ds = dataset if looked >= len(dataset) else stratified_sample(dataset, looked, seed=0)
        self.labeled = ds.labeled()
        ref, _ = create_session(Path(reference_path))
        inputs = session_inputs(ref)
        pre, specs = resolve_feed(inputs, preprocess, ds, shapes)
        check_fits(ds, pre, inputs, specs)
        self.names = [o.name for o in ref.get_outputs()]
        self.copies = sample_copies(ds, pre, inputs, specs)
        self.feeds = [batch_inputs(ds, [i], pre, inputs, specs) for i in range(len(ds))]
        self.reference = [ref.run(self.names, f) for f in self.feeds]
        self.pool_size = len(self.feeds)
        self.hardest = len(self.feeds) > n
        if self.hardest:
            self._keep_hardest(n)
        self.n = len(self.feeds)

    def _keep_hardest(self, n: int) -> None:
        """Keep the ``n`` samples where the QDQ model (nothing in float) has the lowest
        :func:`~ortlab.checks.task_kind.worst_sqnr_db`, in their original order."""
        sess = self._session(())
        cand_names = [o.name for o in sess.get_outputs()]
        sqnr = []
        for feed, ref_out in zip(self.feeds, self.reference):
            one = OutputComparison(self.names, self.labeled, self.policy, self.copies)
            one.add(ref_out, sess.run(cand_names, feed), feed)
            db = worst_sqnr_db(one.report())
            sqnr.append(math.inf if db is None else db)
        keep = sorted(sorted(range(len(sqnr)), key=lambda i: sqnr[i])[:n])
        self.feeds = [self.feeds[i] for i in keep]
        self.reference = [self.reference[i] for i in keep]

    def _session(self, nodes: Iterable[str]) -> Any:
        nodes = list(nodes)
        try:
            sess, _ = create_session(self.reverter.model(nodes).SerializeToString())
        except Exception as exc:  # ORT's own error on a reverted graph: any of its exception types
            raise DataError(f"The QDQ model with {', '.join(sorted(nodes)) or 'nothing'} in float failed to load: "
                            f"{explain_ort_error(exc)}") from None
        return sess

    def chain(self, name: str, max_nodes: int) -> tuple[str, ...]:
        """``name`` with the producers that feed only it (:func:`ortlab.transforms.float_revert.producer_chain`)."""
        return tuple(producer_chain(self.qdq.graph, name, max_nodes))

    def float_costs(self) -> dict[str, float]:
        """Each node's estimated work on one screened sample (:func:`ortlab.model.node_cost.node_costs` of the float
        model at the shapes fed): roughly what keeping it in float costs."""
        shapes = {k: list(v.shape) for k, v in self.feeds[0].items()} if self.feeds else {}
        return node_costs(self.float_model, shapes)

    def report(self, nodes: Iterable[str] = ()) -> EvalReport:
        """The evaluation of the QDQ model with ``nodes`` in float, on the screening samples."""
        nodes = list(nodes)
        sess = self._session(nodes)
        try:
            cand_names = [o.name for o in sess.get_outputs()]
            comparison = OutputComparison(self.names, self.labeled, self.policy, self.copies)
            for feed, ref_out in zip(self.feeds, self.reference):
                if self.cancel is not None and self.cancel.cancelled:
                    raise Cancelled(step="screen")
                comparison.add(ref_out, sess.run(cand_names, feed), feed)
        except (Cancelled, DataError):
            raise
        except ORT_ERRORS + (OrtlabError,) as exc:  # ORT's own error on a reverted graph, or its load failure
            raise DataError(f"The QDQ model with {', '.join(sorted(nodes)) or 'nothing'} in float failed to run: "
                            f"{explain_ort_error(exc)}") from None
        return comparison.report()

    def rank(self, units: Sequence[tuple[str, ...]], score: Callable[[EvalReport], Any],
             time_limit_s: float | None = None) -> Ranking:
        """Screen each unit alone (in the given order, until ``time_limit_s``) and rank them by ``score`` of
        their report, best first (ties keep the given order). A unit that fails to run is left out."""
        start = time.perf_counter()
        base_report = self.report()
        out = Ranking(Screened((), base_report, score(base_report)), candidates=len(units))
        for unit in units:
            if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
                break
            try:
                r = self.report(unit)
            except DataError:
                continue
            out.screened += 1
            out.units.append(Screened(tuple(unit), r, score(r)))
        out.units.sort(key=lambda s: s.score, reverse=True)
        out.seconds = time.perf_counter() - start
        return out
