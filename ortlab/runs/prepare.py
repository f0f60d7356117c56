"""A recipe run up to its start: everything decided before it starts, decided once, in the process that starts
it, and the start.

:func:`prepare_run` reads the model's facts once (:func:`ortlab.model.inspect.inspect_model`, which hashes the
whole file), validates the recipe against the providers that work here and this CPU (:func:`validate_recipe`, whose
rules live here: they ask about the machine, not about the settings), checks that static int8 has data and that an
int8 or fp16 recipe starts from a float model, and names the bundled sample the model is (by that same hash).
:func:`start_recipe` (recorded in a workspace) and :func:`start_unrecorded_recipe` (a tune trial on a cluster node)
prepare the spec, set the run's time limit, check the space and the output place, and hand one typed
:class:`ortlab.runs.recipe_request.RecipeRequest` to the one way out of the process
(:class:`ortlab.runtime.child.ChildExecutor`). The child trusts the prepared spec: it neither inspects the model nor
validates the recipe again; :func:`ortlab.runs.recipe_child.load_prepared` turns it into the
:class:`ortlab.runs.pipeline.PreparedRun` the pipeline runs (a run in this process: :mod:`ortlab.runs.in_process`).
What the recipe does (static int8, bias correction) is the recipe's own answer (:attr:`Recipe.is_static`,
:attr:`Recipe.corrects_biases`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ortlab.core.disk import check_space, run_space_needed
from ortlab.core.errors import ModelLoadError, OrtlabError, RecipeError
from ortlab.core.text import utc_timestamp
from ortlab.data.samples import find_for_model, get_sample
from ortlab.model.diff import is_quantization_op
from ortlab.model.inspect import WEIGHT_INPUTS, ModelInfo, external_data_files, inspect_model
from ortlab.runs import outputs
from ortlab.runs.pipeline import BIAS_ON_RANDOM_DATA, WEIGHT_ROUNDING_ON_RANDOM_DATA
from ortlab.runs.history import newest_run_id
from ortlab.runs.recipe_child import run_recipe_child
from ortlab.runs.recipe_request import RecipeRequest
from ortlab.runs.result_speed import SKIP, SpeedCheck
from ortlab.runs.runspec import RunSpec
from ortlab.runs.service import RUN_TIMEOUT_VAR, RecipeHandle, timeout_from_env
from ortlab.runs.workspace import Workspace
from ortlab.runtime.child import ChildExecutor, default_memory_gb
from ortlab.runtime.hardware import cpu_int8
from ortlab.runtime.providers import working_providers
from ortlab.settings.config import (DISTRIBUTION_MIN_BINS, CalibrationMethod, CpuInt8, Finding, OptLevel, Precision,
                                   QuantFormat, QuantType, Recipe, Target, errors_of)

NO_CALIBRATION_DATA = ("Static quantization needs calibration data: give a folder of images or a tensor file, "
                       "use dynamic quantization, or allow random data (results will be flagged).")
RUN_TIMEOUT_BASE_S = 600.0       # default: a generous base…
RUN_TIMEOUT_PER_SAMPLE_S = 2.0   # …plus this per calibration and verification sample…
RUN_TIMEOUT_PER_100MB_S = 60.0   # …and this per 100 MB of model



def lacks_calibration_data(recipe: Recipe, has_data: bool) -> bool:
    """Whether ``recipe`` cannot run for want of calibration data: static int8 without data, random data not
    allowed (:data:`NO_CALIBRATION_DATA` says so)."""
    return recipe.is_static and not has_data and not recipe.allow_random_data


def findings_here(recipe: Recipe) -> list[Finding]:
    """What validating ``recipe`` finds on this machine: the providers that really work here and what its CPU means
    for int8 (reduce-range on x86 without VNNI); a page shows them, :func:`check_recipe` refuses a run on their
    errors."""
    return validate_recipe(recipe, working_providers(), cpu_int8())


def check_recipe(recipe: Recipe, *, has_data: bool) -> tuple[list[str], list[str]]:
    """Validate ``recipe`` for this machine and its data (``RecipeError`` when it cannot run); return its
    (warnings, notes)."""
    lacking = lacks_calibration_data(recipe, has_data)
    # a recipe that cannot run anywhere says so first; the CPU's int8 facts (reduce-range on x86 without VNNI) too
    findings = raise_on_errors(findings_here(recipe))
    if lacking:
        raise RecipeError(NO_CALIBRATION_DATA, step="validate")
    return ([f.message for f in findings if f.level == "warning"], [f.message for f in findings if f.level == "note"])


def quantized_ops(info: ModelInfo) -> dict[str, int]:
    """The ops of the model that compute on quantized tensors (:func:`ortlab.model.diff.is_quantization_op`) and how
    many of each."""
    found: dict[str, int] = {}
    for (domain, op), n in info.op_counts.items():
        if is_quantization_op(op) and domain in ("", "ai.onnx", "com.microsoft"):
            found[op] = found.get(op, 0) + n
    return found


def _classical_ml_ops(info: ModelInfo) -> list[str]:
    """The ``ai.onnx.ml`` operators of a model that has no weighted neural-network operator (a scikit-learn pipeline
    as skl2onnx writes it: LinearClassifier, TreeEnsembleClassifier, ZipMap, …); [] for any other model."""
    ml = sorted({op for (domain, op) in info.op_counts if domain == "ai.onnx.ml"})
    weighted = any(op in WEIGHT_INPUTS and domain in ("", "ai.onnx", "com.microsoft") for (domain, op) in info.op_counts)
    return [] if weighted else ml


def check_model_for(recipe: Recipe, info: ModelInfo) -> None:
    """``RecipeError`` when ``recipe`` cannot start from this model: int8 or fp16 of a model already quantized, or
    of a classical machine-learning pipeline with no neural-network weights; static int8 of a model with no inputs."""
    if recipe.precision == Precision.FP32:
        return
    ml = _classical_ml_ops(info)
    if ml:
        raise RecipeError(f"This model is a classical machine-learning pipeline ({', '.join(ml[:5])}: ai.onnx.ml "
                          "operators, as skl2onnx writes them) with no neural-network weights (Conv, MatMul, Gemm, "
                          f"LSTM…): {recipe.precision.value} has nothing to convert, and ONNX Runtime's quantizer and "
                          "float16 converter do not take these operators. An fp32 recipe optimizes its graph, and "
                          "ortlab bench times it.", step="validate")
    if not info.inputs and recipe.precision == Precision.INT8 and recipe.is_static:
        raise RecipeError("This model takes no inputs: it computes its outputs from its own constants, so static "
                          "int8 has nothing to calibrate. Dynamic int8 (--quant-mode dynamic) quantizes its weights "
                          "alone; fp16 converts it.", step="validate")
    found = quantized_ops(info)
    if not found:
        return
    listed = ", ".join(f"{op} ×{n}" for op, n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
    raise RecipeError(f"This model is already quantized ({listed}): {recipe.precision.value} starts from a float32 "
                      "model, and rounding a rounded model again only adds error. Start from its float32 original, "
                      "or use this one as it is (ortlab bench times it; an fp32 recipe only optimizes its graph).",
                      step="validate")


def _still_the_same(spec: RunSpec) -> bool:
    """Whether the model file still has the size its prepared facts say (a cheap guard, not a hash)."""
    try:
        return Path(spec.model).stat().st_size == int((spec.model_info or {}).get("file_bytes", -1))
    except OSError:
        return False


def prepare_run(spec: RunSpec, info: ModelInfo | None = None) -> RunSpec:
    """``spec`` with its decisions made: the model's facts (``info`` when the caller already read them, else read
    here), the recipe validated (its warnings and notes kept), the bundled sample named. Raises
    ``ModelLoadError``/``RecipeError`` before anything runs."""
    if spec.model_info is not None and _still_the_same(spec):
        return spec
    if not Path(spec.model).is_file():
        raise ModelLoadError(f"Model file not found: {spec.model}.")
    info = info if info is not None else inspect_model(spec.model)
    check_model_for(spec.recipe, info)
    warnings, notes = check_recipe(spec.recipe, has_data=spec.calibration is not None)
    sample = get_sample(spec.sample) if spec.sample else find_for_model(spec.model, info.sha256)
    return replace(spec, model_info=info.to_dict(), sample=sample.name if sample is not None else None,
                   warnings=tuple(warnings), notes=tuple(notes))


# -- the recipe against this machine ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Providers:
    """What the machine validating a recipe can run (``cpu``: None when its CPU is not considered)."""

    has_trt: bool
    has_gpu: bool
    cpu: CpuInt8 | None = None

    @classmethod
    def of(cls, available_providers: Sequence[str], cpu: CpuInt8 | None = None) -> _Providers:
        has_trt = "TensorrtExecutionProvider" in available_providers
        return cls(has_trt, has_trt or "CUDAExecutionProvider" in available_providers, cpu)


def _error(field: str, message: str) -> Finding:
    return Finding("error", field, message)


def _warning(field: str, message: str) -> Finding:
    return Finding("warning", field, message)


def _note(field: str, message: str) -> Finding:
    return Finding("note", field, message)


def _is_int8(recipe: Recipe) -> bool:
    return recipe.precision == Precision.INT8



def _gpu_target_without_gpu(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if recipe.target == Target.GPU and not here.has_gpu:
        yield _warning("target", "No working GPU provider here (CUDA/TensorRT); the model will be built for GPU but "
                                 "every run on this machine will use the CPU.")


def _int8_on_gpu(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if not _is_int8(recipe) or recipe.target != Target.GPU:
        return
    q = recipe.quant
    if recipe.is_dynamic:
        yield _error("target", "int8 dynamic quantization has no GPU kernels (DynamicQuantizeLinear, "
                               "MatMulInteger run on the CPU). Choose fp16 for GPU, or target cpu.")
    elif q.quant_format == QuantFormat.QOPERATOR:
        yield _error("quant.quant_format", "int8 QOperator models (QLinearConv, QLinearMatMul) run only on the CPU. "
                                           "Choose fp16 for GPU, or QDQ format with TensorRT.")
    elif not here.has_trt:
        yield _error("target", "int8 on GPU needs TensorRT to run the QDQ graph, and TensorRT is not available here. "
                               "Choose fp16 for GPU, or target cpu for int8.")
    else:
        yield _note("target", "int8 QDQ on GPU runs through TensorRT's int8 kernels.")


def _int8_types(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """The activation/weight type pair: S8S8 slow on x86, S8U8 unsupported."""
    if not _is_int8(recipe):
        return
    q = recipe.quant
    if (recipe.is_static and recipe.target == Target.CPU and q.activation_type == QuantType.INT8
            and q.weight_type == QuantType.INT8 and _is_x86()):
        yield _note("quant.activation_type", "On x86 CPUs ONNX Runtime's S8S8 kernels are slow (measured slower than "
                                             "fp32 here); uint8 activations (U8S8) are the fast path.")
    if q.activation_type == QuantType.INT8 and q.weight_type == QuantType.UINT8:
        yield _error("quant.weight_type", "int8 activations with uint8 weights (S8U8) are not supported by ONNX "
                                          "Runtime. Use int8 weights, or uint8 activations.")


def _int8_dynamic(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Dynamic quantization: Conv is slow, weights are 8-bit. (It always writes operator-style integer ops: the
    format knob does not apply.)"""
    q = recipe.quant
    if not recipe.is_dynamic:
        return
    if "Conv" in q.effective_op_types():
        yield _warning("quant.op_types", "Dynamic quantization of Conv makes ConvInteger, which runs far slower than "
                                         "fp32 on CPU. Leave Conv out (MatMul/Gemm only) or use static quantization.")
    if q.int16_weight_nodes:
        yield _error("quant.int16_weight_nodes", "16-bit weights are a static QDQ setting; dynamic quantization "
                                                 "quantizes weights to 8 bits.")


