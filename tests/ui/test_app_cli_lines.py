"""Issue 38 (10): the Recipe and History pages' CLI lines wrap instead of being cut off, and name the workspace from
$ORTLAB_HOME instead of spelling out the server's path."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("streamlit")

from ortlab.model.importing import import_model
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import Recipe
from tests.runs.test_stored import _run
from tests.support.app_session import started_app
from tests.support.models import conv_bn_model
from tests.ui.test_app import TIMEOUT


def _joined(text: str) -> str:
    """The command a shell reads from lines continued with ' \\'."""
    return " ".join(x.rstrip(" \\").strip() for x in text.split("\n"))


def test_cli_lines_are_workspace_relative_and_wrap(home, tmp_path, monkeypatch):
    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    run = _run(ws, model, 1000)
    run = replace(run, spec=RunSpec(model=str(model), recipe=Recipe(),
                                    evaluation=DataRef(path=str(home / "data" / "x" / "ev"))))
    ws.history().update(run)
    at = started_app(monkeypatch, TIMEOUT)
    at.switch_page("pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    [line] = [c for c in at.code if "ortlab optimize" in c.value]
    rel = model.relative_to(home).as_posix()
    assert _joined(line.value).startswith(f'ortlab optimize "$ORTLAB_HOME"/{rel} run{run.run_id}.onnx'), line.value
    assert '--eval "$ORTLAB_HOME"/data/x/ev' in _joined(line.value) and str(home) not in line.value
    assert line.proto.wrap_lines and max(len(x) for x in line.value.split("\n")) <= 88, line.value

    at.switch_page("pages/recipe.py").run()  # the model the session reopened: its line as the run's
    assert not at.exception, [e.value for e in at.exception]
    [line] = [c for c in at.code if "ortlab optimize" in c.value]
    assert _joined(line.value).startswith(f'ortlab optimize "$ORTLAB_HOME"/{rel} OUT.onnx'), line.value
    assert line.proto.wrap_lines and str(home) not in line.value
