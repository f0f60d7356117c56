"""A float Softmax over an inner axis that reads a Transpose, computed over the last axis between two Transposes.

ONNX Runtime's CPU Softmax over an inner axis swaps that axis with the last one inside the kernel, out of sight of
its transpose optimizer. A YOLOv8's distribution-focal-loss head reads ``Reshape → Transpose(0, 2, 1, 3) →
Softmax(axis=1)``: on a YOLOv8n (nudenet's 320n) that Softmax took 1.1–1.3 ms of a 10–14 ms run, in the fp32 model
and in every int8 model that keeps it in float. Written as ``Transpose(axis ↔ last) → Softmax(-1) → Transpose``
(the same values: a permutation, then the same exponentials and sums over the same elements), the optimizer merges
the Transposes and moves them where they cost least: 0.26 ms. A Softmax over an inner axis that reads anything else
is left alone: alone, the rewrite runs no faster (``bench/bench_softmax_axis.py``). Only where the meaning is the
same: opset 13 or later (an older Softmax flattens every axis from ``axis`` on into one), and not under a
QuantizeLinear (with its DequantizeLinear before, ONNX Runtime runs it as QLinearSoftmax).
"""

from __future__ import annotations

import onnx
from onnx import helper

from ortlab.model.graphs import ai_onnx_opset

MIN_OPSET = 13  # before it, Softmax(axis=a) normalised over every axis from a on, flattened


def _perm(node: onnx.NodeProto | None) -> list[int]:
    """A Transpose's ``perm`` ([] for anything else, or a Transpose without one)."""
    if node is None or node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return []
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


def inner_axis_softmaxes(model: onnx.ModelProto) -> dict[int, tuple[int, int]]:
    """{index in the main graph: (axis, rank)} of each Softmax there over an axis other than the last that reads a
    Transpose with a ``perm`` (which gives the rank; a Softmax is float by its schema)."""
    if ai_onnx_opset(model) < MIN_OPSET:
        return {}
    nodes = list(model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    quantized_reads = {i for n in nodes if n.op_type == "QuantizeLinear" for i in n.input[:1]}
    found = {}
    for k, n in enumerate(nodes):
        if n.op_type != "Softmax" or n.domain not in ("", "ai.onnx") or n.output[0] in quantized_reads:
            continue
        rank = len(_perm(producer.get(n.input[0])))
        axis = next((a.i for a in n.attribute if a.name == "axis"), -1)
        if rank < 2 or not -rank <= axis < rank or axis % rank == rank - 1:
            continue
        found[k] = (axis % rank, rank)
    return found


def softmax_over_last_axis(model: onnx.ModelProto) -> list[str]:
    """Rewrite, in place, each Softmax :func:`inner_axis_softmaxes` finds as Transpose → Softmax(-1) → Transpose
    (the Softmax keeps its name and output); the names of those rewritten."""
    found = inner_axis_softmaxes(model)
    if not found:
        return []
    taken = {o for n in model.graph.node for o in [*n.input, *n.output]} | {n.name for n in model.graph.node}
    nodes, done = [], []
    for k, n in enumerate(model.graph.node):
        if k not in found:
            nodes.append(n)
            continue
        axis, rank = found[k]
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        stem = n.name or f"softmax_{k}"
        last, soft = _fresh(f"{stem}/last_axis", taken), _fresh(f"{stem}/over_last_axis", taken)
        nodes += [helper.make_node("Transpose", [n.input[0]], [last], name=_fresh(f"{stem}/to_last", taken),
                                   perm=perm),
                  helper.make_node("Softmax", [last], [soft], name=n.name, axis=-1),
                  helper.make_node("Transpose", [soft], [n.output[0]], name=_fresh(f"{stem}/back", taken),
                                   perm=perm)]
        done.append(n.name or stem)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return done


def _fresh(name: str, taken: set[str]) -> str:
    got, i = name, 1
    while got in taken:
        got, i = f"{name}_{i}", i + 1
    taken.add(got)
    return got


def rewrite_note(names: list[str]) -> str:
    """The note a run carries when :func:`softmax_over_last_axis` rewrote ``names``."""
    shown = ", ".join(f"'{n}'" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"{len(names)} Softmax over an inner axis after a Transpose ({shown}) computed over the last axis between "
            "two Transposes (the same values), which ONNX Runtime's transpose optimizer merges with the one before: "
            "its CPU Softmax swaps an inner axis inside the kernel, out of the optimizer's sight (a YOLOv8's "
            "distribution-focal-loss Softmax: 4.5× faster).")
