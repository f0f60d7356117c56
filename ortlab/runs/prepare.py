"""Everything decided about a recipe run before it starts, decided once, in the process that starts it.

:func:`prepare_run` reads the model's facts once (:func:`ortlab.model.inspect.inspect_model`, which hashes the
whole file), validates the recipe against the providers that work here, checks that static int8 has data and that
an int8 or fp16 recipe starts from a float model, and names the bundled sample the model is (by that same hash).
The prepared :class:`RunSpec` carries all of it to the run's child process, which trusts it: the child neither
inspects the model nor validates the recipe again; :func:`ortlab.runs.recipe_child.load_prepared` turns it into
the :class:`PreparedRun` the pipeline runs. :func:`prepare_recipe_run` prepares a run in this process from a model
and loaded data (scripts and tests). What the recipe does (static int8, bias correction) is the recipe's own answer
(:attr:`Recipe.is_static`, :attr:`Recipe.corrects_biases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ortlab.checks.verdict import VerdictPolicy
from ortlab.core.errors import ModelLoadError, RecipeError
from ortlab.data.dataset import Dataset
from ortlab.data.samples import find_for_model, get_sample
from ortlab.model.diff import is_quantization_op
from ortlab.model.inspect import ModelInfo, inspect_model
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES, RunSpec
from ortlab.runtime.hardware import cpu_int8
from ortlab.runtime.providers import working_providers
from ortlab.settings.config import Finding, Precision, PreprocessConfig, Recipe, raise_on_errors, validate_recipe

BIAS_CORRECTION_SKIPPED = ("Bias correction skipped: the calibration data is random, and fitting the biases to noise "
                           "would not help; give real calibration data to have it.")
NO_CALIBRATION_DATA = ("Static quantization needs calibration data: give a folder of images or a tensor file, "
                       "use dynamic quantization, or allow random data (results will be flagged).")


@dataclass(frozen=True)
class PreparedRun:
    """A run with its decisions made, ready for :func:`ortlab.runs.pipeline.run_prepared`: the source ``model``
    and its facts (``info``), the validated ``recipe`` with its ``warnings`` and ``notes``, the calibration
    ``dataset`` and the ``verify_dataset`` (loaded), the image ``preprocess`` (None: decided per dataset by
    :func:`ortlab.data.preprocess.resolve_preprocess`), how many samples verify the result, the verdict ``policy``
    and ``shapes`` (``{input name: shape}`` for dims the model leaves open)."""

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


def check_model_for(recipe: Recipe, info: ModelInfo) -> None:
    """``RecipeError`` when ``recipe`` cannot start from this model: int8 or fp16 of a model already quantized."""
    found = quantized_ops(info)
    if not found or recipe.precision == Precision.FP32:
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


def prepare_recipe_run(model, recipe: Recipe, dataset: Dataset | None = None,
                       preprocess: PreprocessConfig | None = None, verify_samples: int = DEFAULT_VERIFY_SAMPLES, *,
                       verify_dataset: Dataset | None = None, policy: VerdictPolicy | None = None,
                       shapes: dict[str, list[int]] | None = None, info: ModelInfo | None = None) -> PreparedRun:
    """A run of ``recipe`` on the model at ``model`` with loaded data, prepared in this process: the recipe
    validated (``RecipeError``), the model read (``ModelLoadError``; ``info`` when the caller already read it).
    ``dataset`` calibrates and, unless ``verify_dataset`` is given, verifies."""
    path = Path(model)
    if not path.is_file():
        raise ModelLoadError(f"Model file not found: {path}.", step="validate")
    warnings, notes = check_recipe(recipe, has_data=dataset is not None)
    info = info if info is not None else inspect_model(path)
    check_model_for(recipe, info)
    return PreparedRun(path, recipe, info, dataset, verify_dataset, preprocess, verify_samples,
                       policy or VerdictPolicy(), _int_shapes(shapes), tuple(warnings), tuple(notes))


def _int_shapes(shapes: dict[str, list[int]] | None) -> dict[str, list[int]]:
    return {k: [int(x) for x in v] for k, v in (shapes or {}).items()}
