"""Run a prepared recipe as a plan of stages: validate → (pre-process) → calibrate → quantize → (weight rounding) →
(bias correction), or convert → optimize → verify.

Each stage is one :class:`Stage` object: its name (the key of its progress events and timing), its label, the error
type its untyped failures become, its progress message and its function from a typed input (the output of the stage
before it) to a typed output (:class:`Model`, :class:`Calibrated`, :class:`Quantized`, :class:`Verified`).
:func:`plan` decides once, from the recipe, which stages run; :func:`run_prepared` runs them in order, reporting and
timing each. The calibrate stage reuses the ranges an earlier run computed for the same model, data and calibration
settings (:mod:`ortlab.runs.calibration_cache`).

The source model is read in place and never modified; everything is written into ``out_dir``: ``model.onnx`` (its
external data, if any, as ``model.onnx.data``), ``recipe.json`` and ``artifact.json``. The stages work in a temporary
folder inside ``out_dir``; the result is renamed into place only when every stage succeeded
(``ortlab.runs.outputs``), so a failed run leaves ``out_dir`` as it was, and an ``out_dir`` that would overwrite the
source is refused.

Size: each stage's function sits beside its :class:`Stage` object, the types they pass and :func:`plan`, so that
one file says what a run does, in order.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from ortlab.checks.eval_report import EvalReport
from ortlab.checks.evaluate import evaluate
from ortlab.checks.parity import SAFE_MODEL, optimization_parity
from ortlab.checks.task_metrics import output_channel_groups
from ortlab.checks.verdict import Verdict, VerdictPolicy, judge
from ortlab.core.errors import Cancelled, DataError, ModelLoadError, OptimizationError, OrtlabError, QuantizationError
from ortlab.core.layout import MODEL_FILE, QDQ_FILE, RECIPE_FILE
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.core.text import one_line, utc_timestamp
from ortlab.data.dataset import Dataset, random_dataset, stratified_sample
from ortlab.data.feeds import check_fits, sample_copies
from ortlab.data.inputs import control_input_error, default_notes, infer_specs, is_control_input, resolve_feed
from ortlab.data.preprocess import resolve_preprocess
from ortlab.model.inspect import ModelInfo, check_source_runs, run_warnings, sha256_file
from ortlab.model.patterns import DETECTOR_BIAS_NOTE, is_detector_file
from ortlab.model.size_growth import growth_note
from ortlab.runs import outputs
from ortlab.runs.artifact import Artifact, file_bytes
from ortlab.runs.bias_task_judge import held_back_task_judge
from ortlab.runs.calibration_cache import (
    REUSED, CachedCalibration, CalibrationCache, calibration_key, feeds_digest, model_digest,
)
from ortlab.runs.rounding_cache import RoundingCache
from ortlab.runs.run_notes import RunNotes
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES
from ortlab.runtime import providers
from ortlab.settings.config import OptLevel, Precision, PreprocessConfig, QuantFormat, Recipe
from ortlab.transforms import bias_correction, graph_outputs, weight_rounding
from ortlab.transforms.calibration import CalibrationReader
from ortlab.transforms.coverage import QuantCoverage
from ortlab.transforms.fp16 import convert_fp16
from ortlab.transforms.optimize import optimize_model
from ortlab.transforms.quantize import (
    calibrate_model, calibration_settings, preprocess_for_quantization, quantize_calibrated_result,
    quantize_dynamic_result,
)


BIAS_CORRECTION_SKIPPED = ("Bias correction skipped: the calibration data is random, and fitting the biases to noise "
                           "would not help; give real calibration data to have it.")
WEIGHT_ROUNDING_SKIPPED = ("GPTQ weight rounding skipped: the calibration data is random (it would fit the weights "
                           "to noise); the weights are rounded to nearest.")
# said before a run that may calibrate on random data; a run that does says so itself, in its place
WEIGHT_ROUNDING_ON_RANDOM_DATA = ("GPTQ weight rounding is skipped when the calibration data is random (it would fit "
                                  "the weights to noise).")
BIAS_ON_RANDOM_DATA = "Bias correction is skipped when the calibration data is random (it would fit the biases to noise)."


VERIFICATION_SKIPPED = "Verification skipped: no evaluation data was given."  # a note of the run's artifact


@dataclass(frozen=True)
class PreparedRun:
    """A run with its decisions made, ready for :func:`run_prepared`: the source ``model``
    and its facts (``info``), the validated ``recipe`` with its ``warnings`` and ``notes``, the calibration
    ``dataset`` and the ``verify_dataset`` (loaded), the image ``preprocess`` (None: decided per dataset by
    :func:`ortlab.data.preprocess.resolve_preprocess`), how many samples verify the result, the verdict ``policy``
    and ``shapes`` (``{input name: shape}`` for dims the model leaves open); ``values``: what random data feeds the
    control inputs (``{input name: value}``, ``--input-value``)."""

    model: Path
    recipe: Recipe
    info: ModelInfo
    dataset: Dataset | None = None
    verify_dataset: Dataset | None = None
    preprocess: PreprocessConfig | None = None
    verify_samples: int = DEFAULT_VERIFY_SAMPLES
    policy: VerdictPolicy = field(default_factory=VerdictPolicy)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    values: dict[str, float] = field(default_factory=dict)


# -- what the stages hand on ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A model a stage wrote (``path``; the source after validate) and what the stages after it need to know:
    the ``input_shapes`` fed, whether random data was used, the quantize stage's ``coverage``, the ``qdq`` model to
    keep beside the result (static QDQ int8), the calibration samples (``calibration_sources``, "source#index", to
    count their overlap with the verification samples) and the model the optimize stage read."""

    path: Path
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    random_data: bool = False
    coverage: QuantCoverage | None = None
    qdq: Path | None = None
    calibration_sources: frozenset[str] = frozenset()
    optimized_from: Path | None = None


