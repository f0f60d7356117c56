"""How a graph diff pairs the nodes of two versions of a model: each graph indexed by node and tensor
(:class:`IndexedGraph`), the float tensor a quantizer's tensor stands for (:func:`quantized_tensor_base`), a node's
role, and the matching itself (:func:`match_nodes`: by name, then by role and tensors)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import onnx

from ortlab.core import dtypes
from ortlab.model.inspect import tensor_nbytes, load_model, op_key

__all__ = ["IndexedGraph", "initializer_bytes", "load_for_diff", "match_nodes", "node_dict", "node_domain",
           "quantized_tensor_base", "role", "short_op"]


def node_domain(node: onnx.NodeProto) -> str:
    return "" if node.domain == "ai.onnx" else node.domain


def node_dict(node: onnx.NodeProto) -> dict:
    return {"name": node.name, "op_type": node.op_type, "domain": node_domain(node),
            "inputs": list(node.input), "outputs": list(node.output)}


def short_op(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "com.microsoft") else op_key(domain, op_type)


class IndexedGraph:
    """Index of one graph: producer of each tensor, consumers, initializer names."""

    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.initializers = {t.name for t in graph.initializer}
        self.graph_inputs = {v.name for v in graph.input}
        self.graph_outputs = [v.name for v in graph.output]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(self.nodes):
            for t in n.output:
                if t:
                    self.producer[t] = i
            for t in n.input:
                if t:
                    self.consumers[t].append(i)

    def key(self, i: int) -> tuple[str, str]:
        return node_domain(self.nodes[i]), self.nodes[i].op_type

    def neighbour_signature(self, i: int) -> tuple:
        n = self.nodes[i]
        prod = tuple(sorted(self.nodes[self.producer[t]].op_type for t in n.input if t in self.producer))
        cons = tuple(sorted(self.nodes[c].op_type for t in n.output for c in self.consumers.get(t, ())))
        return prod, cons


# the suffixes ONNX Runtime's quantizer and its QDQ fusions append to the tensor a quantized tensor stands for
_QUANT_SUFFIXES = ("_QuantizeLinear_Output", "_DequantizeLinear_Output", "_quantized", "_dequantized", "_q_to_dq",
                   "_post_dq", "_output_quantized")


def quantized_tensor_base(t: str) -> str:
    """``t`` without the suffixes ONNX Runtime's quantizer appends (``X_QuantizeLinear_Output`` → ``X``)."""
    changed = True
    while changed:
        changed = False
        for suffix in _QUANT_SUFFIXES:
            if t.endswith(suffix) and len(t) > len(suffix):
                t, changed = t[: -len(suffix)], True
    return t


def _bases(tensors) -> tuple[str, ...]:
    return tuple(quantized_tensor_base(t) for t in tensors)


def load_for_diff(path) -> onnx.ModelProto:
    # big weights' values are never compared (only dims, and the values of tensors of <= 4,096 elements)
    return load_model(Path(path), check=False, load_external=False, weights=False)


def initializer_bytes(graph: onnx.GraphProto) -> dict[str, int]:
    out: Counter[str] = Counter()
    for t in graph.initializer:
        out[dtypes.from_onnx(t.data_type)] += tensor_nbytes(t) or 0
    return dict(out)


# -- matching -----------------------------------------------------------------------------------------

def role(op_type: str) -> str:
    """The float op a node stands for: ONNX Runtime keeps a node's name when it quantizes or fuses it and only
    changes its op (``Conv`` → ``QLinearConv``, ``ConvInteger``, ``com.microsoft::FusedConv``, ``nchwc`` Conv;
    ``MatMul`` → ``QLinearMatMul``, ``MatMulInteger``, ``MatMulIntegerToFloat``, ``DynamicQuantizeMatMul``,
    ``FusedMatMul``; ``Gemm`` → ``QGemm``; ``Add`` → ``QLinearAdd``; ``Sigmoid`` → ``QLinearSigmoid``, ...)."""
    op = op_type
    for prefix in ("QLinear", "DynamicQuantize", "Fused", "QOrdered"):
        if op.startswith(prefix) and len(op) > len(prefix):
            op = op[len(prefix):]
            break
    else:
        if len(op) > 1 and op[0] == "Q" and op[1].isupper():  # QGemm, QAttention (not QuantizeLinear)
            op = op[1:]
    for suffix in ("IntegerToFloat", "Integer", "NBits"):
        if op.endswith(suffix) and len(op) > len(suffix):
            op = op[: -len(suffix)]
            break
    return op


def match_nodes(b: IndexedGraph, a: IndexedGraph) -> dict[int, int]:
    """before index → after index, by unique name first, then by structure."""
    pairs: dict[int, int] = {}

    def unique(g: IndexedGraph, keyf, pool) -> dict:
        seen: dict = {}
        dup = set()
        for i in pool:
            k = keyf(g, i)
            if k is None:
                continue
            if k in seen:
                dup.add(k)
            seen[k] = i
        return {k: v for k, v in seen.items() if k not in dup}

    keyfs = [
        lambda g, i: (g.nodes[i].name, g.key(i)) if g.nodes[i].name else None,
        # the same name and role: a node quantized or fused in place (Conv → QLinearConv keeps the Conv's name)
        lambda g, i: (g.nodes[i].name, role(g.nodes[i].op_type)) if g.nodes[i].name else None,
        # unnamed nodes: the same op on the same tensors once the quantizer's suffixes are stripped
        # (Reshape(c) → r is Reshape(c_QuantizeLinear_Output) → r_QuantizeLinear_Output), or the same role writing
        # the same tensor (Conv → c is QLinearConv → c_QuantizeLinear_Output)
        lambda g, i: (g.key(i), _bases(g.nodes[i].input), _bases(g.nodes[i].output)),
        lambda g, i: (role(g.nodes[i].op_type), _bases(g.nodes[i].output)) if g.nodes[i].output else None,
        lambda g, i: (g.key(i), tuple(g.nodes[i].input), tuple(g.nodes[i].output)),
        lambda g, i: (g.key(i), tuple(g.nodes[i].output)),
        lambda g, i: (g.key(i), tuple(g.nodes[i].input)),
    ]
    for keyf in keyfs:
        free_b = [i for i in range(len(b.nodes)) if i not in pairs]
        used_a = set(pairs.values())
        free_a = [j for j in range(len(a.nodes)) if j not in used_a]
        ub, ua = unique(b, keyf, free_b), unique(a, keyf, free_a)
        for k, i in ub.items():
            if k in ua:
                pairs[i] = ua[k]
    # topological-position signature: same op and neighbouring op types, paired in graph order
    used_a = set(pairs.values())
    groups_b: dict = defaultdict(list)
    groups_a: dict = defaultdict(list)
    for i in range(len(b.nodes)):
        if i not in pairs:
            groups_b[(b.key(i), b.neighbour_signature(i))].append(i)
    for j in range(len(a.nodes)):
        if j not in used_a:
            groups_a[(a.key(j), a.neighbour_signature(j))].append(j)
    for k, bs in groups_b.items():
        as_ = groups_a.get(k)
        if as_ and len(as_) == len(bs):
            pairs.update(zip(bs, as_))
    return pairs
