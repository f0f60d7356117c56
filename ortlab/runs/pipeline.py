"""Run a recipe as a plan of stages: validate → (pre-process) → calibrate → quantize → (bias correction), or convert →
optimize → verify.

:func:`plan` lists the stages a recipe runs, before anything runs; :func:`run_recipe` executes that plan, one
small step function per stage, each timed by its own start and stop. The source model is read in place and
never modified; everything is written into ``out_dir``: ``model.onnx`` (its external data, if any, as
``model.onnx.data``), ``recipe.json`` and ``artifact.json``. The stages work in a temporary folder inside
``out_dir``; the result is renamed into place only when every stage succeeded (``ortlab.runs.outputs``), so a failed
run leaves ``out_dir`` as it was, and an ``out_dir`` that would overwrite the source is refused.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortlab.core.layout import MODEL_FILE, QDQ_FILE, RECIPE_FILE
from ortlab.runs.artifact import Artifact, file_bytes
from ortlab.settings.config import OptLevel, PreprocessConfig, Precision, QuantFormat, QuantMode, Recipe
from ortlab.transforms.coverage import QuantCoverage
from ortlab.checks.eval_report import EvalReport
from ortlab.core.text import one_line, utc_timestamp
from ortlab.core.errors import DataError, ModelLoadError, OptimizationError, OrtlabError, QuantizationError
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.transforms import bias_correction
from ortlab.transforms.calibration import CalibrationReader
from ortlab.runs.prepare import BIAS_CORRECTION_SKIPPED, NO_CALIBRATION_DATA, check_recipe, corrects_biases, is_static  # noqa: F401 (NO_CALIBRATION_DATA: part of this module's API)
from ortlab.model.inspect import ModelInfo
from ortlab.data.feeds import check_fits
from ortlab.model.inspect import inspect_model, run_warnings
from ortlab.data.inputs import infer_specs
from ortlab.data.inputs import control_input_error, is_control_input
from ortlab.transforms.fp16 import convert_fp16
from ortlab.transforms.quantize import quantize_dynamic_result
from ortlab.transforms.quantize import preprocess_for_quantization
from ortlab.data.dataset import random_dataset, stratified_sample
from ortlab.transforms.quantize import calibrate_model
from ortlab.transforms.quantize import quantize_calibrated_result
from ortlab.transforms.optimize import optimize_model
from ortlab.runtime import providers
from ortlab.checks.evaluate import evaluate
from ortlab.checks.verdict import judge
from ortlab.checks.parity import check_parity
from ortlab.checks.verdict import VerdictPolicy
from ortlab.model.inspect import sha256_file
from ortlab.runs import outputs
from ortlab.data.preprocess import resolve_preprocess
from ortlab.data.inputs import default_notes, resolve_feed

_STAGE_ERRORS: dict[str, type[OrtlabError]] = {
    "validate": ModelLoadError, "preprocess": QuantizationError, "calibrate": DataError,
    "quantize": QuantizationError, bias_correction.STAGE: QuantizationError, "convert": QuantizationError, "optimize": OptimizationError,
    "verify": OrtlabError,
}


@dataclass(frozen=True)
class Stage:
    """One step of a recipe run: ``name`` (the key of its progress events and timing) and a human label."""

    name: str
    label: str


_LABELS = {
    "validate": "Check recipe, model and data", "preprocess": "Pre-process (shape inference, BatchNorm folding)",
    "calibrate": "Calibrate", "quantize": "Quantize", bias_correction.STAGE: "Bias correction",
    "convert": "Convert to fp16", "optimize": "Graph optimization",
    "verify": "Verify against the original",
}


def plan(recipe: Recipe) -> list[Stage]:
    """The stages ``run_recipe`` runs for ``recipe``, in order (exactly those, known before anything runs)."""
    names = ["validate"]
    if recipe.precision == Precision.FP16:
        names.append("convert")
    elif recipe.precision == Precision.INT8 and recipe.quant.mode == QuantMode.DYNAMIC:
        names.append("quantize")
    elif is_static(recipe):
        names += (["preprocess"] if recipe.quant.preprocess else []) + ["calibrate", "quantize"]
        if corrects_biases(recipe):
            names.append(bias_correction.STAGE)
    if not (is_static(recipe) and recipe.opt_level == OptLevel.DISABLED):
        names.append("optimize")
    names.append("verify")
    return [Stage(n, _LABELS[n]) for n in names]


@dataclass
class _Run:
    """The state one ``run_recipe`` call carries from stage to stage."""

    source: Path
    recipe: Recipe
    out_dir: Path
    dataset: Any
    verify_dataset: Any
    preprocess: PreprocessConfig | None
    verify_samples: int
    reporter: Reporter
    cancel: CancelToken | None
    shapes: dict[str, list[int]] = field(default_factory=dict)  # the user's {input: shape} overrides
    work: Path = Path()
    current: Path = Path()  # the model the next stage reads
    info: Any = None
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    random_data: bool = False
    evaluation: EvalReport | None = None
    providers: list[str] = field(default_factory=list)
    coverage: QuantCoverage | None = None
    pre_optimize: Path | None = None  # the model the optimize stage read (for the parity check)
    qdq: Path | None = None  # static int8 QDQ: the quantized model before optimization, kept as QDQ_FILE
    policy: Any = None  # VerdictPolicy
    verdict: Any = None  # Verdict
    calibration_sources: set[str] = field(default_factory=set)
    calibration: Any = None  # the calibration Dataset the calibrate stage used (bias correction reuses it)
    quantized_from: Path | None = None  # the float model the quantize stage read
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    _feeds: dict[int, tuple[Any, list, Any]] = field(default_factory=dict)  # id(ds) → (pre, specs, ds)

    @property
    def final(self) -> Path:
        """The result while the run goes (in the work folder; installed into ``out_dir`` at the end)."""
        return self.work / "result.onnx"

    def warn(self, items) -> None:
        for w in items or ():
            if w and str(w) not in self.warnings:
                self.warnings.append(str(w))

    def note(self, items) -> None:
        for n in items or ():
            if n and str(n) not in self.notes:
                self.notes.append(str(n))

    def pre_for(self, ds) -> PreprocessConfig | None:
        return self.feed_for(ds)[0]

    def specs_for(self, ds) -> list:
        return self.feed_for(ds)[1]

    def feed_for(self, ds) -> tuple[PreprocessConfig | None, list]:
        """The preprocessing and the input specs (:func:`ortlab.data.inputs.infer_specs`) that feed ``ds``."""

        if ds is None:
            return self.preprocess, []
        key = id(ds)
        if key not in self._feeds:
            pre = self.preprocess if self.preprocess is not None else resolve_preprocess(self.info.inputs, dataset=ds)
            pre, specs = resolve_feed(self.info.inputs, pre, ds, self.shapes)
            for note in default_notes(specs):
                if note not in self.notes:
                    self.notes.append(note)
            if not self.input_shapes:
                self.input_shapes = {s.name: list(s.shape) for s in specs}
            self._feeds[key] = (pre, specs, ds)  # the dataset is kept, so its id is not reused
        pre, specs, _ = self._feeds[key]
        return pre, specs

    def next_path(self, name: str) -> Path:
        return self.work / name


# -- the step functions: each reads and writes the _Run; the stage wrapper times and reports it ----------------


def _validate(r: _Run) -> None:
    if r.info is None:  # not prepared by ortlab.runs.prepare: decide here what it would have
        if not r.source.is_file():
            raise ModelLoadError(f"Model file not found: {r.source}.")
        warnings, notes = check_recipe(r.recipe, has_data=r.dataset is not None)
        r.warn(warnings)
        r.note(notes)
        r.info = inspect_model(r.source)
    r.warn(run_warnings(r.info.warnings, int8=r.recipe.precision == Precision.INT8))

    # names and ranks of --shape, before any work
    specs = infer_specs(r.info.inputs, overrides=r.shapes, strict=False)
    random_used = r.recipe.allow_random_data and r.dataset is None and (is_static(r.recipe)
                                                                         or r.verify_dataset is None)
    control = next((s for s in specs if is_control_input(s)), None)
    if random_used and control is not None:
        raise control_input_error(control)
    if r.preprocess is not None and r.preprocess.problems():
        raise DataError(" ".join(r.preprocess.problems()))
    for ds in (r.dataset, r.verify_dataset):
        if ds is not None:
            pre, specs = r.feed_for(ds)
            check_fits(ds, pre, r.info.inputs, specs or None)
    r.random_data = bool(r.dataset is not None and r.dataset.is_random)


def _convert(r: _Run) -> None:
    dst = r.next_path("fp16.onnx")
    r.warn(convert_fp16(r.current, dst, r.recipe.keep_io_types))
    r.current = dst


def _quantize_dynamic(r: _Run) -> None:
    dst = r.next_path("quantized.onnx")
    result = quantize_dynamic_result(r.current, dst, r.recipe.quant)
    r.warn(result.warnings)
    r.note(result.notes)
    r.coverage = result.coverage
    r.current = dst


def _preprocess(r: _Run) -> None:
    dst = r.next_path("preprocessed.onnx")
    r.warn(preprocess_for_quantization(r.current, dst))
    r.current = dst


def _calibrate(r: _Run) -> None:
    q = r.recipe.quant
    calib = r.dataset if r.dataset is not None else random_dataset(q.calibration_samples, seed=q.seed)
    r.random_data = r.random_data or calib.is_random
    calib = stratified_sample(calib, q.calibration_samples, q.seed)
    if not calib.is_random:
        r.calibration_sources = {f"{s.source}#{s.index}" for s in calib.samples}
    r.calibration = calib
    r.reporter(ProgressEvent("calibrate", 0, len(calib), f"Calibrating on {len(calib)} samples"))
    pre, specs = r.feed_for(calib)
    reader = CalibrationReader(calib, pre, r.info.inputs, r.reporter, r.cancel, specs=specs)
    r.warn(calibrate_model(r.current, q, reader, r.next_path("calibration.json")))


def _quantize_static(r: _Run) -> None:
    dst = r.next_path("quantized.onnx")
    r.quantized_from = r.current
    result = quantize_calibrated_result(r.current, dst, r.recipe.quant, r.next_path("calibration.json"))
    r.warn(result.warnings)
    r.note(result.notes)
    r.coverage = result.coverage
    r.current = dst
    if r.recipe.quant.quant_format == QuantFormat.QDQ and len(list(r.work.glob("quantized*"))) == 1:
        r.qdq = dst  # kept beside the result for per-node analysis (no external data: one file)


def _correct_biases(r: _Run) -> None:
    """Empirical bias correction of the static QDQ model (``ortlab.transforms.bias_correction``) on the samples the
    calibrate stage used; reports its own "bias_correction" n/N events and honours cancel between runs."""
    if r.calibration is None or r.quantized_from is None or r.calibration.is_random:
        r.note([BIAS_CORRECTION_SKIPPED])
        r.reporter(ProgressEvent(bias_correction.STAGE, 1, 1, "skipped: the calibration data is random"))
        return
    pre, specs = r.feed_for(r.calibration)
    reader = CalibrationReader(r.calibration, pre, r.info.inputs, null_reporter, r.cancel, specs=specs)
    feeds = []
    while (feed := reader.get_next()) is not None:
        feeds.append(feed)
    dst = r.next_path("bias_corrected.onnx")
    result = bias_correction.correct_biases(r.quantized_from, r.current, dst, feeds, r.reporter, r.cancel)
    r.warn(result.warnings)
    r.note(result.notes)
    if r.qdq == r.current:
        r.qdq = dst  # the QDQ file kept beside the result is the corrected one
    r.current = dst


def _optimize(r: _Run) -> None:
    result = optimize_model(r.current, r.final, r.recipe.opt_level, r.recipe.target)
    r.warn(result.warnings)
    r.note(result.notes)
    r.pre_optimize = r.current
    r.current = r.final


def _verify(r: _Run) -> None:
    if r.current != r.final:  # no optimize stage: the last model is the result
        shutil.copyfile(r.current, r.final)
        r.current = r.final
    q = r.recipe.quant
    ver = r.verify_dataset if r.verify_dataset is not None else r.dataset
    if ver is None and r.recipe.allow_random_data:
        ver = random_dataset(max(1, r.verify_samples), seed=q.seed)
    if ver is None or r.verify_samples <= 0:
        r.notes.append("Verification skipped: no evaluation data was given.")
        r.verdict = judge(None, r.policy, r.coverage)
        _, used = providers.create_session(r.final, r.recipe.target)
        r.providers = list(used)
        return
    sample = stratified_sample(ver, r.verify_samples, q.seed)
    r.random_data = r.random_data or ver.is_random
    pre, specs = r.feed_for(sample)
    report = evaluate(r.source, r.final, sample, pre, target=r.recipe.target, reporter=r.reporter,
                      cancel=r.cancel, policy=r.policy, specs=specs)
    if r.calibration_sources:
        report.calibration_overlap = sum(f"{s.source}#{s.index}" in r.calibration_sources for s in sample.samples)
    r.evaluation = report
    r.verdict = judge(report, r.policy, r.coverage)
    r.providers = list(report.providers_cand)
    if r.pre_optimize is not None and r.recipe.opt_level != OptLevel.DISABLED:

        parity = check_parity(r.pre_optimize, r.final, sample, pre, r.recipe, specs=specs)
        if not parity.ok:
            r.warn([parity.message])


def _messages(r: _Run) -> dict[str, str]:
    q = r.recipe.quant
    return {
        "preprocess": "Shape inference and BatchNorm folding (quant_pre_process)",
        "calibrate": f"Collecting activation ranges ({q.calibration_method.value})",
        "quantize": "Dynamic int8 quantization" if q.mode == QuantMode.DYNAMIC else
                    "Computing scales and writing the int8 model",
        bias_correction.STAGE: "Correcting int32 biases node by node against the float model",
        "convert": "Converting weights to float16", "optimize": f"Graph optimization ({r.recipe.opt_level.value})",
        "verify": "Comparing with the source" if (r.verify_dataset or r.dataset) is not None or
                  r.recipe.allow_random_data else "Loading the result (no evaluation data)",
    }


def _step(stage: str, recipe: Recipe) -> Callable[[_Run], Any]:
    if stage == "quantize":
        return _quantize_static if is_static(recipe) else _quantize_dynamic
    return {"validate": _validate, "convert": _convert, "preprocess": _preprocess, "calibrate": _calibrate,
            bias_correction.STAGE: _correct_biases, "optimize": _optimize, "verify": _verify}[stage]


_COUNTED = ("calibrate", bias_correction.STAGE)


def _run_stage(r: _Run, stage: str, fn: Callable[[_Run], Any], message: str) -> None:
    """Report, time, type the errors of and honour cancel around one step."""
    if r.cancel is not None:
        r.cancel.raise_if_cancelled(stage)
    if stage not in _COUNTED:  # these report their own n/N events
        r.reporter(ProgressEvent(stage, 0, 1, message))
    start = time.perf_counter()
    try:
        fn(r)
    except OrtlabError as exc:
        if exc.step is None:
            exc.step = stage
        raise
    except MemoryError:
        raise  # the run service turns it into "this run needed more than X GB"
    except Exception as exc:
        raise _STAGE_ERRORS[stage](one_line(exc), step=stage) from exc
    finally:
        r.timings[stage] = r.timings.get(stage, 0.0) + time.perf_counter() - start
    if stage not in _COUNTED:
        r.reporter(ProgressEvent(stage, 1, 1, message))
    if r.cancel is not None:
        r.cancel.raise_if_cancelled(stage)


def run_recipe(model_path, recipe: Recipe, out_dir, dataset=None, preprocess: PreprocessConfig | None = None,
               reporter: Reporter = null_reporter, cancel: CancelToken | None = None, verify_samples: int = 32,
               *, verify_dataset=None, policy=None, shapes: dict[str, list[int]] | None = None,
               info: ModelInfo | None = None, decided: tuple[Sequence[str], Sequence[str]] = ((), ())) -> Artifact:
    """Apply ``recipe`` to the model at ``model_path`` and write the result into ``out_dir``.

    ``dataset`` (``ortlab.data.dataset.Dataset``) feeds calibration and, unless ``verify_dataset`` is given, the
    verification against the source. Without data, static int8 needs ``recipe.allow_random_data`` and
    verification is skipped. ``preprocess`` None means :func:`ortlab.data.dataset.resolve_preprocess` decides.
    Each stage of :func:`plan` is reported to ``reporter``; ``cancel`` raises ``Cancelled``. The verify stage
    judges the result with ``policy`` (``verdict.VerdictPolicy``, default when None) into ``Artifact.verdict``.
    ``shapes`` (``{input name: shape}``) sets dims the model leaves open (:func:`ortlab.data.inputs.infer_specs`);
    the artifact's ``input_shapes`` says what was fed. ``info`` and ``decided`` (the recipe's warnings and notes)
    come from :func:`ortlab.runs.prepare.prepare_run`: given, the model is not inspected and the recipe not
    validated again.
    """

    source = Path(model_path)
    outputs.check_targets(source, outputs.result_files(out_dir, as_file=False))
    r = _Run(source, recipe, Path(out_dir), dataset, verify_dataset, preprocess, verify_samples, reporter, cancel,
             current=source, policy=policy or VerdictPolicy(),
             shapes={k: [int(x) for x in v] for k, v in (shapes or {}).items()}, info=info)
    r.warn(decided[0])
    r.note(decided[1])
    stages = plan(recipe)
    _run_stage(r, "validate", _validate, "Checking the recipe, the model and the data")
    messages = _messages(r)
    created = not r.out_dir.exists()
    r.out_dir.mkdir(parents=True, exist_ok=True)
    r.work = outputs.make_temp_dir(outputs.WORK_PREFIX, r.out_dir)
    target = r.out_dir / MODEL_FILE
    try:
        for stage in stages[1:]:
            _run_stage(r, stage.name, _step(stage.name, recipe), messages.get(stage.name, ""))
        outputs.install_model(r.final, target)
        if r.qdq is not None:
            os.replace(r.qdq, r.out_dir / QDQ_FILE)
        else:
            (r.out_dir / QDQ_FILE).unlink(missing_ok=True)  # an earlier run's, which this result does not match
    except BaseException:
        shutil.rmtree(r.work, ignore_errors=True)
        if created:  # a folder this run made holds nothing but what the run wrote: no empty run folders
            shutil.rmtree(r.out_dir, ignore_errors=True)
        raise
    shutil.rmtree(r.work, ignore_errors=True)

    artifact = Artifact(
        run_id=None, model_path=target, source_path=source.resolve(), source_sha256=r.info.sha256,
        sha256=sha256_file(target), recipe=recipe, timings=r.timings, warnings=r.warnings, providers=r.providers,
        size_bytes=file_bytes(target), source_size_bytes=int(r.info.total_bytes), random_data=r.random_data,
        created_at=utc_timestamp(), evaluation=r.evaluation, notes=r.notes, verdict=r.verdict,
        coverage=r.coverage,
        input_shapes=r.input_shapes,
    )
    outputs.write_text_atomic(r.out_dir / RECIPE_FILE, recipe.to_json())
    artifact.save()
    return artifact
