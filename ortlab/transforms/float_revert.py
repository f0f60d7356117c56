"""Run chosen nodes of a QDQ model in float again, in memory: what keeping them out of quantization would give,
without a new quantize.

A node of ORT's QDQ output reads each input through a ``DequantizeLinear``: an activation as ``x → QuantizeLinear →
DequantizeLinear``, a weight or bias as ``DequantizeLinear(int8/int32 initializer)``. Reverting the node to float
bypasses those pairs: an activation input reads ``x`` itself, a weight or bias the float value of the fp32 model's
node of the same name (when its weight is that node's, within one quantization step), else the dequantized value.
Its output keeps the Q/DQ pair its quantized consumers read, as ORT's ``nodes_to_exclude`` leaves it.

A *unit* is a node with the producers that feed only it (through Q/DQ pairs), up to ``max_nodes``: a SiLU's
``Mul`` brings its ``Sigmoid`` and ``Conv`` (:func:`producer_chain`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_CLIPPING = ("Relu", "Clip")  # activations ORT's QDQ quantizer removes when the Q/DQ after them clips alike
SUFFIX = "_float_revert"  # the name of a float initializer that replaces a dequantized one


class _Graph:
    """Who produces and who consumes each tensor of a graph."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.nodes = {n.name: n for n in graph.node if n.name}

    def real_producer(self, tensor: str) -> Any:
        n = self.producer.get(tensor)
        while n is not None and n.op_type in _QDQ and n.input:
            n = self.producer.get(n.input[0])
        return n

    def real_consumers(self, tensor: str, seen: set[str] | None = None) -> list[Any]:
        seen = seen if seen is not None else set()
        out = []
        for c in self.consumers.get(tensor, []):
            if c.op_type in _QDQ:
                if c.output and c.output[0] not in seen:
                    seen.add(c.output[0])
                    out += self.real_consumers(c.output[0], seen)
            else:
                out.append(c)
        return out


def producer_chain(graph: onnx.GraphProto, name: str, max_nodes: int) -> list[str]:
    """``name`` and the producers that feed only it (through Q/DQ pairs), up to ``max_nodes`` nodes: a SiLU's Mul
    brings its Sigmoid and Conv. ``[name]`` when the graph has no such node."""
    g = _Graph(graph)
    if name not in g.nodes:
        return [name]
    chain = [name]
    grew = True
    while grew and len(chain) < max_nodes:
        grew = False
        for member in list(chain):
            for i in g.nodes[member].input:
                p = g.real_producer(i)
                if p is None or not p.name or p.name in chain or p.op_type in _QDQ:
                    continue
                if all(c.name in chain for o in p.output for c in g.real_consumers(o)) and len(chain) < max_nodes:
                    chain.append(p.name)
                    grew = True
    return chain


