"""Graph optimization with ONNX Runtime's own optimizer (SessionOptions.optimized_model_filepath)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from ortlab.runtime import providers as P
from ortlab.settings.config import OptLevel, Precision, Target
from ortlab.core.errors import ModelLoadError, OptimizationError
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.model.inspect import external_data_files, load_model
from ortlab.core.text import one_line
from ortlab.model.graphs import walk_graphs, walk_nodes
from ortlab.core.text import format_bytes
from ortlab.transforms.softmax_axis import rewrite_note, softmax_over_last_axis

ALL_LEVEL_WARNING = ("Level 'all' wrote hardware-specific ops (e.g. com.microsoft.nchwc layouts): the saved model "
                     "only suits hardware like this machine's. Use 'extended' for a portable model.")
NO_GPU_WARNING = ("No working CUDA GPU here: the model was optimized for the CPU, so GPU-specific fusions could not "
                  "be applied. Optimize on a machine with a GPU, or let ORT optimize at load time there.")


@dataclass(frozen=True)
class OptimizeResult:
    """Where the optimized model went, how, and what a person should know about it."""

    path: Path
    level: OptLevel
    target: Target
    providers: list[str]
    warnings: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "level": self.level.value, "target": self.target.value,
                "providers": list(self.providers), "warnings": list(self.warnings), "seconds": self.seconds,
                "notes": list(self.notes)}


def optimize_providers(target: Target) -> list[str]:
    """Providers to optimize with: CUDA+CPU for gpu when CUDA really works (never TensorRT: its compiled
    nodes cannot be saved), else CPU."""
    if Target(target) == Target.GPU and P.CUDA in P.working_providers():
        return [P.CUDA, P.CPU]
    return [P.CPU]


def _random_feed(sess) -> dict[str, np.ndarray]:
    """One random feed for a session: symbolic dims are 1 where they lead an input (batch), else 32; floats
    ~ N(0, 1), integers in {0, 1}, booleans False/True."""
    rng = np.random.default_rng(0)
    leading = {a.shape[0] for a in sess.get_inputs() if a.shape and not isinstance(a.shape[0], int)}
    feed = {}
    for arg in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else (1 if d in leading or d is None else 32) for d in arg.shape]
        kind = arg.type[len("tensor("):-1] if arg.type.startswith("tensor(") else arg.type
        dtype = {"float": np.float32, "float16": np.float16, "double": np.float64, "bool": np.bool_}.get(kind)
        if dtype is None:
            try:
                dtype = np.dtype(kind).type
            except TypeError:
                raise ValueError(f"input {arg.name!r} has type {arg.type}") from None
        if np.issubdtype(dtype, np.floating):
            feed[arg.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feed[arg.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feed


def _outputs_match(ref: np.ndarray, out: np.ndarray, tolerance: float = 1e-3) -> tuple[bool, float]:
    ref64, out64 = np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64)
    if ref64.shape != out64.shape:
        return False, float("inf")
    if ref64.size == 0:
        return True, 0.0
    diff = float(np.nanmax(np.abs(ref64 - out64)))
    scale = max(1.0, float(np.nanmax(np.abs(ref64))))
    same_nan = bool(np.array_equal(np.isnan(ref64), np.isnan(out64)))
    return same_nan and diff <= tolerance * scale, diff


# max |disabled - optimized| / max |disabled| above which graph optimization counts as changing what a model
# computes (checked by :mod:`ortlab.checks.parity` and by :func:`verify_with_runtime`)
TOLERANCE = {Precision.FP32: 1e-3, Precision.FP16: 2e-2, Precision.INT8: 0.1}
QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                 "QLinearConv", "QLinearMatMul"}


def _runtime_tolerance(src: Path) -> float:
    """Relative tolerance of :func:`verify_with_runtime`: the optimization-parity tolerance of int8 when ``src``
    is quantized (ORT's fused int8 kernels round activations differently from the unfused graph, e.g. 0.13 on
    a MiniLM-sized encoder's hidden state after dynamic int8), else fp32's."""
    model = onnx.load_model(str(src), load_external_data=False)
    quantized = any(n.op_type in QUANTIZED_OPS for n in model.graph.node)
    return TOLERANCE[Precision.INT8 if quantized else Precision.FP32]


# a fused int8 graph passes against its QDQ source, whatever their largest difference, when the rms of their
# difference is at most this multiple of the rms of the QDQ graph's own difference from the float model: fused
# QLinear kernels round at other points than DQ -> float op -> Q, one-step flips that a poorly fitting int8 model
# amplifies layer by layer, so their spread is quantization noise of the same kind (measured up to 1.1x of it)
FUSED_INT8_NOISE = 2.0


WITHIN_INT8_ROUNDING = "within int8 rounding"


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(np.asarray(a, dtype=np.float64))))) if np.size(a) else 0.0


def _within_quantization_noise(qdq: list, fused: list, floats: list, names: list[str]) -> tuple[bool, str]:
    """Whether every output of the fused int8 graph differs from the QDQ graph's by no more than
    :data:`FUSED_INT8_NOISE` times the QDQ graph's own error against the float model (rms, relative to the float
    output's rms); the text says so for the output with the largest such ratio."""
    worst = (-1.0, "", 0.0, 0.0)
    for name, q, c, f in zip(names, qdq, fused, floats):
        q64, c64, f64 = (np.asarray(x, dtype=np.float64) for x in (q, c, f))
        if not (q64.shape == c64.shape == f64.shape) or not np.all(np.isfinite(c64)):
            return False, f"output '{name}' of the optimized model has another shape or non-finite values"
        scale = _rms(f64) or 1.0
        drift, noise = _rms(c64 - q64) / scale, _rms(q64 - f64) / scale
        ratio = drift / noise if noise > 0 else (0.0 if drift == 0 else float("inf"))
        if ratio > worst[0]:
            worst = (ratio, name, drift, noise)
    ratio, name, drift, noise = worst
    text = (f"output '{name}': rms difference {drift:.1%} of the float model's output, against {noise:.1%} between "
            f"the unfused int8 graph and the float model")
    return ratio <= FUSED_INT8_NOISE, text


def verify_with_runtime(src: Path, dst: Path, float_source: Path | None = None) -> str:
    """Load ``dst`` (a model ORT wrote) and ``src`` in ONNX Runtime, run both on one random feed and compare
    every output (tolerance: :func:`_runtime_tolerance`); returns the largest difference as text. When ``src`` is
    quantized and ``float_source`` (the float model it was quantized from) is given, outputs beyond the tolerance
    still pass while they stay within the quantization noise (:func:`_within_quantization_noise`). Raises
    ``OptimizationError`` when ``dst`` does not load or run, or its outputs differ."""
    try:
        with P.quiet_native_stderr():
            so = P.session_options(opt_level=OptLevel.DISABLED)
            ref, _ = P.create_session(src, Target.CPU, so)
            cand, _ = P.create_session(dst, Target.CPU, P.session_options(opt_level=OptLevel.DISABLED))
            feed = _random_feed(ref)
            ref_out, cand_out = ref.run(None, feed), cand.run(None, feed)
    except P.ORT_ERRORS + (ModelLoadError,) as exc:
        raise OptimizationError(f"ONNX Runtime cannot run the model it wrote: {P.explain_ort_error(exc)}",
                                step="optimize") from None
    worst, tolerance = 0.0, _runtime_tolerance(src)
    names = [o.name for o in ref.get_outputs()]
    beyond: tuple[str, float] | None = None
    for name, a, b in zip(names, ref_out, cand_out):
        ok, diff = _outputs_match(a, b, tolerance)
        if not ok and beyond is None:
            beyond = (name, diff)
        worst = max(worst, diff)
    if beyond is None:
        return f"max |Δ| {worst:.3g}"
    name, diff = beyond
    message = f"The optimized model's output '{name}' differs from the source's on a random input (max |Δ| {diff:.3g})"
    if float_source is None or tolerance != TOLERANCE[Precision.INT8]:
        raise OptimizationError(message + ".", step="optimize")
    try:
        with P.quiet_native_stderr():
            floats = P.create_session(float_source, Target.CPU, so)[0].run(None, feed)
    except P.ORT_ERRORS + (ModelLoadError,) as exc:
        raise OptimizationError(f"{message}, and the float model it was quantized from does not run to compare: "
                                f"{P.explain_ort_error(exc)}", step="optimize") from None
    ok, noise = _within_quantization_noise(ref_out, cand_out, floats, names)
    if not ok:
        raise OptimizationError(f"{message}, more than int8 rounding explains ({noise}).", step="optimize")
    return (f"max |Δ| {worst:.3g}, {WITHIN_INT8_ROUNDING}: fused int8 kernels round differently from the "
            f"unfused graph ({noise})")


def _check_output(path: Path, warnings: list[str], src: Path | None = None, notes: list[str] | None = None,
                  float_source: Path | None = None) -> None:
    """Full ONNX check of what ORT wrote. When the checker objects (contrib ops, or ops ORT fused in the ONNX
    domain at an opset that predates them, such as LayerNormalization at opset 12), ORT itself is the judge:
    the model must load in ORT and its outputs match the source's (``src``) on a random input; the checker's
    objection then becomes a note. Without ``src`` only the structural check is the fallback."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return
    except ONNX_ERRORS + (OSError,) as exc:
        full_error = one_line(exc)
    if src is not None:
        agreement = verify_with_runtime(src, path, float_source)
        verb = "differ only by int8 rounding from" if WITHIN_INT8_ROUNDING in agreement else "match"
        if notes is not None:
            notes.append(f"The ONNX checker rejects the graph ONNX Runtime wrote ({full_error}); ONNX Runtime loads "
                         f"and runs it, and its outputs {verb} the source's on a random input ({agreement}).")
        return
    model = onnx.load_model(str(path), load_external_data=False)
    domains = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
    if not domains:
        raise OptimizationError(f"ONNX Runtime wrote a model the ONNX checker rejects: {full_error}", step="optimize")
    try:
        onnx.checker.check_model(str(path), full_check=False)
    except ONNX_ERRORS + (OSError,) as exc:
        raise OptimizationError("ONNX Runtime wrote a model the ONNX checker rejects: "
                                f"{one_line(exc)}", step="optimize") from None
    warnings.append(f"Only the structural ONNX check was run: full checking (shape inference) does not know the "
                    f"ops of {', '.join(sorted(domains))}.")


def optimize_model(src, dst, level: OptLevel, target: Target = Target.CPU,
                   float_source: Path | None = None) -> OptimizeResult:
    """Optimize ``src`` at ``level`` with ONNX Runtime and save to ``dst`` (``src`` is never modified); above
    "disabled", a Softmax over an inner axis that reads a Transpose is first computed over the last axis
    (:mod:`.softmax_axis`).

    gpu optimizes with CUDA only when CUDA really works here (else CPU, with a warning); level "all"
    adds the hardware-specific warning; "disabled" copies the graph through ORT unchanged. The result
    passes the ONNX checker (structural check only when contrib ops defeat full checking) or, when the checker
    rejects it, runs like ``src`` in ORT (``float_source``: the float model a quantized ``src`` came from, whose
    quantization error bounds the fused int8 kernels' differences; see :func:`verify_with_runtime`).
    """
    level, target = OptLevel(level), Target(target)
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise OptimizationError("The optimized model must go to a new file, not over the source.", step="optimize")
    try:
        source = load_model(src, check=True, load_external=False)
    except ModelLoadError as exc:
        if not exc.message.startswith("invalid model:"):
            exc.step = exc.step or "optimize"
            raise
        # the checker rejects a model ORT runs (a function op's body, a quantizer's value_info without a shape):
        # ORT is the judge, as for the source at upload: the session below loads it, and its result must match it
        source = load_model(src, check=False, load_external=False)
    external = external_data_files(source, src.parent)
    weights_as_inputs = [] if external else _weights_as_inputs(source)
    rewritten = softmax_over_last_axis(source) if level != OptLevel.DISABLED and not external else []
    dst.parent.mkdir(parents=True, exist_ok=True)
    for stale in (dst, dst.with_name(dst.name + ".data")):
        if stale.exists():
            stale.unlink()

    warnings: list[str] = []
    providers = optimize_providers(target)
    if target == Target.GPU and P.CUDA not in providers:
        warnings.append(NO_GPU_WARNING)
    so = P.session_options(opt_level=level)
    so.optimized_model_filepath = str(dst)
    if external:  # otherwise ORT's output would point at the source's weight file, relative to dst
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", dst.name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ortlab-optimize-") as tmp:
        read = _as_constants(source, weights_as_inputs, Path(tmp)) if weights_as_inputs or rewritten else src
        del source
        try:
            with P.quiet_native_stderr():
                sess = ort.InferenceSession(str(read), sess_options=so, providers=providers, enable_fallback=0)
        except P.ORT_ERRORS as exc:
            raise OptimizationError(f"ONNX Runtime could not optimize the model: {P.explain_ort_error(exc)}",
                                    step="optimize") from None
        seconds = time.perf_counter() - start
        used = list(sess.get_providers())
        del sess
    if not dst.is_file():
        raise OptimizationError("ONNX Runtime did not write the optimized model.", step="optimize")
    notes: list[str] = [WEIGHTS_AS_INPUTS_NOTE.format(n=len(weights_as_inputs))] if weights_as_inputs else []
    notes += [rewrite_note(rewritten)] if rewritten else []
    _check_output(dst, warnings, src, notes, float_source)
    growth = _growth_warning(src, dst, list(external.values()))
    if growth:
        warnings.append(growth)
    if level == OptLevel.ALL:
        specific = hardware_specific_domains(dst)
        if specific:
            warnings.append(ALL_LEVEL_WARNING)
        else:
            notes.append("Level 'all' wrote no hardware-specific ops here (no com.microsoft.nchwc layouts): the saved "
                         "model is as portable as at 'extended'.")
    return OptimizeResult(path=dst, level=level, target=target, providers=used, warnings=warnings, seconds=seconds,
                          notes=notes)


WEIGHTS_AS_INPUTS_NOTE = (
    "{n} weights were also listed as graph inputs (as models of IR version 3 list them), which ONNX Runtime treats as "
    "inputs a caller may replace: it leaves them out of constant folding and, sharing equal ones, wrote models "
    "that asked for them as inputs. The model was optimized with them as constants only (ONNX Runtime's "
    "remove_initializer_from_input step); the result's inputs are the model's real ones.")


def _weights_as_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs that are also initializers (every weight, in a model of IR version 3)."""
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name in weights]


def _as_constants(model: onnx.ModelProto, names: list[str], tmp: Path) -> Path:
    """``model`` without ``names`` among its graph inputs (IR version 4 at least, where weights need not be inputs;
    none: as it is), saved in ``tmp``."""
    drop = set(names)
    kept = [i for i in model.graph.input if i.name not in drop]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)
    path = tmp / "model.onnx"
    onnx.save(model, str(path))
    return path


