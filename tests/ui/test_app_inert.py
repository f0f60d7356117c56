"""Text from a model, a file name or a recipe name is shown as text: never rendered as Markdown or HTML (no
image fetched from another host); the History page deletes a run after a confirmation and shows the storage
used; errors show workspace-relative paths."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from ortlab.runs import prepare
from ortlab.ui.session.inert import md
from tests.ui.test_app import APP, TIMEOUT, _server_like_navigation, leaves  # noqa: F401 (an autouse fixture)

IMAGE = "![x](http://example.invalid/x.png)"
TAG = "<img src=x>"
PAYLOAD = f"{IMAGE} {TAG}"
RENDERED = ("markdown", "caption", "subheader", "header", "title", "error", "warning", "info", "success",
            "toast", "exception")


def shown(at) -> list[tuple[str, str]]:
    """(element type, value) of every element of the page and the sidebar."""
    out = []
    for block in (at.main, at.sidebar):
        for e in leaves(block):
            value = getattr(e, "value", None)
            out.append((e.type, str(value) if value is not None else ""))
    return out


def assert_inert(at) -> None:
    """No element that renders Markdown/HTML carries the payload unescaped."""
    for kind, value in shown(at):
        if kind in RENDERED:
            assert IMAGE not in value and TAG not in value and "](http://example" not in value, (kind, value)
            assert "![x](x.png)" not in value and "**bold**" not in value, (kind, value)


def evil_model(tmp_path) -> bytes:
    from tests.support.models import conv_bn_graph

    model = conv_bn_graph()
    model.producer_name = PAYLOAD
    model.graph.name = PAYLOAD
    path = tmp_path / "evil.onnx"
    onnx.save_model(model, str(path))
    return path.read_bytes()


@pytest.mark.slow
def test_model_metadata_file_name_and_recipe_name_are_shown_as_text(home, tmp_path):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    name = f"{TAG} ![x](x.png) **bold**.onnx"  # (a file name holds no "/")
    at.file_uploader(key="model_upload").set_value((name, evil_model(tmp_path), "application/octet-stream")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert_inert(at)
    values = [v for _, v in shown(at)]
    assert at.subheader[0].value == md(name)  # the upload's name, literally
    assert any(md(PAYLOAD) in v for v in values)  # producer and graph name, literally

    at.switch_page("pages/recipe.py").run()
    at.text_input(key="recipe.name").set_value(PAYLOAD).run()
    at.radio(key="recipe.opt_level").set_value(at.radio(key="recipe.opt_level").options[1]).run()
    at.button(key="recipe.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    finished = [m.value for m in [*at.success, *at.info, *at.warning]]
    assert any(md(PAYLOAD) in v for v in finished), finished
    assert_inert(at)

    at.switch_page("pages/history.py").run()
    assert not at.exception
    assert_inert(at)
    assert list(at.dataframe[0].value["recipe"]) == [PAYLOAD]  # a dataframe cell is text
    assert any(h.value == f"Run #1: {md(PAYLOAD)}" for h in at.subheader)

    at.switch_page("pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert_inert(at)

    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import History
    from ortlab.ui.session.actions import run_report

    run = History(home / "history.sqlite").list()[0]
    assert isinstance(run, Artifact)
    html = run_report(run)
    assert TAG not in html and "&lt;img src=x&gt;" in html


def test_history_deletes_a_run_after_confirmation_and_shows_storage(home, tmp_path):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("pages/recipe.py").run()
    at.radio(key="recipe.opt_level").set_value(at.radio(key="recipe.opt_level").options[1]).run()
    at.button(key="recipe.run").click().run()
    at.switch_page("pages/history.py").run()
    assert not at.exception
    assert any("Storage used by the workspace" in c.value for c in at.caption)
    from ortlab.runs.history import History

    [run] = History(home / "history.sqlite").list()
    folder = Path(run.model_path).parent
    assert folder.is_dir()
    at.button(key="history.delete").click().run()
    assert any("cannot be undone" in w.value for w in at.warning) and folder.is_dir()  # asked first
    at.button(key="history.delete_no").click().run()
    assert folder.is_dir() and History(home / "history.sqlite").list()
    at.button(key="history.delete").click().run()
    at.button(key="history.delete_yes").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not folder.exists() and History(home / "history.sqlite").list() == []
    assert any(md("Deleted run #1") in s.value for s in at.success), [s.value for s in at.success]


def test_error_messages_show_workspace_relative_paths(home):
    from ortlab.ui.session.guard import error_message, public_paths
    from ortlab.core.errors import ModelLoadError
    from ortlab.runs.workspace import Workspace

    ws = Workspace()
    path = ws.models_dir / "abc" / "m.onnx"
    _, text = error_message("Opening", ModelLoadError(f"Model file '{path}' does not exist or is not a file."))
    assert public_paths(text, ws.root) == "Opening failed: Model file 'workspace/models/abc/m.onnx' does not exist " \
                                          "or is not a file."
    assert public_paths("Cannot read /etc/secret/thing.onnx.", ws.root) == "Cannot read thing.onnx."


def test_a_damaged_history_is_rebuilt_and_the_app_says_so(home, tmp_path):
    from ortlab.settings.config import Recipe
    from ortlab.runs.history import History
    from ortlab.runs.runspec import RunSpec
    from ortlab.runs.workspace import Workspace
    from tests.support.models import conv_bn_model

    ws = Workspace(home)
    src = conv_bn_model(tmp_path / "src.onnx")
    runs = [prepare.start_recipe(RunSpec(str(src), Recipe()), workspace=ws).follow() for _ in range(2)]
    ws.db_path.write_bytes(b"garbage, not SQLite" * 100)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception
    assert any("moved aside to history" in w.value and "rebuilt from the 2 runs" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    assert not any(str(home) in w.value for w in at.warning)
    assert Counter(r.run_id for r in History(ws.db_path).list()) == Counter(r.run_id for r in runs)
    assert len(list(home.glob("history.sqlite.corrupt-*"))) == 1
    at.switch_page("pages/history.py").run()
    assert not at.exception and list(at.dataframe[0].value["run"]) == [str(i) for i in sorted((r.run_id for r in runs), reverse=True)]


def test_public_paths_leave_links_alone():
    from ortlab.ui.session.guard import public_paths

    assert public_paths("see http://example.invalid/x.png or /srv/a/b.onnx", "/srv/ws") == \
        "see http://example.invalid/x.png or b.onnx"


def test_a_run_the_server_lost_is_listed_on_history_and_runs_again(home, tmp_path):
    """After a restart, a run that was going when the server died is listed as interrupted with its recipe;
    "Run again" runs its spec (and records it), the leftover folder goes."""
    import json
    import os
    import time

    from ortlab.runs import outputs
    from ortlab.runs.runspec import RunSpec
    from ortlab.runs.workspace import Workspace
    from ortlab.settings.config import OptLevel, Recipe
    from tests.support.models import conv_bn_model

    ws = Workspace(home)
    spec = RunSpec(str(conv_bn_model(tmp_path / "src.onnx")), Recipe(opt_level=OptLevel.BASIC))
    folder = ws.new_artifact_dir()  # what the killed server left: the spec, an owner that is gone
    (folder / outputs.OWNER_FILE).write_text("999999999")
    outputs.write_text_atomic(folder / outputs.RUNNING_FILE, json.dumps(
        {"spec": spec.to_dict(), "origin": "app", "started_at": "2026-01-02T03:04:05+00:00"}))
    old = time.time() - 3600
    os.utime(folder, (old, old))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()  # the restarted server's first session
    at.switch_page("pages/history.py").run()
    assert not at.exception
    (note,) = [w.value for w in at.warning if "Interrupted" in w.value]
    assert "2026-01-02 03:04" in note and spec.recipe.label() in note
    next(b for b in at.button if b.label == "Run again").click().run()
    assert not at.exception
    assert not folder.exists()
    runs = ws.history().list()
    assert len(runs) == 1 and runs[0].spec == spec
    assert not [w.value for w in at.warning if "Interrupted" in w.value]
