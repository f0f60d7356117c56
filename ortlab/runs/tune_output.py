"""What a tune search leaves behind: the recommendation as ``model.onnx`` + ``recipe.json`` (a closest trial under
``closest/``), its mark on the History record, and every trial as ``trials.json``."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from ortlab.core.errors import OrtlabError
from ortlab.core.serial import dumps
from ortlab.runs.tune_policy import CLOSEST_DIR, TRIALS_FILE, Trial, TuneResult

RECOMMENDED_NOTE = "Recommended by its tune search."  # on that trial's History record


def mark_recommended(workspace: Any, best: Trial) -> None:
    """Note on the recommended trial's History record that its search recommended it (History shows a search as
    one row named after it)."""
    if best.run_id is None:
        return
    try:
        history = workspace.history()
        artifact = history.get(best.run_id)
        if RECOMMENDED_NOTE not in artifact.notes:
            history.update(replace(artifact, notes=[*artifact.notes, RECOMMENDED_NOTE]))
    except OrtlabError:  # History unreadable now: the search's result stands without the mark
        return


def write_recommendation(out_dir: Path, best: Trial, accepted: bool) -> str | None:
    """The recommendation as ``model.onnx`` + ``recipe.json``; a closest trial that did not meet the bar under
    ``closest/`` instead, so it is never taken for a recommendation. The model file written, if any."""
    folder = out_dir if accepted else out_dir / CLOSEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = None
    if best.model_path and Path(best.model_path).is_file():
        shutil.copyfile(best.model_path, folder / "model.onnx")
        written = str(folder / "model.onnx")
    (folder / "recipe.json").write_text(best.recipe.to_json(), encoding="utf-8")
    return written


def write_trials(out_dir: Path, result: TuneResult) -> None:
    """The whole result, every trial with it, as ``trials.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRIALS_FILE).write_text(dumps(result, indent=2), encoding="utf-8")
