"""Workspace folders and the SQLite run/benchmark history."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ortlab.bench import LatencySummary
from ortlab.config import BenchConfig, Precision, QuantConfig, QuantMode, Recipe
from ortlab.history import BenchmarkRecord, BenchVariant, History, HistoryError
from ortlab.artifact import Artifact
from ortlab.eval_report import EvalReport
from ortlab.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent


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
    assert art.run_id == run_id
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


def test_concurrent_writers_threads_and_processes(tmp_path):
    db = tmp_path / "h.sqlite"
    h = History(db)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: h.add(make_artifact(i)), range(40)))
    assert len(set(ids)) == 40
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from test_workspace import make_artifact\nfrom ortlab.history import History\n"
            "h = History(sys.argv[3])\n[h.add(make_artifact(i)) for i in range(20)]\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(REPO), str(REPO / "tests"), str(db)], cwd=tmp_path)
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


def test_unreadable_database_is_a_typed_error(tmp_path):
    bad = tmp_path / "h.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryError, match="Cannot open the history database"):
        History(bad)
