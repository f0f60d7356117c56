"""int8 quantization with ONNX Runtime's own tools (the only module that calls onnxruntime.quantization).

Every call works on a copy inside its own temp dir (ORT writes ``*-inferred.onnx`` next to its input and
an augmented model during calibration) and copies the result to ``dst``: nothing lands in the current
directory or next to the source. ORT's log lines become returned warnings instead of stderr noise.

Size: it is the only module that calls ``onnxruntime.quantization`` (both modes, calibration, overrides,
the copies ORT needs and its log lines), by design.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import (
    CalibrationMethod as OrtCalibrationMethod,
    QuantFormat as OrtQuantFormat,
    QuantType as OrtQuantType,
    quant_pre_process,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.calibrate import (
    CalibrationDataReader, HistogramCalibrater, TensorData, TensorsData, create_calibrator, load_tensors_data,
    save_tensors_data,
)
from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry, QLinearOpsRegistry

from ortlab.model import graphs
from ortlab.model.graphs import ai_onnx_opset
from ortlab.model.inspect import WEIGHT_INPUTS
from ortlab.model.patterns import detect_patterns, float_scope, is_detector
from ortlab.settings.config import DISTRIBUTION_MIN_BINS, CalibrationMethod, QuantConfig, QuantFormat, QuantMode, QuantType
from ortlab.transforms import graph_outputs
from ortlab.transforms.coverage import QuantCoverage, quant_coverage
from ortlab.transforms.inlined_names import name_replacements, with_inlined
from ortlab.transforms.unbounded_ranges import find_unbounded
from ortlab.transforms.range_split import find_range_splits, load_ranges
from ortlab.transforms.silu_range import note as silu_note, tighten_silu_ranges
from ortlab.transforms.score_range import note as score_note, set_score_ranges
from ortlab.transforms.untaken_weights import untaken_weights
from ortlab.core.errors import OrtlabError, QuantizationError
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.runtime.providers import quiet_native_stderr
from ortlab.runtime.threads import limit_threads, thread_limit
from ortlab.core.text import one_line

MIN_OPSET = 13  # per-channel QDQ needs the `axis` attribute of QuantizeLinear/DequantizeLinear
CALIBRATION_PROVIDERS = ["CPUExecutionProvider"]
MAX_LOG_WARNINGS = 8

_QUANT_TYPES = {QuantType.INT8: OrtQuantType.QInt8, QuantType.UINT8: OrtQuantType.QUInt8}
_FORMATS = {QuantFormat.QDQ: OrtQuantFormat.QDQ, QuantFormat.QOPERATOR: OrtQuantFormat.QOperator}
_METHODS = {m: getattr(OrtCalibrationMethod, m.value) for m in CalibrationMethod}


@dataclass(frozen=True)
class OrtArguments:
    """What a QuantConfig becomes for ORT: ``quantize`` = kwargs of quantize_static/quantize_dynamic,
    ``calibrator`` = kwargs of ``create_calibrator`` (static only; its ``extra_options`` carries num_bins etc.,
    which quantize_static's own ``extra_options`` cannot forward)."""

    quantize: dict[str, Any]
    calibrator: dict[str, Any]


def _op_types(q: QuantConfig, supported: set[str]) -> list[str] | None:
    wanted = set(q.effective_op_types())
    if not q.op_types_to_exclude:
        return sorted(wanted) if wanted else None  # None = everything ORT supports
    return sorted((wanted or supported) - set(q.op_types_to_exclude))


def ort_arguments(q: QuantConfig) -> OrtArguments:
    """The single mapping from a typed QuantConfig to ONNX Runtime's quantization arguments."""
    extra: dict[str, Any] = {"WeightSymmetric": q.symmetric_weight}
    common = {
        "per_channel": q.per_channel,
        "reduce_range": q.reduce_range,
        "weight_type": _QUANT_TYPES[q.weight_type],
        "nodes_to_exclude": list(q.nodes_to_exclude) or None,
        "extra_options": extra,
    }
    if q.is_dynamic:
        ops = _op_types(q, set(IntegerOpsRegistry))
        return OrtArguments({**common, "op_types_to_quantize": ops}, {})
    ops = _op_types(q, set(QLinearOpsRegistry) | set(QDQRegistry))
    extra["ActivationSymmetric"] = q.symmetric_activation
    method = _METHODS[q.calibration_method]
    cal: dict[str, Any] = {}
    if q.symmetric_activation:
        cal["symmetric"] = True  # otherwise ORT's per-method default (Percentile is symmetric by default)
    if q.calibration_method == CalibrationMethod.MINMAX:
        cal.update(moving_average=q.moving_average, averaging_constant=q.averaging_constant)
        extra.update(CalibMovingAverage=q.moving_average, CalibMovingAverageConstant=q.averaging_constant)
        if q.symmetric_activation:
            extra["CalibTensorRangeSymmetric"] = True
    elif q.calibration_method == CalibrationMethod.ENTROPY:
        cal.update(num_bins=q.num_bins, num_quantized_bins=q.num_quantized_bins)
    elif q.calibration_method == CalibrationMethod.PERCENTILE:
        cal.update(num_bins=q.num_bins, percentile=q.percentile)
    else:
        cal.update(num_bins=q.num_bins)
    quantize = {**common, "quant_format": _FORMATS[q.quant_format], "activation_type": _QUANT_TYPES[q.activation_type],
                "op_types_to_quantize": ops, "calibrate_method": method,
                "calibration_providers": list(CALIBRATION_PROVIDERS)}
    # ORT's own quantize_static calibrates only the outputs of quantizable op types, not every tensor.
    calibrate = ops or sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    calibrator = {"op_types_to_calibrate": calibrate, "calibrate_method": method,
                  "providers": list(CALIBRATION_PROVIDERS), "extra_options": cal}
    return OrtArguments(quantize, calibrator)


# -- helpers --------------------------------------------------------------------------------------------


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(record.getMessage())
        except (TypeError, ValueError, KeyError):  # a message whose arguments do not fit its format: dropped
            return
        if text and text not in self.messages:
            self.messages.append(text)


@contextlib.contextmanager
def _ort_quiet() -> Iterator[_ListHandler]:
    """Capture ORT's Python log records, its stdout prints and native stderr while it works."""
    handler = _ListHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with quiet_native_stderr(), contextlib.redirect_stdout(io.StringIO()):
            yield handler
    finally:
        root.removeHandler(handler)


@dataclass(frozen=True)
class QuantResult:
    """What a quantize step wrote: its ``warnings``, ``notes`` and the :class:`QuantCoverage` of the result."""

    warnings: list[str]
    notes: list[str]
    coverage: QuantCoverage


_NO_CHANNEL_AXIS = re.compile(r"Axis -?\d+ is out-of-range for weight '(?P<name>.+)' with rank \d+")


def _no_channel_axis(names: list[str]) -> str:
    """One line for ORT's "Axis 1 is out-of-range for weight …" warnings (one per 1-D weight)."""
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (f"{len(names)} weight{'s' if len(names) > 1 else ''} with no channel axis ({shown}; e.g. a "
            "LayerNormalization scale) quantized per tensor instead of per channel, as ONNX Runtime does.")


def _log_warnings(messages: list[str], dynamic: bool = False) -> list[str]:
    out = []
    no_axis = [m_.group("name") for m_ in map(_NO_CHANNEL_AXIS.fullmatch, messages) if m_ is not None]
    if no_axis:
        out.append(_no_channel_axis(no_axis))
    for m in messages:
        if _NO_CHANNEL_AXIS.fullmatch(m):
            continue
        if "consider to run pre-processing" in m or "consider pre-processing" in m:
            if dynamic:  # pre-processing is a static-mode setting: nothing a person can turn on here
                continue
            m = ("The model was not pre-processed with quant_pre_process (shape inference, BatchNorm folding); "
                 "ONNX Runtime recommends it. Turn pre-processing on.")
        else:
            m = "ONNX Runtime: " + m
        if m not in out:
            out.append(m)
    if len(out) > MAX_LOG_WARNINGS:
        out = out[:MAX_LOG_WARNINGS] + [f"(+{len(out) - MAX_LOG_WARNINGS} more ONNX Runtime log messages)"]
    return out


def _fail(step: str, exc: BaseException, hint: str) -> QuantizationError:
    return QuantizationError(f"ONNX Runtime failed ({type(exc).__name__}: {one_line(exc)}). {hint}", step=step)


@contextlib.contextmanager
def _ort_failures(step: str, hint: str) -> Iterator[None]:
    """ORT's quantization tools fail as :func:`_fail` words it (ortlab's own errors and Cancelled pass as they are)."""
    try:
        yield
    except OrtlabError:
        raise
    except Exception as exc:  # ORT's quantization tools are Python over any graph: any error, one message and a hint
        raise _fail(step, exc, hint) from None


def _load(src, step: str) -> onnx.ModelProto:
    path = Path(src)
    if not path.is_file():
        raise QuantizationError(f"Model file {path} does not exist.", step=step)
    try:
        return onnx.load(str(path))
    except ONNX_ERRORS + (OSError,) as exc:
        raise QuantizationError(f"Cannot load {path.name} as an ONNX model ({one_line(exc)}).", step=step) from None


def _check_dst(src, dst, step: str) -> Path:
    dst = Path(dst)
    if dst.resolve() == Path(src).resolve():
        raise QuantizationError("The output path is the source model; write the result to a new file.", step=step)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return dst


def _ensure_opset(model: onnx.ModelProto, step: str) -> tuple[onnx.ModelProto, list[str]]:
    opset = ai_onnx_opset(model)
    if not opset or opset >= MIN_OPSET:
        return model, []
    try:
        converted = version_converter.convert_version(model, MIN_OPSET)
    except ONNX_ERRORS + (version_converter.ConvertError,) as exc:
        raise _fail(step, exc, f"The model's opset {opset} could not be converted to {MIN_OPSET}; re-export it "
                               f"with opset {MIN_OPSET} or newer.") from None
    # the converter keeps the IR version; an IR 3 model (initializers must be graph inputs) would make the quantizer's
    # new initializers invalid
    converted.ir_version = max(converted.ir_version, onnx.helper.find_min_ir_version_for(list(converted.opset_import)))
    return converted, [f"Converted the model from opset {opset} to {MIN_OPSET} first (per-channel quantization "
                       f"needs opset {MIN_OPSET}+)."]


def _stage_input(model: onnx.ModelProto, tmp: Path, name: str = "input.onnx") -> Path:
    # Exporters may record value_info for initializers. ORT's dynamic quantizer transposes Gemm weights
    # into MatMul weights but keeps that stale value_info, and its shape inference then fails.
    # ORT runs a graph whose nodes are out of order, but its quantizers' shape inference and the ONNX checker
    # refuse it ("Nodes in a graph must be topologically sorted"): hand them the same graph in order
    try:
        graphs.topological_sort(model.graph)
    except ValueError as exc:
        raise QuantizationError(f"The graph cannot be put in order for quantization: {exc}.") from None
    graphs.flatten_gemm_biases(model.graph)
    graph_outputs.detach(model)  # outputs no node makes: the quantizers cannot take them
    initializers = {init.name for init in model.graph.initializer}
    stale = [vi for vi in model.graph.value_info if vi.name in initializers]
    for vi in stale:
        model.graph.value_info.remove(vi)
    path = tmp / name
    onnx.save_model(model, str(path))
    return path


def _refuse_float16(model: onnx.ModelProto, step: str) -> None:
    from onnx import TensorProto

    weights = [*(t for g in graphs.walk_graphs(model.graph) for t in g.initializer), *graphs.constant_weights(model.graph)]
    types = {t.data_type for t in weights}
    if TensorProto.FLOAT16 in types and TensorProto.FLOAT not in types:
        raise QuantizationError("int8 quantization needs a float32 model, and this one computes in float16 (its "
                                "weights are float16): quantize the float32 original instead.", step=step)


def _weights_to_initializers(model: onnx.ModelProto) -> list[str]:
    """ORT's quantizers only quantize weights that are initializers: move Constant-node weights there (in the
    staged copy); returns the note that says so."""
    moved = graphs.constants_to_initializers(model)
    if not moved:
        return []
    return [f"{moved} weight tensor(s) held in Constant nodes were moved into initializers before quantizing "
            "(ONNX Runtime's quantizer only quantizes initializers); the source model is unchanged."]


_SUBGRAPHS_UNREACHED = ("inside If/Loop/Scan bodies, which ONNX Runtime's static quantizer does not enter (its "
                        "dynamic quantizer does)")
MAX_NAMED_NODES = 4


def _count_text(counts: Counter) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))


