"""History's "Models and data" section: an imported model deleted with its runs, after a confirmation."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from ortlab.core.text import format_bytes
from ortlab.model.importing import import_model
from ortlab.runs.workspace import Workspace
from ortlab.ui.session.inert import md
from tests.ui.test_app import APP, TIMEOUT, sidebar_text, _server_like_navigation  # noqa: F401 (an autouse fixture)
from tests.runs.test_stored import _bytes, _run
from tests.support.models import conv_bn_model


def test_history_deletes_an_imported_model_with_its_runs_after_confirmation(home, tmp_path):
    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    runs = [_run(ws, model, 2000), _run(ws, model, 1000)]
    freed = _bytes(model.parent) + sum(_bytes(r.dir) for r in runs)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.file_uploader(key="model_upload").set_value(("mine.onnx", model.read_bytes(), "")).run()  # the model in use
    assert not at.exception and "mine.onnx" in sidebar_text(at)
    at.switch_page("pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    [section] = [e for e in at.expander if e.label.startswith("Models and data")]
    assert section.label.startswith("Models and data: 1 imported model, 0 uploaded data sets")
    [row] = [m.value for m in at.markdown if "on disk" in m.value]
    assert md("mine.onnx") in row and "· 2 runs" in row

    at.button(key="history.stored.delete.0").click().run()  # asks first: nothing is deleted yet
    assert any("cannot be undone" in w.value and "2 runs" in w.value for w in at.warning)
    assert model.is_file() and all(r.dir.is_dir() for r in runs)
    at.button(key="history.stored.no.0").click().run()
    assert model.is_file() and len(ws.history().list()) == 2
    assert not any("cannot be undone" in w.value for w in at.warning)

    at.button(key="history.stored.delete.0").click().run()
    at.button(key="history.stored.yes.0").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not model.parent.exists() and not any(r.dir.exists() for r in runs) and ws.history().list() == []
    [done] = [s.value for s in at.success if "Deleted" in s.value]
    assert done == md(f"Deleted model mine.onnx (2 runs, {format_bytes(freed)} freed)."), done
    assert not any("on disk" in m.value for m in at.markdown)  # the section is gone with the only model
    assert "mine.onnx" not in sidebar_text(at) and "digits_cnn" in sidebar_text(at)  # the default sample is back
