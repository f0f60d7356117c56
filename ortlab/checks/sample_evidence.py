"""A task measure per evaluation sample (:class:`SampleEvidence`), so two trials can be compared on the same samples:
for each sample a numerator and a denominator whose sums make the measure, and the evidence it rests on (each task
kind counts it its own way: :meth:`ortlab.checks.task_kind.TaskKind.evidence`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SampleEvidence", "flags"]


@dataclass(frozen=True)
class SampleEvidence:
    """``measure`` = Σ ``hits`` / Σ ``totals`` over the samples (higher is better, in [0, 1]). ``per_unit``: how
    many hits one counted unit makes (2 for F1, whose matched pairs count on both sides; 1 for shares), so that
    Σ totals / per_unit is the number of units a Wilson interval counts. ``count`` ``unit``: the evidence
    ("120 reference detections"). ``binary``: each sample scores 0 or 1 of 1 (McNemar's test applies).
    ``errors`` / ``error_counts``: where the task has one, a continuous error per sample (Σ squared error over
    ``error_counts`` values, lower is better: a detector's near-threshold score logits, a classifier's top-1
    margin), named ``error_measure``: it tells two models apart where the measure, counted over a few hundred
    units, cannot."""

    measure: str
    hits: tuple[float, ...]
    totals: tuple[float, ...]
    count: int
    unit: str
    binary: bool = False
    per_unit: float = 1.0
    units: tuple[float, ...] = ()  # each sample's share of ``count`` (empty: one unit per sample)
    errors: tuple[float, ...] = ()
    error_counts: tuple[float, ...] = ()
    error_measure: str = ""

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
        errors = tuple(self.errors[i] for i in idx) if self.errors else ()
        error_counts = tuple(self.error_counts[i] for i in idx) if self.error_counts else ()
        return SampleEvidence(self.measure, hits, totals, count, self.unit, self.binary, self.per_unit, units,
                              errors, error_counts, self.error_measure)

    def text(self) -> str:
        """E.g. "120 reference detections in 300 samples"."""
        unit = self.unit[:-1] if self.count == 1 and self.unit.endswith("s") else self.unit
        return f"{self.count:,} {unit} in {len(self):,} sample{'' if len(self) == 1 else 's'}"


def flags(n: int, bad: Sequence[int]) -> tuple[float, ...]:
    """1.0 for each of ``n`` samples, 0.0 for those in ``bad``."""
    wrong = set(bad)
    return tuple(0.0 if i in wrong else 1.0 for i in range(n))
