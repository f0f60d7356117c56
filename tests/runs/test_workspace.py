"""Workspace folders and the SQLite run/benchmark history."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ortlab.timing.bench import LatencySummary
from ortlab.settings.config import BenchConfig, Precision, QuantConfig, QuantMode, Recipe
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History, HistoryError
from ortlab.runs.artifact import Artifact
from ortlab.checks.eval_report import EvalReport
from ortlab.runs.workspace import HOME_CACHE, Workspace, cache_dirs, folder_bytes

REPO = Path(__file__).resolve().parents[2]


def make_artifact(i: int = 0, recipe: Recipe | None = None, evaluation: EvalReport | None = None) -> Artifact:
    return Artifact(
        run_id=None, model_path=Path(f"/ws/artifacts/run-{i}/model.onnx"), source_path=Path("/models/src.onnx"),
        source_sha256="a" * 64, sha256=f"{i:064x}", recipe=recipe or Recipe(), timings={"optimize": 0.25 + i},
        warnings=[f"warning {i}"], providers=["CPUExecutionProvider"], size_bytes=1000 + i,
        source_size_bytes=4000, random_data=bool(i % 2), created_at=f"2025-01-01T00:00:{i:02d}+00:00",
        evaluation=evaluation,
    )


# -- workspace ---------------------------------------------------------------------------------------


def test_workspace_layout_from_argument(tmp_path):
    ws = Workspace(tmp_path / "ws")
    assert ws.root == (tmp_path / "ws").resolve()
    assert ws.models_dir.is_dir() and ws.artifacts_dir.is_dir()
    assert ws.db_path == ws.root / "history.sqlite"
    a, b = ws.new_artifact_dir(), ws.new_artifact_dir()
    assert a != b and a.is_dir() and b.is_dir() and a.parent == ws.artifacts_dir
    assert list(a.iterdir()) == []


def test_workspace_root_from_env_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "from-env"))
    assert Workspace().root == (tmp_path / "from-env").resolve()
    monkeypatch.delenv("ORTLAB_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Workspace().root == (tmp_path / "home" / ".ortlab").resolve()
    # the argument wins over the environment
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "from-env"))
    assert Workspace(tmp_path / "arg").root == (tmp_path / "arg").resolve()


def test_cache_from_env_then_xdg_then_home_and_the_workspace_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "ws"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORTLAB_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dirs() == (tmp_path / "mine", tmp_path / "ws" / HOME_CACHE)
    monkeypatch.delenv("ORTLAB_CACHE_DIR")
    assert cache_dirs()[0] == tmp_path / "xdg" / "ortlab"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignored
    assert cache_dirs()[0] == tmp_path / "home" / ".cache" / "ortlab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dirs()[0] == tmp_path / "home" / ".cache" / "ortlab"


def test_the_fallback_cache_in_the_workspace_is_not_counted_as_workspace(tmp_path):
    ws = Workspace(tmp_path / "ws")
    (ws.models_dir / "m.onnx").write_bytes(b"x" * 1000)
    size = ws.size_bytes()
    (ws.root / HOME_CACHE / "netron-1.2.3-0123456789ab").mkdir(parents=True)
    (ws.root / HOME_CACHE / "netron-1.2.3-0123456789ab" / "view.js").write_bytes(b"y" * 50_000)
    (ws.models_dir / HOME_CACHE).mkdir()  # only the folder at the top is the cache
    (ws.models_dir / HOME_CACHE / "f").write_bytes(b"z" * 10)
    assert ws.size_bytes() == size + 10 == folder_bytes(ws.root) - 50_000


def test_two_workspaces_are_independent(tmp_path):
    w1, w2 = Workspace(tmp_path / "u1"), Workspace(tmp_path / "u2")
    w1.history().add(make_artifact())
    assert len(w1.history().list()) == 1 and w2.history().list() == []


def test_new_artifact_dirs_unique_across_threads(tmp_path):
    ws = Workspace(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: ws.new_artifact_dir(), range(64)))
    assert len(set(dirs)) == 64


# -- history -----------------------------------------------------------------------------------------


def test_add_get_list_delete_and_reopen(tmp_path):
    db = tmp_path / "h.sqlite"
    h = History(db)
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC), name="dyn")
    art = make_artifact(1, recipe, evaluation=EvalReport(n_samples=32, outputs=[], top1_agreement=0.97))
    run_id = h.add(art)
    assert art.run_id is None  # the record is frozen: the id is returned, not written into it
    art = replace(art, run_id=run_id)
    second = h.add(make_artifact(2))

    h2 = History(db)  # a new object on the same file sees everything
    got = h2.get(run_id)
    assert isinstance(got, Artifact) and got == art
    assert got.source_name == "src.onnx" and got.source_path == Path("/models/src.onnx")
    assert got.recipe == recipe and got.kind == "int8-dynamic" and got.random_data is True
    assert got.evaluation == EvalReport(n_samples=32, outputs=[], top1_agreement=0.97)
    assert got.timings == {"optimize": 1.25} and got.warnings == ["warning 1"] and got.notes == []
    assert got.created_at == "2025-01-01T00:00:01+00:00"
    assert h2.get(second).evaluation is None and h2.get(second).kind == "fp32"

    assert [r.run_id for r in h2.list()] == [second, run_id]  # newest first
    assert [r.run_id for r in h2.list(limit=1)] == [second]
    assert h2.delete(run_id) is True and h2.delete(run_id) is False
    with pytest.raises(HistoryError, match=f"No run with id {run_id}"):
        History(db).get(run_id)
    assert [r.run_id for r in History(db).list()] == [second]


def test_database_uses_wal(tmp_path):
    History(tmp_path / "h.sqlite")
    with sqlite3.connect(tmp_path / "h.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_benchmarks_round_trip(tmp_path):
    h = History(tmp_path / "h.sqlite")
    cfg = BenchConfig(batch_sizes=(1, 8), runs=50)
    summaries = [LatencySummary("fp32", 1, 50, 1.0, 1.5, 2.0, 1.1, 0.2, 0.9, 2.1, 909.0, 80.5,
                                ["CPUExecutionProvider"])]
    bid = h.add_benchmark([3, {"label": "source", "model_path": Path("/m.onnx")}], cfg, summaries)
    rows = History(tmp_path / "h.sqlite").list_benchmarks()
    assert len(rows) == 1 and isinstance(rows[0], BenchmarkRecord) and rows[0].id == bid
    assert rows[0].variants == [BenchVariant(run_id=3), BenchVariant(name="source", path="/m.onnx")]
    assert rows[0].config == cfg and rows[0].summaries == summaries
    assert h.delete_benchmark(bid) and h.list_benchmarks() == []


@pytest.mark.slow
def test_concurrent_writers_threads_and_processes(tmp_path):
    db = tmp_path / "h.sqlite"
    h = History(db)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: h.add(make_artifact(i)), range(40)))
    assert len(set(ids)) == 40
    code = ("import sys; sys.path[:0] = [sys.argv[1]]\n"
            "from tests.runs.test_workspace import make_artifact\nfrom ortlab.runs.history import History\n"
            "h = History(sys.argv[2])\n[h.add(make_artifact(i)) for i in range(20)]\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(REPO), str(db)], cwd=tmp_path)
             for _ in range(3)]
    reader_errors = []

    def read_while_writing():
        try:
            for _ in range(30):
                History(db).list()
        except Exception as exc:  # pragma: no cover - surfaced by the assert below
            reader_errors.append(exc)

    t = threading.Thread(target=read_while_writing)
    t.start()
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    t.join()
    assert reader_errors == []
    assert len(History(db).list()) == 100


def stored_runs(ws: Workspace, n: int) -> list[Artifact]:
    """``n`` runs recorded as the service records them: a folder under artifacts/ with artifact.json."""
    h = ws.history()
    runs = []
    for i in range(n):
        folder = ws.new_artifact_dir()
        (folder / "model.onnx").write_bytes(b"model %d" % i)
        a = replace(make_artifact(i), model_path=folder / "model.onnx")
        a = replace(a, run_id=h.add(a))
        a.save()
        runs.append(a)
    return runs


@pytest.mark.parametrize("damage", ["garbage", "truncated", "unknown schema"])
def test_damaged_database_is_moved_aside_and_rebuilt_from_the_artifacts(tmp_path, damage):
    from ortlab.runs import history as history_mod

    ws = Workspace(tmp_path / "ws")
    runs = stored_runs(ws, 3)
    ws.history().delete(runs[1].run_id)  # a deleted run stays deleted… unless its folder is still there
    import shutil

    shutil.rmtree(runs[1].dir)
    before = [(r.run_id, r.sha256, r.recipe) for r in ws.history().list() if isinstance(r, Artifact)]
    if damage == "garbage":
        ws.db_path.write_bytes(b"this is not sqlite" * 100)
    elif damage == "truncated":
        data = ws.db_path.read_bytes()
        ws.db_path.write_bytes(data[:100] + b"\0" * 4000)
    else:  # an old layout this ortlab cannot migrate: a table of that name, not the columns
        ws.db_path.unlink()
        with sqlite3.connect(ws.db_path) as conn:
            conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, whatever TEXT)")
            conn.execute("PRAGMA user_version=2")
        conn.close()
    history_mod.take_notices()
    h = ws.history()
    assert isinstance(h.recovered, history_mod.HistoryRecovered) and h.recovered.restored == 2
    assert "moved aside to history.sqlite.corrupt-" in h.recovered.message and str(tmp_path) not in h.recovered.message
    assert [n.moved_to for n in history_mod.take_notices()] == [h.recovered.moved_to]
    assert h.recovered.moved_to.is_file() and h.recovered.moved_to.parent == ws.root
    after = [(r.run_id, r.sha256, r.recipe) for r in h.list() if isinstance(r, Artifact)]
    assert after == before  # the same runs, with their ids
    assert ws.history().recovered is None and history_mod.take_notices() == []  # once
    new = make_artifact(9)
    last_id = runs[-1].run_id
    assert last_id is not None and h.add(new) == last_id + 1


def test_busy_or_newer_database_is_not_moved_aside(tmp_path):
    db = tmp_path / "h.sqlite"
    History(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version=3")
    conn.close()
    with pytest.raises(HistoryError, match="schema version 3"):
        History(db)
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []


def test_cli_says_once_that_the_history_was_rebuilt(tmp_path, monkeypatch, capsys):
    from ortlab.cli import main as cli

    ws = Workspace(tmp_path / "ws")
    stored_runs(ws, 2)
    ws.db_path.write_bytes(b"not a database" * 50)
    monkeypatch.setenv("ORTLAB_HOME", str(ws.root))
    assert cli.main(["history"]) == 0
    out, err = capsys.readouterr()
    assert err.count("warning: The run history could not be read") == 1 and "rebuilt from the 2 runs" in err
    assert str(ws.root) not in err
    assert cli.main(["history"]) == 0
    assert capsys.readouterr().err == ""


# -- delete and storage -----------------------------------------------------------------------------


def test_delete_run_removes_row_files_and_benchmarks_never_files_outside(tmp_path):
    ws = Workspace(tmp_path / "ws")
    inside, other = stored_runs(ws, 2)
    outside_file = tmp_path / "elsewhere" / "result.onnx"
    outside_file.parent.mkdir()
    outside_file.write_bytes(b"cli result")
    outside = replace(make_artifact(5), model_path=outside_file)
    h = ws.history()
    outside = replace(outside, run_id=h.add(outside))
    b_inside = h.add_benchmark([BenchVariant("a", "a", str(inside.model_path), inside.run_id)], BenchConfig(), [])
    b_other = h.add_benchmark([BenchVariant("b", "b", str(other.model_path), other.run_id)], BenchConfig(), [])
    size = ws.size_bytes()
    assert size > 0
    assert inside.run_id is not None and outside.run_id is not None

    done = ws.delete_run(inside.run_id)
    assert done.removed == [inside.dir] and done.benchmarks == [b_inside] and done.freed_bytes > 0
    [timed] = done.timed  # named, with what it timed (issue 38: "deleted 2 benchmarks" said not which)
    assert timed.startswith(f"benchmark #{b_inside} of ") and timed.endswith(": a, batch size 1"), timed
    assert not inside.dir.exists() and other.dir.exists() and ws.size_bytes() < size
    assert [r.run_id for r in h.list()] == [outside.run_id, other.run_id]
    assert [b.id for b in h.list_benchmarks()] == [b_other]

    done = ws.delete_run(outside.run_id)  # only forgotten: the file outside the workspace stays
    assert done.removed == [] and outside_file.read_bytes() == b"cli result"
    assert [r.run_id for r in h.list()] == [other.run_id]
    with pytest.raises(HistoryError, match="No run"):
        ws.delete_run(outside.run_id)


def test_delete_never_follows_a_run_pointing_outside_through_artifacts(tmp_path):
    ws = Workspace(tmp_path / "ws")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.onnx").write_bytes(b"keep")
    (ws.artifacts_dir / "link").symlink_to(victim, target_is_directory=True)
    a = replace(make_artifact(1), model_path=ws.artifacts_dir / "link" / "model.onnx")
    a = replace(a, run_id=ws.history().add(a))
    assert a.run_id is not None and ws.delete_run(a.run_id).removed == []
    assert (victim / "model.onnx").read_bytes() == b"keep"


def test_workspace_is_private(tmp_path):
    old = os.umask(0o022)
    try:
        ws = Workspace(tmp_path / "ws")
        ws.history()
        run = ws.new_artifact_dir()
    finally:
        os.umask(old)
    for folder in (ws.root, ws.models_dir, ws.artifacts_dir, run):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(ws.db_path.stat().st_mode) == 0o600