def _names(nodes: list[graphs.NodeAt]) -> str:
    names = [at.node.name or at.node.output[0] for at in nodes[:MAX_NAMED_NODES]]
    more = len(nodes) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _left_in_float(quantized: onnx.ModelProto, targets: list[str]) -> list[graphs.NodeAt]:
    """The weighted nodes of the ``targets`` op types that ``quantized`` still computes in float."""
    nodes = list(graphs.walk_nodes(quantized.graph))
    dq = {o for at in nodes if at.node.op_type == "DequantizeLinear" for o in at.node.output}
    return [at for at in nodes if at.node.op_type in targets and at.node.op_type in WEIGHT_INPUTS
            and at.node.domain in ("", "ai.onnx") and not any(i in dq for i in at.node.input)]


def _why_float(model: onnx.ModelProto, left: list[graphs.NodeAt], dynamic: bool) -> list[str]:
    """Why each weighted node stayed float, grouped: inside subgraphs (static), weights computed by other
    nodes, weights fed as graph inputs. ``model`` is the model that was quantized."""
    stored = {t.name for g in graphs.walk_graphs(model.graph) for t in g.initializer}
    producer = {o: at.node.op_type for at in graphs.walk_nodes(model.graph) for o in at.node.output}
    constant = _constant_tensors(model.graph)
    in_sub: list[graphs.NodeAt] = []
    computed: dict[str, list[graphs.NodeAt]] = {}
    activations: list[graphs.NodeAt] = []
    fed: list[graphs.NodeAt] = []
    for at in left:
        if not dynamic and at.in_subgraph:
            in_sub.append(at)
            continue
        weights = [at.node.input[i] for i in WEIGHT_INPUTS[at.node.op_type]
                   if i < len(at.node.input) and at.node.input[i]]
        made_by = next((producer[w] for w in weights if w not in stored and w in producer), None)
        if made_by is not None and not at.in_subgraph and any(w not in constant for w in weights):
            activations.append(at)  # both inputs computed at run time (attention's Q·Kᵀ, A·V): nothing to fold
        elif made_by is not None:
            computed.setdefault(made_by, []).append(at)
        elif any(w not in stored for w in weights):
            fed.append(at)
    out = []
    if in_sub:
        out.append(f"{_count_text(Counter(at.node.op_type for at in in_sub))} node(s) are {_SUBGRAPHS_UNREACHED} "
                   f"({_names(in_sub)})")
    for op, nodes in computed.items():
        out.append(f"{_count_text(Counter(at.node.op_type for at in nodes))} node(s) take their weights from {op} "
                   f"nodes rather than stored tensors, and ONNX Runtime quantizes stored weights only ({_names(nodes)}); "
                   "fold the constants first (ortlab optimize MODEL folded.onnx --precision fp32 --opt-level basic) "
                   "and quantize the folded model")
    if activations:
        which = ("which int8 dynamic quantization does not cover" if dynamic
                 else "which ONNX Runtime's quantizer left in float")
        out.append(f"{_count_text(Counter(at.node.op_type for at in activations))} node(s) are activation × activation "
                   f"{'MatMuls (attention)' if all(at.node.op_type == 'MatMul' for at in activations) else 'products'}, "
                   f"{which} ({_names(activations)})")
    if fed:
        out.append(f"{_count_text(Counter(at.node.op_type for at in fed))} node(s) take their second input from the "
                   f"model's inputs or from activations, not from weights ({_names(fed)})")
    return out


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """The main graph's tensors computed from stored tensors only (initializers, Constant nodes and what nodes make
    of them alone): what folding constants turns into weights."""
    known = {t.name for t in graph.initializer}
    for node in graph.node:  # nodes are topologically sorted
        if node.op_type == "Constant" or (node.input and all(not i or i in known for i in node.input)):
            known.update(o for o in node.output if o)
    return known


