"""Recipes: check a recipe, run it in a child process, follow and recover its runs; the settings as CLI flags."""

from __future__ import annotations

from ortlab.runs.pipeline import VERIFICATION_SKIPPED, stage_labels
from ortlab.runs.prepare import NO_CALIBRATION_DATA, findings_here, lacks_calibration_data, start_recipe
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES
from ortlab.runs.service import CANCELLED, DONE, FAILED, QUEUED, RUNNING
from ortlab.runs.run_recovery import dismiss_interrupted, interrupted_runs, startup
from ortlab.runtime.hardware import advise, advised_recipe
from ortlab.settings.config import errors_of, preprocess_cli_args, recipe_cli_line
from ortlab.settings.flags import add_config_arguments, config_from_args, given_values


class Recipes:
    """Checking and running recipes, the states of a run, and the settings as command-line flags."""

    NO_CALIBRATION_DATA = NO_CALIBRATION_DATA
    VERIFICATION_SKIPPED = VERIFICATION_SKIPPED
    DEFAULT_VERIFY_SAMPLES = DEFAULT_VERIFY_SAMPLES
    QUEUED, RUNNING, DONE, FAILED, CANCELLED = QUEUED, RUNNING, DONE, FAILED, CANCELLED

    findings_here = staticmethod(findings_here)
    errors_of = staticmethod(errors_of)
    lacks_calibration_data = staticmethod(lacks_calibration_data)
    advised_recipe = staticmethod(advised_recipe)
    int8_advice = staticmethod(advise)  # this CPU's int8 flavour (Recipe.with_int8_flavour applies it)
    recipe_cli_line = staticmethod(recipe_cli_line)
    preprocess_cli_args = staticmethod(preprocess_cli_args)
    add_config_arguments = staticmethod(add_config_arguments)
    config_from_args = staticmethod(config_from_args)
    given_values = staticmethod(given_values)
    start_recipe = staticmethod(start_recipe)
    stage_labels = staticmethod(stage_labels)
    startup = staticmethod(startup)
    interrupted_runs = staticmethod(interrupted_runs)
    dismiss_interrupted = staticmethod(dismiss_interrupted)


recipes = Recipes()
