"""Graph outputs that no node of their own makes: a graph input returned as it is, an initializer returned as an
output, an output listed twice.

ONNX allows them, but ONNX Runtime's quantizers fail on the first ("Graph is not a DAG") and its float16 converter
on all three ("Nodes in a graph must be topologically sorted"). :func:`detach` gives each such output a node before a
transform; :func:`reattach` gives a copied output its own name again in the transform's result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import onnx
from onnx import helper

from ortlab.model import graphs

SUFFIX = "__ortlab_passthrough"  # with the output's position, the name of its copy while a transform runs


def copied_outputs(inputs: Iterable[str], outputs: Sequence[str]) -> list[int]:
    """The positions of the outputs :func:`detach` copies by an Identity (and :func:`reattach` names again): a graph
    input returned as it is, and an output listed a second time."""
    returned, listed, positions = set(inputs), set(), []
    for k, name in enumerate(outputs):
        if name in returned or name in listed:
            positions.append(k)
        else:
            listed.add(name)
    return positions


def detach(model: onnx.ModelProto) -> int:
    """In place, on the main graph: an initializer that is an output becomes a Constant node of the same name (its
    other consumers read it as before); an input that is an output, and an output listed a second time, is copied by
    an Identity to ``name + SUFFIX + position``, which the output then names (:func:`reattach` undoes it). Returns
    how many outputs were changed."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    made: list[onnx.NodeProto] = []
    kept = []
    for init in graph.initializer:
        if init.name in outputs:
            made.append(helper.make_node("Constant", [], [init.name], name=f"ortlab_output_{init.name}", value=init))
        else:
            kept.append(init)
    if made:
        del graph.initializer[:]
        graph.initializer.extend(kept)
        for i in [i for i in graph.input if i.name in {n.output[0] for n in made}]:  # IR 3: weights are inputs too
            graph.input.remove(i)
    for k in copied_outputs([i.name for i in graph.input], [o.name for o in graph.output]):
        out = graph.output[k]
        copy = f"{out.name}{SUFFIX}{k}"
        made.append(helper.make_node("Identity", [out.name], [copy], name=f"ortlab_output_{copy}"))
        out.name = copy
    graph.node.extend(made)
    if made:
        graphs.topological_sort(graph)
    return len(made)


def reattach(path: Path) -> bool:
    """In place, on the saved model at ``path`` (its external data untouched): each output ``name + SUFFIX + k``
    whose ``name`` is a graph input or another output names it again, and the nodes that only made the copy are
    removed. Returns whether the file changed."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    names = {i.name for i in graph.input} | {o.name for o in graph.output}
    changed = [o for o in graph.output if SUFFIX in o.name and o.name.rpartition(SUFFIX)[0] in names]
    if not changed:
        return False
    made = [o.name for o in changed]
    for out in changed:
        out.name = out.name.rpartition(SUFFIX)[0]
    _remove_unused(graph, made)
    onnx.save(model, str(path))
    return True


def _remove_unused(graph: onnx.GraphProto, names: list[str]) -> None:
    """Remove the nodes that make ``names`` once nothing reads them, then those that made their inputs, and so on."""
    chain = set(names)
    while True:
        read = graphs.names_read(graph) | {o.name for o in graph.output}
        dead = [n for n in graph.node if any(o in chain for o in n.output) and not any(o in read for o in n.output)]
        if not dead:
            return
        for n in dead:
            chain.update(x for x in n.input if x)
            graph.node.remove(n)