@dataclass(frozen=True)
class Calibrated:
    """The calibrate stage's output: the ``model`` it calibrated, the activation ``ranges`` (ONNX Runtime's
    calibration cache file), the samples it used (``dataset``, with the ``preprocess`` and input ``specs`` that feed
    them: bias correction runs on them) and whether the ranges were ``reused`` from an earlier run."""

    model: Model
    ranges: Path
    dataset: Dataset
    preprocess: PreprocessConfig | None
    specs: list
    reused: bool


@dataclass(frozen=True)
class Quantized:
    """The quantize stage's output: the int8 ``model``, the ``float_model`` it was quantized from and, for static
    int8, the calibration it used; ``feeds``: its samples as model inputs, passed on by weight rounding to bias
    correction (which drops them) so that they are read and preprocessed once."""

    model: Model
    float_model: Path
    calibrated: Calibrated | None = None
    feeds: tuple[dict, ...] | None = None


@dataclass(frozen=True)
class Verified:
    """The verify stage's output: the result ``model`` and how it compares with the source."""

    model: Model
    evaluation: EvalReport | None
    verdict: Verdict
    providers: list[str]


@dataclass(frozen=True)
class RunContext:
    """What every stage may read: the prepared ``run``, the ``work`` folder, the ``result`` path, the reporter and
    cancel token, the calibrations kept in the workspace (None: none kept) and the ``findings`` it adds its warnings
    and notes to."""

    run: PreparedRun
    work: Path
    reporter: Reporter
    cancel: CancelToken | None
    calibrations: CalibrationCache | None
    findings: RunNotes

    @property
    def result(self) -> Path:
        """The result while the run goes (in the work folder; installed into ``out_dir`` at the end)."""
        return self.work / "result.onnx"

    def feed(self, ds: Dataset) -> tuple[PreprocessConfig | None, list]:
        """The preprocessing and the input specs (:func:`ortlab.data.inputs.resolve_feed`) that feed ``ds``."""
        run = self.run
        pre = run.preprocess if run.preprocess is not None else resolve_preprocess(run.info.inputs, dataset=ds)
        pre, specs = resolve_feed(run.info.inputs, pre, ds, run.shapes)
        self.findings.note(default_notes(specs))
        return pre, list(specs)


