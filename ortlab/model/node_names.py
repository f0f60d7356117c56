"""Node names a person typed (``--exclude-nodes``, ``--int16-weight-nodes``) checked against the model's graph.

ONNX names nodes and tensors apart, and a per-node table or Netron shows both, so a tensor name
(``/layers.0/Softmax_output_0``) typed where a node name is expected is an easy slip that ONNX Runtime's quantizer
silently ignores. A tensor name is refused with the node that writes it (what to type instead); a name that is
neither is a warning with the closest node names (the quantizer's pre-processing may name nodes the source lacks).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

import onnx

from ortlab.core.errors import RecipeError
from ortlab.model.graphs import walk_nodes


def _quoted(nodes: Sequence[onnx.NodeProto]) -> str:
    return ", ".join(f"{n.name} ({n.op_type})" for n in nodes)


def tensor_not_node(name: str, nodes: Sequence[onnx.NodeProto], flag: str) -> str:
    """The sentence for tensor ``name`` given where a node is expected: the node that writes it, else the ones that
    read it, and the flag to type."""
    writers = [n for n in nodes if name in n.output]
    readers = [n for n in nodes if name in n.input]
    named_writers = [n for n in writers if n.name]
    if named_writers:
        return (f"{flag}: {name!r} is a tensor, not a node: node {_quoted(named_writers)} writes it; give "
                f"{flag} {named_writers[0].name}.")
    named_readers = [n for n in readers if n.name]
    writer = (f"the {writers[0].op_type} node that writes it has no name" if writers
              else "it is an input or a weight, written by no node")
    if named_readers:
        return (f"{flag}: {name!r} is a tensor, not a node ({writer}); the node(s) that read it: "
                f"{_quoted(named_readers)}; give {flag} {','.join(n.name for n in named_readers)}.")
    return f"{flag}: {name!r} is a tensor, not a node ({writer}, and no named node reads it)."


def check_node_names(model_path, names: Sequence[str], flag: str) -> list[str]:
    """Warnings for the ``names`` that are no node of the model at ``model_path`` and no tensor either (with the
    closest node names). Raises ``RecipeError`` naming the node to give when a name is a tensor's."""
    if not names:
        return []
    model = onnx.load(str(Path(model_path)), load_external_data=False)
    nodes = [at.node for at in walk_nodes(model.graph)]
    node_names = {n.name for n in nodes if n.name}
    tensors = {t for n in nodes for t in (*n.input, *n.output) if t} | {i.name for i in model.graph.input}
    warnings: list[str] = []
    for name in names:
        if name in node_names:
            continue
        if name in tensors:
            raise RecipeError(tensor_not_node(name, nodes, flag), step="validate")
        close = difflib.get_close_matches(name, sorted(node_names), n=3, cutoff=0.6)
        warnings.append(f"{flag}: no node named {name!r} in {Path(model_path).name}"
                        + (f" (did you mean {', '.join(close)}?)" if close else "")
                        + "; a name the graph does not have leaves nothing in float.")
    return warnings
