"""The kinds of task a model's outputs hold, each as one type that owns its measure, its wording and its bars.

A report's :class:`ortlab.checks.eval_report.TaskMetrics` hold the metrics of every output by kind (detections,
decoded strings, top-1 flips, embeddings, dense maps, exact integer outputs). Each :class:`TaskKind` reads its own
metrics and knows, for them:

* its **measure** (:meth:`TaskKind.measure`: name and value, higher is better, a share in [0, 1]) and the measure
  per evaluation sample (:meth:`TaskKind.evidence`), what a tune search ranks trials by;
* its **bars**: how the verdict judges its figures against a :class:`ortlab.checks.verdict.VerdictPolicy`
  (:meth:`TaskKind.judge`), and the bar a search's claim is worded against (:meth:`TaskKind.claim_bar`);
* its **wording**: the CLI's short texts (:meth:`TaskKind.lines`), the figures a table or card shows where top-1
  says nothing (:meth:`TaskKind.figures`) and how bias correction's change of the measure reads
  (:meth:`TaskKind.change_shown`).

:data:`KINDS` is the one order: detections, decoded strings, top-1 flips, embeddings, dense maps, exact outputs.
The verdict looks at them in it (the first figure checked heads an OK verdict), and the task's measure is the first
kind's in it that has one (:func:`main_kind`). Nothing outside this module branches on the kind of task.

This module needs neither numpy nor ONNX Runtime.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ortlab.checks.eval_report import (
    BoxesMetrics, DenseMapMetrics, EmbeddingMetrics, EvalReport, TaskMetrics,
)
from ortlab.checks.detection_verdict import judge_detections
from ortlab.checks.sample_evidence import SampleEvidence, flags
from ortlab.checks.uncertainty import Uncertainty, share_uncertainty
from ortlab.checks.verdict_findings import Figure, Findings, db_text, pct_text, share
from ortlab.checks.verdict_policy import VerdictPolicy

__all__ = ["DENSE_MAPS", "DETECTIONS", "EXACT_OUTPUTS", "KINDS", "SPARSE_MAP", "TaskKind", "claim_bar", "kinds_of",
           "main_kind", "reference_detections", "worst_sqnr_db"]


def _pct(x: float | None, digits: int = 1) -> str:
    """0.123 → "12.3%"; None → "–" (as tables show it)."""
    return "–" if x is None else f"{100 * x:.{digits}f}%"


class TaskKind:
    """One kind of task metric: where it sits in a report and what it means (see the module docstring). The base
    holds what a kind without the part says: no measure, no evidence, nothing to show."""

    name = ""

    def present(self, tm: TaskMetrics) -> bool:
        """Whether ``tm`` holds metrics of this kind."""
        raise NotImplementedError

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        """The kind's measure (name, value: higher is better, in [0, 1]); None when it has none."""
        return None

    def task_sqnr(self, tm: TaskMetrics, sqnrs: dict[str, float], what: str) -> str:
        """The SQNR that matters for the task: may lower an output's entry of ``sqnrs`` (output → dB) to its worst
        channel group's, or drop an output no SQNR judges; returns what the worst of them is called."""
        return what

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        """The measure per evaluation sample; None without a per-sample record."""
        return None

    def grouped_outputs(self, tm: TaskMetrics) -> list[BoxesMetrics]:
        """The outputs whose channel groups (class scores, boxes) are judged and shown apart, not as a whole."""
        return []

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        """Grade this kind's figures against ``policy``'s bars into ``f`` (``n``: the samples compared)."""

    def claim_bar(self, measure: str, policy: VerdictPolicy) -> float | None:
        """The verdict's own bar on ``measure`` that a search's held-out claim is worded against; None when the
        verdict judges another figure."""
        return None

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        """The CLI's short texts, each as (the verdict's name of the figure, text)."""
        return []

    def figures(self, tm: TaskMetrics) -> list[tuple[str, str, str]]:
        """Where top-1 says nothing: (card label, card value, table cell) of the first output of this kind."""
        return []

    def change_shown(self, tm: TaskMetrics, measure: str, value: float) -> tuple[str, str, bool]:
        """How a change of the measure reads: what is named, ``value`` as shown, and whether lower is better."""
        return measure, f"{value:.1%}", False


