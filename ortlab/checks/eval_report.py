"""The typed result of comparing a candidate model with its reference (``evaluate.evaluate`` makes it).

Kept apart from ``evaluate`` so that reading stored results (``artifact.json``, the history) needs neither
ONNX Runtime nor numpy. SQNR of identical outputs is ``float('inf')`` (``OutputError.identical``);
``serial.to_plain`` writes it as the string "inf".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ortlab.core.serial import from_plain, to_plain

__all__ = ["BoxesMetrics", "ClassificationMetrics", "DenseMapMetrics", "EmbeddingMetrics", "EvalReport",
           "ExactMetrics", "OptimizationParity", "OutputError", "SequenceMetrics", "Task", "TaskMetrics", "upgrade_v1"]


class Task(StrEnum):
    """What a model's outputs mean, which decides the metrics that are computed (``auto``: inferred)."""

    AUTO = "auto"
    CLASSIFICATION = "classification"
    DENSE_MAP = "dense_map"
    BOXES = "boxes"
    EMBEDDING = "embedding"
    SEQUENCE = "sequence"
    GENERIC = "generic"


@dataclass
class OutputError:
    """Error of one output over all samples: max/mean |ref - cand|, cosine similarity, SQNR in dB."""

    name: str
    max_abs: float
    mean_abs: float
    cosine: float
    sqnr_db: float  # +inf when the outputs are identical
    nonfinite: int = 0  # candidate values that are NaN/inf where the reference's are finite (e.g. fp16 overflow)
    # the reference's own NaN/inf values (left out of SQNR, cosine and the mean), and how many of them the candidate
    # does not repeat
    source_nonfinite: int = 0
    source_nonfinite_differs: int = 0
    values: int = 0  # the values compared, over all samples (0 in reports written before it was kept)
    # each sample's Σref² and Σ(ref - cand)²: the SQNR's interval is bootstrapped over them (empty in old reports)
    sample_signal: list[float] = field(default_factory=list)
    sample_noise: list[float] = field(default_factory=list)
    # a per-token output compared at the attention mask's real tokens only: their count and the padded positions
    # left out (0 and 0: every position compared)
    real_tokens: int = 0
    padding: int = 0
    # the samples on which the output's shape differs (a variable-size output, e.g. the boxes a detector's NMS
    # keeps: another number of them), whose values are left out of every figure above; and then each sample's
    # [reference, candidate] value counts (empty when no size changed)
    size_changed: int = 0
    sample_sizes: list[list[int]] = field(default_factory=list)

    @property
    def size_agreement(self) -> float:
        """The most a match of values can agree when their counts differ: 2·Σmin / Σ(reference + candidate) over
        the samples, an upper bound of a detector's F1 from its box counts alone (1.0 when no size changed)."""
        total = sum(r + c for r, c in self.sample_sizes)
        return 2 * sum(min(r, c) for r, c in self.sample_sizes) / total if total else 1.0

    @property
    def identical(self) -> bool:
        """True when the candidate's output equals the reference's exactly (SQNR is +inf)."""
        return self.sqnr_db == math.inf

    @property
    def padding_note(self) -> str:
        """E.g. "last_hidden_state: compared on the 310 real tokens; padding ignored (1,226 padded positions)";
        empty when no padding was left out."""
        if not self.padding:
            return ""
        return (f"{self.name}: compared on the {self.real_tokens:,} real tokens; padding ignored "
                f"({self.padding:,} padded positions)")

    @property
    def source_nonfinite_note(self) -> str:
        """E.g. "y: the source's own output is NaN/inf at 6 of 48 values on these inputs, left out of SQNR and cosine (the
        result is NaN/inf at the same places)"; empty when the source's output is finite throughout."""
        if not self.source_nonfinite:
            return ""
        same = ("the result is NaN/inf at the same places" if not self.source_nonfinite_differs else
                f"the result differs at {self.source_nonfinite_differs:,} of them")
        of = f" of {self.values:,}" if self.values else ""
        return (f"{self.name}: the source's own output is NaN/inf at {self.source_nonfinite:,}{of} values on these "
                f"inputs, left out of SQNR and cosine ({same})")

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this record (non-finite numbers as "inf"/"-inf"/"nan")."""
        return to_plain(self)


@dataclass
class OptimizationParity:
    """ORT's graph optimization at ``level`` vs the same graph with optimizations disabled
    (:func:`ortlab.checks.parity.check_parity`): the largest difference of ``output``, relative to its scale, and
    the highest level re-checked within tolerance (``safe_level``; "disabled" when none was); ``safe_verdict``: the
    level of the verdict on the model optimized at ``safe_level`` instead ("" when it was not judged)."""

    level: str
    ok: bool
    output: str
    max_abs: float
    relative: float
    tolerance: float
    n_samples: int
    safe_level: str = ""
    safe_verdict: str = ""

    def text_for(self, level: str) -> str:
        """What changed, and the level that is safe, for a result whose verdict is ``level``; empty when the outputs
        agree. When the model optimized at the safe level was judged too, whether that level would change the
        verdict (a result that quantization breaks stays broken at any level: the advice to lower it would
        mislead)."""
        if self.ok:
            return ""
        safe = ("" if not self.safe_level else
                f"; '{self.safe_level}' keeps them within tolerance (re-checked): use --opt-level {self.safe_level}"
                if self.safe_level != "disabled" else
                "; 'basic' changes them too: use --opt-level disabled")
        if self.safe_verdict and self.safe_level not in ("", "disabled"):
            same = self.safe_verdict == level
            safe = (f"; '{self.safe_level}' keeps them within tolerance (re-checked), and its verdict is "
                    + (f"{level} as well: the level does not decide this result" if same else
                       f"{self.safe_verdict}: use --opt-level {self.safe_level}"))
        if not math.isfinite(self.max_abs):
            return (f"graph optimization at '{self.level}' changed the outputs: '{self.output}' is NaN or infinite "
                    f"where the same graph with optimizations disabled is not, or the reverse ({self.n_samples} "
                    f"samples){safe}")
        return (f"graph optimization at '{self.level}' changed the outputs: '{self.output}' differs from the same "
                f"graph with optimizations disabled by up to {self.max_abs:.3g} ({self.relative:.1%} of its scale, "
                f"tolerance {self.tolerance:.1%}, {self.n_samples} samples){safe}")


@dataclass
class ClassificationMetrics:
    """Top-1 agreement of one classifier output, its flips split by the reference's confidence.

    A flip is a sample whose candidate top-1 class differs from the reference's. ``flip_margins`` holds, for
    each flip, the reference's (fp32) softmax margin between its top-1 and top-2 class: a flip with a margin
    below the policy's threshold is a near-tie (the reference itself was undecided), above it a confident flip.
    """

    output: str
    n_classes: int
    n_samples: int
    agreement: float
    flip_margins: list[float] = field(default_factory=list)
    margin: float = 0.1  # the threshold the counts below use (the evaluation's policy)
    top5_containment: float | None = None  # None with 5 classes or fewer
    # per sample, for paired comparisons of two candidates on the same samples (empty in old reports): the
    # reference's top-1 − top-2 softmax margin of every sample, and the index of each flip (aligned with flip_margins)
    sample_margins: list[float] = field(default_factory=list)
    flip_samples: list[int] = field(default_factory=list)
    # per sample (empty in old reports): how far the gap between the reference's top-1 and top-2 logit moved,
    # squared: a continuous measure that tells two candidates apart where a few flips cannot
    sample_margin_error: list[float] = field(default_factory=list)

    def confident_flips(self, margin: float | None = None) -> int:
        """Flips where the reference's softmax margin was at least ``margin`` (default: :attr:`margin`)."""
        m = self.margin if margin is None else margin
        return sum(1 for x in self.flip_margins if x >= m)

    def near_tie_flips(self, margin: float | None = None) -> int:
        """Flips where the reference's top-1 and top-2 were closer than ``margin`` (default: :attr:`margin`)."""
        return len(self.flip_margins) - self.confident_flips(margin)

    def confident_flip_rate(self, margin: float | None = None) -> float:
        """Confident flips as a share of the samples."""
        return self.confident_flips(margin) / max(1, self.n_samples)


