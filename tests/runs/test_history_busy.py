"""A history database that another process holds locked past the wait costs no run: the run ends, its result is
kept, its note says the history was busy and when it will be listed, and the next start lists it."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ortlab.runs import prepare
from ortlab.cli import main as cli
from ortlab.runs import history as history_mod, run_recovery, service
from ortlab.runs.artifact import Artifact
from ortlab.runs.runspec import RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import OptLevel, Recipe
from tests.support.models import conv_bn_model

BASIC = Recipe(opt_level=OptLevel.BASIC)
WAIT_S = 1.0  # the history's wait for a lock, in this test's processes and in the run's child


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("busy") / "conv.onnx")


@pytest.fixture
def short_wait(tmp_path, monkeypatch):
    """The history waits WAIT_S for a lock here and in every child this test starts (a ``sitecustomize`` on the
    child's PYTHONPATH, kept by ``child_env``), instead of 30 s."""
    monkeypatch.setattr(history_mod, "BUSY_TIMEOUT_S", WAIT_S)
    hook = tmp_path / "busy_hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"from ortlab.runs import history\nhistory.BUSY_TIMEOUT_S = {WAIT_S}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))


@contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another connection, on another thread, holds ``db`` with BEGIN EXCLUSIVE until the block ends."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN EXCLUSIVE")
        holding.set()
        release.wait(300)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert holding.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join(30)


def runs_in(ws: Workspace) -> list[Artifact]:
    return [r for r in ws.history().list() if isinstance(r, Artifact)]


def test_a_run_that_meets_a_locked_history_ends_and_is_listed_at_the_next_start(src, tmp_path, short_wait):
    ws = Workspace(tmp_path / "home")
    ws.history()
    with locked(ws.db_path):
        begin = time.monotonic()
        handle = prepare.start_recipe(RunSpec(str(src), BASIC), workspace=ws)
        assert handle.wait(120), "the run hung on the locked history"
        took = time.monotonic() - begin
        assert handle.state == service.DONE, handle.error
        art = handle.result
        assert art.run_id is None and art.model_path.is_file() and (art.dir / "artifact.json").is_file()
        (note,) = [n for n in art.notes if n.startswith("Not recorded")]
        assert note == ("Not recorded in the history yet: The history database history.sqlite was busy: another "
                        "process held it locked for more than 1 s. The result is kept and will be listed when "
                        "ortlab next starts (the app, or any ortlab command that uses the workspace).")
        assert runs_in(ws) == []  # reading works while the lock is held
    assert took < 60, took
    notices = run_recovery.startup(ws)
    (row,) = runs_in(ws)
    assert row.dir == art.dir and row.sha256 == art.sha256
    assert any("1 finished run that could not be recorded" in n.message and f"run {row.run_id}" in n.message
               for n in notices), [n.message for n in notices]
    assert run_recovery.startup(ws) == [] and len(runs_in(ws)) == 1  # listed once


def test_the_cli_run_into_a_file_with_a_locked_history_exits_0_and_is_listed_later(src, tmp_path, short_wait,
                                                                                   monkeypatch, capsys):
    ws = Workspace(tmp_path / "home")
    ws.history()
    monkeypatch.setenv("ORTLAB_HOME", str(ws.root))
    out = tmp_path / "out.onnx"
    with locked(ws.db_path):
        code = cli.main(["optimize", str(src), str(out), "--opt-level", "basic"])
        captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.is_file()
    text = " ".join((captured.out + captured.err).split())
    assert "was busy: another process held it locked for more than 1 s" in text, text
    assert "will be listed when ortlab next starts" in text and "history not recorded yet" in text
    assert "Traceback" not in captured.err
    assert len(list((ws.root / history_mod.PENDING_DIR).glob("*.json"))) == 1
    assert runs_in(ws) == []
    notices = run_recovery.startup(ws)
    (row,) = runs_in(ws)
    assert Path(row.model_path) == out.resolve() and notices
    assert list((ws.root / history_mod.PENDING_DIR).glob("*.json")) == []


def test_a_kept_run_whose_file_was_replaced_since_is_not_listed(src, tmp_path, short_wait, monkeypatch):
    ws = Workspace(tmp_path / "home")
    ws.history()
    out = tmp_path / "out.onnx"
    with locked(ws.db_path):
        handle = prepare.start_recipe(RunSpec(str(src), BASIC), out, workspace=ws)
        assert handle.wait(120) and handle.state == service.DONE, handle.error
    out.write_bytes(b"another model now")
    assert run_recovery.startup(ws) == [] and runs_in(ws) == []
    assert list((ws.root / history_mod.PENDING_DIR).glob("*.json")) == []