class Detections(TaskKind):
    """YOLO-style boxes: the F1 of the candidate's decoded detections against the reference's."""

    name = "detections"
    F1 = "detection F1"
    SCORE_ERROR = "near-threshold score error (mean squared logit)"

    def present(self, tm: TaskMetrics) -> bool:
        return bool(tm.boxes)

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        f1s = [b.f1 for b in tm.boxes if b.f1 is not None]
        if f1s:  # decoded detections matched by class and IoU
            return self.F1, min(f1s)
        return "detections kept", min(1.0 - b.changed_fraction for b in tm.boxes)

    def task_sqnr(self, tm: TaskMetrics, sqnrs: dict[str, float], what: str) -> str:
        for b in tm.boxes:
            if b.group_sqnr_db:
                g = min(b.group_sqnr_db, key=lambda k: b.group_sqnr_db[k])
                sqnrs[b.output] = min(sqnrs.get(b.output, math.inf), b.group_sqnr_db[g])
                what = f"{g} SQNR"
        return what

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        boxes = [b for b in tm.boxes if b.sample_ref and b.f1 is not None]
        if not boxes or len(boxes) != len(tm.boxes):
            return None
        b = min(boxes, key=lambda b: b.f1 or 0.0)
        scored = len(b.sample_score_error) == len(b.sample_ref) == len(b.sample_score_count)
        return SampleEvidence(self.F1, tuple(2.0 * m for m in b.sample_matched),
                              tuple(float(r + c) for r, c in zip(b.sample_ref, b.sample_cand)),
                              sum(b.sample_ref), "reference detections", per_unit=2.0,
                              units=tuple(float(r) for r in b.sample_ref),
                              errors=tuple(b.sample_score_error) if scored else (),
                              error_counts=tuple(float(c) for c in b.sample_score_count) if scored else (),
                              error_measure=self.SCORE_ERROR if scored else "")

    def grouped_outputs(self, tm: TaskMetrics) -> list[BoxesMetrics]:
        return list(tm.boxes)

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        for b in tm.boxes:
            judge_detections(b, policy, f, n)

    def claim_bar(self, measure: str, policy: VerdictPolicy) -> float | None:
        return policy.min_det_f1 if measure == self.F1 else None

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        out = []
        for b in tm.boxes:
            f1 = "–" if b.f1 is None else f"{b.f1:.2f}"
            out.append((f"{b.output}: detections F1 vs reference",
                        f"{b.output}: detections F1 {f1} vs reference ({b.matched} of {b.ref_total} matched, "
                        f"{b.cand_total} found; score SQNR {db_text(b.score_sqnr_db)}, box SQNR "
                        f"{db_text(b.box_sqnr_db)}" + (f"; {b.other_channels} channels after the scores lie outside "
                                                      "[0, 1], not read as classes: mask coefficients or keypoints"
                                                      if b.other_channels else "") + ")"))
        return out

    def figures(self, tm: TaskMetrics) -> list[tuple[str, str, str]]:
        for b in tm.boxes[:1]:
            sqnr = db_text(b.score_sqnr_db)
            f1 = ("Detection F1 vs fp32", "no detections", "no detections") if b.f1 is None else \
                ("Detection F1 vs fp32", f"{b.f1:.3f}", f"F1 {b.f1:.3f}")
            return [f1, ("Score SQNR", sqnr, f"score SQNR {sqnr}")]
        return []

    def change_shown(self, tm: TaskMetrics, measure: str, value: float) -> tuple[str, str, bool]:
        if measure == self.F1:
            return measure, f"{value:.2f}", False
        return super().change_shown(tm, measure, value)

    @staticmethod
    def unjudged(tm: TaskMetrics | None, n: int) -> list[str]:
        """The remark on each detection output on which neither model detects anything: there is nothing to compare,
        and its SQNR measures the background (as on a dense map that finds nothing)."""
        return [f"{b.output}: neither model detects anything above the {b.threshold:g} score threshold in the {n} "
                f"samples, so the detections cannot be compared and the output's SQNR measures background only; give "
                f"evaluation data showing the objects the model finds" for b in (tm.boxes if tm is not None else [])
                if b.f1 is None and b.ref_detections == 0 and b.cand_detections == 0]  # not a report without counts

    @staticmethod
    def fewest_reference(tm: TaskMetrics | None) -> int | None:
        """The fewest reference detections of the detection outputs; None when there are none."""
        boxes = tm.boxes if tm is not None else []
        return min(b.ref_total for b in boxes) if boxes else None

    @staticmethod
    def group_sqnrs(tm: TaskMetrics | None) -> list[tuple[str, float]]:
        """("output0 scores", dB) for each channel group of a detector output (its own figure against the SQNR
        bar)."""
        return [(f"{b.output} {group}", db) for b in (tm.boxes if tm is not None else [])
                for group, db in b.group_sqnr_db.items()]