@dataclass
class DenseMapMetrics:
    """Decision changes of one heat-map/segmentation output: elements on different sides of ``threshold``.

    ``scale`` says what was thresholded: "probability" (the reference lies in [0, 1]) or "logit" (sigmoid of the
    values, i.e. values compared with logit(threshold))."""

    output: str
    threshold: float
    scale: str
    crossing_fraction: float  # elements above the threshold in one model and not in the other / all elements
    ref_positive_fraction: float  # elements above the threshold in the reference / all elements
    # each sample's crossing and all elements: the share's interval is bootstrapped over samples (empty in old reports)
    sample_crossing: list[int] = field(default_factory=list)
    sample_elements: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BoxesMetrics:
    """Detections of one YOLO-style output ([N, 4+classes, anchors] or [N, anchors, 5+classes] with objectness).

    Both models' outputs are decoded the same way: an anchor's score is its best class score (times its
    objectness when the anchors are rows, as YOLOv5 writes them), anchors scoring above ``threshold`` (compared
    with logit(threshold) when the scores are not in [0, 1]) are kept, then per-class non-maximum suppression
    (IoU > ``nms_iou``). The candidate's detections are matched greedily, best score first, to the reference's
    of the same class with IoU ≥ ``match_iou``: precision = matched / candidate detections, recall = matched /
    reference detections, F1 their harmonic mean (None when neither model detects anything).
    ``changed_fraction``: anchors above the threshold in one model and not the other, as a share of anchors
    above it in either (0 when neither detects anything). ``score_sqnr_db`` / ``box_sqnr_db``: SQNR of the class
    score channels and of the 4 box channels apart (the box pixels dominate the whole output's SQNR).
    ``other_channels``: channels after the scores that are not scores (a segmentation model's mask coefficients, a
    pose model's keypoints: unbounded where the scores lie in [0, 1]), left out of the detections."""

    output: str
    threshold: float
    scale: str
    changed_fraction: float
    ref_detections: float  # mean detections per sample (after NMS)
    cand_detections: float
    matched: int = 0
    ref_total: int = 0
    cand_total: int = 0
    match_iou: float = 0.5
    nms_iou: float = 0.45
    score_sqnr_db: float = math.nan
    box_sqnr_db: float = math.nan
    # per sample (empty in old reports): matched detections, the reference's and the candidate's detections
    sample_matched: list[int] = field(default_factory=list)
    sample_ref: list[int] = field(default_factory=list)
    sample_cand: list[int] = field(default_factory=list)
    other_channels: int = 0
    # per sample (empty in old reports): the scores near the threshold (reference logit within ±1.5 of the
    # threshold's), their Σ squared logit error and their count: a continuous measure that tells two candidates
    # apart where the F1 over a few hundred detections cannot
    sample_score_error: list[float] = field(default_factory=list)
    sample_score_count: list[int] = field(default_factory=list)
    # the same detections above a second, higher threshold (None: not measured, or the threshold is that high
    # already): a defect that caps the scores leaves the detections at a low threshold as they were
    high_threshold: float | None = None
    high_matched: int = 0
    high_ref_total: int = 0
    high_cand_total: int = 0

    @property
    def precision(self) -> float | None:
        return self.matched / self.cand_total if self.cand_total else (None if not self.ref_total else 0.0)

    @property
    def recall(self) -> float | None:
        return self.matched / self.ref_total if self.ref_total else (None if not self.cand_total else 0.0)

    @property
    def f1(self) -> float | None:
        """2·matched / (reference + candidate detections); None when neither detects anything."""
        total = self.ref_total + self.cand_total
        return 2 * self.matched / total if total else None

    @property
    def high_f1(self) -> float | None:
        """The F1 above :attr:`high_threshold`; None when not measured or neither model detects anything there."""
        total = self.high_ref_total + self.high_cand_total
        return 2 * self.high_matched / total if self.high_threshold is not None and total else None

    @property
    def group_sqnr_db(self) -> dict[str, float]:
        """SQNR of each channel group ("boxes": the 4 box channels, "scores": the class scores), which a
        whole-tensor SQNR hides (box pixels dominate it); empty when not measured."""
        return {k: v for k, v in (("boxes", self.box_sqnr_db), ("scores", self.score_sqnr_db)) if not math.isnan(v)}


