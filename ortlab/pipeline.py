"""Run a recipe end to end: validate → (pre-process) → calibrate/quantize or convert → optimize → verify.

The source model is read in place and never modified; everything is written into ``out_dir``:
``model.onnx``, ``recipe.json`` and ``artifact.json``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import datetime, UTC
from pathlib import Path
from typing import Any
from collections.abc import Callable

from . import config as cfg
from .artifact import MODEL_FILE, RECIPE_FILE, Artifact, file_bytes
from .config import OptLevel, PreprocessConfig, Precision, QuantMode, Recipe
from .errors import (DataError, ModelLoadError, OptimizationError, OrtlabError,
                     QuantizationError, RecipeError)
from .progress import CancelToken, ProgressEvent, Reporter, null_reporter
from .text import one_line

_STAGE_ERRORS: dict[str, type[OrtlabError]] = {
    "validate": ModelLoadError, "preprocess": QuantizationError, "calibrate": DataError,
    "quantize": QuantizationError, "convert": QuantizationError, "optimize": OptimizationError,
    "verify": OrtlabError,
}

NO_CALIBRATION_DATA = ("Static quantization needs calibration data: give a folder of images or a tensor file, "
                       "use dynamic quantization, or allow random data (results will be flagged).")


class _Run:
    """State of one ``run_recipe`` call: stage timing, reporting, cancel and error wrapping."""

    def __init__(self, reporter: Reporter, cancel: CancelToken | None) -> None:
        self.reporter = reporter
        self.cancel = cancel
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []

    def check(self, stage: str) -> None:
        if self.cancel is not None:
            self.cancel.raise_if_cancelled(stage)

    def stage(self, stage: str, fn: Callable[[], Any], message: str = "", *, events: bool = True) -> Any:
        """Run one step: report it (unless ``events`` is False), time it, type its errors, honour cancel."""
        self.check(stage)
        if events:
            self.reporter(ProgressEvent(stage, 0, 1, message))
        start = time.perf_counter()
        try:
            result = fn()
        except OrtlabError as exc:
            if exc.step is None:
                exc.step = stage
            raise
        except Exception as exc:
            raise _STAGE_ERRORS[stage](one_line(exc), step=stage) from exc
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - start
        if events:
            self.reporter(ProgressEvent(stage, 1, 1, message))
        self.check(stage)
        return result

    def add_warnings(self, items) -> None:
        for w in items or ():
            if w and w not in self.warnings:
                self.warnings.append(str(w))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_recipe(model_path, recipe: Recipe, out_dir, dataset=None, preprocess: PreprocessConfig | None = None,
               reporter: Reporter = null_reporter, cancel: CancelToken | None = None, verify_samples: int = 32,
               *, verify_dataset=None) -> Artifact:
    """Apply ``recipe`` to the model at ``model_path`` and write the result into ``out_dir``.

    ``dataset`` (``ortlab.data.Dataset``) feeds calibration and, unless ``verify_dataset`` is given, the
    verification against the source. Without data, static int8 needs ``recipe.allow_random_data`` and
    verification is skipped. Stages are reported to ``reporter``; ``cancel`` raises ``Cancelled``.
    """
    from . import data as data_mod
    from . import providers
    from .model import inspect_model, sha256_file

    run = _Run(reporter, cancel)
    notes: list[str] = []
    source = Path(model_path)
    out_dir = Path(out_dir)
    q = recipe.quant
    is_static = recipe.precision == Precision.INT8 and q.mode == QuantMode.STATIC

    def pre_for(ds, inputs):
        if preprocess is not None or ds is None or getattr(ds, "kind", "") != "images":
            return preprocess
        return data_mod.detect_preprocess(inputs[0])

    # -- validate: nothing is written before the recipe, the model and the data are known to fit --------
    def validate():
        findings = cfg.require_valid(recipe, providers.working_providers())
        run.add_warnings(f.message for f in findings if f.level == "warning")
        notes.extend(f.message for f in findings if f.level == "note")
        if not source.is_file():
            raise ModelLoadError(f"Model file not found: {source}.")
        info = inspect_model(source)
        run.add_warnings(info.warnings)
        if is_static and dataset is None and not recipe.allow_random_data:
            raise RecipeError(NO_CALIBRATION_DATA)
        if preprocess is not None and preprocess.problems():
            raise DataError(" ".join(preprocess.problems()))
        for ds in (dataset, verify_dataset):
            if ds is not None:
                data_mod.check_fits(ds, pre_for(ds, info.inputs), info.inputs)
        return info

    info = run.stage("validate", validate, "Checking the recipe, the model and the data")

    model_inputs = list(info.inputs)
    random_data = bool(dataset is not None and getattr(dataset, "is_random", False))

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / MODEL_FILE
    work = Path(tempfile.mkdtemp(prefix=".ortlab-work-", dir=out_dir))
    try:
        from .optimize import optimize_model

        def optimize(src: Path) -> None:
            res = run.stage("optimize", lambda: optimize_model(src, final, recipe.opt_level, recipe.target),
                            f"Graph optimization ({recipe.opt_level.value})")
            run.add_warnings(res.warnings)

        if recipe.precision == Precision.FP32:
            optimize(source)
        elif recipe.precision == Precision.FP16:
            from .fp16 import convert_fp16

            fp16_path = work / "fp16.onnx"
            run.add_warnings(run.stage("convert", lambda: convert_fp16(source, fp16_path, recipe.keep_io_types),
                                       "Converting weights to float16"))
            optimize(fp16_path)
        elif q.mode == QuantMode.DYNAMIC:
            from .quantize import quantize_dynamic_model

            q_path = work / "quantized.onnx"
            run.add_warnings(run.stage("quantize", lambda: quantize_dynamic_model(source, q_path, q),
                                       "Dynamic int8 quantization"))
            optimize(q_path)
        else:
            from .quantize import preprocess_for_quantization, quantize_static_model

            src = source
            if q.preprocess:
                pre_path = work / "preprocessed.onnx"
                run.add_warnings(run.stage("preprocess", lambda: preprocess_for_quantization(source, pre_path),
                                           "Shape inference and BatchNorm folding (quant_pre_process)"))
                src = pre_path
            calib = dataset
            if calib is None:
                calib = data_mod.random_dataset(q.calibration_samples, seed=q.seed)
            random_data = random_data or bool(getattr(calib, "is_random", False))
            calib = data_mod.stratified_sample(calib, q.calibration_samples, q.seed)
            total = len(calib)
            calib_times: list[float] = []

            def calib_reporter(event: ProgressEvent) -> None:
                if event.stage == "calibrate":
                    calib_times.append(time.perf_counter())
                reporter(event)
                if event.stage == "calibrate" and event.total and event.done >= event.total:
                    reporter(ProgressEvent("quantize", 0, 1, "Computing ranges and writing the int8 model"))

            reporter(ProgressEvent("calibrate", 0, total, f"Calibrating on {total} samples"))
            reader = data_mod.CalibrationReader(calib, pre_for(calib, model_inputs), model_inputs, calib_reporter,
                                                cancel)
            q_path = work / "quantized.onnx"
            start = time.perf_counter()
            run.add_warnings(run.stage("quantize", lambda: quantize_static_model(src, q_path, q, reader),
                                       events=False))
            if calib_times:  # ORT pulls every sample first, then computes ranges and writes the model
                run.timings["calibrate"] = calib_times[-1] - start
                run.timings["quantize"] -= run.timings["calibrate"]
            reporter(ProgressEvent("quantize", 1, 1, "Computing ranges and writing the int8 model"))
            if recipe.opt_level == OptLevel.DISABLED:
                shutil.copyfile(q_path, final)
            else:
                optimize(q_path)

        # -- verify against the source ---------------------------------------------------------------
        ver = verify_dataset if verify_dataset is not None else dataset
        if ver is None and recipe.allow_random_data:
            ver = data_mod.random_dataset(max(1, verify_samples), seed=q.seed)
        evaluation = None
        if ver is not None and verify_samples > 0:
            from .evaluate import evaluate

            ver_sample = data_mod.stratified_sample(ver, verify_samples, q.seed)
            random_data = random_data or bool(getattr(ver, "is_random", False))
            ver_pre = pre_for(ver_sample, model_inputs)
            report = run.stage("verify", lambda: evaluate(source, final, ver_sample, ver_pre, target=recipe.target,
                                                          reporter=reporter, cancel=cancel),
                               f"Comparing with the source on {len(ver_sample)} samples")
            evaluation = report
            used = list(report.providers_cand)
        else:
            notes.append("Verification skipped: no evaluation data was given.")

            def open_session():
                _, used_providers = providers.create_session(final, recipe.target)
                return list(used_providers)

            used = run.stage("verify", open_session, "Loading the result (no evaluation data)")
    except BaseException:
        final.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)

    artifact = Artifact(
        run_id=None, model_path=final, source_path=source.resolve(), source_sha256=info.sha256,
        sha256=sha256_file(final), recipe=recipe, timings=run.timings, warnings=run.warnings, providers=used,
        size_bytes=file_bytes(final), source_size_bytes=int(info.total_bytes), random_data=random_data,
        created_at=_now(), evaluation=evaluation, notes=notes,
    )
    (out_dir / RECIPE_FILE).write_text(recipe.to_json(), encoding="utf-8")
    artifact.save()
    return artifact