class DecodedStrings(TaskKind):
    """An OCR recognizer's per-position class probabilities, greedy CTC decoded: the strings that changed."""

    name = "decoded strings"

    def present(self, tm: TaskMetrics) -> bool:
        return bool(tm.sequences)

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        # a recognizer: the verdict's own measure, decoded strings that stay the same
        return "strings kept", min(1.0 - q.changed_fraction for q in tm.sequences)

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        q = max(tm.sequences, key=lambda q: q.changed_fraction)
        if len(q.changed_samples) != q.changed:
            return None
        return SampleEvidence("strings kept", flags(q.n_samples, q.changed_samples), (1.0,) * q.n_samples,
                              q.n_samples, "strings", binary=True)

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        for q in tm.sequences:
            # the bar grade() appends follows the share it judges (after the CER it read "CER 6.6% > 10.0%")
            # with its counts: over few reference characters (noise decodes to blanks) a few edits read as 100%
            text = (f"{q.output}: character error rate {pct_text(q.cer)} ({q.edits} edit(s) over {q.ref_chars} "
                    f"reference character(s)); {q.changed}/{q.n_samples} decoded strings changed "
                    f"({pct_text(q.changed_fraction)})")
            fig = Figure(f"{q.output}: decoded strings changed", q.changed_fraction, pct_text(q.changed_fraction),
                         share(q.changed_fraction, q.n_samples, q.n_samples),
                         (policy.max_changed_strings, policy.broken_changed_strings))
            f.grade(q.changed_fraction, policy.max_changed_strings, policy.broken_changed_strings, text, fig)
            f.checked.append((text, fig))

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        return [(f"{q.output}: decoded strings changed",
                 f"{q.output}: decoded strings changed {q.changed}/{q.n_samples} ({q.changed_fraction:.1%}), "
                 f"CER {q.cer:.2%}") for q in tm.sequences]

    def figures(self, tm: TaskMetrics) -> list[tuple[str, str, str]]:
        for q in tm.sequences[:1]:
            return [("Strings changed", f"{q.changed}/{q.n_samples}", f"{q.changed}/{q.n_samples} strings changed")]
        return []

    def change_shown(self, tm: TaskMetrics, measure: str, value: float) -> tuple[str, str, bool]:
        return "decoded strings changed", str(sum(q.changed for q in tm.sequences)), True