def _coverage_result(out: Path, source: onnx.ModelProto, targets: list[str], warnings: list[str],
                     notes: list[str], dynamic: bool, excluded: list[str] | None = None) -> QuantResult:
    quantized = onnx.load(str(out), load_external_data=False)
    # ORT's dynamic quantizer rewrites Gemm (alpha = beta = 1, no transA) as MatMul + Add before quantizing
    counted_as = {"Gemm": "MatMul"} if dynamic and "MatMul" in targets else None
    cov = quant_coverage(quantized, targets, source, counted_as, excluded or ())
    if counted_as and any(at.node.op_type == "Gemm" for at in graphs.walk_nodes(source.graph)):
        notes.append("ONNX Runtime's dynamic quantizer rewrites Gemm nodes as MatMul + Add; they count as MatMul.")
    left = [at for at in _left_in_float(quantized, targets) if at.node.name not in set(excluded or ())]
    reasons = _why_float(source, left, dynamic)
    if cov.total == 0:
        asked = (f"{', '.join(sorted(targets))} nodes" if len(targets) <= 6 else
                 "node of a type ONNX Runtime's quantizer takes")
        if cov.total_candidates == 0:
            why = f"the model has no {asked} (subgraphs included)"
            weighted = [at for at in graphs.walk_nodes(source.graph) if at.node.op_type in WEIGHT_INPUTS]
            if weighted:
                where = " (inside If/Loop/Scan bodies)" if all(at.in_subgraph for at in weighted) else ""
                why += f"; its weighted nodes are {_count_text(Counter(at.node.op_type for at in weighted))}{where}"
                others = sorted({at.node.op_type for at in weighted} & set(IntegerOpsRegistry) - {"Conv"})
                if dynamic and others:
                    why += f", which dynamic quantization takes when asked (--op-types {','.join(others)})"
        else:
            why = (f"ONNX Runtime quantized none of its {_count_text(Counter(cov.candidates))} nodes: "
                   + ("; ".join(reasons) if reasons else "their inputs' types or shapes are unknown to it"))
        hint = (" Use static quantization for Conv models." if dynamic
                and any(n.op_type == "Conv" for n in source.graph.node) else "")
        warnings.append(f"Nothing was quantized: {why}; the result computes like the source model.{hint}")
    else:
        if reasons:
            warnings.append(f"{len(left)} weighted node(s) stayed float: " + "; ".join(reasons) + ".")
        warnings.extend(untaken_weights(source, targets, dynamic, excluded or ()))
        if cov.in_subgraphs:
            notes.append(f"{cov.in_subgraphs} of the {cov.total} quantized nodes are inside control-flow subgraphs.")
    return QuantResult(warnings, notes, cov)