In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class Stage(Generic[In, Out]):
    """One step of a recipe run: ``name`` (the key of its progress events and timing), a human ``label``, the
    ``error`` type its untyped failures become, its progress ``message`` (text, or made from the prepared run) and
    ``run``, its work from a typed input to a typed output. A ``counted`` stage reports its own n/N events."""

    name: str
    label: str
    error: type[OrtlabError]
    run: Callable[[RunContext, In], Out]
    message: str | Callable[[PreparedRun], str] = ""
    counted: bool = False

    def message_for(self, run: PreparedRun) -> str:
        return self.message(run) if callable(self.message) else self.message


def _shapes(specs) -> dict[str, list[int]]:
    return {s.name: list(s.shape) for s in specs}


# -- the stages' work ---------------------------------------------------------------------------------------------


def _validate(ctx: RunContext, source: Path) -> Model:
    """The checks that need the loaded data: the model's warnings, the inputs' names and ranks, and that each
    dataset fits the model (the recipe itself was validated when the run was prepared)."""
    run = ctx.run
    ctx.findings.warn(run_warnings(run.info.warnings, int8=run.recipe.precision == Precision.INT8))
    if providers.runtime_providers(run.recipe.target) == [providers.CPU]:  # a GPU may have kernels the CPU lacks
        check_source_runs(source, run.info)
    specs = infer_specs(run.info.inputs, overrides=run.shapes, strict=False)  # names and ranks of --shape
    random_used = run.recipe.allow_random_data and run.dataset is None and (run.recipe.is_static
                                                                            or run.verify_dataset is None)
    control = next((s for s in specs if is_control_input(s) and s.name not in run.values), None)
    if random_used and control is not None:
        raise control_input_error(control)
    if run.preprocess is not None and run.preprocess.problems():
        raise DataError(" ".join(run.preprocess.problems()))
    shapes: dict[str, list[int]] = {}
    for ds in (run.dataset, run.verify_dataset):
        if ds is not None:
            pre, fed = ctx.feed(ds)
            check_fits(ds, pre, run.info.inputs, fed or None)
            shapes = shapes or _shapes(fed)
    return Model(source, input_shapes=shapes, random_data=bool(run.dataset is not None and run.dataset.is_random))


def _convert(ctx: RunContext, m: Model) -> Model:
    dst = ctx.work / "fp16.onnx"
    ctx.findings.warn(convert_fp16(m.path, dst, ctx.run.recipe.keep_io_types))
    return replace(m, path=dst)


def _quantize_dynamic(ctx: RunContext, m: Model) -> Quantized:
    dst = ctx.work / "quantized.onnx"
    result = quantize_dynamic_result(m.path, dst, ctx.run.recipe.quant)
    ctx.findings.warn(result.warnings)
    ctx.findings.note(result.notes)
    return Quantized(replace(m, path=dst, coverage=result.coverage), float_model=m.path)


def _preprocess(ctx: RunContext, m: Model) -> Model:
    dst = ctx.work / "preprocessed.onnx"
    ctx.findings.warn(preprocess_for_quantization(m.path, dst))
    return replace(m, path=dst)


