"""Which evaluation samples a tune search chooses on and which it holds out to confirm its pick (:func:`split`),
sized by the evidence the samples hold, so that the decision and the claim each rest on enough of it."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["CLAIM_UNITS", "CONFIRM_EVERY", "MIN_SPLIT_SAMPLES", "split"]

CONFIRM_EVERY = 3  # a third of the evidence (every third sample, where each is one unit) is held out to confirm
MIN_SPLIT_SAMPLES = 30  # fewer samples are not split: the claim is then made on the samples chosen on
CLAIM_UNITS = 100  # the units (detections …) each part holds at least, where the data holds twice as many


def split(n: int, units: Sequence[float] = ()) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The samples to choose on and the samples held out to confirm the pick, interleaved so both parts cover the data
    alike. Without ``units`` (one unit per sample) every :data:`CONFIRM_EVERY`-th sample is held out. With each
    sample's ``units`` (its reference detections; 1 for a confident sample, 0 for another) the held-out part takes a
    third of the units, or :data:`CLAIM_UNITS` where a third would hold fewer and the data holds twice that, so the
    claim and the decision each rest on that much evidence. The samples are held out in that proportion within each
    group of samples holding the same number of units (every third sample where each holds one), so neither part
    gets the crowded photos, nor the empty ones, whose false detections count too. Fewer than
    :data:`MIN_SPLIT_SAMPLES` samples are not split (the confirming part is then empty)."""
    if n < MIN_SPLIT_SAMPLES:
        return tuple(range(n)), ()
    total = float(sum(units)) if len(units) == n else 0.0
    if total <= 0:
        confirm = tuple(i for i in range(n) if i % CONFIRM_EVERY == CONFIRM_EVERY - 1)
        return tuple(i for i in range(n) if i % CONFIRM_EVERY != CONFIRM_EVERY - 1), confirm
    target = CLAIM_UNITS if 2 * CLAIM_UNITS <= total < CONFIRM_EVERY * CLAIM_UNITS else total / CONFIRM_EVERY
    groups: dict[float, list[int]] = {}
    for i in range(n):
        groups.setdefault(float(units[i]), []).append(i)
    due = {w: target / total * len(ids) for w, ids in groups.items()}
    count = {w: math.floor(due[w] + 1e-9) for w in groups}
    while sum(w * c for w, c in count.items()) < target - 1e-9:  # the fractions left over, largest first
        open_ = [w for w in groups if w > 0 and count[w] < len(groups[w])]
        if not open_:
            break
        w = max(open_, key=lambda w: (due[w] - count[w], -w))
        count[w] += 1
    held = {i for w, ids in groups.items() for i in _evenly(ids, count[w])}
    return tuple(i for i in range(n) if i not in held), tuple(i for i in range(n) if i in held)


def _evenly(ids: Sequence[int], k: int) -> list[int]:
    """``k`` of ``ids`` spread evenly over them in order (each third one where ``k`` is a third of them)."""
    m = len(ids)
    return [ids[j] for j in range(m) if (j + 1) * k // m > j * k // m] if m else []
