"""A recipe run in this process, for scripts, tests and benchmarks: :func:`prepare_recipe_run` makes the decisions
:func:`ortlab.runs.prepare.prepare_run` makes for a child (the recipe validated, the model read) from a model and
loaded data, and :func:`run_recipe` runs the result through :func:`ortlab.runs.pipeline.run_prepared`. The app and
the CLI run a prepared spec in a child process instead (:func:`ortlab.runs.prepare.start_recipe`)."""

from __future__ import annotations

from pathlib import Path

from ortlab.checks.verdict import VerdictPolicy
from ortlab.core.errors import ModelLoadError
from ortlab.core.progress import CancelToken, Reporter, null_reporter
from ortlab.data.dataset import Dataset
from ortlab.model.inspect import ModelInfo, inspect_model
from ortlab.runs.artifact import Artifact
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.pipeline import PreparedRun, run_prepared
from ortlab.runs.prepare import check_model_for, check_recipe
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES
from ortlab.settings.config import PreprocessConfig, Recipe


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


def run_recipe(model_path, recipe: Recipe, out_dir, dataset=None, preprocess: PreprocessConfig | None = None,
               reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
               verify_samples: int = DEFAULT_VERIFY_SAMPLES,
               *, verify_dataset=None, policy=None, shapes: dict[str, list[int]] | None = None,
               calibrations: CalibrationCache | None = None) -> Artifact:
    """Prepare (:func:`prepare_recipe_run`: the recipe validated, the model read) and run ``recipe`` on the model at
    ``model_path`` into ``out_dir`` in this process.

    ``dataset`` feeds calibration and, unless ``verify_dataset`` is given, the verification against the source.
    Without data, static int8 needs ``recipe.allow_random_data`` and verification is skipped. ``preprocess`` None
    means :func:`ortlab.data.preprocess.resolve_preprocess` decides. ``shapes`` (``{input name: shape}``) sets dims
    the model leaves open (:func:`ortlab.data.inputs.infer_specs`). ``calibrations``: where calibrated ranges are
    kept and reused (:class:`ortlab.runs.calibration_cache.CalibrationCache`; None: calibrate afresh).
    """
    run = prepare_recipe_run(model_path, recipe, dataset, preprocess, verify_samples, verify_dataset=verify_dataset,
                             policy=policy, shapes=shapes)
    return run_prepared(run, out_dir, reporter, cancel, calibrations=calibrations)