def _calibrate(ctx: RunContext, m: Model) -> Calibrated:
    """The activation ranges of ``m`` on the sampled calibration data: reused from the workspace when an earlier
    run calibrated the same model on the same feeds with the same settings, else computed (and kept there)."""
    run, q = ctx.run, ctx.run.recipe.quant
    calib = run.dataset if run.dataset is not None else random_dataset(q.calibration_samples, q.seed, run.values)
    random_data = m.random_data or calib.is_random
    calib = stratified_sample(calib, q.calibration_samples, q.seed)
    sources = frozenset() if calib.is_random else frozenset(f"{s.source}#{s.index}" for s in calib.samples)
    ctx.reporter(ProgressEvent("calibrate", 0, len(calib), f"Calibrating on {len(calib)} samples"))
    pre, specs = ctx.feed(calib)
    ranges = ctx.work / "calibration.json"
    kept, key = ctx.calibrations, ""
    if kept is not None:  # the key reads every feed once, without progress (the calibration reports it)
        data = CalibrationReader(calib, pre, run.info.inputs, null_reporter, ctx.cancel, specs=specs)
        key = calibration_key(model_digest(m.path), feeds_digest(data.get_next), calibration_settings(q))
    cached = kept.get(key) if kept is not None else None
    if cached is not None:
        outputs.write_text_atomic(ranges, cached.ranges)
        ctx.findings.warn(cached.warnings)
        ctx.findings.note([REUSED])
        ctx.reporter(ProgressEvent("calibrate", len(calib), len(calib), REUSED))
    else:
        reader = CalibrationReader(calib, pre, run.info.inputs, ctx.reporter, ctx.cancel, specs=specs)
        warnings = calibrate_model(m.path, q, reader, ranges)
        ctx.findings.warn(warnings)
        if kept is not None:
            kept.put(key, CachedCalibration(ranges.read_text(encoding="utf-8"), tuple(warnings)))
    model = replace(m, random_data=random_data, calibration_sources=sources,
                    input_shapes=m.input_shapes or _shapes(specs))
    return Calibrated(model, ranges, calib, pre, specs, reused=cached is not None)


def _quantize_static(ctx: RunContext, c: Calibrated) -> Quantized:
    dst = ctx.work / "quantized.onnx"
    q = ctx.run.recipe.quant
    result = quantize_calibrated_result(c.model.path, dst, q, c.ranges)
    ctx.findings.warn(result.warnings)
    ctx.findings.note(result.notes)
    # a QDQ model (one file: ORT writes no external data here) is kept beside the result for per-node analysis
    qdq = dst if q.quant_format == QuantFormat.QDQ else None
    return Quantized(replace(c.model, path=dst, coverage=result.coverage, qdq=qdq), c.model.path, c)


def _calibration_feeds(ctx: RunContext, c: Calibrated, given: tuple[dict, ...] | None = None) -> tuple[dict, ...]:
    """The calibrate stage's samples as model inputs, in order: ``given`` (an earlier stage's), else read."""
    if given is not None:
        return given
    reader = CalibrationReader(c.dataset, c.preprocess, ctx.run.info.inputs, null_reporter, ctx.cancel,
                               specs=c.specs)
    feeds = []
    while (feed := reader.get_next()) is not None:
        feeds.append(feed)
    return tuple(feeds)


def _kept_fits(ctx: RunContext) -> RoundingCache | None:
    """Where the run keeps and finds node fits (GPTQ roundings, bias corrections): beside its kept calibrations, in
    its workspace; None for a run that keeps none."""
    return RoundingCache.beside(ctx.calibrations.folder) if ctx.calibrations is not None else None


def _round_weights(ctx: RunContext, qz: Quantized) -> Quantized:
    """GPTQ weight rounding of the static QDQ model (``ortlab.transforms.weight_rounding``) on the samples the
    calibrate stage used; reports its own "weight_rounding" n/N events. Skipped on random data."""
    c = qz.calibrated
    if c is None or c.dataset.is_random:
        ctx.findings.restate(WEIGHT_ROUNDING_ON_RANDOM_DATA, WEIGHT_ROUNDING_SKIPPED)
        ctx.reporter(ProgressEvent(weight_rounding.STAGE, 1, 1, "skipped: the calibration data is random"))
        return qz
    dst = ctx.work / "weights_rounded.onnx"
    feeds = _calibration_feeds(ctx, c)
    result = weight_rounding.round_weights(qz.float_model, qz.model.path, dst, feeds, ctx.reporter, ctx.cancel,
                                           output_groups=output_channel_groups, memo=_kept_fits(ctx))
    ctx.findings.note(result.notes)
    qdq = dst if qz.model.qdq == qz.model.path else qz.model.qdq  # the QDQ file kept is the re-rounded one
    return replace(qz, model=replace(qz.model, path=dst, qdq=qdq),
                   feeds=feeds if ctx.run.recipe.corrects_biases else None)


