"""A trial's task measure per evaluation sample, so two trials can be compared on the same samples.

:func:`evidence_of` reads an :class:`ortlab.checks.eval_report.EvalReport` (no ONNX Runtime, no numpy) and gives a
:class:`SampleEvidence`: for each sample a numerator and a denominator whose sums make the task's measure, and the
evidence the measure rests on, counted the way the task counts it:

* a detector: detection F1 = Σ 2·matched / Σ (reference + candidate detections); evidence: reference detections;
* a classifier: no confident flip = 1 − confident flips / samples; evidence: confident samples (the reference's
  top-1 − top-2 softmax margin at least the policy's margin: only those can flip confidently);
* an OCR recognizer: strings kept; evidence: strings;
* an embedding model: nearest neighbours kept; evidence: neighbours (one per sample);
* a dense map: map elements kept; evidence: samples.

None when the report has no per-sample record (an old report, or plain tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortlab.checks.eval_report import EvalReport

__all__ = ["SampleEvidence", "evidence_of"]


@dataclass(frozen=True)
class SampleEvidence:
    """``measure`` = Σ ``hits`` / Σ ``totals`` over the samples (higher is better, in [0, 1]). ``per_unit``: how
    many hits one counted unit makes (2 for F1, whose matched pairs count on both sides; 1 for shares), so that
    Σ totals / per_unit is the number of units a Wilson interval counts. ``count`` ``unit``: the evidence
    ("120 reference detections"). ``binary``: each sample scores 0 or 1 of 1 (McNemar's test applies)."""

    measure: str
    hits: tuple[float, ...]
    totals: tuple[float, ...]
    count: int
    unit: str
    binary: bool = False
    per_unit: float = 1.0
    units: tuple[float, ...] = ()  # each sample's share of ``count`` (empty: one unit per sample)

    def __len__(self) -> int:
        return len(self.hits)

    def value(self, idx: Sequence[int] | None = None) -> float | None:
        """The measure over the samples ``idx`` (all when None); None when they hold no unit (no detection)."""
        ids = range(len(self.hits)) if idx is None else idx
        total = sum(self.totals[i] for i in ids)
        return sum(self.hits[i] for i in ids) / total if total > 0 else None

    def subset(self, idx: Sequence[int]) -> SampleEvidence:
        """The evidence of the samples ``idx`` only (the count is kept for whole-set evidence only)."""
        hits = tuple(self.hits[i] for i in idx)
        totals = tuple(self.totals[i] for i in idx)
        units = tuple(self.units[i] for i in idx) if self.units else ()
        count = round(sum(units)) if units else len(idx)
        return SampleEvidence(self.measure, hits, totals, count, self.unit, self.binary, self.per_unit, units)

    def text(self) -> str:
        """E.g. "120 reference detections in 300 samples"."""
        unit = self.unit[:-1] if self.count == 1 and self.unit.endswith("s") else self.unit
        return f"{self.count:,} {unit} in {len(self):,} sample{'' if len(self) == 1 else 's'}"


def _flags(n: int, bad: Sequence[int]) -> tuple[float, ...]:
    wrong = set(bad)
    return tuple(0.0 if i in wrong else 1.0 for i in range(n))


def evidence_of(report: EvalReport | None) -> SampleEvidence | None:
    """The per-sample task measure of ``report`` (the same measure as :func:`ortlab.runs.tune_policy.task_quality`:
    a detector's worst output by F1, a recognizer's worst output by strings kept), or None without a per-sample
    record."""
    tm = report.task if report is not None else None
    if tm is None:
        return None
    if tm.boxes:
        boxes = [b for b in tm.boxes if b.sample_ref and b.f1 is not None]
        if not boxes or len(boxes) != len(tm.boxes):
            return None
        b = min(boxes, key=lambda b: b.f1 or 0.0)
        return SampleEvidence("detection F1", tuple(2.0 * m for m in b.sample_matched),
                              tuple(float(r + c) for r, c in zip(b.sample_ref, b.sample_cand)),
                              sum(b.sample_ref), "reference detections", per_unit=2.0,
                              units=tuple(float(r) for r in b.sample_ref))
    c = tm.classification
    if c is not None:
        if len(c.sample_margins) != c.n_samples or len(c.flip_samples) != len(c.flip_margins):
            return None
        confident = [i for i, m in zip(c.flip_samples, c.flip_margins) if m >= c.margin]
        sure = tuple(1.0 if m >= c.margin else 0.0 for m in c.sample_margins)
        return SampleEvidence("no confident flip", _flags(c.n_samples, confident), (1.0,) * c.n_samples,
                              round(sum(sure)), "confident samples", binary=True, units=sure)
    embeddings = [e for e in tm.embeddings if e.nn_agreement is not None]
    if embeddings:
        e = min(embeddings, key=lambda e: e.nn_agreement or 0.0)
        n = report.n_samples if report is not None else 0
        if e.nn_changed_samples and max(e.nn_changed_samples) >= n:
            return None
        if not e.nn_changed_samples and (e.nn_agreement or 0.0) < 1.0:
            return None  # an old report: which samples moved is not recorded
        return SampleEvidence("NN agreement", _flags(n, e.nn_changed_samples), (1.0,) * n, n, "neighbours",
                              binary=True)
    if tm.sequences:
        q = max(tm.sequences, key=lambda q: q.changed_fraction)
        if len(q.changed_samples) != q.changed:
            return None
        return SampleEvidence("strings kept", _flags(q.n_samples, q.changed_samples), (1.0,) * q.n_samples,
                              q.n_samples, "strings", binary=True)
    if tm.dense_maps:
        d = max(tm.dense_maps, key=lambda d: d.crossing_fraction)
        if not d.sample_elements:
            return None
        return SampleEvidence("map elements kept", tuple(float(e - x) for x, e in zip(d.sample_crossing,
                                                                                        d.sample_elements)),
                              tuple(float(e) for e in d.sample_elements), len(d.sample_elements), "samples")
    return None