@dataclass
class SequenceMetrics:
    """Per-position class probabilities ([N, T, classes], an OCR recognizer's CTC softmax) decoded greedily
    (argmax per position, repeats collapsed, blank ``blank`` dropped) in both models: the share of samples whose
    decoded string changed, and the character error rate (edit distance / reference length, summed over the
    samples)."""

    output: str
    n_samples: int
    changed: int
    edits: int
    ref_chars: int
    blank: int = 0
    changed_samples: list[int] = field(default_factory=list)  # the index of each changed string (empty: old report)

    @property
    def changed_fraction(self) -> float:
        return self.changed / max(1, self.n_samples)

    @property
    def cer(self) -> float:
        """Character error rate against the reference's strings (edits per reference character)."""
        return self.edits / self.ref_chars if self.ref_chars else (0.0 if not self.edits else 1.0)


@dataclass
class EmbeddingMetrics:
    """Per-sample cosine of one embedding output, and whether each sample's nearest neighbour among the
    evaluation samples stays the same (``nn_agreement``; None with fewer than 3 samples). A change of neighbour to
    one the float model finds within ``nn_near_tie`` cosine of its own nearest is a near-tie (``nn_near_ties``,
    counted apart, like classification's near-tie flips), not a change. [N, T, D] outputs
    (``tokens``) are mean-pooled over T for the neighbours; with an attention mask, cosine and pooling take the
    real tokens only (``real_tokens``; ``padding``: the padded positions left out)."""

    output: str
    min_cosine: float
    mean_cosine: float
    nn_agreement: float | None
    tokens: bool = False  # a per-token output [N, T, D]; one vector per sample (a sentence embedding) when False
    real_tokens: int = 0
    padding: int = 0
    nn_near_ties: int = 0
    nn_near_tie: float = 0.0
    nn_changed_samples: list[int] = field(default_factory=list)  # samples whose neighbour changed (not a near-tie)