class TopOneFlips(TaskKind):
    """A classifier: confident top-1 flips (near-tie flips are shown, not counted)."""

    name = "top-1 flips"
    NO_FLIP = "no confident flip"
    MARGIN_ERROR = "top-1 margin error (mean squared logit)"

    def present(self, tm: TaskMetrics) -> bool:
        return tm.classification is not None

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        c = tm.classification
        if c is None:
            return None
        return self.NO_FLIP, 1.0 - c.confident_flips(c.margin) / max(1, c.n_samples)

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        c = tm.classification
        if c is None or len(c.sample_margins) != c.n_samples or len(c.flip_samples) != len(c.flip_margins):
            return None
        confident = [i for i, m in zip(c.flip_samples, c.flip_margins) if m >= c.margin]
        sure = tuple(1.0 if m >= c.margin else 0.0 for m in c.sample_margins)
        scored = len(c.sample_margin_error) == c.n_samples
        return SampleEvidence(self.NO_FLIP, flags(c.n_samples, confident), (1.0,) * c.n_samples,
                              round(sum(sure)), "confident samples", binary=True, units=sure,
                              errors=tuple(c.sample_margin_error) if scored else (),
                              error_counts=(1.0,) * c.n_samples if scored else (),
                              error_measure=self.MARGIN_ERROR if scored else "")

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        c = tm.classification
        if c is None:
            return
        conf, ties = c.confident_flips(policy.margin), c.near_tie_flips(policy.margin)
        rate = conf / max(1, c.n_samples)
        fig = Figure(f"{c.output}: confident top-1 flips", rate, f"{conf}/{c.n_samples} ({pct_text(rate)})", share(
            rate, c.n_samples, c.n_samples), (policy.max_confident_flips, policy.broken_confident_flips))
        f.grade(rate, policy.max_confident_flips, policy.broken_confident_flips,
                f"{c.output}: {conf}/{c.n_samples} confident top-1 flips ({pct_text(rate)})", fig)
        f.checked.append((f"{conf} confident top-1 flips, {ties} near-tie flips (reference softmax margin "
                          f"< {policy.margin:g}) of {c.n_samples}", fig))

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        c = tm.classification
        if c is None:
            return []
        return [(f"{c.output}: confident top-1 flips",
                 f"flips {c.confident_flips()} confident / {c.near_tie_flips()} near-tie (margin < {c.margin:g})")]

    def change_shown(self, tm: TaskMetrics, measure: str, value: float) -> tuple[str, str, bool]:
        c = tm.classification
        if c is None:
            return super().change_shown(tm, measure, value)
        return "confident flips", str(c.confident_flips()), True


class Embeddings(TaskKind):
    """Embeddings: nearest-neighbour agreement across the evaluation set and the lowest per-sample cosine."""

    name = "embeddings"

    def present(self, tm: TaskMetrics) -> bool:
        return bool(tm.embeddings)

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        agreements = [e.nn_agreement for e in tm.embeddings if e.nn_agreement is not None]
        return ("NN agreement", min(agreements)) if agreements else None

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        embeddings = [e for e in tm.embeddings if e.nn_agreement is not None]
        if not embeddings:
            return None
        e = min(embeddings, key=lambda e: e.nn_agreement or 0.0)
        n = report.n_samples
        if e.nn_changed_samples and max(e.nn_changed_samples) >= n:
            return None
        if not e.nn_changed_samples and (e.nn_agreement or 0.0) < 1.0:
            return None  # an old report: which samples moved is not recorded
        return SampleEvidence("NN agreement", flags(n, e.nn_changed_samples), (1.0,) * n, n, "neighbours",
                              binary=True)

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        for e in tm.embeddings:
            _judge_embedding(e, policy, f, n)

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        return [(f"{e.output}: nearest-neighbour agreement", f"{e.output}: NN agreement "
                 + (f"{e.nn_agreement:.0%}" if e.nn_agreement is not None else "–") + f", cosine min {e.min_cosine:.3f}")
                for e in tm.embeddings]

    def figures(self, tm: TaskMetrics) -> list[tuple[str, str, str]]:
        for e in tm.embeddings[:1]:
            cos = [("Embedding cosine", f"{e.mean_cosine:.4f}", f"cosine {e.mean_cosine:.4f}")]
            if e.nn_agreement is None:
                return cos
            return cos + [("NN agreement", _pct(e.nn_agreement), f"NN agreement {_pct(e.nn_agreement)}")]
        return []


