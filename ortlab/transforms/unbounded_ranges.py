"""Unbounded ranges: keep in float the nodes that make and read a tensor calibrated to ±inf or float32's extremes
(or to no range at all: an empty tensor, NaN).

An attention mask written as -inf, or as float32's lowest value (-3.4e38, as PyTorch's exports write it), gives
the masked scores a calibrated range of -inf..x: one int8 step is then infinite (or about 1e36), every real score
rounds to the zero point, and the attention output collapses (ONNX's expanded Attention test models, static int8:
SQNR 0 dB, cosine 0). ORT's quantizer needs a range for every tensor of a quantized node, so such a tensor cannot
simply be left out: :func:`find_unbounded` reads the calibration cache (no second calibration) and names the nodes
that make and read each such tensor, to keep in float; the rest is quantized as usual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnxruntime.quantization.calibrate import load_tensors_data

from ortlab.model.graphs import consumers
from ortlab.transforms.range_split import range_bounds

LIMIT = 1e30  # beyond any real activation; float32's lowest value (a mask) is -3.4e38


@dataclass(frozen=True)
class UnboundedRange:
    """``tensor`` was calibrated to ``low``..``high``; ``nodes``: the nodes that make and read it, kept in float."""

    tensor: str
    low: float
    high: float
    nodes: tuple[str, ...]

    def note(self) -> str:
        kept = f"Kept {', '.join(self.nodes)} in float: tensor '{self.tensor}'"
        if math.isnan(self.low) or math.isnan(self.high):
            return f"{kept} held NaN in calibration, which has no int8 range; check the model or the data."
        if self.low > self.high:  # the calibrator's running min/max never moved
            return (f"{kept} held no value in calibration (an empty tensor, e.g. a Slice that takes nothing at "
                    "these input shapes), so it has no range to quantize on.")
        return (f"{kept} was calibrated to {self.low:.3g}..{self.high:.3g} (a mask's -inf or float32's lowest value), "
                "where one int8 step is wider than every real value and all of them would round to zero.")


def find_unbounded(model: onnx.ModelProto, cache, skip: tuple[str, ...] = ()) -> list[UnboundedRange]:
    """The tensors of the calibration ``cache`` whose range is not finite or reaches beyond :data:`LIMIT`, each
    with the nodes of ``model``'s main graph that make and read it (not those in ``skip``, already kept). Unnamed
    nodes get a name (``op_type`` and position), as ORT's quantizer excludes nodes by name."""
    data = load_tensors_data(Path(cache))
    wide = {}
    for tensor in data:
        lo, hi = range_bounds(data[tensor])
        if not (math.isfinite(lo) and math.isfinite(hi) and max(abs(lo), abs(hi)) < LIMIT):
            wide[tensor] = (lo, hi)
    if not wide:
        return []
    graph = model.graph
    _name_unnamed(graph)
    made_by = {out: node.name for node in graph.node for out in node.output}
    read_by = {t: [n.name for n in nodes] for t, nodes in consumers(graph).items()}
    found = []
    for tensor, (lo, hi) in wide.items():
        names = ([made_by[tensor]] if tensor in made_by else []) + read_by.get(tensor, [])
        kept = tuple(dict.fromkeys(n for n in names if n not in skip))
        if kept:
            found.append(UnboundedRange(tensor, lo, hi, kept))
            skip = (*skip, *kept)
    return found


def _name_unnamed(graph: onnx.GraphProto) -> None:
    """Each unnamed node of ``graph`` gets ``op_type_position`` (unique)."""
    taken = {n.name for n in graph.node}
    for i, node in enumerate(graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
