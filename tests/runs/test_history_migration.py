"""History schema 2: a schema-1 database (the first release's SQL) is migrated at open and reads back typed;
a row that cannot be decoded is listed as unreadable without hiding the others."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ortlab.runs.artifact import Artifact
from ortlab.timing.bench import LatencySummary
from ortlab.settings.config import BenchConfig, Precision, QuantMode, Recipe
from ortlab.runs.history import (SCHEMA_VERSION, BenchmarkRecord, BenchVariant, History, HistoryError, UnreadableBenchmark,
                            UnreadableRun)

# the schema of the first release (user_version 1), as it was
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    source_name TEXT NOT NULL,
    source_path TEXT NOT NULL,
    source_sha256 TEXT NOT NULL,
    model_path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    recipe_json TEXT NOT NULL,
    metrics_json TEXT,
    timings_json TEXT NOT NULL,
    warnings_json TEXT NOT NULL,
    providers_json TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    source_size_bytes INTEGER NOT NULL,
    random_data INTEGER NOT NULL DEFAULT 0,
    kind TEXT NOT NULL,
    notes_json TEXT
);
CREATE TABLE IF NOT EXISTS benchmarks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    variants_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    summary_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at);
"""

RECIPE_V1 = {"precision": "int8", "target": "cpu", "opt_level": "extended", "keep_io_types": True,
             "allow_random_data": False, "name": "",
             "quant": {"mode": "static", "quant_format": "QDQ", "op_types": ["Conv"], "per_channel": True}}
METRICS_V1 = {"n_samples": 32, "top1_accuracy_ref": 0.96875, "top1_accuracy_cand": 0.9375, "top5_accuracy_ref": None,
              "top5_accuracy_cand": None, "top1_agreement": 0.90625, "top5_containment": 1.0,
              "per_class": [{"class": "0", "n": 16, "ref_acc": 1.0, "cand_acc": 0.9375}], "random_data": False,
              "providers_ref": ["CPUExecutionProvider"], "providers_cand": ["CPUExecutionProvider"],
              "outputs": [{"name": "logits", "max_abs": 0.01, "mean_abs": 0.002, "cosine": 0.9999, "sqnr_db": 31.5,
                           "identical": False},
                          {"name": "same", "max_abs": 0.0, "mean_abs": 0.0, "cosine": 1.0, "sqnr_db": None,
                           "identical": True}]}


def v1_database(path: Path, runs: list[dict], benchmarks: Sequence[dict] = ()) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute("PRAGMA user_version=1")
        for r in runs:
            conn.execute(f"INSERT INTO runs ({', '.join(r)}) VALUES ({', '.join('?' for _ in r)})", tuple(r.values()))
        for b in benchmarks:
            conn.execute(f"INSERT INTO benchmarks ({', '.join(b)}) VALUES ({', '.join('?' for _ in b)})",
                         tuple(b.values()))
    conn.close()
    return path


def v1_run(i: int, **changes) -> dict:
    row = {"id": i, "created_at": f"2025-06-01T00:00:{i:02d}+00:00", "source_name": "src.onnx",
           "source_path": "/models/src.onnx", "source_sha256": "a" * 64, "model_path": f"/ws/artifacts/{i}/model.onnx",
           "sha256": f"{i:064x}", "recipe_json": json.dumps(RECIPE_V1), "metrics_json": json.dumps(METRICS_V1),
           "timings_json": json.dumps({"quantize": 1.5, "verify": 0.5}), "warnings_json": json.dumps(["w"]),
           "providers_json": json.dumps(["CPUExecutionProvider"]), "size_bytes": 1000, "source_size_bytes": 4000,
           "random_data": 1, "kind": "int8-static", "notes_json": None}
    row.update(changes)
    return row


SUMMARY_V1: dict[str, Any] = {"variant": "original", "batch_size": 1, "n": 15, "p50": 0.5, "p90": 0.6, "p99": 0.7, "mean": 0.55,
              "std": 0.05, "min": 0.4, "max": 0.8, "throughput_per_s": 1818.2, "peak_rss_mb": None,
              "providers": ["CPUExecutionProvider"], "profile_path": None}


def v1_bench(i: int, **changes) -> dict:
    row = {"id": i, "created_at": "2025-06-02T00:00:00+00:00",
           "variants_json": json.dumps([{"id": "original", "name": "original · digits", "path": "/m.onnx",
                                         "run_id": None}, {"run_id": 3}]),
           "config_json": json.dumps(BenchConfig(runs=15).to_dict()),
           "summary_json": json.dumps([SUMMARY_V1, {**SUMMARY_V1, "variant": "run3", "throughput_per_s": math.inf}])}
    row.update(changes)
    return row


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    return version


