"""The weights an int8 recipe leaves in float because of their op type, when they are most of the model.

ONNX Runtime's static quantizer has no LSTM, GRU or RNN kernel; its dynamic quantizer takes LSTM
(``DynamicQuantizeLSTM``) and Conv (``ConvInteger``) only when asked, and ortlab's dynamic default asks for MatMul and
Gemm alone. On a recurrent model (a wake-word or voice-activity detector) an int8 run can then quantize the one
small dense layer and leave the recurrent weights, nearly all of the model, as they were: a result the source's
size (openWakeWord's hey_mycroft: 102%; ddddocr's CRNN, whose LSTM holds 31% of the weights: 49%), which the coverage
line ("Gemm 1/1") does not show. :func:`untaken_weights` says so, with the share and the recipe that takes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

import onnx

from ortlab.model import graphs
from ortlab.model.inspect import WEIGHT_INPUTS, tensor_nbytes
from ortlab.settings.config import DYNAMIC_DEFAULT_OP_TYPES

__all__ = ["MIN_SHARE", "untaken_weights", "weight_bytes"]

MIN_SHARE = 0.25  # said when the untaken weights are at least this share of the model's float weights
NO_INT8_KERNEL = frozenset({"GRU", "RNN"})  # ONNX Runtime quantizes them in neither mode
_FLOAT = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                    onnx.TensorProto.BFLOAT16})


def _weighted(model: onnx.ModelProto) -> tuple[list[tuple[str, str, int]], int]:
    """(name or first output, op type, bytes of its stored float weights) of each weighted node, and the bytes of
    every stored float tensor of the model, subgraphs included. Reads dims only: external data need not be loaded."""
    stored = {t.name: tensor_nbytes(t) or 0 for g in graphs.walk_graphs(model.graph) for t in g.initializer
              if t.data_type in _FLOAT}
    nodes = [(n.name or n.output[0], n.op_type,
              sum(stored.get(n.input[i], 0) for i in WEIGHT_INPUTS[n.op_type] if i < len(n.input)))
             for n in (at.node for at in graphs.walk_nodes(model.graph))
             if n.op_type in WEIGHT_INPUTS and n.domain in ("", "ai.onnx")]
    return nodes, sum(stored.values())


def weight_bytes(model: onnx.ModelProto) -> tuple[dict[str, int], int]:
    """(bytes of the stored float weights of each weighted node, by node name or first output; bytes of every
    stored float tensor of the model), subgraphs included."""
    nodes, total = _weighted(model)
    return {name: size for name, _, size in nodes}, total


def _remedy(op: str, dynamic: bool, targets: Collection[str]) -> str:
    asked = ",".join(dict.fromkeys([*(targets if dynamic else DYNAMIC_DEFAULT_OP_TYPES), op]))
    if op in NO_INT8_KERNEL:
        return (f"ONNX Runtime has no int8 kernel for {op} in either mode, so int8 cannot make this model much "
                "smaller; fp16 halves every weight")
    if op == "LSTM":
        how = ("dynamic int8 takes LSTM only when asked" if dynamic
               else "ONNX Runtime's static int8 has no LSTM kernel; its dynamic int8 takes LSTM when asked")
        return (f"{how} (--quant-mode dynamic --op-types {asked}, DynamicQuantizeLSTM): time it, as a small "
                "LSTM can run slower in int8 than in float at batch 1")
    if op == "Conv" and dynamic:
        return ("dynamic int8 leaves Conv in float, as its ConvInteger runs far slower than fp32 on CPU; static int8 "
                "(--quant-mode static, with calibration images) quantizes Conv")
    return f"this int8 recipe does not take {op}" + (f" (--op-types {asked} asks for it)" if dynamic else "")


def untaken_weights(source: onnx.ModelProto, targets: Collection[str], dynamic: bool,
                    excluded: Collection[str] = ()) -> list[str]:
    """One warning per op type outside ``targets`` (the op types the quantizer was asked to take) whose nodes hold at
    least :data:`MIN_SHARE` of ``source``'s float weights, with what would take them; [] otherwise. Nodes in
    ``excluded`` were kept in float on purpose and are not counted."""
    weighted, total = _weighted(source)
    if not total:
        return []
    held: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    for name, op, size in weighted:
        if size and op not in targets and name not in excluded:
            held[op] += size
            nodes[op] += 1
    out = []
    for op, size in held.most_common():
        share = size / total
        if share >= MIN_SHARE:
            out.append(f"{nodes[op]} {op} node(s) hold {share:.0%} of the model's weights, which stay in float, as "
                       f"large as in the source: {_remedy(op, dynamic, targets)}.")
    return out