@dataclass
class ExactMetrics:
    """An integer or boolean output, compared exactly (no accuracy, no SQNR)."""

    output: str
    dtype: str
    n_elements: int
    n_different: int

    @property
    def different_fraction(self) -> float:
        return self.n_different / max(1, self.n_elements)


@dataclass
class TaskMetrics:
    """The task of the model (inferred from its outputs and labels, or given) and the metrics it calls for."""

    task: Task
    inferred: bool
    why: str
    classification: ClassificationMetrics | None = None
    dense_maps: list[DenseMapMetrics] = field(default_factory=list)
    boxes: list[BoxesMetrics] = field(default_factory=list)
    embeddings: list[EmbeddingMetrics] = field(default_factory=list)
    exact: list[ExactMetrics] = field(default_factory=list)
    sequences: list[SequenceMetrics] = field(default_factory=list)

    @property
    def classifications(self) -> list[ClassificationMetrics]:
        """The classifier output's metrics as a list like the other kinds' (empty or one)."""
        return [self.classification] if self.classification is not None else []


@dataclass(frozen=True)
class EvalReport:
    """Reference vs candidate over ``n_samples``; accuracies are None when not applicable."""

    n_samples: int
    outputs: list[OutputError]
    top1_accuracy_ref: float | None = None
    top1_accuracy_cand: float | None = None
    top5_accuracy_ref: float | None = None
    top5_accuracy_cand: float | None = None
    top1_agreement: float | None = None
    top5_containment: float | None = None
    per_class: list[dict[str, Any]] = field(default_factory=list)
    random_data: bool = False
    providers_ref: list[str] = field(default_factory=list)
    providers_cand: list[str] = field(default_factory=list)
    task: TaskMetrics | None = None  # None in reports written before task-aware evaluation
    calibration_overlap: int = 0  # evaluation samples that were also calibration samples
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # each input's shape as fed (one sample)
    parity: OptimizationParity | None = None  # the optimized result vs its unoptimized graph (None: not checked)
    available_samples: int = 0  # the samples the evaluation data had (``n_samples`` were drawn from it; 0: unknown)

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this report (SQNR of identical outputs is "inf")."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        """``serial.from_plain``: reads :meth:`to_dict`'s form back, and the form written before schema 2."""
        return from_plain(cls, data)

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        """``serial.from_plain`` calls this first: an evaluation written before schema 2 (``to_dict`` then wrote
        None for non-finite numbers and an ``identical`` flag per output) becomes today's form."""
        return upgrade_v1(data)


def upgrade_v1(data: Any) -> Any:
    """An evaluation written before schema 2 in today's form: each output's ``identical`` flag goes, and a
    None where a number must be becomes +inf (identical outputs' SQNR) or NaN."""
    if not isinstance(data, dict) or not isinstance(data.get("outputs"), list):
        return data
    outputs = []
    for o in data["outputs"]:
        if isinstance(o, dict):
            o = dict(o)
            identical = bool(o.pop("identical", False))
            for k in ("max_abs", "mean_abs", "cosine", "sqnr_db"):
                if k in o and o[k] is None:
                    o[k] = "inf" if k == "sqnr_db" and identical else "nan"
        outputs.append(o)
    return {**data, "outputs": outputs}