def _calibration(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Static int8: the calibration samples and the method's own options."""
    if not recipe.is_static:
        return
    q = recipe.quant
    if 1 <= q.calibration_samples < 10:
        yield _warning("quant.calibration_samples", f"Only {q.calibration_samples} calibration samples: ranges may "
                                                    "not represent real data. 100 or more is usual.")
    if q.calibration_method == CalibrationMethod.DISTRIBUTION and q.num_bins < DISTRIBUTION_MIN_BINS:
        yield _error("quant.num_bins", f"The Distribution method needs at least {DISTRIBUTION_MIN_BINS} histogram "
                                       f"bins (ONNX Runtime refuses fewer); got {q.num_bins}.")
    if q.calibration_method == CalibrationMethod.ENTROPY and q.num_quantized_bins >= q.num_bins:
        yield _error("quant.num_quantized_bins", "Quantized bins must be fewer than histogram bins for Entropy.")
    if q.moving_average and not (0.0 < q.averaging_constant < 1.0):
        yield _error("quant.averaging_constant", "Averaging constant must be in (0, 1).")


def _no_preprocess(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if recipe.is_static and not recipe.quant.preprocess:
        yield _warning("quant.preprocess", "Without pre-processing ORT warns and BatchNormalization stays unfused; "
                                           "accuracy and speed are usually worse.")


def _int16_weights(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Static int8: 16-bit weights need QDQ, and a node kept in float cannot have them."""
    if not recipe.is_static:
        return
    q = recipe.quant
    if q.int16_weight_nodes and q.quant_format != QuantFormat.QDQ:
        yield _error("quant.int16_weight_nodes", "16-bit weights need the QDQ format (QOperator has no int16 "
                                                 "QLinearConv/QLinearMatMul).")
    if overlap := set(q.int16_weight_nodes) & set(q.nodes_to_exclude):
        yield _error("quant.int16_weight_nodes", f"Nodes both kept in float and given 16-bit weights: "
                                                 f"{', '.join(sorted(overlap))}.")


def _bias_correction(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Static int8: when bias correction does not apply."""
    if not recipe.is_static or not recipe.quant.bias_correction:
        return
    if not recipe.corrects_biases:
        yield _note("quant.bias_correction", "Bias correction works on the QDQ format (it edits the int32 bias of "
                                             "each DequantizeLinear; QOperator folds biases into QLinearConv): this "
                                             "QOperator run is not corrected.")
    if recipe.corrects_biases and recipe.allow_random_data:
        yield _note("quant.bias_correction", BIAS_ON_RANDOM_DATA)


def _weight_rounding(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Static int8: when GPTQ weight rounding does not apply."""
    if not recipe.is_static or not recipe.quant.weight_rounding:
        return
    if not recipe.rounds_weights:
        yield _note("quant.weight_rounding", "GPTQ weight rounding works on the QDQ format (it re-rounds the int8 "
                                             "weight of each DequantizeLinear): this QOperator run keeps nearest "
                                             "rounding.")
    elif recipe.allow_random_data:
        yield _note("quant.weight_rounding", WEIGHT_ROUNDING_ON_RANDOM_DATA)


def _random_calibration(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if recipe.is_static and recipe.allow_random_data:
        yield _warning("allow_random_data", "Random calibration data gives meaningless ranges; every result will be "
                                            "flagged.")


def _int8_op_choice(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """Any int8: reduce_range's use, op types both included and excluded."""
    if not _is_int8(recipe):
        return
    q = recipe.quant
    if q.reduce_range and q.weight_type == QuantType.UINT8 and q.activation_type == QuantType.UINT8:
        yield _note("quant.reduce_range", "reduce_range matters mostly for U8S8 on CPUs without VNNI.")
    overlap = set(q.op_types) & set(q.op_types_to_exclude)
    if overlap:
        yield _error("quant.op_types_to_exclude", f"Op types both included and excluded: {', '.join(sorted(overlap))}.")


def _fp16_on_cpu(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if recipe.precision == Precision.FP16 and recipe.target == Target.CPU:
        yield _note("precision", "fp16 on CPU halves the file but gains no speed: most CPU kernels are fp32 and ORT "
                                 "inserts Casts. Choose int8 for CPU speed.")


def _opt_level_all(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    if recipe.opt_level != OptLevel.ALL:
        return
    yield _note("opt_level", "Level 'all' may write hardware-specific ops (e.g. NCHWc layouts) that suit only this "
                             "kind of machine; the result is checked and warns when it does. 'extended' is the "
                             "portable choice.")
    if recipe.target == Target.GPU:
        yield _note("opt_level", "For GPU the saved model is optimized with CUDA only (TensorRT's compiled nodes "
                                 "cannot be saved).")


def _u8s8_on_a_saturating_cpu(recipe: Recipe, here: _Providers) -> Iterator[Finding]:
    """On x86 without VNNI, where full-range U8S8 weights saturate ORT's 16-bit sums: a note that reduce-range is on
    as advised, else a warning that it is off."""
    cpu = here.cpu
    if cpu is None or not cpu.saturates_u8s8 or not _is_int8(recipe) or recipe.target != Target.CPU \
            or not recipe.quant.is_u8s8:
        return
    if recipe.quant.reduce_range:
        yield _note("quant.reduce_range", f"Reduce-range is on (7-bit weights), as advised for {cpu.name}. {cpu.why}")
    else:
        yield _warning("quant.reduce_range", f"Full-range U8S8 weights on {cpu.name}, an x86 CPU without VNNI: ONNX "
                       "Runtime's int8 kernels add the uint8×int8 products in 16-bit sums that saturate, which can "
                       "cost much accuracy (the digits sample: 10 dB SQNR instead of 30 dB). Turn on reduce-range, or "
                       "use uint8 weights (U8U8).")


# The rules of validate_recipe, in the order their findings are listed.
_RECIPE_RULES: tuple[Callable[[Recipe, _Providers], Iterator[Finding]], ...] = (
    _gpu_target_without_gpu, _int8_on_gpu, _int8_types, _int8_dynamic, _calibration, _no_preprocess,
    _int16_weights, _weight_rounding, _bias_correction, _random_calibration, _int8_op_choice, _fp16_on_cpu, _opt_level_all,
    _u8s8_on_a_saturating_cpu)


def validate_recipe(recipe: Recipe, available_providers: Sequence[str] = ("CPUExecutionProvider",),
                    cpu: CpuInt8 | None = None) -> list[Finding]:
    """Check a recipe before any work. ``available_providers`` must be what really works here
    (``ortlab.runtime.providers.working_providers()``), not what ORT claims; ``cpu``: what the CPU that will run it
    means for int8 (``ortlab.runtime.hardware.cpu_int8()``; None: not considered)."""
    out = [_error(path, message) for path, message in recipe.out_of_bounds()]
    out_of_range = {f.field for f in out}
    here = _Providers.of(available_providers, cpu)
    for rule in _RECIPE_RULES:
        # a number out of its bounds already has its error
        out.extend(f for f in rule(recipe, here) if f.level != "error" or f.field not in out_of_range)
    return out


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def require_valid(recipe: Recipe, available_providers: Sequence[str] = ("CPUExecutionProvider",),
                  cpu: CpuInt8 | None = None) -> list[Finding]:
    """Raise ``RecipeError`` on the first error finding; return the warnings and notes."""
    return raise_on_errors(validate_recipe(recipe, available_providers, cpu))


def raise_on_errors(findings: list[Finding]) -> list[Finding]:
    """``findings`` when none is an error; else ``RecipeError`` with the errors' messages."""
    errors = errors_of(findings)
    if errors:
        raise RecipeError(" ".join(f.message for f in errors), step="validate")
    return findings


# -- the start ---------------------------------------------------------------------------------------------------


def start_recipe(spec: RunSpec, out=None, *, workspace=None, origin: str = "app",
                 memory_gb: float | None = None, info: ModelInfo | None = None,
                 speed_check: SpeedCheck = SKIP) -> RecipeHandle:
    """Run ``spec`` in a child process and return its handle at once.

    ``out``: None = a new folder in the workspace; a folder = the artifact folder (model.onnx, recipe.json,
    artifact.json); a ``*.onnx`` path = just that model (and its external data) written there. Every run is
    recorded in the workspace history (``origin`` "app" or "cli") by the child when it ends; then, with
    ``speed_check`` enabled, the parent times the result against its source (:mod:`ortlab.runs.result_speed`)
    and stores the figure with the run before the handle is done. ``memory_gb``
    (default :func:`memory_limit_gb`: ``$ORTLAB_RUN_MEMORY_GB``, else min(8 GB, 60 % of RAM); none for a GPU
    target unless the variable is set) limits the child's address space. The spec is prepared here, before the
    child starts (:func:`prepare_run`; ``info``: the model's facts when the caller read them):
    a model that cannot load or a recipe that cannot run is refused at once, and the child decides nothing again.
    """
    size = _model_bytes(spec.model)
    timeout, timeout_why = run_timeout_s(spec, size)
    spec = prepare_run(spec, info)
    ws = workspace if workspace is not None else Workspace()
    target: Path | None = None
    needed = run_space_needed(size)
    check_space(ws.root, needed)
    if out is not None:
        check_space(Path(out).expanduser().absolute().parent, needed)
    as_file = out is not None and Path(out).suffix.lower() == ".onnx" and not Path(out).is_dir()
    if out is not None:  # refused before anything is written: OUT must not be the source or a file it needs
        outputs.check_targets(spec.model, outputs.result_files(out, as_file=as_file))
    if out is None:
        run_dir, created = ws.new_artifact_dir(), True
        (run_dir / outputs.OWNER_FILE).write_text(str(os.getpid()))
        # what is running, to list it as interrupted (and run it again) if the server dies before it ends
        outputs.write_text_atomic(run_dir / outputs.RUNNING_FILE, json.dumps(
            {"spec": spec.to_dict(), "origin": origin, "started_at": utc_timestamp()}))
    elif as_file:
        target = Path(out).expanduser().absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
        outputs.clean_stale(folders=[target.parent])
        run_dir, created = outputs.make_temp_dir(outputs.RUN_PREFIX, target.parent), True
    else:
        run_dir = Path(out).expanduser().resolve()
        created = not run_dir.exists()
    request = RecipeRequest(spec, run_dir, out_file=target, db=Path(ws.db_path), origin=origin, timeout_s=timeout,
                            timeout_why=timeout_why, runs_before=newest_run_id(ws.db_path),
                            memory_gb=memory_gb if memory_gb is not None else default_memory_gb(spec.recipe.target))
    with _starting(run_dir, remove=created):
        job = ChildExecutor().submit(run_recipe_child, request, time_limit_s=timeout)
    return RecipeHandle(request, job, remove_on_cancel=created, speed_check=speed_check)


def start_unrecorded_recipe(spec: RunSpec, run_dir: Path, *, calibrations: Path, memory_gb: float | None,
                            owned_dir: Path | None = None) -> RecipeHandle:
    """Run a prepared ``spec`` into the existing folder ``run_dir`` in a child process, as :func:`start_recipe`
    does (the same child, memory limit ``memory_gb``, time limit and errors), but outside any workspace: nothing
    is recorded, ``calibrations`` is the folder of kept calibrations it reads and adds to, and the handle's
    ``result`` is the artifact left in ``run_dir`` (a tune trial on a cluster node). ``owned_dir``: a folder that
    holds the child's scratch folder, and that the child removes, before it kills itself and its process group,
    when this process dies first (its end of the pipe closes)."""
    timeout, timeout_why = run_timeout_s(spec)
    spec = prepare_run(spec)  # a no-op for a prepared spec: the child trusts it
    (run_dir / outputs.OWNER_FILE).write_text(str(os.getpid()))
    request = RecipeRequest(spec, Path(run_dir), calibrations=Path(calibrations), timeout_s=timeout,
                            timeout_why=timeout_why, memory_gb=memory_gb, owned_dir=owned_dir)
    with _starting(run_dir, remove=False):
        job = ChildExecutor().submit(run_recipe_child, request, time_limit_s=timeout)
    return RecipeHandle(request, job, remove_on_cancel=False)


def run_timeout_s(spec: RunSpec, model_bytes: int | None = None) -> tuple[float, str]:
    """(seconds, how it was chosen) a run of ``spec`` may take: ``$ORTLAB_RUN_TIMEOUT_S`` when set, else a
    generous base plus time per sample (calibration and verification) and per 100 MB of model."""
    value = timeout_from_env()
    if value is not None:
        return value, f"${RUN_TIMEOUT_VAR}"
    recipe = spec.recipe
    calibration = recipe.quant.calibration_samples if recipe.is_static else 0
    verification = max(0, int(spec.verify_samples))
    samples = calibration + verification
    size = _model_bytes(spec.model) if model_bytes is None else model_bytes
    limit = RUN_TIMEOUT_BASE_S + RUN_TIMEOUT_PER_SAMPLE_S * samples + RUN_TIMEOUT_PER_100MB_S * size / 1e8
    caps = f"{calibration} calibration + {verification} verification" if calibration else f"{verification} verification"
    return round(limit), (f"the default: {RUN_TIMEOUT_BASE_S:.0f} s + {RUN_TIMEOUT_PER_SAMPLE_S:g} s per sample for "
                          f"up to {caps} samples + {RUN_TIMEOUT_PER_100MB_S:.0f} s per 100 MB of model; set "
                          f"${RUN_TIMEOUT_VAR} to change it")


@contextmanager
def _starting(run_dir: Path, *, remove: bool) -> Iterator[None]:
    """Around the start of a recipe child: when it cannot start, ``run_dir`` goes (``remove``: the run made it) and
    an ``OSError`` becomes an :class:`OrtlabError` that names it."""
    try:
        yield
    except BaseException as exc:  # no folder is left behind by a run that never started
        if remove:
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OrtlabError(f"The run's process could not be started ({exc.strerror or exc}: "
                              f"{exc.filename or 'python'}).") from None
        raise


def _model_bytes(model) -> int:
    """The model file and its external data, in bytes (0 when it cannot be read: the run says why)."""
    try:
        total = Path(model).stat().st_size
    except OSError:
        return 0
    try:
        total += sum(f.stat().st_size for f in set(external_data_files(model).values()))
    except (OSError, OrtlabError):
        pass
    return total
