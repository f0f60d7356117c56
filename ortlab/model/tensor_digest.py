"""What computes each tensor of a graph, as a digest: two tensors with the same digest are computed by the same ops,
attributes, weights and graph inputs, whatever their names and whatever else the graph holds.

The digest of a node's output hashes the node's domain, op type, attributes and output position with the digests of
its inputs; an initializer's hashes its type, shape and values; a graph input's its name and type. The model's
opset imports (what each op means) are part of every digest. A node holding a subgraph (If, Loop, Scan) may read any
outer tensor by name: its outputs hash the whole graph's text, so they match only within the same model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

import onnx
from onnx import numpy_helper

from ortlab.core.digest import update_with_array


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()


def _attributes(node: onnx.NodeProto) -> bytes:
    return b"".join(a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name))


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _opsets(model: onnx.ModelProto) -> str:
    return "|".join(f"{o.domain}:{o.version}" for o in sorted(model.opset_import, key=lambda o: o.domain))


def initializer_digests(model: onnx.ModelProto, names: Collection[str] | None = None) -> dict[str, str]:
    """The digest of each initializer of the main graph (those named in ``names``; all when None), by name: what
    :func:`tensor_digests` hashes for it."""
    opsets = _opsets(model)
    out: dict[str, str] = {}
    for t in model.graph.initializer:
        if names is None or t.name in names:
            h = hashlib.sha256(f"initializer|{opsets}|".encode())
            update_with_array(h, numpy_helper.to_array(t))
            out[t.name] = h.hexdigest()
    return out


def tensor_digests(model: onnx.ModelProto, initializers: Mapping[str, str] | None = None) -> dict[str, str]:
    """The digest of every tensor of the model's main graph (initializers, graph inputs, node outputs) by name. The
    graph's nodes must be in topological order (as ONNX requires); an input no earlier node or initializer gives
    hashes as its name alone. ``initializers``: the digests of every initializer, as :func:`initializer_digests`
    gives them, where the caller keeps them up to date (they are not computed again)."""
    g = model.graph
    opsets = _opsets(model)
    out: dict[str, str] = dict(initializers) if initializers is not None else initializer_digests(model)
    for i in g.input:
        if i.name not in out:
            out[i.name] = _sha("input", opsets, i.name, i.type.SerializeToString(deterministic=True))
    whole = ""
    for node in g.node:
        inputs = [out.get(name, _sha("unknown", name)) if name else "" for name in node.input]
        if _has_subgraph(node):
            whole = whole or _sha(g.SerializeToString(deterministic=True))
            inputs.append(whole)
        head = _sha("node", opsets, node.domain, node.op_type, _attributes(node), *inputs)
        for k, name in enumerate(node.output):
            if name:
                out[name] = _sha(head, str(k))
    return out
