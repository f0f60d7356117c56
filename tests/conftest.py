"""Every test gets its own workspace: runs recorded by the service never land in the real ~/.ortlab, and ortlab's
cache (the Netron viewer's files) is a temporary folder, never the user's ~/.cache."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # session-wide: app servers started by module fixtures inherit it
        mp.setenv("ORTLAB_CACHE_DIR", str(tmp_path_factory.mktemp("ortlab_cache")))
        if not os.environ.get("ORTLAB_SPEED_CHECK_S"):  # runs are not timed against their source unless a test asks
            mp.setenv("ORTLAB_SPEED_CHECK_S", "0")
        yield


@pytest.fixture(autouse=True)
def _private_workspace(tmp_path_factory, monkeypatch):
    if not os.environ.get("ORTLAB_HOME"):  # a test (or a module fixture) that chose one keeps it
        monkeypatch.setenv("ORTLAB_HOME", str(tmp_path_factory.mktemp("ortlab_home")))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A workspace for an app test: jobs run synchronously and relative paths land in ``tmp_path``."""
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORTLAB_SYNC_JOBS", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


@pytest.fixture
def no_parsing_here(monkeypatch):
    """Call it (after building the test's models) to make any parse, check or inspection of a model in this
    process fail the test (``ortlab.model.isolated`` reads them in a child process, which is not affected). Returns
    the list of refused calls."""
    import onnx

    from ortlab.model import diff, diff_view, isolated, inspect as model

    calls: list[str] = []

    def refuse(name):
        def f(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} was called in the server process")
        return f

    def arm() -> list[str]:
        monkeypatch.setattr(model, "_parse", refuse("model._parse"))
        monkeypatch.setattr(isolated, "_inspect", refuse("model.inspect_model"))
        for name in ("load", "load_model", "load_from_string"):
            monkeypatch.setattr(onnx, name, refuse(f"onnx.{name}"))
        monkeypatch.setattr(onnx.checker, "check_model", refuse("onnx.checker.check_model"))
        monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse("onnx.shape_inference.infer_shapes"))
        monkeypatch.setattr(diff, "graph_diff", refuse("diff.graph_diff"))
        monkeypatch.setattr(diff_view, "graph_description", refuse("diff.graph_description"))
        monkeypatch.setattr(isolated, "_diff", refuse("diff.graph_diff"))
        monkeypatch.setattr(isolated, "_description", refuse("diff.graph_description"))
        return calls

    return arm
