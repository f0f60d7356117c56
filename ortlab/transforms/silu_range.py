"""SiLU-aware ranges: an int8 grid for a SiLU's input only as wide as the SiLU can tell apart.

A Conv followed by SiLU (``x · sigmoid(x)``, YOLOv5/v8's activation) has its output quantized before the SiLU, with
the calibrated range of the Conv's raw output: on the measured YOLOv8n often −42..25, so one int8 step is 0.27. But
below about −6 the SiLU is flat (``SiLU(−6) = −0.015``, ``SiLU(−8) = −0.003``): the negative two thirds of that grid
resolve values the next layer cannot see, and the positive side, which it does see, gets a step 2–3 times coarser
than it needs. This is the principle of fused activations in integer inference (Jacob et al., "Quantization and
Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", CVPR 2018: a layer followed by
ReLU6 is quantized on the activation's range), carried to an activation that does not clip.

The cut is chosen so that clipping costs less than the SiLU output's own rounding: the range's low end becomes
``−t``, the smallest ``t`` with ``|SiLU(−t)| = t · sigmoid(−t) ≤ step / 2``, ``step`` the SiLU output's int8 step
(its calibrated range / 255). Any input below ``−t`` then maps to a SiLU value within half a step of the true one,
which the SiLU output's rounding could not have kept anyway. The high end, which carries the signal, is never moved
(clipping the top of this model's ranges, as an MSE-optimal range does, broke it: detection F1 0.79).

Only ONNX Runtime's calibration cache changes (a copy): the quantizer then writes the tighter scale and zero point;
the graph, the kernels and the speed are the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization.calibrate import TensorData, load_tensors_data, save_tensors_data

from ortlab.model.graphs import consumers
from ortlab.transforms.range_split import tensor_range

LEVELS = 255  # steps of an 8-bit grid
SILU_TAIL_PEAK = 1.2785  # t · sigmoid(−t) is largest here (0.2785) and falls for every larger t


@dataclass(frozen=True)
class SiluRange:
    """One SiLU input whose range was cut: ``tensor`` (the SiLU's input), its calibrated ``low`` and ``high``, the
    new low end ``cut`` and the SiLU output's int8 ``step`` that decided it."""

    tensor: str
    low: float
    high: float
    cut: float
    step: float

    def step_ratio(self) -> float:
        """The input's new int8 step over its old one (< 1: finer)."""
        return (self.high - self.cut) / (self.high - self.low)


def silu_tail(t: float) -> float:
    """|SiLU(−t)| = t · sigmoid(−t)."""
    return t / (1.0 + math.exp(t)) if t < 700 else 0.0


def flat_below(step: float) -> float:
    """The smallest ``t`` ≥ :data:`SILU_TAIL_PEAK` with ``silu_tail(t) ≤ step / 2`` (bisection: the tail falls
    monotonically past its peak)."""
    target = step / 2.0
    if target >= silu_tail(SILU_TAIL_PEAK):
        return SILU_TAIL_PEAK
    lo, hi = SILU_TAIL_PEAK, 60.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if silu_tail(mid) > target else (lo, mid)
    return hi


def silu_pairs(graph: onnx.GraphProto, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(SiLU input, SiLU output) of every ``x → Sigmoid → Mul(x, sigmoid(x))`` in ``graph`` whose input feeds
    nothing else (another reader would see the cut) and whose Sigmoid and Mul are not in ``skip``."""
    readers_of = consumers(graph)
    outputs = {o.name for o in graph.output}
    pairs = []
    for sig in graph.node:
        if sig.op_type != "Sigmoid" or sig.name in skip:
            continue
        x = sig.input[0]
        readers = readers_of.get(x, [])
        muls = [m for m in readers if m.op_type == "Mul" and sorted(m.input) == sorted([x, sig.output[0]])]
        if len(readers) != 2 or len(muls) != 1 or muls[0].name in skip or x in outputs:
            continue
        if [c.name for c in readers_of.get(sig.output[0], [])] != [muls[0].name] or sig.output[0] in outputs:
            continue
        pairs.append((x, muls[0].output[0]))
    return pairs


def tighten_silu_ranges(model: onnx.ModelProto, cache, dst, skip: tuple[str, ...] = ()) -> list[SiluRange]:
    """Write ``cache`` (ONNX Runtime's calibration cache) to ``dst`` with every SiLU input's low end cut to where
    the SiLU is flat within half its output's step; returns the cut ranges (none: ``dst`` is a plain copy)."""
    data = load_tensors_data(Path(cache))
    cut: list[SiluRange] = []
    for x, y in silu_pairs(model.graph, skip):
        if x not in data or y not in data:
            continue
        x_range, y_range = tensor_range(data[x]), tensor_range(data[y])
        if x_range is None or y_range is None:
            continue
        (low, hi), (y_lo, y_hi) = x_range, y_range
        step = (max(y_hi, 0.0) - min(y_lo, 0.0)) / LEVELS
        if step <= 0 or hi <= 0:
            continue
        t = flat_below(step)
        if low >= -t:
            continue
        old = data[x]
        fields = {k: v for k, v in old.to_dict().items() if k != "CLS"}
        fields["lowest"] = np.asarray(-t, dtype=np.asarray(old.lowest).dtype).reshape(np.shape(old.lowest))
        data[x] = TensorData(**fields)
        cut.append(SiluRange(x, low, hi, -t, step))
    save_tensors_data(data, Path(dst))
    return cut


def note(cut: list[SiluRange]) -> str:
    """One line for the run's notes."""
    ratios = sorted(c.step_ratio() for c in cut)
    median = ratios[len(ratios) // 2]
    high, low = max(c.cut for c in cut), min(c.cut for c in cut)
    where = f"{high:.1f}" if f"{high:.1f}" == f"{low:.1f}" else f"{high:.1f} to {low:.1f}"
    return (f"SiLU-aware ranges: {len(cut)} SiLU input(s) quantized on the part of their range the SiLU can tell "
            f"apart (below {where} it is flat within half its output's int8 step), so their int8 step is finer: "
            f"median {median:.2f}× the calibrated range's (finest {ratios[0]:.2f}×). Same graph and speed; "
            "--no-silu-range keeps the calibrated ranges.")
