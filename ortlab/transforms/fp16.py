"""float32 → float16 conversion with ONNX Runtime's converter (onnxruntime.transformers.float16)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ortlab.model import graphs
from ortlab.transforms import graph_outputs
from ortlab.core.errors import ModelLoadError, QuantizationError
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.model.inspect import PROTOBUF_LIMIT, load_model
from ortlab.core.text import one_line
from ortlab.runtime import providers
from ortlab.settings.config import OptLevel

_FP16_MAX = float(np.finfo(np.float16).max)


_CONVERTER_CASTS = ("_cast_to_fp32_node", "_cast_to_fp16_node")


def _relocate_casts(model: onnx.ModelProto) -> int:
    """ORT's converter appends the Casts around the nodes it keeps in float32 to the *main* graph, even when such
    a node sits inside an If/Loop/Scan body: the Cast then reads a value that only exists inside the subgraph
    ("Nodes in a graph must be topologically sorted"). Move each such Cast into the graph where its input is
    produced (once, even when the converter wrote it twice); returns how many moved."""
    main = model.graph
    produced_in: dict[str, onnx.GraphProto] = {}
    for g in graphs.walk_graphs(main):
        if g is not main:
            for n in g.node:
                for o in n.output:
                    produced_in[o] = g
    keep, moved, seen = [], 0, set()
    moved_names: dict[str, onnx.GraphProto] = {}
    for n in main.node:
        if n.op_type == "Cast" and n.name.endswith(_CONVERTER_CASTS) and n.input[0] in produced_in:
            target = produced_in[n.input[0]]
            if n.output[0] not in seen:
                target.node.append(n)
                moved_names[n.output[0]] = target
                moved += 1
            seen.add(n.output[0])
            continue
        keep.append(n)
    if moved:
        del main.node[:]
        main.node.extend(keep)
        stay = []
        for vi in main.value_info:
            if vi.name in moved_names:
                moved_names[vi.name].value_info.append(vi)
            else:
                stay.append(vi)
        del main.value_info[:]
        main.value_info.extend(stay)
    return moved


def _where_it_fails(model: onnx.ModelProto, message: str) -> str:
    """" (at node 'x' (Max) in If '/If' then_branch)" when a node of ``model`` is named in ``message``."""
    at = graphs.locate(model, message)
    return f" (at {graphs.describe(at)})" if at is not None else ""


def _all_initializers(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _all_initializers(attr.g)
            for g in attr.graphs:
                yield from _all_initializers(g)


def _out_of_range(model: onnx.ModelProto) -> int:
    n = 0
    for t in _all_initializers(model.graph):
        if t.data_type == TensorProto.FLOAT:
            a = numpy_helper.to_array(t)
            n += int(np.count_nonzero(np.isfinite(a) & (np.abs(a) > _FP16_MAX)))
    return n


def _io_types(model: onnx.ModelProto) -> dict[str, int]:
    inits = {t.name for t in model.graph.initializer}
    return {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]
            if v.name not in inits}


# ops whose float values must keep their width, beyond ORT's default list: BitCast reinterprets the bits
KEPT_IN_FLOAT32 = ("BitCast",)


def convert_fp16(src, dst, keep_io_types: bool = True) -> list[str]:
    """Convert float32 weights and compute of ``src`` to float16 and save to ``dst``; return warnings.

    ``keep_io_types`` leaves float32 inputs/outputs (Casts are inserted) so callers need no change.
    Ops ORT keeps in float32 (its default block list) and :data:`KEPT_IN_FLOAT32` stay float32. ``src`` is never
    modified.
    """
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise QuantizationError("The fp16 model must go to a new file, not over the source.", step="convert")
    model = _staged(src)
    warnings: list[str] = []
    before = Counter(t.data_type for t in _all_initializers(model.graph))
    if before[TensorProto.FLOAT] == 0 and before[TensorProto.FLOAT16] > 0:
        raise QuantizationError("The model already has float16 weights and no float32 ones; convert the original "
                                "float32 model instead.", step="convert")
    if before[TensorProto.FLOAT] == 0 and not any(t == TensorProto.FLOAT for t in _io_types(model).values()):
        warnings.append("The model has no float32 weights or inputs; fp16 conversion changes nothing.")
    clamped = _out_of_range(model)
    if clamped:
        warnings.append(f"{clamped:,} weight values exceed the float16 range (±65504) and are clamped; check accuracy.")
    io_before = _io_types(model)
    big = model.ByteSize() > PROTOBUF_LIMIT // 2
    logging.getLogger("onnxruntime.transformers.float16").setLevel(logging.WARNING)
    blocked = [*DEFAULT_OP_BLOCK_LIST, *KEPT_IN_FLOAT32]
    try:
        for attempt in range(MAX_KERNEL_RETRIES):  # an op ORT has no float16 kernel for stays float32, and again
            if attempt:  # the converter changes the model it is given: start again from the file
                model = _staged(src)
            converted = convert_float_to_float16(model, keep_io_types=keep_io_types, disable_shape_infer=big,
                                                 op_block_list=blocked)
            missing = None if big else _missing_float16_kernel(converted, blocked)
            if missing is None:
                break
            blocked.append(missing)
            warnings.append(f"{missing} stays float32: ONNX Runtime has no float16 kernel for it here.")
    except Exception as exc:  # ORT's Python converter fails in its own ways on an unusual graph: one message
        raise QuantizationError(mixed_types_message(model, str(exc)) or
                                f"ONNX Runtime could not convert the model to float16: {one_line(exc)}",
                                step="convert") from None
    try:
        # the converter appends its Casts at the end of the main graph's node list, also those of nodes inside
        # If/Loop/Scan bodies: move those into their subgraph, then order every graph
        _relocate_casts(converted)
        graphs.topological_sort(converted.graph)
    except ValueError as exc:  # a cycle, named
        raise QuantizationError(f"The float16 graph could not be sorted: {one_line(exc)}",
                                step="convert") from None
    after = Counter(t.data_type for t in _all_initializers(converted.graph))
    if after[TensorProto.FLOAT]:
        warnings.append(f"{after[TensorProto.FLOAT]} initializer(s) stay float32 (used by ops ONNX Runtime keeps in "
                        "float32, or shapes/indices).")
    io_after = _io_types(converted)
    changed_io = list(dict.fromkeys(n.partition(graph_outputs.SUFFIX)[0] for n, t in io_after.items()
                                    if io_before.get(n) == TensorProto.FLOAT and t != TensorProto.FLOAT))
    if changed_io:
        warnings.append(f"Inputs/outputs {', '.join(changed_io)} are now float16: callers must pass and expect float16 "
                        "arrays.")
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        if big or converted.ByteSize() > PROTOBUF_LIMIT:
            data_name = dst.name + ".data"
            onnx.save_model(converted, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=data_name, size_threshold=1024)
            warnings.append(f"The weights were saved next to the model in '{data_name}' (over 2 GiB in one file).")
        else:
            onnx.save_model(converted, str(dst))
        onnx.checker.check_model(str(dst), full_check=True)
    except ONNX_ERRORS + (OSError,) as exc:
        raise QuantizationError(mixed_types_message(converted, str(exc)) or
                                f"The float16 model could not be saved or failed the ONNX check: "
                                f"{one_line(exc)}{_where_it_fails(converted, str(exc))}", step="convert") from None
    return warnings


_MIXED = re.compile(r"\((1|10)\) vs \((1|10)\)")
MAX_KERNEL_RETRIES = 8


def _staged(src: Path) -> onnx.ModelProto:
    """``src`` as the converter takes it: outputs no node makes given one (:mod:`.graph_outputs`), Constant floats
    held as tensors."""
    try:
        model = load_model(src, check=True)
    except ModelLoadError as exc:
        exc.step = exc.step or "convert"
        raise
    graph_outputs.detach(model)  # outputs no node makes: the converter cannot take them
    _float_constants_as_tensors(model)
    return model


def _float_constants_as_tensors(model: onnx.ModelProto) -> None:
    """A Constant whose value is a ``value_float``/``value_floats`` attribute (as ONNX's function bodies and
    onnxscript write them) holds it as a ``value`` tensor instead, which the float16 converter converts: it leaves
    the plain attributes float32, and they then met float16 values ("type 1 vs 10")."""
    for g in graphs.walk_graphs(model.graph):
        for node in g.node:
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue
            for attr in list(node.attribute):
                if attr.name == "value_float":
                    tensor = onnx.helper.make_tensor("value", TensorProto.FLOAT, [], [attr.f])
                elif attr.name == "value_floats":
                    tensor = onnx.helper.make_tensor("value", TensorProto.FLOAT, [len(attr.floats)], list(attr.floats))
                else:
                    continue
                node.attribute.remove(attr)
                node.attribute.append(onnx.helper.make_attribute("value", tensor))


def _missing_float16_kernel(converted: onnx.ModelProto, blocked: list[str]) -> str | None:
    """The op of ``converted`` ONNX Runtime has no kernel for (EyeLike-22 in float16), when that is why it does not
    load and the op is not already ``blocked``; else None (it loads, or fails for another reason, said later)."""
    try:
        providers.create_session(converted.SerializeToString(),
                                 options=providers.session_options(opt_level=OptLevel.DISABLED))
    except ModelLoadError as exc:
        op = providers.op_without_kernel(exc.message)
        return op if op not in blocked else None
    return None


def mixed_types_message(model: onnx.ModelProto, error: str) -> str | None:
    """ortlab's words for the converter's known failure on If/Loop models: a TypeInferenceError "(1) vs (10)"
    (float32 meets float16: a subgraph converted apart from the graph around it). None for other errors."""
    m = _MIXED.search(error)
    if "TypeInferenceError" not in error or m is None or m.group(1) == m.group(2):
        return None
    where = _where_it_fails(model, error)
    bodies = "If/Loop/Scan subgraphs" if graphs.has_subgraphs(model.graph) else "parts of the graph"
    return (f"fp16 cannot convert this model: ONNX Runtime's float16 converter left a float32 value meeting a "
            f"float16 one{where} (type 1 vs 10), a known limit of that converter on models with {bodies}. "
            f"Keep this model in fp32 (graph optimization) or use int8 dynamic instead.")
