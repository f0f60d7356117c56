"""Everything decided about a recipe run before it starts, decided once, in the process that starts it.

:func:`prepare_run` reads the model's facts once (:func:`ortlab.model.inspect.inspect_model`, which hashes the
whole file), validates the recipe against the providers that work here, checks that static int8 has data, and
names the bundled sample the model is (by that same hash). The prepared :class:`RunSpec` carries all of it to
the run's child process, which trusts it: the child neither inspects the model nor validates the recipe again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ortlab.core.errors import ModelLoadError, RecipeError
from ortlab.data.samples import find_for_model, get_sample
from ortlab.model.inspect import ModelInfo, inspect_model
from ortlab.runs.runspec import RunSpec
from ortlab.runtime.providers import working_providers
from ortlab.settings.config import Precision, QuantFormat, QuantMode, Recipe, require_valid

BIAS_CORRECTION_SKIPPED = ("Bias correction skipped: the calibration data is random, and fitting the biases to noise "
                           "would not help; give real calibration data to have it.")
NO_CALIBRATION_DATA = ("Static quantization needs calibration data: give a folder of images or a tensor file, "
                       "use dynamic quantization, or allow random data (results will be flagged).")


def is_static(recipe: Recipe) -> bool:
    """Static int8: calibrated on data."""
    return recipe.precision == Precision.INT8 and recipe.quant.mode == QuantMode.STATIC


def corrects_biases(recipe: Recipe) -> bool:
    """Whether the run has a bias-correction stage (static QDQ int8 with ``bias_correction`` on)."""
    return is_static(recipe) and recipe.quant.bias_correction and recipe.quant.quant_format == QuantFormat.QDQ


def check_recipe(recipe: Recipe, *, has_data: bool) -> tuple[list[str], list[str]]:
    """Validate ``recipe`` for this machine and its data (``RecipeError`` when it cannot run); return its
    (warnings, notes)."""
    findings = require_valid(recipe, working_providers())
    if is_static(recipe) and not has_data and not recipe.allow_random_data:
        raise RecipeError(NO_CALIBRATION_DATA, step="validate")
    return ([f.message for f in findings if f.level == "warning"], [f.message for f in findings if f.level == "note"])


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
    warnings, notes = check_recipe(spec.recipe, has_data=spec.calibration is not None)
    sample = get_sample(spec.sample) if spec.sample else find_for_model(spec.model, info.sha256)
    return replace(spec, model_info=info.to_dict(), sample=sample.name if sample is not None else None,
                   warnings=tuple(warnings), notes=tuple(notes))