def _sort_after_subgraph_quantization(path: Path) -> None:
    """ORT's dynamic quantizer appends the DynamicQuantizeLinear of a value that If/Loop/Scan bodies read after the
    node that holds them; ORT runs that, the ONNX checker refuses it ("Nodes in a graph must be topologically
    sorted"). Put the producers first (``graphs.topological_sort``, outer-scope reads included)."""
    model = onnx.load(str(path))
    graphs.topological_sort(model.graph)
    onnx.save_model(model, str(path))


def _finish(out: Path, dst: Path, step: str) -> None:
    if not out.is_file():
        raise QuantizationError("ONNX Runtime wrote no output model.", step=step)
    shutil.copyfile(out, dst)


# -- public API -----------------------------------------------------------------------------------------


def preprocess_for_quantization(src, dst) -> list[str]:
    """Run ORT's ``quant_pre_process`` (shape inference, BatchNorm folding) from ``src`` into ``dst``.

    Opset < 13 is converted to 13 first; when symbolic shape inference fails it is retried without it.
    Returns warnings.
    """
    step = "preprocess"
    model, warnings = _ensure_opset(_load(src, step), step)
    dst = _check_dst(src, dst, step)
    with tempfile.TemporaryDirectory(prefix="ortlab-preprocess-") as tmpdir:
        tmp = Path(tmpdir)
        staged = _stage_input(model, tmp)
        out = tmp / "preprocessed.onnx"
        messages: list[str] = []
        try:
            # ORT's symbolic shape inference saves "sym_shape_infer_temp.onnx" into the current directory when it
            # gives up (recipes run in their own child process, so changing its directory is safe)
            with _ort_quiet() as log, contextlib.chdir(tmp):
                quant_pre_process(str(staged), str(out), skip_symbolic_shape=False)
            messages = log.messages
            _shapes_hold(staged, out)
        except Exception as first:  # ORT's symbolic shape inference gives up in its own ways: retried without it
            with _ort_failures(step, "Turn pre-processing off and quantize the model as it is."), _ort_quiet() as log:
                quant_pre_process(str(staged), str(out), skip_symbolic_shape=True)
            messages = log.messages
            reason = one_line(first)
            warnings.append(SHAPES_FALLBACK + f" (Details: {type(first).__name__}: {reason}.)")
        _name_replacements(model, out)
        _finish(out, dst, step)
    for m in messages:
        if "Model Optimization Failed" in m:
            warnings.append("ORT's graph optimization inside pre-processing failed; the model was pre-processed "
                            "without it (BatchNormalization may stay unfused).")
    return warnings


