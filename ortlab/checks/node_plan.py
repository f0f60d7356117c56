"""What a per-node analysis (:mod:`ortlab.checks.analyze`) runs and compares: the candidate's nodes matched to the
reference's float tensors, and the "local" model holding each quantized node's copy fed with the reference's
fp32 inputs (see :mod:`ortlab.checks.analyze` for the matching rules)."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

QUANT_OPS = ("QuantizeLinear", "DequantizeLinear")
QUANT_INPUT_SUFFIX = "_QuantizeLinear_Input"


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name → ONNX element type, from inputs, outputs, value_info and initializers."""
    g = model.graph
    out: dict[str, int] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    for init in g.initializer:
        out[init.name] = init.data_type
    return out


@dataclass
class NodePlan:
    """What to run and compare: per node (name, op, ref tensor, candidate tensor, local output or None)."""

    nodes: list[tuple[str, str, str, str, str | None]]
    ref_outputs: list[str]
    cand_outputs: list[str]
    local_model: bytes | None
    local_inputs: list[str]
    unmatched: list[str]
    qdq: bool
    unnamed: dict[str, str] = field(default_factory=dict)  # rows named by their output tensor → their node's op


def _is_float(name: str, types: dict[str, int]) -> bool:
    return types.get(name) in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


class _CandidateGraph:
    """The candidate graph indexed: its initializers, each tensor's producer and consumers."""

    def __init__(self, g: onnx.GraphProto) -> None:
        self.graph = g
        self.inits = {i.name: i for i in g.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in g.node:
            for o in node.output:
                self.producer[o] = node
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
        self.qdq = any(n.op_type in QUANT_OPS for n in g.node)

    def produced_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        p = self.producer.get(name)
        return p if p is not None and p.op_type == op_type else None

    def fake_quant_of(self, t: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
        """(Q, DQ) that turn float tensor ``t`` into its dequantized form, when the candidate has them."""
        for q in self.consumers.get(t, []):
            if q.op_type == "QuantizeLinear" and q.input[0] == t:
                for dq in self.consumers.get(q.output[0], []):
                    if dq.op_type == "DequantizeLinear":
                        return q, dq
        return None

    def compared_nodes(self) -> list[onnx.NodeProto]:
        """The nodes whose output is compared: every computing node, only the quantized ones in a QDQ graph."""
        out = []
        for node in self.graph.node:
            if node.op_type in QUANT_OPS or not node.output:
                continue
            quantized = any(self.produced_by(i, "DequantizeLinear") is not None for i in node.input)
            if self.qdq and not quantized:
                continue
            out.append(node)
        return out


class _LocalModel:
    """The local model being built: each quantized node's copy fed with the reference's fp32 inputs."""

    def __init__(self, cand: _CandidateGraph, ref_types: dict[str, int], ref_inputs: set[str]) -> None:
        self.cand = cand
        self.ref_types = ref_types
        self.ref_inputs = ref_inputs
        self.ref_known = set(ref_types) | ref_inputs
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}
        self.inputs: dict[str, int] = {}
        self.outputs: list[str] = []
        self._weights: set[str] = set()
        self._fake_quantized: dict[str, str] = {}

    def _add_init(self, name: str) -> None:
        if name and name in self.cand.inits and name not in self.inits:
            self.inits[name] = self.cand.inits[name]

    def _add_copy(self, node: onnx.NodeProto, inputs: list[str], outputs: list[str], tag: str) -> None:
        c = onnx.NodeProto()
        c.CopyFrom(node)
        c.name = f"{node.name or node.op_type}{tag}"
        del c.input[:]
        c.input.extend(inputs)
        del c.output[:]
        c.output.extend(outputs)
        self.nodes.append(c)

    def _input(self, x: str) -> str | None:
        """The local model's tensor for candidate input ``x`` of a quantized node (None: not possible)."""
        if not x or x in self.cand.inits:
            self._add_init(x)
            return x
        dq = self.cand.produced_by(x, "DequantizeLinear")
        if dq is not None:
            if dq.input[0] in self.cand.inits:
                return self._weight(x, dq)
            return self._fake_quantized_input(x, dq)
        if x in self.ref_known:  # a float activation the candidate does not quantize here
            self.inputs[x] = self.ref_types.get(x, TensorProto.FLOAT)
            return x
        return None

    def _weight(self, x: str, dq: onnx.NodeProto) -> str:
        """A quantized weight: its DequantizeLinear as it is."""
        if x not in self._weights:
            for i in dq.input:
                self._add_init(i)
            self.nodes.append(dq)
            self._weights.add(x)
        return x

    def _fake_quantized_input(self, x: str, dq: onnx.NodeProto) -> str | None:
        """A quantized activation: the reference's fp32 tensor through the candidate's own Q/DQ."""
        q = self.cand.produced_by(dq.input[0], "QuantizeLinear")
        if q is None:
            return None
        t = q.input[0]
        if t not in self.ref_known or (not _is_float(t, self.ref_types) and t not in self.ref_inputs):
            return None
        if x not in self._fake_quantized:
            params = list(q.input[1:]) + list(dq.input[1:])
            for i in params:
                self._add_init(i)
            if any(i and i not in self.cand.inits for i in params):
                return None  # scales computed at run time: not reproducible here
            self.inputs[t] = self.ref_types.get(t, TensorProto.FLOAT)
            self._add_copy(q, [t, *q.input[1:]], [f"{x}__lq"], "__lq")
            self._add_copy(dq, [f"{x}__lq", *dq.input[1:]], [f"{x}__l"], "__ldq")
            self._fake_quantized[x] = f"{x}__l"
        return self._fake_quantized[x]

    def add_node(self, node: onnx.NodeProto, fq: tuple[onnx.NodeProto, onnx.NodeProto] | None) -> str | None:
        """Copies ``node`` (and its output's Q/DQ ``fq``) into the local model; its local output, or None
        when an input cannot be reproduced."""
        ins = [self._input(x) for x in node.input]
        if not all(i is not None for i in ins):
            return None
        outs = [f"{o}__lout" if o else "" for o in node.output]
        self._add_copy(node, [i or "" for i in ins], outs, "__local")
        local_out = outs[0]
        if fq is not None:
            y = node.output[0]
            q, dq = fq
            for i in list(q.input[1:]) + list(dq.input[1:]):
                self._add_init(i)
            self._add_copy(q, [local_out, *q.input[1:]], [f"{y}__loq"], "__loq")
            self._add_copy(dq, [f"{y}__loq", *dq.input[1:]], [f"{y}__lodq"], "__lodq")
            local_out = f"{y}__lodq"
        self.outputs.append(local_out)
        return local_out

    def serialised(self, cand: onnx.ModelProto) -> bytes | None:
        """The local model with ``cand``'s opsets and IR version, or None when it computes nothing."""
        if not self.outputs:
            return None
        graph = helper.make_graph(
            self.nodes, "ortlab_local",
            [helper.make_tensor_value_info(n, t, None) for n, t in self.inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in self.outputs],
            list(self.inits.values()))
        lm = helper.make_model(graph, opset_imports=list(cand.opset_import))
        lm.ir_version = cand.ir_version
        return lm.SerializeToString()


def _reference_name(y: str, ref_types: dict[str, int]) -> str:
    """The reference tensor of candidate tensor ``y``: a graph output keeps its name on the DequantizeLinear;
    the node writes "<name>_QuantizeLinear_Input"."""
    if y not in ref_types and y.endswith(QUANT_INPUT_SUFFIX):
        return y[:-len(QUANT_INPUT_SUFFIX)]
    return y


def plan_nodes(ref: onnx.ModelProto, cand: onnx.ModelProto) -> NodePlan:
    """Which nodes of ``cand`` to compare with which tensors of ``ref``, and the local model of the quantized ones."""
    ref_types = tensor_types(ref)
    ref_inputs = {i.name for i in ref.graph.input}
    graph = _CandidateGraph(cand.graph)
    local = _LocalModel(graph, ref_types, ref_inputs)
    nodes: list[tuple[str, str, str, str, str | None]] = []
    unmatched: list[str] = []
    unnamed: dict[str, str] = {}
    for node in graph.compared_nodes():
        y = node.output[0]
        ry = _reference_name(y, ref_types)
        if not _is_float(ry, ref_types):
            if graph.qdq and ry not in ref_types:
                unmatched.append(node.name or y)
            continue
        fq = graph.fake_quant_of(y)
        cand_tensor = fq[1].output[0] if fq is not None else y
        local_out = local.add_node(node, fq) if graph.qdq else None
        nodes.append((node.name or y, node.op_type, ry, cand_tensor, local_out))
        if not node.name:
            unnamed[y] = node.op_type
    ref_outputs = sorted({n[2] for n in nodes} | (set(local.inputs) - ref_inputs))
    cand_outputs = sorted({n[3] for n in nodes})
    return NodePlan(nodes, ref_outputs, cand_outputs, local.serialised(cand), list(local.inputs), unmatched, graph.qdq,
                    unnamed)
