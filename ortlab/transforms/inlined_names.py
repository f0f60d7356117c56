"""Names for the nodes ONNX Runtime's pre-processing writes in place of a node it replaced.

ORT inlines an operator defined as an ONNX function when it has no kernel for it (HardSwish becomes HardSigmoid +
Mul) and writes the body's nodes without names. A person who names the original node (``--exclude-nodes
HardSwish.20``, as ``analyze`` tells them) would name nothing: the quantizer excludes by node name. Here the node
that writes the replaced node's output takes its name, and the other nodes of the body are named
``NAME/inlined/OP``, so excluding ``NAME`` excludes all of them (:func:`with_inlined`).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

INLINED = "/inlined/"


def _tensors(graph: onnx.GraphProto) -> set[str]:
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def name_replacements(source: onnx.GraphProto, processed: onnx.GraphProto) -> dict[str, list[str]]:
    """Give the unnamed nodes of ``processed`` that stand in for a named node of ``source`` (gone from
    ``processed``) names: the one that writes the source node's output takes its name, the nodes that feed it
    through tensors ``source`` does not have are ``NAME/inlined/OP`` (numbered when repeated). Changes
    ``processed`` in place; returns each source name → the names given."""
    writers = {out: node.name for node in source.node if node.name for out in node.output if out}
    known = _tensors(source)
    used = {node.name for node in processed.node if node.name}
    producer = {out: node for node in processed.node for out in node.output}
    given: dict[str, list[str]] = {}
    for node in processed.node:
        owner = next((writers[out] for out in node.output if out in writers), None)
        if node.name or owner is None or owner in used:
            continue
        node.name = owner
        used.add(owner)
        given[owner] = [owner]
        pending = [t for t in node.input if t not in known]
        while pending:
            body = producer.get(pending.pop())
            if body is None or body.name:
                continue
            name, k = f"{owner}{INLINED}{body.op_type}", 1
            while name in used:
                k += 1
                name = f"{owner}{INLINED}{body.op_type}_{k}"
            body.name = name
            used.add(name)
            given[owner].append(name)
            pending.extend(t for t in body.input if t not in known)
    return given


def with_inlined(names: Iterable[str], graph: onnx.GraphProto) -> list[str]:
    """``names`` and, for each, the nodes of ``graph`` named ``NAME/inlined/…`` (the rest of what it was
    replaced by)."""
    wanted = list(dict.fromkeys(names))
    prefixes = tuple(f"{name}{INLINED}" for name in wanted)
    extra = [node.name for node in graph.node if prefixes and node.name.startswith(prefixes)]
    return list(dict.fromkeys([*wanted, *extra]))