def _shapes_hold(staged: Path, out: Path) -> None:
    """Raises ValueError when the shapes ORT's symbolic shape inference wrote into ``out`` contradict ONNX's own
    inference ("Inferred shape and existing shape differ"), where the model it read (``staged``) passes: the
    quantizer would size tensors by them, and the int8 model fail to run."""
    try:
        onnx.checker.check_model(str(out), full_check=True)
    except ONNX_ERRORS as exc:
        try:
            onnx.checker.check_model(str(staged), full_check=True)
        except ONNX_ERRORS:
            return  # the checker rejects the model itself (ORT runs it): the written shapes are not to blame
        raise ValueError(f"the shapes it wrote contradict the graph: {one_line(exc)}") from None


def _name_replacements(source: onnx.ModelProto, out: Path) -> None:
    """Name the nodes pre-processing wrote, unnamed, in place of named ones (:mod:`inlined_names`)."""
    processed = onnx.load(str(out), load_external_data=False)
    if name_replacements(source.graph, processed.graph):
        onnx.save(processed, str(out))


def _excluded(names: Sequence[str], model: onnx.ModelProto, warnings: list[str]) -> list[str]:
    """``names`` with what pre-processing replaced them by; a name the model does not have is said in a warning."""
    present = {at.node.name for at in graphs.walk_nodes(model.graph)}
    missing = [n for n in names if n not in present]
    if missing:
        warnings.append(f"No node named {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''} in the model "
                        "being quantized (pre-processing may have folded it away, as it folds BatchNormalization "
                        "into Conv): it was not kept in float. `ortlab analyze` names the quantized graph's nodes.")
    return with_inlined(names, model.graph)


# said in plain words when ORT's symbolic shape inference gives up and pre-processing goes on without it
SHAPES_FALLBACK = ("Pre-processing worked out the tensor shapes with ONNX's standard shape inference, because ORT's "
                   "more thorough one could not handle this model. Quantization works as usual; a few tensors may "
                   "keep open shapes.")


def quantize_dynamic_model(src, dst, q: QuantConfig) -> list[str]:
    """Dynamic int8 (weights ahead of time, activations at run time) of ``src`` into ``dst``; returns warnings."""
    return quantize_dynamic_result(src, dst, q).warnings