# an optimized file more than 10% (and 16 kB) larger than its input gets a warning that says why
GROWTH_WARN, GROWTH_MIN_BYTES = 1.1, 16_000


def _growth_warning(src: Path, dst: Path, external: list[Path]) -> str | None:
    """Why the optimized file is larger than its input (None when it is not much larger): the tensors ORT's
    constant folding stored, and how many of them are the same data folded once per If/Loop/Scan branch."""

    before = src.stat().st_size + sum(f.stat().st_size for f in external if f.is_file())
    after = dst.stat().st_size + sum(f.stat().st_size for f in dst.parent.glob(dst.name + ".data"))
    if after <= GROWTH_WARN * before or after - before < GROWTH_MIN_BYTES:
        return None
    old = onnx.load_model(str(src), load_external_data=False)
    known = {t.name for g in walk_graphs(old.graph) for t in g.initializer}
    known |= {o for at in walk_nodes(old.graph) if at.node.op_type == "Constant" for o in at.node.output}
    del old
    new = onnx.load_model(str(dst), load_external_data=False)
    folded = [t for g in walk_graphs(new.graph) for t in g.initializer if t.name not in known]
    seen: dict[bytes, int] = {}
    for t in folded:
        seen[t.raw_data] = seen.get(t.raw_data, 0) + 1
    copies = sum(n for data, n in seen.items() if n > 1 and data)
    text = (f"The optimized file is {after / max(1, before):.0%} of its input ({format_bytes(before)} → "
            f"{format_bytes(after)}): ONNX Runtime's constant folding stored {len(folded)} precomputed tensor(s) "
            f"({format_bytes(sum(len(t.raw_data) for t in folded))})")
    if copies:
        text += (f", {copies} of them copies of the same data folded once per If/Loop/Scan branch that uses it")
    return text + (". ONNX Runtime folds the same in memory when it loads the model; --opt-level disabled keeps "
                   "the file at its input's size.")


HARDWARE_SPECIFIC_DOMAINS = ("com.microsoft.nchwc",)


def hardware_specific_domains(path) -> list[str]:
    """The hardware-specific op domains (NCHWc layouts) a saved model really uses, subgraphs included."""

    model = onnx.load_model(str(path), load_external_data=False)
    return sorted({at.node.domain for at in walk_nodes(model.graph) if at.node.domain in HARDWARE_SPECIFIC_DOMAINS})