def _correct_biases(ctx: RunContext, qz: Quantized) -> Quantized:
    """Empirical bias correction of the static QDQ model (``ortlab.transforms.bias_correction``) on the samples the
    calibrate stage used; reports its own "bias_correction" n/N events and honours cancel between runs. Skipped on
    random data, and on a YOLO-style detector while known patterns are on (:data:`DETECTOR_BIAS_NOTE`). The samples
    weight rounding passed on are used here and go no further."""
    given, qz = qz.feeds, replace(qz, feeds=None)
    c = qz.calibrated
    if c is None or c.dataset.is_random:
        ctx.findings.restate(BIAS_ON_RANDOM_DATA, BIAS_CORRECTION_SKIPPED)
        ctx.reporter(ProgressEvent(bias_correction.STAGE, 1, 1, "skipped: the calibration data is random"))
        return qz
    if ctx.run.recipe.quant.known_patterns and is_detector_file(qz.float_model):
        ctx.findings.note([DETECTOR_BIAS_NOTE])
        ctx.reporter(ProgressEvent(bias_correction.STAGE, 1, 1, "skipped: a YOLO-style detector"))
        return qz
    dst = ctx.work / "bias_corrected.onnx"
    result = bias_correction.correct_biases(qz.float_model, qz.model.path, dst, _calibration_feeds(ctx, c, given),
                                            ctx.reporter, ctx.cancel,
                                            output_groups=output_channel_groups,
                                            task_judge=held_back_task_judge(
                                                ctx.run.policy, c.dataset.labeled(),
                                                sample_copies(c.dataset, c.preprocess, ctx.run.info.inputs, c.specs)),
                                            memo=_kept_fits(ctx))
    ctx.findings.warn(result.warnings)
    ctx.findings.note(result.notes)
    qdq = dst if qz.model.qdq == qz.model.path else qz.model.qdq  # the QDQ file kept is the corrected one
    return replace(qz, model=replace(qz.model, path=dst, qdq=qdq))


def _made(x: Model | Quantized) -> Model:
    return x.model if isinstance(x, Quantized) else x


def _optimize(ctx: RunContext, x: Model | Quantized) -> Model:
    m = _made(x)
    float_source = x.float_model if isinstance(x, Quantized) else None
    result = optimize_model(m.path, ctx.result, ctx.run.recipe.opt_level, ctx.run.recipe.target, float_source)
    ctx.findings.warn(result.warnings)
    ctx.findings.note(result.notes)
    return replace(m, path=ctx.result, optimized_from=m.path)


def _verify(ctx: RunContext, x: Model | Quantized) -> Verified:
    run, m = ctx.run, _made(x)
    if m.path != ctx.result:  # no optimize stage: the last model is the result
        shutil.copyfile(m.path, ctx.result)
        m = replace(m, path=ctx.result)
    if graph_outputs.copied_outputs([i.name for i in run.info.inputs], [o.name for o in run.info.outputs]):
        for path in (m.path, m.qdq):
            if path is not None:
                graph_outputs.reattach(path)
    q = run.recipe.quant
    ver = run.verify_dataset if run.verify_dataset is not None else run.dataset
    if ver is None and run.recipe.allow_random_data:
        ver = random_dataset(max(1, run.verify_samples), seed=q.seed, control=run.values)
    if ver is None or run.verify_samples <= 0:
        ctx.findings.notes.append(VERIFICATION_SKIPPED)
        _, used = providers.create_session(m.path, run.recipe.target)
        return Verified(m, None, judge(None, run.policy, m.coverage), list(used))
    sample = stratified_sample(ver, run.verify_samples, q.seed)
    pre, specs = ctx.feed(sample)
    m = replace(m, random_data=m.random_data or ver.is_random, input_shapes=m.input_shapes or _shapes(specs))
    report = evaluate(run.model, m.path, sample, pre, target=run.recipe.target, reporter=ctx.reporter,
                      cancel=ctx.cancel, policy=run.policy, specs=specs)
    report = replace(report, available_samples=0 if ver.is_random else ver.population or len(ver))  # drawn from these
    if m.calibration_sources:
        report = replace(report, calibration_overlap=sum(f"{s.source}#{s.index}" in m.calibration_sources
                                                         for s in sample.samples))
    if m.optimized_from is not None and run.recipe.opt_level != OptLevel.DISABLED:
        # joins the verdict (judge reads report.parity), with the level re-checked as safe
        parity = optimization_parity(m.optimized_from, m.path, sample, pre, run.recipe, ctx.work, specs)
        if not parity.ok and parity.safe_level == OptLevel.BASIC.value:  # would that level change the verdict?
            at_safe = evaluate(run.model, ctx.work / SAFE_MODEL, sample, pre, target=run.recipe.target,
                               cancel=ctx.cancel, policy=run.policy, specs=specs)
            parity = replace(parity, safe_verdict=judge(at_safe, run.policy, m.coverage).level.value)
        report = replace(report, parity=parity)
    return Verified(m, report, judge(report, run.policy, m.coverage), list(report.providers_cand))


