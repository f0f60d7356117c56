"""Which declared tensor types and shapes a model contradicts: ONNX's checker says only "Inferred elem type differs
from existing elem type: (1) vs (13)"; this finds the tensor, what it is declared as and which node makes what."""

from __future__ import annotations

import re

import onnx

from ortlab.core import dtypes
from ortlab.core.onnx_errors import ONNX_ERRORS

# the last: a declared intermediate type reaches the next node ("B has inconsistent type tensor(float)")
_CONTRADICTIONS = ("Inferred elem type differs", "Inferred shape and existing shape differ", "has inconsistent type")


def is_contradiction(message: str) -> bool:
    """Whether a checker message is about a declared type or shape that inference contradicts."""
    return any(text in message for text in _CONTRADICTIONS)


def _type_pair(message: str) -> tuple[int, int] | None:
    """(inferred, declared) element types of "…differs from existing elem type: (1) vs (13)", if said."""
    match = re.search(r"existing elem type: \((\d+)\) vs \((\d+)\)", message)
    return (int(match[1]), int(match[2])) if match else None


def _type_text(elem_type: int) -> str:
    name = dtypes.from_onnx(elem_type)
    return f"type {name}, which ONNX does not define" if name.isdigit() else name


def _dims(value_type: onnx.TypeProto) -> list[int | None] | None:
    tensor = value_type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]


def _shape_text(dims: list[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _differs(declared: list[int | None] | None, inferred: list[int | None] | None) -> bool:
    if declared is None or inferred is None:
        return False
    return len(declared) != len(inferred) or any(a is not None and b is not None and a != b
                                                 for a, b in zip(declared, inferred))


def contradicted_declarations(model: onnx.ModelProto, message: str = "", limit: int = 3) -> list[str]:
    """Up to ``limit`` sentences, one per output or annotated tensor of the main graph whose declared element type
    or shape differs from what ONNX infers from the node that makes it (or its initializer holds); with the
    checker's ``message``, only the type pair it names. ``model`` is changed while inference runs and put back; an
    empty list when inference itself fails or finds nothing to say."""
    graph = model.graph
    saved_info = list(graph.value_info)
    saved_outputs = [onnx.TypeProto.FromString(o.type.SerializeToString()) for o in graph.output]
    declared = {o.name: t for o, t in zip(graph.output, saved_outputs)}
    declared.update({v.name: v.type for v in saved_info})
    try:
        del graph.value_info[:]
        for output in graph.output:
            output.type.Clear()
        inferred_model = onnx.shape_inference.infer_shapes(model)
    except ONNX_ERRORS:
        return []
    finally:
        del graph.value_info[:]
        graph.value_info.extend(saved_info)
        for output, kept in zip(graph.output, saved_outputs):
            output.type.CopyFrom(kept)
    inferred = {v.name: v.type for v in list(inferred_model.graph.value_info) + list(inferred_model.graph.output)}
    for init in graph.initializer:  # a weight listed in value_info: its data is what it is
        inferred[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
    makers = {name: node for node in graph.node for name in node.output if name}
    weights = {init.name for init in graph.initializer}
    pair = _type_pair(message)
    found: list[str] = []
    for name, want in declared.items():
        got = inferred.get(name)
        if got is None or not want.HasField("tensor_type") or not got.HasField("tensor_type"):
            continue
        node = makers.get(name)
        maker = "its initializer holds" if name in weights else (
            f"{node.op_type} node '{node.name}' makes" if node is not None and node.name else
            f"its {node.op_type} node makes" if node is not None else "the graph makes")
        want_type, got_type = want.tensor_type.elem_type, got.tensor_type.elem_type
        if want_type and got_type and want_type != got_type:
            if pair is None or pair == (got_type, want_type):
                found.append(f"'{name}' is declared {_type_text(want_type)}, but {maker} {_type_text(got_type)}")
        elif _differs(_dims(want), _dims(got)):
            found.append(f"'{name}' is declared with shape {_shape_text(_dims(want) or [])}, but {maker} "
                         f"{_shape_text(_dims(got) or [])}")
        if len(found) >= limit:
            break
    return found
