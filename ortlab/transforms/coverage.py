"""How much of a model int8 quantization really quantized: quantized nodes per op type, subgraphs included.

:class:`QuantCoverage` is plain data (the app shows it without importing onnx); :func:`quant_coverage` counts it
from the quantized model: ``QLinear*``/``QGemm``/``QAttention`` (QOperator), ``MatMulInteger``/``ConvInteger``/
``DynamicQuantize*`` (dynamic) and float ops fed by ``DequantizeLinear`` (QDQ), each by the op it wraps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from ortlab.model.graphs import walk_nodes

# integer op → the float op it replaces
_WRAPS = {
    "MatMulInteger": "MatMul", "ConvInteger": "Conv", "DynamicQuantizeMatMul": "MatMul", "MatMulIntegerToFloat": "MatMul",
    "DynamicQuantizeLSTM": "LSTM", "QAttention": "Attention", "QGemm": "Gemm", "QEmbedLayerNormalization":
    "EmbedLayerNormalization", "QOrderedMatMul": "MatMul", "QuantizeLinear": "", "DequantizeLinear": "",
    "DynamicQuantizeLinear": "",
}


@dataclass(frozen=True)
class QuantCoverage:
    """``quantized``: op type → nodes quantized (inside subgraphs too); ``candidates``: op type → nodes of the
    types asked to be quantized in the model that was quantized; ``in_subgraphs``: of the quantized nodes, those
    inside If/Loop/Scan bodies."""

    quantized: dict[str, int] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)
    in_subgraphs: int = 0
    # op type → candidate nodes the quantizer folded away (a Relu after a Conv: the int8 Conv's range clips it)
    folded: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Quantized nodes of every op type."""
        return int(sum(self.quantized.values()))

    @property
    def total_candidates(self) -> int:
        return int(sum(self.candidates.values()))

    def rows(self) -> list[tuple[str, int, int]]:
        """(op type, quantized, nodes of that type) for every op type seen, most quantized first."""
        ops = set(self.quantized) | set(self.candidates)
        rows = [(op, self.quantized.get(op, 0), max(self.candidates.get(op, 0), self.quantized.get(op, 0)))
                for op in ops]
        return sorted(rows, key=lambda r: (-r[1], -r[2], r[0]))

    def summary(self) -> str:
        """"MatMul 16/16, Gemm 0/2 (4 in subgraphs)" or "nothing quantized"."""
        if not self.rows():
            return "nothing quantized"
        text = ", ".join(f"{op} {q}/{n}" + (f" ({self.folded[op]} folded away)" if self.folded.get(op) else "")
                         for op, q, n in self.rows())
        if not self.total:
            text = f"nothing quantized ({text})"
        return text + (f" ({self.in_subgraphs} in subgraphs)" if self.in_subgraphs else "")


def wrapped_op(op_type: str) -> str | None:
    """The float op an integer op stands for ("" for Q/DQ themselves), None for an op that is not one."""
    if op_type in _WRAPS:
        return _WRAPS[op_type]
    if op_type.startswith("QLinear"):
        return op_type[len("QLinear"):]
    return None


def quant_coverage(model: Any, targets: Iterable[str] | None = None, source: Any = None,
                   counted_as: dict[str, str] | None = None, excluded: Iterable[str] = ()) -> QuantCoverage:
    """Count what ``model`` (an onnx ModelProto, quantized) has quantized. ``candidates`` counts the ``targets``
    op types in ``source`` (the model before quantizing; default ``model``'s float nodes plus the quantized ones);
    ``counted_as`` renames candidate op types the quantizer rewrites first (dynamic: Gemm → MatMul); the nodes
    named in ``excluded`` (kept in float, though they may read DequantizeLinear outputs) never count."""

    wanted = set(targets) if targets is not None else None
    rename = counted_as or {}
    nodes = list(walk_nodes(model.graph))
    dq_outputs = {o for at in nodes if at.node.op_type == "DequantizeLinear" for o in at.node.output}
    quantized: Counter[str] = Counter()
    in_sub = 0
    kept = set(excluded)
    for at in nodes:
        n = at.node
        if n.name and n.name in kept:
            continue
        wrapped = wrapped_op(n.op_type)
        if (wrapped is None and n.domain in ("", "ai.onnx") and (wanted is None or n.op_type in wanted)
                and any(i in dq_outputs for i in n.input)):
            wrapped = n.op_type  # QDQ: an op the quantizer wraps in DequantizeLinear → op → QuantizeLinear
        if wrapped:
            quantized[wrapped] += 1
            in_sub += at.in_subgraph
    if source is not None:
        candidates = Counter(rename.get(at.node.op_type, at.node.op_type) for at in walk_nodes(source.graph))
    else:
        candidates = Counter(rename.get(at.node.op_type, at.node.op_type) for at in nodes)
        candidates.update(quantized)
    if wanted is not None:
        candidates = Counter({op: n for op, n in candidates.items() if op in wanted or op in quantized})
    left = Counter(at.node.op_type for at in nodes)
    folded = {op: n - quantized.get(op, 0) - left.get(op, 0) for op, n in candidates.items()
              if source is not None and n - quantized.get(op, 0) - left.get(op, 0) > 0}
    return QuantCoverage(dict(quantized), dict(candidates), int(in_sub), folded)
