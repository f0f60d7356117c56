"""Walk ONNX graphs with their control-flow subgraphs (If/Loop/Scan bodies), and small graph passes.

Every count ortlab shows (op counts, quantization coverage, weights) goes through :func:`walk_nodes`, so nodes
inside ``If`` branches and ``Loop``/``Scan`` bodies are counted too.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def ai_onnx_opset(model: onnx.ModelProto) -> int:
    """The ai.onnx opset version the model imports (0 when none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


@dataclass(frozen=True)
class NodeAt:
    """A node and where it lives: ``where`` is "" for the main graph, else "If 'name' then_branch/…"."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    where: str

    @property
    def in_subgraph(self) -> bool:
        return bool(self.where)


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, graph) of each subgraph a node holds (If branches, Loop/Scan bodies)."""
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.name, attr.g
        for i, g in enumerate(attr.graphs):
            yield f"{attr.name}[{i}]", g


def walk_nodes(graph: onnx.GraphProto, where: str = "") -> Iterator[NodeAt]:
    """Every node of ``graph`` and, depth first, of its subgraphs."""
    for node in graph.node:
        yield NodeAt(node, graph, where)
        for attr, sub in subgraphs(node):
            here = f"{node.op_type} '{node.name or node.output[0]}' {attr}"
            yield from walk_nodes(sub, f"{where} / {here}" if where else here)


def walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph inside it."""
    yield graph
    for node in graph.node:
        for _, sub in subgraphs(node):
            yield from walk_graphs(sub)


def has_subgraphs(graph: onnx.GraphProto) -> bool:
    return any(True for n in graph.node for _ in subgraphs(n))


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name → the nodes of ``graph`` (not its subgraphs) that read it, in graph order, each node once."""
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in dict.fromkeys(n.input):
            out.setdefault(i, []).append(n)
    return out


def _numel(t: TensorProto) -> int:
    return int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1


def constant_weights(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    """Float tensors (at least one dimension) held in Constant nodes, subgraphs included: weights that are
    not initializers."""
    for at in walk_nodes(graph):
        n = at.node
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for attr in n.attribute:
                if attr.name == "value" and attr.HasField("t") and attr.t.data_type in FLOAT_TYPES and attr.t.dims:
                    yield attr.t


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Turn Constant nodes that hold float tensors (weights) into initializers of the graph they are in, in
    place; returns how many. Constant outputs that are graph outputs are left alone. Needs IR version 4+."""
    moved = 0
    for graph in walk_graphs(model.graph):
        outputs = {o.name for o in graph.output}
        keep = []
        for n in graph.node:
            t = next((a.t for a in n.attribute if a.name == "value" and a.HasField("t")), None)
            if (n.op_type == "Constant" and n.domain in ("", "ai.onnx") and t is not None and len(n.attribute) == 1
                    and t.data_type in FLOAT_TYPES and t.dims and n.output[0] not in outputs
                    and t.data_location != TensorProto.EXTERNAL):
                init = graph.initializer.add()
                init.CopyFrom(t)
                init.name = n.output[0]
                moved += 1
            else:
                keep.append(n)
        if len(keep) != len(graph.node):
            del graph.node[:]
            graph.node.extend(keep)
    return moved


def flatten_gemm_biases(graph: onnx.GraphProto) -> int:
    """Give each Gemm bias initializer of shape [1, N] the shape [N] (a copy when other nodes read it too); return
    how many. Both broadcast to Gemm's [M, N] alike, but ONNX Runtime's QDQ quantizer reads a per-channel bias one
    value per channel and fails on a row ("The truth value of an array ... is ambiguous"): its MatMul+Add fusion
    keeps the Add's [1, N]."""
    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    vectors: dict[str, TensorProto] = {}
    for node in graph.node:
        c = inits.get(node.input[2]) if node.op_type == "Gemm" and len(node.input) > 2 else None
        if c is None or len(c.dims) != 2 or c.dims[0] != 1:
            continue
        if c.name not in vectors:
            vector = c
            if readers.get(c.name, 0) > 1:  # other nodes read it as it is: a copy, added to the graph
                vector = graph.initializer.add()
                vector.CopyFrom(c)
                vector.name = f"{c.name}_as_vector"
            vector.dims[:] = [c.dims[1]]
            vectors[c.name] = vector
        node.input[2] = vectors[c.name].name
    return len(vectors)


def _implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from outer scopes (not produced inside them)."""
    names: set[str] = set()
    for _, sub in subgraphs(node):
        inner = {i.name for i in sub.input} | {t.name for t in sub.initializer}
        for n in sub.node:
            names.update(x for x in n.input if x and x not in inner)
            names |= _implicit_inputs(n) - inner
            inner.update(n.output)
    return names


def names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name the nodes of ``graph`` read: their inputs and what their subgraphs read from outer scopes."""
    names: set[str] = set()
    for n in graph.node:
        names.update(x for x in n.input if x)
        names |= _implicit_inputs(n)
    return names


def topological_sort(graph: onnx.GraphProto) -> bool:
    """Order the nodes of ``graph`` and of every subgraph so each node follows the producers of its inputs
    (including the outer-scope values its subgraphs read), keeping the original order where it is free.
    Names not produced inside a graph (inputs, initializers, outer-scope values) are taken as available.
    Raises ``ValueError`` naming a node on a cycle. True when any graph's order changed."""
    changed = False
    for g in walk_graphs(graph):
        changed = _sort_one(g) or changed
    return changed


def _sort_one(graph: onnx.GraphProto) -> bool:
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        wanted = {x for x in n.input if x} | _implicit_inputs(n)
        d = {producer[x] for x in wanted if x in producer and producer[x] != i}
        deps.append(d)
        for j in d:
            users[j].append(i)
    ready = [i for i, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            deps[u].discard(i)
            if not deps[u]:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = next(n for i, n in enumerate(nodes) if i not in set(order))
        raise ValueError(f"the graph has a cycle through node '{stuck.name}' ({stuck.op_type})")
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)
        return True
    return False


def locate(model: onnx.ModelProto, text: str) -> NodeAt | None:
    """The node whose name appears in ``text`` (an error message), preferring nodes inside subgraphs and
    longer names; None when no node name appears."""
    best: NodeAt | None = None
    for at in walk_nodes(model.graph):
        name = at.node.name
        if (name and len(name) > 2 and name in text
                and (best is None or (at.in_subgraph, len(name)) > (best.in_subgraph, len(best.node.name)))):
            best = at
    return best


def describe(at: NodeAt) -> str:
    """"node 'x' (Max) in If '/If' then_branch" or "node 'x' (Max)"."""
    text = f"node '{at.node.name}' ({at.node.op_type})"
    return f"{text} in {at.where}" if at.where else text