def test_v1_database_is_migrated_and_reads_back_typed(tmp_path):
    db = v1_database(tmp_path / "h.sqlite", [v1_run(1), v1_run(3, notes_json=json.dumps(["a note"]))],
                     [v1_bench(1)])
    h = History(db)
    assert user_version(db) == SCHEMA_VERSION == 2
    runs = h.list()
    assert [r.run_id for r in runs] == [3, 1] and all(isinstance(r, Artifact) for r in runs)
    run = h.get(1)
    assert run.recipe == Recipe.from_dict(RECIPE_V1) and run.recipe.precision == Precision.INT8
    assert run.recipe.quant.mode == QuantMode.STATIC and run.kind == "int8-static"
    assert run.model_path == Path("/ws/artifacts/1/model.onnx") and run.source_name == "src.onnx"
    assert run.timings == {"quantize": 1.5, "verify": 0.5} and run.random_data is True and run.notes == []
    assert h.get(3).notes == ["a note"]
    ev = run.evaluation
    assert ev is not None and ev.top1_agreement == 0.90625 and ev.per_class[0]["cand_acc"] == 0.9375
    assert ev.outputs[0].sqnr_db == 31.5 and not ev.outputs[0].identical
    assert ev.outputs[1].identical and ev.outputs[1].sqnr_db == math.inf
    [bench] = h.list_benchmarks()
    assert isinstance(bench, BenchmarkRecord) and bench.id == 1 and bench.config == BenchConfig(runs=15)
    assert bench.variants == [BenchVariant("original", "original · digits", "/m.onnx", None), BenchVariant(run_id=3)]
    assert bench.summaries[0] == LatencySummary(**SUMMARY_V1) and bench.summaries[1].throughput_per_s == math.inf
    # new rows go on after the migrated ones, and a second open changes nothing
    assert h.add(run) == 4
    assert [r.run_id for r in History(db).list()] == [4, 3, 1]


def test_migration_is_one_transaction(tmp_path, monkeypatch):
    db = v1_database(tmp_path / "h.sqlite", [v1_run(1)])
    import ortlab.runs.history as history

    def broken(*args):
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    monkeypatch.setattr(history, "_v1_plain", broken)
    with pytest.raises(HistoryError, match="simulated"):
        History(db)
    assert user_version(db) == 1  # nothing changed
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT recipe_json FROM runs").fetchone()[0] == json.dumps(RECIPE_V1)
    conn.close()
    monkeypatch.undo()
    assert [r.run_id for r in History(db).list()] == [1]


def test_ctrl_c_just_after_the_commit_stays_an_interrupt(tmp_path, monkeypatch):
    """Ctrl-C landing after COMMIT (no transaction left to roll back) is still a KeyboardInterrupt, not SQLite's
    "cannot rollback" read as a database that cannot be opened (the command then ran on as if never interrupted)."""
    import ortlab.runs.history as history

    connect = sqlite3.connect

    class InterruptedAfterCommit(sqlite3.Connection):
        def execute(self, sql, *args):
            cursor = super().execute(sql, *args)
            if sql == "COMMIT":
                raise KeyboardInterrupt
            return cursor

    monkeypatch.setattr(history.sqlite3, "connect", lambda *a, **k: connect(*a, factory=InterruptedAfterCommit, **k))
    db = tmp_path / "h.sqlite"
    with pytest.raises(KeyboardInterrupt):
        History(db)
    monkeypatch.undo()
    assert user_version(db) == SCHEMA_VERSION  # the commit stands
    assert History(db).list() == []


def test_a_bad_row_is_listed_as_unreadable_and_the_rest_still_reads(tmp_path):
    bad_recipe = json.dumps({**RECIPE_V1, "sparsity": 0.5})  # a setting this version does not know
    db = v1_database(tmp_path / "h.sqlite",
                     [v1_run(1), v1_run(2, recipe_json=bad_recipe), v1_run(3, metrics_json="{not json"), v1_run(4)],
                     [v1_bench(1), v1_bench(2, config_json="[")])
    h = History(db)
    runs = h.list()
    assert [r.run_id if isinstance(r, Artifact) else r.id for r in runs] == [4, 3, 2, 1]
    assert isinstance(runs[0], Artifact) and isinstance(runs[3], Artifact)
    assert isinstance(runs[1], UnreadableRun) and "metrics_json" in runs[1].reason
    assert runs[1].created_at == "2025-06-01T00:00:03+00:00"
    assert isinstance(runs[2], UnreadableRun) and "sparsity" in runs[2].reason
    with pytest.raises(HistoryError, match="Run 2 in the history cannot be read"):
        h.get(2)
    benches = h.list_benchmarks()
    assert isinstance(benches[0], UnreadableBenchmark) and "config_json" in benches[0].reason
    assert isinstance(benches[1], BenchmarkRecord)
    # damage after the migration too: a schema-2 row whose JSON is broken
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET artifact_json = '{' WHERE id = 4")
    conn.close()
    runs = History(db).list()
    assert isinstance(runs[0], UnreadableRun) and "invalid JSON" in runs[0].reason
    assert sum(isinstance(r, Artifact) for r in runs) == 1


def test_a_newer_database_is_refused(tmp_path):
    db = tmp_path / "h.sqlite"
    History(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version=7")
    conn.close()
    with pytest.raises(HistoryError, match="schema version 7"):
        History(db)
