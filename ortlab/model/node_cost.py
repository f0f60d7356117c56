"""The estimated work of each node of a model for one sample: what keeping a node in float costs, to order a
keep-in-float set by (tune trims the costliest first).

A Conv, ConvTranspose, Gemm or MatMul costs its multiply-accumulates (its output elements times the products each
one sums); any other node its output elements (an elementwise op, and the Q/DQ pairs a float island adds around
it, move that many values). Shapes come from ONNX shape inference with the inputs fixed at the shapes fed.
An estimate that ranks, not a timing: where a shape stays unknown a node costs what is known of it (a Conv its
weight's elements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import onnx
from onnx import shape_inference

from ortlab.core.onnx_errors import ONNX_ERRORS

MAC_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def _with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for value in m.graph.input:
        shape = shapes.get(value.name)
        if shape is None or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for d, size in zip(dims, shape):
            d.Clear()
            d.dim_value = int(size)
    return m


def _known_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each tensor's shape where every dim is known (initializers, inputs, inferred values, outputs)."""
    out: dict[str, list[int]] = {t.name: list(t.dims) for t in model.graph.initializer}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            continue
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[value.name] = [d.dim_value for d in dims]
    return out


def node_costs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, float]:
    """Estimated work of each named node for the inputs at ``input_shapes`` (see the module); a model that shape
    inference cannot read costs by what its initializers say."""
    fixed = _with_input_shapes(model, input_shapes or {})
    try:
        inferred = shape_inference.infer_shapes(fixed)
    except ONNX_ERRORS:  # onnx's own inference errors on an unusual graph: the initializers still tell something
        inferred = fixed
    shapes = _known_shapes(inferred)
    costs: dict[str, float] = {}
    for n in inferred.graph.node:
        if not n.name:
            continue
        out = shapes.get(n.output[0]) if n.output else None
        out_elems = float(math.prod(out)) if out is not None else 0.0
        cost = out_elems
        if n.op_type in MAC_OPS and len(n.input) > 1:
            w = shapes.get(n.input[1])
            a = shapes.get(n.input[0])
            if n.op_type in ("Conv", "ConvTranspose") and w is not None and len(w) >= 2:
                per_output = float(math.prod(w[1:]))  # input channels per group × kernel
                cost = out_elems * per_output if out is not None else float(math.prod(w))
            elif a is not None and a:
                transposed = n.op_type == "Gemm" and any(x.name == "transA" and x.i for x in n.attribute)
                k = a[0] if transposed and len(a) > 1 else a[-1]
                cost = out_elems * k
        costs[n.name] = cost
    return costs
