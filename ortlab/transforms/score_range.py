"""Score-aware ranges: a detector's class-score logits quantized on the scores a detector is read at.

A YOLO detector's class-score branch ends in a Conv whose output, the score logits, is quantized before the head's
float Sigmoid. Its calibrated range is whatever the calibration photos gave: on nudenet's YOLOv8n (320×320, 100
calibration photos) the stride-8 logits calibrated to −25.2..0.0, so the int8 grid ended at logit 0 and **every
stride-8 score of the int8 model was capped at 0.5** (fp32 gave 287 anchors above 0.5 in 200 unseen photos, int8
none: detections kept at a 0.3 threshold, lost at 0.5), while its steps of 0.099 logit spent most of the grid on
scores below 10⁻⁴.

The range of each score-logit tensor is set to the scores that matter: its low end is raised to the logit of
:data:`LOW_SCORE` (−9.2: a score no threshold reads) and its high end raised to at least the logit of
:data:`HIGH_SCORE` (+4.6). A calibrated range already wider on top is kept. This is the principle of quantizing on
the range the next op can use (Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018, with ReLU6; :mod:`ortlab.transforms.silu_range` for SiLU), carried to
a Sigmoid whose output is a probability. Only ONNX Runtime's calibration cache changes (a copy): same graph, same
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
from ortlab.model.patterns import KnownPattern
from ortlab.transforms.range_split import tensor_range

LOW_SCORE = 1e-4
HIGH_SCORE = 0.99


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class ScoreRange:
    """One score-logit ``tensor``: its calibrated ``low``..``high`` and the range it is quantized on."""

    tensor: str
    low: float
    high: float
    new_low: float
    new_high: float


def score_logits(model: onnx.ModelProto, patterns: Sequence[KnownPattern] | None = None,
                 skip: Sequence[str] = ()) -> list[str]:
    """The tensors the class-score branch (:func:`ortlab.model.decision_head.score_branch`) hands to the rest of
    the graph (the head's float post-processing), written by nodes not in ``skip`` (those stay float)."""
    branch = set(score_branch(model, patterns))
    if not branch:
        return []
    readers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    skipped = set(skip)
    return [o for n in model.graph.node if n.name in branch and n.name not in skipped for o in n.output
            if o and any(r not in branch for r in readers.get(o, []))]


def set_score_ranges(model: onnx.ModelProto, cache, dst, patterns: Sequence[KnownPattern] | None = None,
                     skip: Sequence[str] = ()) -> list[ScoreRange]:
    """Write ``cache`` (ONNX Runtime's calibration cache) to ``dst`` with each score-logit tensor's range set to
    the scores that matter; returns the ranges changed (none: ``dst`` is a plain copy)."""
    data = load_tensors_data(Path(cache))
    low_end, high_end = logit(LOW_SCORE), logit(HIGH_SCORE)
    changed: list[ScoreRange] = []
    for t in score_logits(model, patterns, skip):
        found = tensor_range(data[t]) if t in data else None
        if found is None:
            continue
        low, high = found
        new_low, new_high = max(low, low_end), max(high, high_end)
        if (new_low, new_high) == (low, high):
            continue
        old = data[t]
        fields = {k: v for k, v in old.to_dict().items() if k != "CLS"}
        for key, bound in (("lowest", low_end), ("highest", high_end)):
            calibrated = np.asarray(getattr(old, key))
            fields[key] = np.maximum(calibrated, bound).astype(calibrated.dtype)
        data[t] = TensorData(**fields)
        changed.append(ScoreRange(t, low, high, new_low, new_high))
    save_tensors_data(data, Path(dst))
    return changed


def note(changed: list[ScoreRange]) -> str:
    """One line for the run's notes."""
    tops = [max(c.high, 0.0) for c in changed]  # ONNX Runtime's grid always holds 0
    short = [t for t in tops if t < logit(HIGH_SCORE)]
    said = (f"; on their calibrated ranges {len(short)} would stop below a score of {HIGH_SCORE:g}, the lowest at "
            f"{1.0 / (1.0 + math.exp(-min(short))):.2f} (logit {min(short):.1f})" if short else "")
    return (f"Score-aware ranges: the class-score logits of {len(changed)} detection output(s) quantized on scores "
            f"{LOW_SCORE:g} to {HIGH_SCORE:g} (logits {logit(LOW_SCORE):.1f} to {logit(HIGH_SCORE):.1f}, or their "
            f"calibrated top where higher){said}. Same graph and speed; --no-score-range keeps the calibrated ranges.")