# -- the stages: each defined here, once ---------------------------------------------------------------------------

VALIDATE: Stage[Path, Model] = Stage(
    "validate", "Check recipe, model and data", ModelLoadError, _validate,
    "Checking the recipe, the model and the data")
PREPROCESS: Stage[Model, Model] = Stage(
    "preprocess", "Pre-process (shape inference, BatchNorm folding)", QuantizationError, _preprocess,
    "Shape inference and BatchNorm folding (quant_pre_process)")
CALIBRATE: Stage[Model, Calibrated] = Stage("calibrate", "Calibrate", DataError, _calibrate, counted=True)
QUANTIZE_STATIC: Stage[Calibrated, Quantized] = Stage(
    "quantize", "Quantize", QuantizationError, _quantize_static, "Computing scales and writing the int8 model")
QUANTIZE_DYNAMIC: Stage[Model, Quantized] = Stage(
    "quantize", "Quantize", QuantizationError, _quantize_dynamic, "Dynamic int8 quantization")
ROUND_WEIGHTS: Stage[Quantized, Quantized] = Stage(
    weight_rounding.STAGE, "Weight rounding (GPTQ)", QuantizationError, _round_weights, counted=True)
CORRECT_BIASES: Stage[Quantized, Quantized] = Stage(
    bias_correction.STAGE, "Bias correction", QuantizationError, _correct_biases, counted=True)
CONVERT: Stage[Model, Model] = Stage(
    "convert", "Convert to fp16", QuantizationError, _convert, "Converting weights to float16")
OPTIMIZE: Stage[Any, Model] = Stage(
    "optimize", "Graph optimization", OptimizationError, _optimize,
    lambda run: f"Graph optimization ({run.recipe.opt_level.value})")
VERIFY: Stage[Any, Verified] = Stage(
    "verify", "Verify against the original", OrtlabError, _verify,
    lambda run: "Comparing with the source" if (run.verify_dataset or run.dataset) is not None
    or run.recipe.allow_random_data else "Loading the result (no evaluation data)")

STAGES: tuple[Stage[Any, Any], ...] = (VALIDATE, PREPROCESS, CALIBRATE, QUANTIZE_STATIC, QUANTIZE_DYNAMIC,
                                       ROUND_WEIGHTS, CORRECT_BIASES, CONVERT, OPTIMIZE, VERIFY)


def stage_labels() -> dict[str, str]:
    """Every stage's name → its label (what a progress view shows)."""
    return {s.name: s.label for s in STAGES}


def plan(recipe: Recipe) -> list[Stage[Any, Any]]:
    """The stages :func:`run_prepared` runs for ``recipe``, in order (exactly those, known before anything runs)."""
    stages: list[Stage[Any, Any]] = [VALIDATE]
    if recipe.precision == Precision.FP16:
        stages.append(CONVERT)
    elif recipe.is_dynamic:
        stages.append(QUANTIZE_DYNAMIC)
    elif recipe.is_static:
        stages += ([PREPROCESS] if recipe.quant.preprocess else []) + [CALIBRATE, QUANTIZE_STATIC]
        if recipe.rounds_weights:
            stages.append(ROUND_WEIGHTS)
        if recipe.corrects_biases:
            stages.append(CORRECT_BIASES)
    if not (recipe.is_static and recipe.opt_level == OptLevel.DISABLED):
        stages.append(OPTIMIZE)
    stages.append(VERIFY)
    return stages


