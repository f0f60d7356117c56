"""Cancel in the app: the demo's run is started from the Model page, cancelled with its Cancel button while its
child works, and the page says it stopped; the child and every process of its group are gone, no folder is left
and nothing is recorded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from ortlab.runs import service
from ortlab.runtime.child import STOP_GRACE_S, group_members
from ortlab.ui.jobs import status
from ortlab.ui.session import actions
from tests.support.app_session import APP, navigation_mode_like_the_server
from tests.support.children import hold_recipe_children
from tests.ui.test_app import SAMPLE, TIMEOUT

needs_sample = pytest.mark.skipif(not SAMPLE.is_file(), reason="the digits_cnn sample is not here")


@pytest.fixture
def live_app(home, monkeypatch, tmp_path):
    """The app as a server runs it (jobs in the background, drawn while they run, not waited for), with every
    recipe handle it starts kept here; its recipe children are held at their first progress event, so Cancel
    finds the run at work however fast the machine (a fast CPU finished the demo before the click)."""
    hook = tmp_path / "held_hook"
    hook.mkdir()
    hold_recipe_children(hook, monkeypatch)
    navigation_mode_like_the_server(monkeypatch)
    monkeypatch.delenv("ORTLAB_SYNC_JOBS", raising=False)
    monkeypatch.setattr(status, "sync_jobs", lambda: False)
    handles: list[service.RecipeHandle] = []
    real = actions.api.recipes.start_recipe

    def start_recipe(*args, **kwargs):
        handles.append(real(*args, **kwargs))
        return handles[-1]

    monkeypatch.setattr(actions.api.recipes, "start_recipe", start_recipe)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    yield at, handles, home
    for h in handles:  # whatever the test's outcome, nothing it started runs on
        h.cancel()
        h.wait(STOP_GRACE_S * 3)


def _texts(at, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(at, kind)]


@needs_sample
def test_cancel_on_the_model_page_stops_the_demo_and_says_so(live_app):
    at, handles, home = live_app
    at.button(key="demo_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (handle,) = handles
    deadline = time.monotonic() + 60
    while handle.pid is None and not handle.done and time.monotonic() < deadline:
        time.sleep(0.05)  # the child reported its start: it is at work
    assert handle.pid is not None and not handle.done, handle.state
    child = handle.pid
    assert group_members(child), "the child's process group runs"
    at.run()  # the page redraws the running job with its Cancel button
    cancel = at.button(key="model.cancel_recipe")
    assert not cancel.disabled
    begin = time.monotonic()
    cancel.click().run()
    assert handle.wait(STOP_GRACE_S + 30), "the run went on after Cancel"
    took = time.monotonic() - begin
    assert took < STOP_GRACE_S + 10, took
    assert handle.state == service.CANCELLED
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Running the recipe was cancelled." in _texts(at, "warning"), _texts(at, "warning")
    assert not _texts(at, "error")
    assert group_members(child) == [] and not Path(f"/proc/{child}").exists()  # ended and reaped
    print(f"Cancel to the end of the run: {took:.1f} s")
    assert not handle.run_dir.exists()
    from ortlab.runs.history import History

    assert History(home / "history.sqlite").list() == []