def quantized_nodes(graph: onnx.GraphProto) -> list[str]:
    """Names of the nodes that read at least one input through a ``DequantizeLinear`` (the nodes that run
    quantized), in graph order."""
    dq = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return [n.name for n in graph.node if n.name and n.op_type not in _QDQ and any(i in dq for i in n.input)]


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def _dequantize(dq: Any, values: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """The float value of a ``DequantizeLinear`` of a constant, and its scale broadcast to the value's shape."""
    if dq.input[0] not in values or dq.input[1] not in values:
        return None
    q = values[dq.input[0]].astype(np.float64)
    scale = values[dq.input[1]].astype(np.float64)
    zero = values[dq.input[2]].astype(np.float64) if len(dq.input) > 2 and dq.input[2] in values else np.zeros(1)
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and scale.size > 1 and q.ndim > 0:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.size > 1 else zero
    return ((q - zero) * scale).astype(np.float32), np.broadcast_to(scale, q.shape)


def _same_weight(source: np.ndarray | None, deq: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether ``source`` quantizes to the dequantized value: the same shape, within one step of the scale."""
    value, scale = deq
    return source is not None and source.shape == value.shape and bool(
        np.all(np.abs(source.astype(np.float64) - value) <= scale * 1.01 + 1e-12))


def ort_op_types(op_types: Iterable[str] | None = None) -> set[str]:
    """The op types ORT's static quantizer quantizes: ``op_types`` when given, else every type it supports."""
    if op_types:
        return set(op_types)
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return set(QLinearOpsRegistry) | set(QDQRegistry)


class FloatReverter:
    """Copies of one QDQ model with chosen nodes in float (:meth:`model`); ``float_model``: the fp32 model the
    float weights come from (its nodes of the same name); ``op_types``: those the quantizer was asked to quantize
    (None: all ORT supports)."""

    def __init__(self, qdq: onnx.ModelProto, float_model: onnx.ModelProto | None,
                 op_types: Iterable[str] | None = None) -> None:
        self.qdq = qdq
        self._g = _Graph(qdq.graph)
        ops = ort_op_types(op_types)
        self._quantized = {n for n in quantized_nodes(qdq.graph) if self._op(n) in ops}
        self._values = _constants(qdq.graph)
        self._float_nodes = {n.name: n for n in float_model.graph.node if n.name} if float_model is not None else {}
        self._float_values = _constants(float_model.graph) if float_model is not None else {}
        self._float_producer = {o: n for n in float_model.graph.node for o in n.output} if float_model is not None else {}
        self.dequantized: set[str] = set()  # nodes whose weights had no float twin: run on dequantized weights

    def _float_input(self, node: Any, index: int, deq: tuple[np.ndarray, np.ndarray], twin: Any) -> np.ndarray:
        """The float value of ``node``'s constant input ``index``: its fp32 twin's when the twin's weight (input 1)
        matches, else the dequantized value."""
        if twin is not None and index < len(twin.input):
            source = self._float_values.get(twin.input[index])
            if source is not None and source.shape == deq[0].shape:
                return source.astype(np.float32)
        self.dequantized.add(node.name)
        return deq[0]

    def _twin(self, node: Any) -> Any:
        """``node``'s fp32 twin: the node of the same name and op whose weight (input 1, when constant) quantizes to
        this node's, else None."""
        twin = self._float_nodes.get(node.name)
        if twin is None or twin.op_type != node.op_type or len(twin.input) != len(node.input):
            return None
        if len(node.input) > 1:
            dq = self._g.producer.get(node.input[1])
            if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in self._values:
                deq = _dequantize(dq, self._values)
                if deq is None or not _same_weight(self._float_values.get(twin.input[1]), deq):
                    return None
        return twin

    def model(self, nodes: Iterable[str]) -> onnx.ModelProto:
        """A copy of the QDQ model where ``nodes`` run in float, as ORT's ``nodes_to_exclude`` would leave them: their
        weights and biases float; an activation read through a Q/DQ pair float when ORT would leave it so
        (:meth:`_float_in_ort`); a graph output one of them writes float. Q/DQ nodes left unused are removed."""
        names = set(nodes)
        m = onnx.ModelProto()
        m.CopyFrom(self.qdq)
        self._float_outputs(m.graph, names)
        g = _Graph(m.graph)
        quantized = self._quantized
        inits = {t.name for t in m.graph.initializer}
        added: list[Any] = []
        for node in m.graph.node:
            if node.name not in names:
                continue
            twin = self._twin(node)
            for k, tensor in enumerate(node.input):
                dq = g.producer.get(tensor)
                if dq is None or dq.op_type != "DequantizeLinear":
                    continue
                src = dq.input[0]
                if src in self._values:  # a quantized weight or bias
                    deq = _dequantize(dq, self._values)
                    if deq is None:
                        continue
                    name = f"{tensor}{SUFFIX}"
                    if name not in inits:
                        m.graph.initializer.append(numpy_helper.from_array(self._float_input(node, k, deq, twin), name))
                        inits.add(name)
                    node.input[k] = name
                    continue
                q = g.producer.get(src)
                if q is None or q.op_type != "QuantizeLinear":
                    continue
                x = q.input[0]
                if self._float_in_ort(g, x, names, quantized):
                    node.input[k] = self._unclipped(m.graph, g, x, inits, added)
        m.graph.node.extend(added)
        _prune(m.graph)
        _sort(m.graph)
        return m

    def _op(self, name: str) -> str:
        node = self._g.nodes.get(name)
        return node.op_type if node is not None else ""

    @staticmethod
    def _float_in_ort(g: _Graph, x: str, names: set[str], quantized: set[str]) -> bool:
        """Whether ORT would leave activation ``x`` unquantized with ``names`` excluded: a quantized node quantizes
        its inputs and its output, so ``x`` stays float only when every node that reads it is excluded and the node
        that writes it is excluded or was not quantized (reads no Q/DQ pair, or its op type was not asked for)."""
        p = g.producer.get(x)
        if p is not None and p.name not in names and p.name in quantized:
            return False
        return all(c.name in names for c in g.real_consumers(x))

    def _float_outputs(self, graph: onnx.GraphProto, names: set[str]) -> None:
        """A graph output that a reverted node writes through Q → DQ is written by the node itself, as when ORT
        leaves the node out (nothing else reads it through that pair)."""
        g = _Graph(graph)
        outputs = {o.name for o in graph.output}
        for node in graph.node:
            if node.name not in names:
                continue
            for k, y in enumerate(node.output):
                qs = [c for c in g.consumers.get(y, []) if c.op_type == "QuantizeLinear"]
                if len(qs) != 1 or len(g.consumers.get(y, [])) != 1:
                    continue
                dqs = g.consumers.get(qs[0].output[0], [])
                if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].output[0] not in outputs:
                    continue
                if g.consumers.get(dqs[0].output[0]):
                    continue
                node.output[k] = dqs[0].output[0]
                graph.node.remove(dqs[0])
                graph.node.remove(qs[0])

    def _unclipped(self, graph: onnx.GraphProto, g: _Graph, x: str, inits: set[str], added: list[Any]) -> str:
        """``x`` as the fp32 model computes it: ORT's quantizer drops a Relu/Clip whose range the Q/DQ pair after it
        clips anyway (the node before it then writes its output); bypassing that pair needs the activation back."""
        fp = self._float_producer.get(x)
        mine = g.producer.get(x)
        if fp is None or fp.op_type not in _CLIPPING or (mine is not None and mine.op_type == fp.op_type):
            return x
        name = f"{x}{SUFFIX}"
        if any(name in n.output for n in added):
            return name
        act = onnx.NodeProto()
        act.CopyFrom(fp)
        act.name = f"{fp.name}{SUFFIX}"
        del act.input[:]
        act.input.extend([x, *fp.input[1:]])
        del act.output[:]
        act.output.append(name)
        for extra in fp.input[1:]:
            if extra and extra not in inits and extra in self._float_values:
                graph.initializer.append(numpy_helper.from_array(self._float_values[extra], extra))
                inits.add(extra)
        added.append(act)
        return name


def _reads(nodes: Iterable[Any]) -> set[str]:
    """Every tensor name the nodes read, their subgraphs' (If/Loop bodies) included."""
    out: set[str] = set()
    for n in nodes:
        out.update(n.input)
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                out |= _reads(g.node)
    return out


def _prune(graph: onnx.GraphProto) -> None:
    """Removes the Q/DQ nodes whose outputs nothing reads, and the initializers nothing reads any more."""
    outputs = {o.name for o in graph.output}
    while True:
        used = _reads(graph.node) | outputs
        dead = [n for n in graph.node if n.op_type in _QDQ and not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    used = _reads(graph.node) | outputs
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def _sort(graph: onnx.GraphProto) -> None:
    """Puts the nodes back in topological order (an added activation is appended after its readers)."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    outer = _reads(graph.node) - known - {o for n in graph.node for o in n.output}
    known |= outer  # names from an enclosing scope
    pending = list(graph.node)
    ordered: list[Any] = []
    while pending:
        rest = []
        for n in pending:
            if all(i in known for i in n.input):
                ordered.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):  # a cycle or a name from a subgraph: keep the rest as it was
            ordered += rest
            break
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)
