"""Every test gets its own workspace: runs recorded by the service never land in the real ~/.ortlab."""

from __future__ import annotations

import os

import pytest


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
