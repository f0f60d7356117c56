"""Run and benchmark history in SQLite: one connection per call, WAL, safe across threads and processes."""

from __future__ import annotations

import dataclasses
import enum
import json
import sqlite3
from contextlib import closing, contextmanager
from datetime import datetime, UTC
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Sequence

from .errors import OrtlabError

SCHEMA_VERSION = 1

_SCHEMA = """
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
    notes_json TEXT,
    origin TEXT,
    spec_json TEXT
);
CREATE TABLE IF NOT EXISTS benchmarks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    variants_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    summary_json TEXT NOT NULL,
    origin TEXT
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at);
"""

_RUN_JSON = {"recipe_json": "recipe", "metrics_json": "metrics", "timings_json": "timings",
             "warnings_json": "warnings", "providers_json": "providers", "notes_json": "notes", "spec_json": "spec"}
# columns added after the first release: (table, column, type) added to older databases when opened
_ADDED_COLUMNS = (("runs", "origin", "TEXT"), ("runs", "spec_json", "TEXT"), ("benchmarks", "origin", "TEXT"))
_BENCH_JSON = {"variants_json": "variants", "config_json": "config", "summary_json": "summary"}


class HistoryError(OrtlabError):
    """The history database cannot be read or has no such entry."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _plain(obj: Any) -> Any:
    """JSON-safe form of dataclasses, enums, paths, tuples and numpy scalars."""
    if hasattr(obj, "to_dict"):
        return _plain(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    return obj


def _dumps(obj: Any) -> str:
    return json.dumps(_plain(obj), sort_keys=True)


def _kind(recipe: dict) -> str:
    precision = recipe.get("precision", "fp32")
    if precision == "int8":
        return f"int8-{recipe.get('quant', {}).get('mode', 'static')}"
    return str(precision)


class History:
    """Every optimization run (one row per artifact) and every benchmark, kept in ``db_path``."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._connect() as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                for table, column, kind in _ADDED_COLUMNS:
                    have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
                    if column not in have:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"Cannot open the history database {self.db_path}: {exc}.") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.db_path, timeout=30.0)) as conn:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout=30000")
            with conn:  # one transaction: commit on success, roll back on error
                yield conn

    # -- runs ------------------------------------------------------------------------------------------
    def add(self, artifact: Any, *, origin: str | None = None, spec: Any = None) -> int:
        """Store an :class:`ortlab.artifact.Artifact`; set and return its ``run_id``. ``origin`` says where the
        run was started ("app" or "cli"); ``spec`` is the ``RunSpec`` (or its dict) that made it."""
        recipe = _plain(artifact.recipe)
        source_path = Path(artifact.source_path)
        row = {
            "created_at": artifact.created_at or _now(),
            "source_name": source_path.name,
            "source_path": str(source_path),
            "source_sha256": artifact.source_sha256,
            "model_path": str(artifact.model_path),
            "sha256": artifact.sha256,
            "recipe_json": _dumps(recipe),
            "metrics_json": _dumps(artifact.evaluation) if artifact.evaluation is not None else None,
            "timings_json": _dumps(artifact.timings),
            "warnings_json": _dumps(list(artifact.warnings)),
            "providers_json": _dumps(list(artifact.providers)),
            "size_bytes": int(artifact.size_bytes),
            "source_size_bytes": int(artifact.source_size_bytes),
            "random_data": int(bool(artifact.random_data)),
            "kind": _kind(recipe),
            "notes_json": _dumps(list(getattr(artifact, "notes", []))),
            "origin": origin,
            "spec_json": _dumps(spec) if spec is not None else None,
        }
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._connect() as conn:
            run_id = int(conn.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", tuple(row.values())).lastrowid)
        try:
            artifact.run_id = run_id
        except AttributeError:  # frozen or read-only objects keep their own id
            pass
        return run_id

    def list(self, limit: int | None = None) -> list[dict]:
        """All runs, newest first, with JSON columns decoded (``recipe``, ``metrics``, ``timings``…)."""
        return self._newest("runs", _RUN_JSON, limit)

    def get(self, run_id: int) -> dict:
        """One run by id; ``HistoryError`` when there is none."""
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
        if row is None:
            raise HistoryError(f"No run with id {run_id} in the history.")
        return self._decode(row, _RUN_JSON)

    def delete(self, run_id: int) -> bool:
        """Forget a run (its files stay where they are). Returns whether a row was removed."""
        with self._connect() as conn:
            return conn.execute("DELETE FROM runs WHERE id = ?", (int(run_id),)).rowcount > 0

    # -- benchmarks ------------------------------------------------------------------------------------
    def add_benchmark(self, variants: Sequence[Any], config: Any, summaries: Sequence[Any],
                      created_at: str | None = None, *, origin: str | None = None) -> int:
        """Store one benchmark: ``variants`` (run ids or dicts naming each model), the ``BenchConfig``
        and the ``LatencySummary`` list. Returns the benchmark id."""
        plain_variants = [{"run_id": v} if isinstance(v, int) else _plain(v) for v in variants]
        with self._connect() as conn:
            cur = conn.execute(
                "INSERT INTO benchmarks (created_at, variants_json, config_json, summary_json, origin) "
                "VALUES (?, ?, ?, ?, ?)",
                (created_at or _now(), _dumps(plain_variants), _dumps(config), _dumps(list(summaries)), origin),
            )
            return int(cur.lastrowid)

    def list_benchmarks(self, limit: int | None = None) -> list[dict]:
        """All benchmarks, newest first, with ``variants``, ``config`` and ``summary`` decoded."""
        return self._newest("benchmarks", _BENCH_JSON, limit)

    def delete_benchmark(self, bench_id: int) -> bool:
        """Forget a benchmark. Returns whether a row was removed."""
        with self._connect() as conn:
            return conn.execute("DELETE FROM benchmarks WHERE id = ?", (int(bench_id),)).rowcount > 0

    def _newest(self, table: str, json_cols: dict[str, str], limit: int | None) -> list[dict]:
        sql = f"SELECT * FROM {table} ORDER BY id DESC"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        with self._connect() as conn:
            return [self._decode(r, json_cols) for r in conn.execute(sql, params)]

    @staticmethod
    def _decode(row: sqlite3.Row, json_cols: dict[str, str]) -> dict:
        out: dict[str, Any] = {}
        for key in row.keys():  # noqa: SIM118 - sqlite3.Row iterates values, not keys
            value = row[key]
            if key in json_cols:
                out[json_cols[key]] = json.loads(value) if value is not None else None
            elif key == "random_data":
                out[key] = bool(value)
            else:
                out[key] = value
        return out