# -- the runner ----------------------------------------------------------------------------------------------------


def _run_stage(stage: Stage[Any, Any], ctx: RunContext, value: Any, timings: dict[str, float]) -> Any:
    """Run one stage on ``value``: report it (unless it counts its own events), time it, type its errors and
    honour cancel around it; return its output."""
    if ctx.cancel is not None:
        ctx.cancel.raise_if_cancelled(stage.name)
    message = stage.message_for(ctx.run)
    if not stage.counted:
        ctx.reporter(ProgressEvent(stage.name, 0, 1, message))
    start = time.perf_counter()
    try:
        out = stage.run(ctx, value)
    except (OrtlabError, Cancelled) as exc:
        if exc.step is None:
            exc.step = stage.name
        raise
    except MemoryError:
        raise  # the run service turns it into "this run needed more than X GB"
    except Exception as exc:  # a stage's third-party tool can fail in any way: the stage's own error names it
        raise stage.error(one_line(exc), step=stage.name) from exc
    finally:
        timings[stage.name] = timings.get(stage.name, 0.0) + time.perf_counter() - start
    if not stage.counted:
        ctx.reporter(ProgressEvent(stage.name, 1, 1, message))
    if ctx.cancel is not None:
        ctx.cancel.raise_if_cancelled(stage.name)
    return out


def run_prepared(run: PreparedRun, out_dir, reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                 *, calibrations: CalibrationCache | None = None) -> Artifact:
    """Run the stages of :func:`plan` for the prepared ``run`` and write the result into ``out_dir``.

    Each stage is reported to ``reporter``; ``cancel`` raises ``Cancelled``. The verify stage judges the result with
    the run's policy into ``Artifact.verdict``; the artifact's ``input_shapes`` says what was fed. ``calibrations``:
    where calibrated ranges are kept and reused (the run service passes its workspace's); None: calibrate afresh.
    """
    source, out = Path(run.model), Path(out_dir)
    outputs.check_targets(source, outputs.result_files(out, as_file=False))
    findings = RunNotes()
    findings.warn(run.warnings)
    findings.note(run.notes)
    timings: dict[str, float] = {}
    stages = plan(run.recipe)
    ctx = RunContext(run, Path(), reporter, cancel, calibrations, findings)
    value: Any = _run_stage(stages[0], ctx, source, timings)  # validate: before anything is written
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    ctx = replace(ctx, work=outputs.make_temp_dir(outputs.WORK_PREFIX, out))
    target = out / MODEL_FILE
    try:
        for stage in stages[1:]:
            value = _run_stage(stage, ctx, value, timings)
        verified: Verified = value
        outputs.install_model(verified.model.path, target)
        if verified.model.qdq is not None:
            os.replace(verified.model.qdq, out / QDQ_FILE)
        else:
            (out / QDQ_FILE).unlink(missing_ok=True)  # an earlier run's, which this result does not match
    except BaseException:  # interrupted or failed alike: no half-written result stays, then re-raised
        shutil.rmtree(ctx.work, ignore_errors=True)
        if created:  # a folder this run made holds nothing but what the run wrote: no empty run folders
            shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(ctx.work, ignore_errors=True)

    made = verified.model
    findings.note([growth_note(source, target, int(run.info.total_bytes), file_bytes(target))])
    artifact = Artifact(
        run_id=None, model_path=target, source_path=source.resolve(), source_sha256=run.info.sha256,
        sha256=sha256_file(target), recipe=run.recipe, timings=timings, warnings=findings.warnings,
        providers=verified.providers, size_bytes=file_bytes(target), source_size_bytes=int(run.info.total_bytes),
        random_data=made.random_data, created_at=utc_timestamp(), evaluation=verified.evaluation,
        notes=findings.notes, verdict=verified.verdict, coverage=made.coverage, input_shapes=made.input_shapes,
    )
    outputs.write_text_atomic(out / RECIPE_FILE, run.recipe.to_json())
    artifact.save()
    return artifact
