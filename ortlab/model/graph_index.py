"""A model's main graph, indexed for the structural searches of :mod:`ortlab.model.patterns` and
:mod:`ortlab.model.decision_head`: producers, consumers, and which tensors are constant."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

# ops that only move or reshape data
CARRIERS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast", "Dropout"})
SHAPE_OPS = frozenset({"Shape", "Size"})


class GraphIndex:
    """The main graph's producers, consumers and the tensors that are constant (weights, Constant nodes, shapes
    and whatever is computed from them only)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.nodes = list(g.node)
        self.order = {id(n): i for i, n in enumerate(self.nodes)}
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.initializers = {t.name: t for t in g.initializer}
        self.const: set[str] = set(self.initializers)
        for n in self.nodes:  # graph order: a producer before its consumers
            ins = [i for i in n.input if i]
            if n.op_type == "Constant" or n.op_type in SHAPE_OPS or (ins and all(i in self.const for i in ins)):
                self.const.update(o for o in n.output if o)
        self.outputs = {o.name: o for o in g.output}
        self.has_conv = any(n.op_type == "Conv" for n in self.nodes)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)

    def computes(self, n: onnx.NodeProto) -> bool:
        """Whether ``n`` computes on activations (not a constant or shape-only node)."""
        return any(o not in self.const for o in n.output if o)

    def activations(self, n: onnx.NodeProto) -> list[str]:
        return [i for i in n.input if i and i not in self.const]

    def up(self, n: onnx.NodeProto) -> list[onnx.NodeProto]:
        return [self.producer[i] for i in self.activations(n) if i in self.producer]

    def down(self, n: onnx.NodeProto) -> list[onnx.NodeProto]:
        return [c for o in n.output for c in self.consumers.get(o, [])]

    def named(self, nodes: Iterable[onnx.NodeProto]) -> tuple[str, ...]:
        """The names of ``nodes`` that compute, once each, in graph order."""
        chosen = {id(n): n for n in nodes if n.name and self.computes(n)}
        return tuple(n.name for n in sorted(chosen.values(), key=lambda n: self.order[id(n)]))