def quantize_dynamic_result(src, dst, q: QuantConfig) -> QuantResult:
    """:func:`quantize_dynamic_model` with its notes and the :class:`QuantCoverage` of the result. Weights held in
    Constant nodes are moved into initializers first (in the staged copy); nodes inside If/Loop/Scan bodies are
    quantized and counted too. Nothing quantized is a warning that says why."""
    step = "quantize"
    args = ort_arguments(_as_mode(q, QuantMode.DYNAMIC))
    model, warnings = _ensure_opset(_load(src, step), step)
    _refuse_float16(model, step)
    dst = _check_dst(src, dst, step)
    ops = args.quantize["op_types_to_quantize"]
    if ops is None or "Conv" in ops:
        warnings.append("Dynamic quantization of Conv makes ConvInteger, which runs far slower than fp32 on CPU. "
                        "Leave Conv out (MatMul/Gemm only) or use static quantization.")
    targets = list(ops) if ops is not None else sorted(IntegerOpsRegistry)
    notes = _weights_to_initializers(model)
    kwargs = dict(args.quantize)
    kwargs["nodes_to_exclude"] = _excluded(q.nodes_to_exclude, model, warnings) or None
    if graphs.has_subgraphs(model.graph):  # ORT leaves If/Loop/Scan bodies alone unless asked
        kwargs["extra_options"] = {**(kwargs.get("extra_options") or {}), "EnableSubgraph": True}
    with tempfile.TemporaryDirectory(prefix="ortlab-quant-") as tmpdir:
        tmp = Path(tmpdir)
        staged = _stage_input(model, tmp)
        out = tmp / "quantized.onnx"
        with _ort_failures(step, "Exclude the failing op types or nodes, or try static quantization."), \
                _ort_quiet() as log:
            quantize_dynamic(str(staged), str(out), **kwargs)
        if graphs.has_subgraphs(model.graph):
            _sort_after_subgraph_quantization(out)
        result = _coverage_result(out, model, targets, warnings + _log_warnings(log.messages, dynamic=True), notes,
                                  dynamic=True)
        _finish(out, dst, step)
    return result


def _as_mode(q: QuantConfig, mode: QuantMode) -> QuantConfig:
    return replace(q, mode=mode)


def _static_args(q: QuantConfig) -> OrtArguments:
    args = ort_arguments(_as_mode(q, QuantMode.STATIC))
    if q.calibration_method == CalibrationMethod.DISTRIBUTION and q.num_bins < DISTRIBUTION_MIN_BINS:
        raise QuantizationError(f"The Distribution method needs at least {DISTRIBUTION_MIN_BINS} histogram bins "
                                f"(got {q.num_bins}); raise num_bins.", step="calibrate")
    return args


class _OneBatch(CalibrationDataReader):
    """A reader of one batch (for :func:`collect_streaming`)."""

    def __init__(self, batch: dict) -> None:
        self._batch: dict | None = batch

    def get_next(self) -> dict | None:
        batch, self._batch = self._batch, None
        return batch


def collect_streaming(calibrator: Any, reader: Any) -> int:
    """``calibrator.collect_data(reader)`` with bounded memory: ORT's histogram calibrators keep every batch's
    intermediate outputs until the reader ends, so a big model's activations over all calibration samples pile
    up (7.9 GB for an OCR recognizer with Percentile). For Percentile they get one batch at a time here: each
    ``collect_data`` call turns its batch into a histogram merged into the running one (ORT's own merge, the
    range widened as needed) and drops the outputs; the ranges stay within a few % of one pass over all data.
    Entropy and Distribution read the reader as ORT does: their optimum moves with the bins' layout, which
    merging changes (measured: one logits range 6.1 vs 1.7), so they keep ORT's one-pass histograms and memory.
    MinMax keeps only running minima and maxima. Returns the batches streamed (-1 when ORT read them)."""
    if not isinstance(calibrator, HistogramCalibrater) or getattr(calibrator, "method", "") != "percentile":
        calibrator.collect_data(reader)
        return -1
    n = 0
    while True:
        batch = reader.get_next()
        if not batch:
            break
        calibrator.collect_data(_OneBatch(batch))
        n += 1
    if n == 0:
        raise ValueError("No data is collected.")
    return n


_INFINITE_HISTOGRAM = ("A tensor of this model holds -inf or inf while it computes (an attention mask, typically), "
                       "which the {method} calibration method cannot put in a histogram. Calibrate with MinMax (the "
                       "default), which keeps the nodes that make and read such a tensor in float.")


