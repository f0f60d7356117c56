"""Range-split: keep in float the nodes that join tensors of very different ranges under one int8 scale.

A YOLOv8 head's last Concat joins box pixels (0..640) and class scores (0..1): quantized, the joined tensor gets
one scale (640/255 ≈ 2.5), every score rounds to 0 or 2.5, and the detector is broken (F1 vs fp32 0.31 on the
measured YOLOv8n; keeping that one Concat in float gave 0.82). The defect shows in the calibration ranges before
anything runs: :func:`find_range_splits` reads the ranges ORT's calibrator computed (the calibration cache, no
second calibration) and names every joining node whose activation inputs' ranges differ by more than a factor.

Joining ops: Concat (one output scale for all inputs) and the element-wise Add/Sub/Sum/Max/Min (the output scale
follows the wider input, so the narrower one's contribution rounds away). Mul is not one: its inputs keep their
own scales and the product's range is its own, so nothing is crushed. Inputs that are weights (initializers,
Constant outputs) are left out: ORT gives them their own scale.

A kept node's output still mixes the ranges, so the nodes that only move its data (Reshape, Transpose, Concat, …)
are kept in float too, down to the first node that computes with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization.calibrate import TensorData, load_tensors_data

from ortlab.model.graphs import consumers

JOINING_OPS = ("Concat", "Add", "Sub", "Sum", "Max", "Min")
# ops that move a mixed tensor's values without computing with them: quantizing their input would crush it again
CARRIER_OPS = ("Concat", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split",
               "Gather", "Expand", "Tile")
DEFAULT_FACTOR = 100.0


@dataclass(frozen=True)
class RangeSplit:
    """A node kept in float: ``wide``/``narrow`` are the (low, high) calibrated ranges of its widest and narrowest
    activation input, ``ratio`` their width ratio; ``carried_from`` names the flagged node whose mixed output this
    (carrier) node only moves (then the ranges are that node's)."""

    node: str
    op_type: str
    wide: tuple[float, float]
    narrow: tuple[float, float]
    ratio: float
    carried_from: str = ""

    def note(self) -> str:
        if self.carried_from:
            return (f"Kept {self.node} ({self.op_type}) in float too: it carries the output of {self.carried_from}, "
                    "whose mixed ranges one int8 scale would crush again.")
        what = "one int8 scale" if self.op_type == "Concat" else "its int8 output scale"
        return (f"Kept {self.node} ({self.op_type}) in float: its inputs range {_range(self.wide)} and "
                f"{_range(self.narrow)} ({_times(self.ratio)}), {what} would crush the smaller (range-split).")


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _range(r: tuple[float, float]) -> str:
    return f"{_num(r[0])}..{_num(r[1])}"


def _times(ratio: float) -> str:
    return f"{ratio:.0f}×" if ratio >= 10 else f"{ratio:.1f}×"


def width(r: tuple[float, float]) -> float:
    """What sets a tensor's int8 scale: its range widened to include 0 (as ORT's quantizer does)."""
    return max(r[1], 0.0) - min(r[0], 0.0)


def load_ranges(cache) -> dict[str, tuple[float, float]]:
    """Tensor name → (low, high) from ORT's calibration cache (``save_tensors_data`` JSON)."""
    data = load_tensors_data(Path(cache))
    return {name: r for name in data if (r := tensor_range(data[name])) is not None}


def tensor_range(data: TensorData) -> tuple[float, float] | None:
    """One tensor's calibrated (low, high) as floats (:func:`range_bounds`); None when either is not finite."""
    lo_f, hi_f = range_bounds(data)
    return (lo_f, hi_f) if math.isfinite(lo_f) and math.isfinite(hi_f) else None


def range_bounds(data: TensorData) -> tuple[float, float]:
    """One tensor's calibrated (low, high) as floats: the lowest low and highest high of per-channel ranges, ±inf
    as they are."""
    lo, hi = data.range_value
    return float(np.min(np.asarray(lo, dtype=np.float64))), float(np.max(np.asarray(hi, dtype=np.float64)))


def find_range_splits(model: onnx.ModelProto, ranges: dict[str, tuple[float, float]],
                      factor: float = DEFAULT_FACTOR, skip: tuple[str, ...] = ()) -> list[RangeSplit]:
    """The nodes of ``model``'s main graph to keep in float: joining nodes whose activation inputs' ranges (from
    ``ranges``) differ more than ``factor``×, then the carrier nodes downstream of them. Unnamed nodes (ORT cannot
    exclude them) and the names in ``skip`` (already excluded) are left out."""
    g = model.graph
    weights = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    readers = consumers(g)
    found: list[RangeSplit] = []
    kept = set(skip)
    for n in g.node:
        if n.op_type not in JOINING_OPS or not n.name or n.name in kept:
            continue
        ins = [(ranges[i], i) for i in dict.fromkeys(n.input) if i and i not in weights and i in ranges]
        ins = [(r, i) for r, i in ins if width(r) > 0]
        if len(ins) < 2:
            continue
        wide = max(ins, key=lambda t: width(t[0]))[0]
        narrow = min(ins, key=lambda t: width(t[0]))[0]
        ratio = width(wide) / width(narrow)
        if ratio <= factor:
            continue
        found.append(RangeSplit(n.name, n.op_type, wide, narrow, ratio))
        kept.add(n.name)
        # the mixed output: keep the nodes that only move it in float as well
        todo = list(n.output)
        while todo:
            t = todo.pop()
            for c in readers.get(t, []):
                if c.op_type in CARRIER_OPS and c.name and c.name not in kept:
                    kept.add(c.name)
                    found.append(RangeSplit(c.name, c.op_type, wide, narrow, ratio, carried_from=n.name))
                    todo.extend(c.output)
    return found
