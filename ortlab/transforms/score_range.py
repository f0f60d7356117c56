"""Score-aware ranges: a detector's class-score logits quantized on the scores a detector is read at.

A YOLO detector's class-score branch ends in a Conv whose output, the score logits, is quantized before the head's
float Sigmoid. Its calibrated range is whatever the calibration photos gave: on nudenet's YOLOv8n (320×320, 100
calibration photos) the stride-8 logits calibrated to −25.2..0.0, so the int8 grid ended at logit 0 and **every
stride-8 score of the int8 model was capped at 0.5** (fp32 gave 287 anchors above 0.5 in 200 unseen photos, int8
none: detections kept at a 0.3 threshold, lost at 0.5).

The high end of each score-logit tensor's range is raised to at least the logit of :data:`HIGH_SCORE` (+4.6), so
the grid holds every score a detector is read at; the calibrated low end is kept (cutting it, as SiLU-aware ranges
do, would make ``ortlab analyze`` rank the clipped tail of harmless logits below −9 as the worst error). A range
estimated from a few photos is widened to what the op after it can tell apart (the reverse of the cut in
:mod:`ortlab.transforms.silu_range`). Only ONNX Runtime's calibration cache changes (a copy): same graph, same
speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization.calibrate import TensorData, load_tensors_data, save_tensors_data

from ortlab.model.decision_head import score_branch
from ortlab.model.graphs import consumers
from ortlab.model.patterns import KnownPattern
from ortlab.transforms.range_split import tensor_range

HIGH_SCORE = 0.99


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class ScoreRange:
    """One score-logit ``tensor``: its calibrated ``low``..``high`` and the ``new_high`` it is quantized up to."""

    tensor: str
    low: float
    high: float
    new_high: float


def score_logits(model: onnx.ModelProto, patterns: Sequence[KnownPattern] | None = None,
                 skip: Sequence[str] = ()) -> list[str]:
    """The tensors the class-score branch (:func:`ortlab.model.decision_head.score_branch`) hands to the rest of
    the graph (the head's float post-processing), written by nodes not in ``skip`` (those stay float)."""
    branch = set(score_branch(model, patterns))
    if not branch:
        return []
    readers = consumers(model.graph)
    skipped = set(skip)
    return [o for n in model.graph.node if n.name in branch and n.name not in skipped for o in n.output
            if o and any(r.name not in branch for r in readers.get(o, []))]


def set_score_ranges(model: onnx.ModelProto, cache, dst, patterns: Sequence[KnownPattern] | None = None,
                     skip: Sequence[str] = ()) -> list[ScoreRange]:
    """Write ``cache`` (ONNX Runtime's calibration cache) to ``dst`` with each score-logit tensor's range set to
    the scores that matter; returns the ranges changed (none: ``dst`` is a plain copy)."""
    data = load_tensors_data(Path(cache))
    high_end = logit(HIGH_SCORE)
    changed: list[ScoreRange] = []
    for t in score_logits(model, patterns, skip):
        found = tensor_range(data[t]) if t in data else None
        if found is None:
            continue
        low, high = found
        if high >= high_end:
            continue
        old = data[t]
        fields = {k: v for k, v in old.to_dict().items() if k != "CLS"}
        calibrated = np.asarray(old.highest)
        fields["highest"] = np.maximum(calibrated, high_end).astype(calibrated.dtype)
        data[t] = TensorData(**fields)
        changed.append(ScoreRange(t, low, high, high_end))
    save_tensors_data(data, Path(dst))
    return changed


def note(changed: list[ScoreRange]) -> str:
    """One line for the run's notes."""
    tops = sorted(max(c.high, 0.0) for c in changed)  # ONNX Runtime's grid always holds 0
    return (f"Score-aware ranges: the class-score logits of {len(changed)} detection output(s) quantized up to a "
            f"score of {HIGH_SCORE:g} (logit {logit(HIGH_SCORE):.1f}): on their calibrated ranges they stopped at "
            f"scores of {', '.join(f'{1.0 / (1.0 + math.exp(-t)):.2f}' for t in tops)}, capping every score "
            "above. Same graph and speed; --no-score-range keeps the calibrated ranges.")