def calibrate_model(src, q: QuantConfig, reader, cache) -> list[str]:
    """Calibrate ``src`` with ``reader`` (a :class:`ortlab.transforms.calibration.CalibrationReader`) and write the
    activation ranges as ONNX Runtime's calibration cache ``cache`` (JSON); returns warnings.

    The one calibration path for every method: ORT's ``create_calibrator`` → ``collect_data`` →
    ``compute_data``, with the method's own options (histogram bins, percentile, moving average, symmetry).
    Raises ``Cancelled`` when the reader's cancel token is set, ``QuantizationError`` else.
    """
    args = _static_args(q)
    model, warnings = _ensure_opset(_load(src, "calibrate"), "calibrate")
    _refuse_float16(model, "calibrate")
    if getattr(reader, "is_random", False):
        warnings.append("Calibrated with random data: activation ranges do not represent real inputs, so the "
                        "quantized model's accuracy is meaningless.")
    cache = Path(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ortlab-calib-") as tmpdir:
        tmp = Path(tmpdir)
        staged = _stage_input(model, tmp)
        if hasattr(reader, "rewind"):
            reader.rewind()
        hint = _RANDOM_DATA_HINT if getattr(reader, "is_random", False) else _CALIBRATE_HINT
        with _ort_failures("calibrate", hint), _ort_quiet() as log:
            calibrator = create_calibrator(staged, augmented_model_path=str(tmp / "augmented_model.onnx"),
                                           **args.calibrator)
            if isinstance(calibrator, HistogramCalibrater) and not calibrator.tensors_to_calibrate:
                # nothing of the op types quantized is calibrated (e.g. --op-types Conv on a model without
                # one): ORT's histogram calibrators then fail with "Histogram has not been collected"
                ranges = TensorsData(args.calibrator["calibrate_method"], {})  # the run says nothing was quantized
            else:
                _limit_calibrator_threads(calibrator)
                try:
                    collect_streaming(calibrator, reader)
                    ranges = calibrator.compute_data()
                except ValueError as exc:  # numpy's histogram of a tensor holding inf
                    if "is not finite" not in str(exc):
                        raise
                    raise QuantizationError(_INFINITE_HISTOGRAM.format(method=CalibrationMethod(
                        q.calibration_method).value), step="calibrate") from None
            save_tensors_data(ranges, cache)
            del calibrator
    return warnings + _log_warnings(log.messages)


def _limit_calibrator_threads(calibrator: Any) -> None:
    """Under ``$ORTLAB_THREADS`` (a trial on a Ray node), the calibrator's session again with that many threads:
    ONNX Runtime's calibrator opens its own with default options (every core)."""
    if not thread_limit():
        return
    import onnxruntime as ort

    so = limit_threads(ort.SessionOptions())
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    calibrator.infer_session = None  # the default session goes before the new one is made
    calibrator.infer_session = ort.InferenceSession(calibrator.augmented_model_path, sess_options=so,
                                                    providers=calibrator.execution_providers)


def calibration_settings(q: QuantConfig) -> str:
    """Everything of ``q`` that changes the ranges :func:`calibrate_model` computes, as one canonical JSON text:
    ONNX Runtime's calibrator arguments (method, its options, the op types calibrated, the providers)."""
    return json.dumps(_static_args(q).calibrator, sort_keys=True, default=str)


def quantize_calibrated_model(src, dst, q: QuantConfig, cache) -> list[str]:
    """Static int8 of ``src`` into ``dst`` from the ranges :func:`calibrate_model` wrote to ``cache``:
    ``quantize_static`` with no data reader, reading the calibration cache. Returns warnings."""
    return quantize_calibrated_result(src, dst, q, cache).warnings


def _channels_axis0(node: onnx.NodeProto) -> bool:
    """Whether a per-channel weight of ``node`` has its output channels on axis 0 (Conv; Gemm with transB)."""
    if node.op_type == "Conv":
        return True
    return node.op_type == "Gemm" and any(a.name == "transB" and a.i == 1 for a in node.attribute)


def int16_weight_overrides(model: onnx.ModelProto, nodes, per_channel: bool = True) -> tuple[dict[str, Any], list[str]]:
    """ORT's ``TensorQuantOverrides`` giving the weight initializer (input 1) of each named node the int16 type
    (one scale per output channel for Conv and transposed-Gemm weights when ``per_channel``, else one per tensor),
    and the names that are not a node with an initializer weight."""
    inits = {t.name: t for t in model.graph.initializer}
    by_name = {n.name: n for n in model.graph.node}
    overrides: dict[str, Any] = {}
    missing = []
    for name in nodes:
        node = by_name.get(name)
        if node is None or len(node.input) < 2 or node.input[1] not in inits:
            missing.append(name)
            continue
        weight = inits[node.input[1]]
        if per_channel and _channels_axis0(node) and weight.dims:
            overrides[node.input[1]] = [{"quant_type": OrtQuantType.QInt16, "axis": 0}] + [{}] * (weight.dims[0] - 1)
        else:
            overrides[node.input[1]] = [{"quant_type": OrtQuantType.QInt16}]
    return overrides, missing


def _quantized_instead(scope: Sequence[str], int16_weights: Sequence[str]) -> str:
    """What a known pattern's note adds when 16-bit weights were asked for nodes of its float scope (they win)."""
    given = set(int16_weights)
    if not (quantized := [n for n in scope if n in given]):
        return ""
    verb = "is" if len(quantized) == 1 else "are"
    return (f" Of these, {len(quantized)} {verb} quantized instead, with 16-bit weights and int8 activations, as "
            f"--int16-weight-nodes asked: {', '.join(quantized)}.")


def quantize_calibrated_result(src, dst, q: QuantConfig, cache) -> QuantResult:
    """:func:`quantize_calibrated_model` with its notes and the :class:`QuantCoverage` of the result."""
    args = _static_args(q)
    model, warnings = _ensure_opset(_load(src, "quantize"), "quantize")
    warnings = [w for w in warnings if not w.startswith("Converted the model from opset")]  # said by calibrate
    _refuse_float16(model, "quantize")
    dst = _check_dst(src, dst, "quantize")
    cache = Path(cache)
    if not cache.is_file():
        raise QuantizationError(f"No calibration cache at {cache}: calibrate first.", step="quantize")
    ops = args.quantize["op_types_to_quantize"]
    targets = list(ops) if ops is not None else sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    notes = _weights_to_initializers(model)
    kwargs = dict(args.quantize)
    if q.int16_weight_nodes:
        overrides, missing = int16_weight_overrides(model, q.int16_weight_nodes, q.per_channel)
        if missing:
            warnings.append(f"No weight to give 16 bits in node(s) {', '.join(missing)} (not in the model, or their "
                            "weight is not a constant); they stay 8-bit.")
        kwargs["extra_options"] = {**kwargs["extra_options"], "TensorQuantOverrides": overrides}
    excluded = _excluded(q.nodes_to_exclude, model, warnings)
    found = detect_patterns(model) if q.known_patterns or q.score_range else []
    if q.known_patterns:  # the starting float scope: each pattern stated in a note
        excluded += float_scope(found, skip=[*excluded, *q.int16_weight_nodes])
        notes.extend(p.note() + _quantized_instead(p.nodes, q.int16_weight_nodes) for p in found)
    if q.range_split:
        splits = find_range_splits(model, load_ranges(cache), q.range_split_factor, tuple(excluded))
        excluded += [s.node for s in splits]
        notes.extend(s.note() for s in splits)
    unbounded = find_unbounded(model, cache, tuple(excluded))  # a mask's -inf: no int8 scale can hold it
    excluded += [n for u in unbounded for n in u.nodes]
    notes.extend(u.note() for u in unbounded)
    kwargs["nodes_to_exclude"] = excluded or None
    with tempfile.TemporaryDirectory(prefix="ortlab-quant-") as tmpdir:
        tmp = Path(tmpdir)
        staged = _stage_input(model, tmp)
        if q.silu_range:  # a copy: the cache is shared by every run calibrated the same way
            cut = tighten_silu_ranges(model, cache, tmp / "calibration.json", tuple(excluded))
            cache = tmp / "calibration.json"
            notes.extend([silu_note(cut)] if cut else [])
        if q.score_range and is_detector(found):
            changed = set_score_ranges(model, cache, tmp / "calibration.scores.json", found, tuple(excluded))
            cache = tmp / "calibration.scores.json"
            notes.extend([score_note(changed)] if changed else [])
        cache = _with_softmax_ranges(model, cache, tmp / "calibration.softmax.json")
        out = tmp / "quantized.onnx"
        with _ort_failures("quantize", _QUANTIZE_HINT), _ort_quiet() as log:
            quantize_static(str(staged), str(out), calibration_data_reader=None,
                            calibration_cache_path=str(cache), **kwargs)
        if graphs.has_subgraphs(model.graph):  # Q/DQ of values that If/Loop bodies read may land after the If
            _sort_after_subgraph_quantization(out)
        result = _coverage_result(out, model, targets, warnings + _log_warnings(log.messages), notes,
                                  dynamic=False, excluded=kwargs["nodes_to_exclude"])
        _finish(out, dst, "quantize")
    return result


def _with_softmax_ranges(model: onnx.ModelProto, cache: Path, dst: Path) -> Path:
    """``cache``, or a copy at ``dst`` that also holds 0..1 for each Softmax output the calibrator did not see (a
    tensor whose type shape inference left unknown): ORT's quantizer sets every Softmax output's range to 0..1 and
    failed on one it had no entry for ("Only an existing tensor can be modified")."""
    data = load_tensors_data(cache)
    missing = [n.output[0] for g in graphs.walk_graphs(model.graph) for n in g.node
               if n.op_type == "Softmax" and n.domain in ("", "ai.onnx") and n.output and n.output[0] not in data.data]
    if not missing:
        return cache
    for name in missing:
        data.data[name] = TensorData(lowest=np.array(0.0, np.float32), highest=np.array(1.0, np.float32))
    save_tensors_data(data, dst)
    return dst


def quantize_static_model(src, dst, q: QuantConfig, reader) -> list[str]:
    """Static int8 in one call: :func:`calibrate_model` then :func:`quantize_calibrated_model` (the cache in
    a temp dir). Nothing lands next to the source or in the current directory."""
    with tempfile.TemporaryDirectory(prefix="ortlab-static-") as tmpdir:
        cache = Path(tmpdir) / "calibration.json"
        warnings = calibrate_model(src, q, reader, cache)
        for w in quantize_calibrated_model(src, dst, q, cache):
            if w not in warnings:
                warnings.append(w)
    return warnings


_CALIBRATE_HINT = "Check that the preprocessing (size, layout, channels, dtype) matches the model input."
_RANDOM_DATA_HINT = ("The model fails on random data of its input shapes: it may need real inputs (give calibration "
                     "data) or other shapes (--shape NAME=D0,D1,…).")
_QUANTIZE_HINT = "Exclude the failing op types or nodes, try the other format, or turn pre-processing on."