def _judge_embedding(e: EmbeddingMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
    if e.nn_agreement is not None:
        text = f"{e.output}: nearest-neighbour agreement {pct_text(e.nn_agreement)}"
        fig = Figure(f"{e.output}: nearest-neighbour agreement", e.nn_agreement, pct_text(e.nn_agreement), share(
            e.nn_agreement, n, n), (policy.min_nn_agreement, policy.broken_nn_agreement))
        f.grade_low(e.nn_agreement, policy.min_nn_agreement, policy.broken_nn_agreement, text, fig)
        ties = (f" ({e.nn_near_ties} near-tie change{'s' * (e.nn_near_ties > 1)} not counted: within "
                f"{e.nn_near_tie:g} cosine in the float model)" if e.nn_near_ties else "")
        f.checked.append((text + ties + f", cosine min {e.min_cosine:.3f}", fig))
    fig = Figure(f"{e.output}: lowest per-sample cosine", e.min_cosine, f"{e.min_cosine:.3f}")
    if e.min_cosine < policy.min_cosine:
        f.degraded.append((f"{e.output}: a sample's cosine is {e.min_cosine:.3f} < {policy.min_cosine:g}", fig))
    elif e.nn_agreement is None:
        f.checked.append((f"{e.output}: cosine min {e.min_cosine:.3f}", fig))


SPARSE_MAP = 0.001  # a reference map above its threshold on fewer elements than this: SQNR measures a handful


def _crossings(d: DenseMapMetrics) -> Callable[[tuple[float, ...]], Uncertainty | None]:
    return lambda bars: share_uncertainty(d.crossing_fraction, d.sample_crossing, d.sample_elements, bars)


class DenseMaps(TaskKind):
    """Heat maps, segmentation: the share of elements that cross the decision threshold."""

    name = "dense maps"

    def present(self, tm: TaskMetrics) -> bool:
        return bool(tm.dense_maps)

    def measure(self, tm: TaskMetrics) -> tuple[str, float] | None:
        return "map elements kept", min(1.0 - d.crossing_fraction for d in tm.dense_maps)

    def evidence(self, report: EvalReport, tm: TaskMetrics) -> SampleEvidence | None:
        d = max(tm.dense_maps, key=lambda d: d.crossing_fraction)
        if not d.sample_elements:
            return None
        return SampleEvidence("map elements kept", tuple(float(e - x) for x, e in zip(d.sample_crossing,
                                                                                        d.sample_elements)),
                              tuple(float(e) for e in d.sample_elements), len(d.sample_elements), "samples")

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        for d in tm.dense_maps:
            fig = Figure(f"{d.output}: elements crossing {d.threshold:g}", d.crossing_fraction,
                         pct_text(d.crossing_fraction), _crossings(d), (policy.max_crossing, policy.broken_crossing))
            f.grade(d.crossing_fraction, policy.max_crossing, policy.broken_crossing,
                    f"{d.output}: {pct_text(d.crossing_fraction)} of elements cross the {d.threshold:g} threshold", fig)
            f.checked.append((f"{d.output}: {pct_text(d.crossing_fraction)} threshold crossings", fig))

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        return [(f"{d.output}: elements crossing {d.threshold:g}", f"{d.output}: {d.crossing_fraction:.2%} cross "
                 f"{d.threshold:g}") for d in tm.dense_maps]

    def figures(self, tm: TaskMetrics) -> list[tuple[str, str, str]]:
        for d in tm.dense_maps[:1]:
            crossing = f"{_pct(d.crossing_fraction, 2)} crossing {d.threshold:g}"
            return [("Map crossing", crossing, crossing)]
        return []

    @staticmethod
    def remarks(tm: TaskMetrics | None) -> tuple[dict[str, DenseMapMetrics], list[str], list[str]]:
        """The dense maps the reference finds nothing on (by output), the remark on each, and the remark on each
        map it finds almost nothing on (sparse)."""
        maps = tm.dense_maps if tm is not None else []
        empty_maps = {d.output: d for d in maps if d.ref_positive_fraction == 0}
        unjudged = [f"{name}: the reference map finds nothing on this data (no element above the {d.threshold:g} "
                    f"threshold in any sample), so its SQNR/cosine measure background noise and cannot judge the "
                    f"result; give evaluation data on which the model detects something"
                    for name, d in empty_maps.items()]
        sparse = [f"{d.output}: the reference map is above the {d.threshold:g} threshold on only "
                  f"{100 * d.ref_positive_fraction:.2g}% of elements on this data, so its SQNR and cosine are decided "
                  f"by those few; judge it on data where the model detects something (for a text detector: images "
                  f"with text, such as sample_models/text_photos)"
                  for d in maps if 0 < d.ref_positive_fraction < SPARSE_MAP]
        return empty_maps, unjudged, sparse


class ExactOutputs(TaskKind):
    """Integer outputs, compared exactly: the share of values that differ (held to the flip bars)."""

    name = "exact outputs"

    def present(self, tm: TaskMetrics) -> bool:
        return bool(tm.exact)

    def task_sqnr(self, tm: TaskMetrics, sqnrs: dict[str, float], what: str) -> str:
        for name in self.outputs(tm):
            sqnrs.pop(name, None)
        return what

    def judge(self, tm: TaskMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
        for x in tm.exact:
            fig = Figure(f"{x.output}: values that differ", x.different_fraction, pct_text(x.different_fraction))
            f.grade(x.different_fraction, policy.max_confident_flips, policy.broken_confident_flips,
                    f"{x.output} ({x.dtype}): {x.n_different:,} of {x.n_elements:,} values differ "
                    f"({pct_text(x.different_fraction)})", fig)
            f.checked.append((f"{x.output}: "
                              f"{'identical' if not x.n_different else f'{x.n_different:,} values differ'}", fig))

    def lines(self, tm: TaskMetrics) -> list[tuple[str, str]]:
        return [(f"{x.output}: values that differ", f"{x.output} ({x.dtype}): {x.n_different} of {x.n_elements} differ")
                for x in tm.exact]

    @staticmethod
    def outputs(tm: TaskMetrics | None) -> set[str]:
        """The outputs compared exactly (integer tensors): no SQNR judges them."""
        return {e.output for e in tm.exact} if tm is not None else set()


DETECTIONS, DENSE_MAPS, EXACT_OUTPUTS = Detections(), DenseMaps(), ExactOutputs()
KINDS: tuple[TaskKind, ...] = (DETECTIONS, DecodedStrings(), TopOneFlips(), Embeddings(), DENSE_MAPS, EXACT_OUTPUTS)


def kinds_of(tm: TaskMetrics | None) -> list[TaskKind]:
    """The kinds ``tm`` holds metrics of, in :data:`KINDS`' order ([] for None: no task metrics)."""
    return [k for k in KINDS if tm is not None and k.present(tm)]


def main_kind(tm: TaskMetrics | None) -> TaskKind | None:
    """The kind whose measure is the task's: the first in :data:`KINDS` that ``tm`` holds with a measure; None for
    plain tensors."""
    return next((k for k in kinds_of(tm) if tm is not None and k.measure(tm) is not None), None)


def claim_bar(measure: str, policy: VerdictPolicy) -> float | None:
    """The verdict's bar on the task measure named ``measure`` (:meth:`TaskKind.claim_bar`), or None."""
    return next((bar for k in KINDS if (bar := k.claim_bar(measure, policy)) is not None), None)


def reference_detections(report: EvalReport | None) -> int | None:
    """The fewest reference detections of a report's detection outputs; None when it has none."""
    return DETECTIONS.fewest_reference(report.task if report is not None else None)


def worst_sqnr_db(report: EvalReport | None) -> float | None:
    """The continuous measure a report is ranked on: the lowest SQNR of a detector's channel groups (scores,
    boxes) and of the other outputs, outputs the task compares exactly aside (:meth:`TaskKind.task_sqnr`); None when
    there is none. It moves with every bit of error, where an F1 over a few detections moves in steps and saturates
    at 100%."""
    if report is None or not report.outputs:
        return None
    sqnrs = {o.name: o.sqnr_db for o in report.outputs}
    for kind in kinds_of(report.task):
        kind.task_sqnr(report.task, sqnrs, "")  # type: ignore[arg-type]
    finite = [v for v in sqnrs.values() if not math.isnan(v)]
    return min(finite) if finite else None
