"""Run and benchmark history in SQLite: one connection per call, WAL, safe across threads and processes.

Schema 2 (``PRAGMA user_version = 2``): a run is one row whose ``artifact_json`` holds
``Artifact.to_dict()`` (``serial.to_plain`` with the artifact's own ``schema_version``, without ``run_id``,
which is the row id); a benchmark is one row whose ``benchmark_json`` holds the variants, the ``BenchConfig``
and the ``LatencySummary`` list. A few columns (time, kind, source, hashes) are kept beside the JSON for
queries. ``problem`` says why a row could not be migrated (its old columns are then kept in the JSON).

Schema 1 (the first release: one JSON column per field, ``metrics_json`` for the evaluation) is migrated when
the database is opened, in one transaction. Reading never fails because of one bad row: a row that cannot
be decoded is listed as :class:`UnreadableRun` / :class:`UnreadableBenchmark` with the reason.

Size: the SQLite schema, its migrations, recovery from damage and the typed reads are one storage format.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ortlab.runs.artifact import Artifact
from ortlab.runtime.machine import Machine
from ortlab.timing.bench import LatencySummary
from ortlab.settings.config import BenchConfig
from ortlab.core.disk import free_bytes, is_disk_full
from ortlab.core.text import format_bytes, one_line, utc_timestamp
from ortlab.core.errors import HistoryError, OrtlabError
from ortlab.core.serial import dumps, from_plain, loads, to_plain
from ortlab.core.layout import ARTIFACT_FILE
from ortlab.runs.artifact import load_artifact
from ortlab.model.inspect import sha256_file
from ortlab.runs.outputs import RECORDED_FILE, RUNNING_FILE, owner_alive, write_text_atomic

SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 30.0  # how long a call waits for another process's lock on the history before it gives up
PENDING_DIR = "pending"  # beside history.sqlite: runs into OUT.onnx finished while the history was busy
BENCHMARK_SCHEMA_VERSION = 2  # of the plain form in ``benchmark_json``

_SCHEMA = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        kind TEXT NOT NULL,
        source_name TEXT NOT NULL,
        source_sha256 TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        artifact_json TEXT NOT NULL,
        problem TEXT
    )""",
    """CREATE TABLE benchmarks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        benchmark_json TEXT NOT NULL,
        problem TEXT
    )""",
    "CREATE INDEX runs_created ON runs (created_at)",
)

_DECODE_ERRORS = (ValueError, TypeError, KeyError, OrtlabError)


class HistoryRecovered(HistoryError):
    """Not a failure, a warning to show once: the history database was damaged (or of a schema this ortlab
    cannot migrate), was moved aside to ``moved_to`` and rebuilt from the ``artifact.json`` files of the
    workspace (``restored`` runs)."""

    def __init__(self, message: str, moved_to: Path | None = None, restored: int = 0) -> None:
        super().__init__(message)
        self.moved_to = moved_to
        self.restored = restored


_NOTICES: builtins.list[HistoryRecovered] = []
_NOTICES_LOCK = threading.Lock()


class HistoryFull(HistoryError):
    """The history cannot be changed: its disk is full (it can still be read)."""


def take_notices() -> builtins.list[HistoryRecovered]:
    """The recoveries this process made since the last call (each is shown once)."""
    with _NOTICES_LOCK:
        out = list(_NOTICES)
        _NOTICES.clear()
    return out


@dataclass(frozen=True)
class UnreadableRun:
    """A stored run that cannot be decoded (damaged JSON, a recipe setting this version does not know…)."""

    id: int
    created_at: str
    reason: str


@dataclass(frozen=True)
class UnreadableBenchmark:
    """A stored benchmark that cannot be decoded."""

    id: int
    created_at: str
    reason: str


@dataclass(frozen=True)
class BenchVariant:
    """One timed model of a benchmark: its variant ``id`` (as in ``LatencySummary.variant``), display
    ``name``, file ``path``, History ``run_id`` when it is a stored run, and the ``runtime`` that times it
    ("onnxruntime", or "openvino" for the optional extra)."""

    id: str = ""
    name: str = ""
    path: str = ""
    run_id: int | None = None
    runtime: str = "onnxruntime"

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        return _variant_plain(data)


def _variant_plain(v: Any) -> Any:
    """A run id, or a mapping with the schema-1 spellings (``label``, ``model_path``), as BenchVariant data."""
    if isinstance(v, int) and not isinstance(v, bool):
        return {"run_id": v}
    if isinstance(v, Mapping):
        d = dict(v)
        if "label" in d and "name" not in d:
            d["name"] = d.pop("label")
        if "model_path" in d and "path" not in d:
            d["path"] = d.pop("model_path")
        if isinstance(d.get("path"), Path):
            d["path"] = str(d["path"])
        return d
    return v


@dataclass
class BenchmarkRecord:
    """One stored benchmark: what was timed, how, and the statistics of every variant × batch size."""

    id: int | None
    created_at: str
    variants: list[BenchVariant]
    config: BenchConfig
    summaries: list[LatencySummary] = field(default_factory=list)
    origin: str = ""  # "app" or "cli": where the benchmark was started ("" when unknown)
    machine: Machine | None = None  # where it was timed (None: recorded before machines were stored)

    def names(self) -> dict[str, str]:
        """Variant id → display name."""
        return {v.id: v.name or v.id for v in self.variants if v.id}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OrtlabError):
        return exc.message
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON ({exc.msg} at line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


class History:
    """Every optimization run (one row per artifact) and every benchmark, kept in ``db_path``."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.recovered: HistoryRecovered | None = None
        # the one line saying why the history can be read but not changed (its disk is full), else None
        self.read_only: str | None = None
        unusable = _unusable(self.db_path)
        if unusable is not None:  # a directory, a special file, one this user may not open: set aside, rebuilt
            self._recover(unusable, tag="broken")
            return
        if not self.db_path.exists():  # private to its owner, whatever the umask (SQLite's -wal/-shm follow)
            os.close(os.open(self.db_path, os.O_CREAT | os.O_WRONLY, 0o600))
        elif self.db_path.stat().st_mode & 0o077 and self.db_path.stat().st_uid == getattr(os, "getuid", int)():
            os.chmod(self.db_path, 0o600)
        try:
            self._open()
        except HistoryError:
            raise
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise HistoryError(busy_message(self.db_path)) from None
            if not _damaged(exc) and self._disk_full(exc):  # readable, not writable, until space is freed
                self.read_only = full_disk_message(self.db_path.parent)
                return
            if not _damaged(exc):  # disk I/O…: nothing to rebuild, try again later
                raise HistoryError(f"Cannot open the history database {self.db_path.name}: {exc}.") from None
            self._recover(one_line(exc))

    def _disk_full(self, exc: BaseException) -> bool:
        """Whether ``exc`` (SQLite says only "disk I/O error" when it cannot make its -shm file) met a full disk."""
        free = free_bytes(self.db_path.parent)
        return is_disk_full(exc) or (free is not None and free < FULL_BELOW_BYTES)

    def _recover(self, reason: str, tag: str = "corrupt") -> None:
        """Move the damaged (or unusable: ``tag`` "broken") database aside (``history.sqlite.<tag>-<timestamp>``)
        and rebuild it from the ``artifact.json`` files under the workspace's ``artifacts/``; remember the notice.
        ``reason`` says what is wrong with it."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        moved: Path | None = self.db_path.with_name(f"{self.db_path.name}.{tag}-{stamp}")
        n = 1
        while moved is not None and moved.exists():
            n += 1
            moved = self.db_path.with_name(f"{self.db_path.name}.{tag}-{stamp}-{n}")
        assert moved is not None
        try:
            os.replace(self.db_path, moved)
        except FileNotFoundError:  # another process moved it aside first
            moved = None
        except OSError as exc:
            raise HistoryError(f"The history database {self.db_path.name} cannot be used ({reason}) and could not "
                               f"be moved aside ({exc.strerror or exc}): move or remove {self.db_path}.") from None
        for suffix in ("-wal", "-shm", "-journal"):
            side = Path(f"{self.db_path}{suffix}")
            if side.exists():
                if moved is not None:
                    os.replace(side, Path(f"{moved}{suffix}"))
                else:
                    side.unlink(missing_ok=True)
        os.close(os.open(self.db_path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            restored = self._open(rebuild=True)
        except sqlite3.DatabaseError as again:
            raise HistoryError(f"Cannot open the history database: {again}.") from None
        if moved is None:
            return
        self.recovered = HistoryRecovered(
            f"The run history could not be read ({reason}); it was moved aside to {moved.name} and "
            f"rebuilt from the {restored} run{'s' if restored != 1 else ''} stored in the workspace (benchmarks "
            "and runs written outside the workspace are not in the rebuilt history).", moved, restored)
        with _NOTICES_LOCK:
            _NOTICES.append(self.recovered)

    def _open(self, rebuild: bool = False) -> int:
        """Create schema 2, or migrate schema 1 to it, in one transaction (other processes wait). With
        ``rebuild``, a newly created database is filled from the workspace's artifact folders; returns how
        many runs that restored."""
        restored = 0
        with closing(sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as conn:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            _quick_check(conn)
            if _user_version(conn) == SCHEMA_VERSION:
                _probe(conn)
                return 0
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = _user_version(conn)  # another process may have done it while we waited
                if version > SCHEMA_VERSION:
                    raise HistoryError(f"The history database {self.db_path} has schema version {version}; this "
                                       f"ortlab knows up to {SCHEMA_VERSION}. Update ortlab or use another "
                                       f"workspace ($ORTLAB_HOME).")
                if version < SCHEMA_VERSION:
                    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                    if "runs" in tables or "benchmarks" in tables:
                        _migrate_v1(conn, tables)
                    else:
                        for stmt in _SCHEMA:
                            conn.execute(stmt)
                        if rebuild:
                            restored = _rebuild(conn, self.db_path.parent / "artifacts")
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                _probe(conn)
                conn.execute("COMMIT")
            except BaseException:  # any failure or interrupt rolls the migration back, then re-raised
                # an interrupt just after COMMIT finds no transaction: rolling back would replace it with an error
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return restored

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_S)) as conn:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            with conn:  # one transaction: commit on success, roll back on error
                yield conn

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read from: the usual one, or, when the disk is full (:attr:`read_only`), one that
        writes nothing (``immutable``: no -shm or -wal file made; what a writer left unmerged in the -wal, if
        any, is not seen)."""
        if self.read_only is None:
            with self._connect() as conn:
                yield conn
            return
        uri = f"file:{quote(str(self.db_path.resolve()))}?mode=ro&immutable=1"
        try:
            with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
                conn.row_factory = sqlite3.Row
                yield conn
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.read_only} (The history cannot be read either: {one_line(exc)}.)") from None

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A connection to write with; a write that meets a full disk is :class:`HistoryFull`'s one line."""
        try:
            with self._connect() as conn:
                yield conn
        except sqlite3.DatabaseError as exc:
            full = self._writing_failed(exc)
            if full is None:
                raise
            raise full from None

    def _writing_failed(self, exc: sqlite3.DatabaseError) -> HistoryFull | None:
        """The one line for a write that met a full disk, else None."""
        if _damaged(exc) or _busy(exc) or not self._disk_full(exc):
            return None
        return HistoryFull(full_disk_message(self.db_path.parent))

    # -- runs ------------------------------------------------------------------------------------------
    def add(self, artifact: Artifact) -> int:
        """Store an :class:`ortlab.runs.artifact.Artifact`; set and return its ``run_id``. A database found damaged
        here is moved aside and rebuilt (as at open) and the run stored in the rebuilt one."""
        try:
            return self._add(artifact)
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise HistoryError(busy_message(self.db_path)) from None
            full = self._writing_failed(exc)
            if full is not None:
                raise full from None
            if not _damaged(exc):
                raise HistoryError(f"Cannot write to the history database {self.db_path.name}: {one_line(exc)}.") \
                    from None
            self._recover(one_line(exc))
            return self._add(artifact)

    def _add(self, artifact: Artifact) -> int:
        row = _run_row(artifact)
        with self._connect() as conn:
            cur = conn.execute("INSERT INTO runs (created_at, kind, source_name, source_sha256, sha256, "
                               "artifact_json) VALUES (?, ?, ?, ?, ?, ?)", row)
            return int(cur.lastrowid or 0)

    def update(self, artifact: Artifact) -> bool:
        """Store ``artifact`` again under its ``run_id`` (what was learned after it was recorded, e.g. its speed
        against the source). Returns whether a row was changed."""
        if artifact.run_id is None:
            return False
        row = _run_row(artifact)
        with self._connect() as conn:
            return conn.execute("UPDATE runs SET created_at = ?, kind = ?, source_name = ?, source_sha256 = ?, "
                                "sha256 = ?, artifact_json = ? WHERE id = ?", (*row, int(artifact.run_id))).rowcount > 0

    def _own_folder(self, model_path) -> str | None:
        """The run folder of ``model_path`` when it is one of this workspace's (``artifacts/<run>/``), else None."""
        try:
            folder = Path(model_path).expanduser().resolve().parent
            artifacts = (self.db_path.parent / "artifacts").resolve()
        except (OSError, RuntimeError):
            return None
        return str(folder) if folder.parent == artifacts else None

    def find_folder(self, run_dir, after: int = 0) -> int | None:
        """The id of the newest run after run ``after`` whose model lies in the folder ``run_dir``, or None."""
        with self._reading() as conn:
            return _row_for_folder(conn, str(Path(run_dir).resolve()), after)

    def reindex(self, skip=None) -> builtins.list[int]:
        """Store every run folder of the workspace that has a complete ``artifact.json``, a model whose sha256
        matches it, and no row (a run whose recording failed or was cut short: the folder is the source of truth),
        and every run into OUT.onnx that finished while the history was busy (:func:`defer_run`); ``skip(folder)``
        leaves out folders still being written. Returns the new run ids."""
        if self.read_only is not None:  # nothing can be added until space is freed
            return []
        added = self._add_deferred()
        artifacts = self.db_path.parent / "artifacts"
        if not artifacts.is_dir():
            return added
        with self._connect() as conn:
            known = {Path(p).parent for (p,) in conn.execute(
                "SELECT json_extract(artifact_json, '$.model_path') FROM runs WHERE problem IS NULL")
                if isinstance(p, str)}
        for path in sorted(artifacts.glob(f"*/{ARTIFACT_FILE}")):
            folder = path.parent
            if folder in known or folder.resolve() in known or (skip is not None and skip(folder)):
                continue
            try:
                artifact = load_artifact(folder)
            except (OrtlabError, OSError):
                continue
            if self._own_folder(artifact.model_path) != str(folder.resolve()):
                continue
            try:
                if sha256_file(artifact.model_path) != artifact.sha256:
                    continue  # not the model its artifact.json describes: not a result to list
            except OSError:
                continue
            run_id = self.add(artifact)
            added.append(run_id)
            try:
                replace(artifact, run_id=run_id).save()  # with its run id
            except OSError:
                pass
        return added

    def _add_deferred(self) -> builtins.list[int]:
        """Store the runs :func:`defer_run` kept while the history was busy, when their model is still the one
        they made (same sha256); a record whose model is gone or was replaced since is dropped."""
        added: builtins.list[int] = []
        pending = self.db_path.parent / PENDING_DIR
        for path in sorted(pending.glob("*.json")) if pending.is_dir() else []:
            try:
                artifact = Artifact.from_dict(loads(path.read_text(encoding="utf-8")))
                current = sha256_file(artifact.model_path) == artifact.sha256
            except (OrtlabError, OSError, ValueError, TypeError, KeyError):
                current = False
            if current:
                added.append(self.add(artifact))
            path.unlink(missing_ok=True)
        return added

    def list(self, limit: int | None = None) -> list[Artifact | UnreadableRun]:
        """All runs, newest first, as typed artifacts (``run_id`` set); rows that cannot be decoded come as
        :class:`UnreadableRun`."""
        return [_run(r) for r in self._newest("runs", limit)]

    def get(self, run_id: int) -> Artifact:
        """One run by id; ``HistoryError`` when there is none or it cannot be read."""
        with self._reading() as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
        if row is None:
            raise HistoryError(f"No run with id {run_id} in the history.")
        run = _run(row)
        if isinstance(run, UnreadableRun):
            raise HistoryError(f"Run {run_id} in the history cannot be read: {run.reason}")
        return run

    def delete(self, run_id: int) -> bool:
        """Forget a run (its files stay where they are). Returns whether a row was removed. On a full disk
        (SQLite needs room for its -wal and -shm files) ``HistoryError`` says so: free space first (deleting a
        run's folder does, see ``Workspace.delete_run``)."""
        with self._writing() as conn:
            removed = conn.execute("DELETE FROM runs WHERE id = ?", (int(run_id),)).rowcount > 0
        self.read_only = None  # it could write: the disk has room again
        return removed

    # -- benchmarks ------------------------------------------------------------------------------------
    def add_benchmark(self, variants: Sequence[Any], config: Any, summaries: Sequence[Any],
                      created_at: str | None = None, *, origin: str = "", machine: Machine | None = None) -> int:
        """Store one benchmark: ``variants`` (:class:`BenchVariant`, run ids, or mappings with ``id``, ``name``,
        ``path``, ``run_id``), the ``BenchConfig``, the ``LatencySummary`` list and the :class:`Machine` that timed
        them. Returns the benchmark id."""
        record = BenchmarkRecord(
            id=None, created_at=created_at or utc_timestamp(),
            variants=[v if isinstance(v, BenchVariant) else from_plain(BenchVariant, _variant_plain(v))
                      for v in variants],
            config=config if isinstance(config, BenchConfig) else BenchConfig.from_dict(config),
            summaries=[s if isinstance(s, LatencySummary) else LatencySummary.from_dict(s) for s in summaries],
            origin=origin, machine=machine,
        )
        with self._writing() as conn:
            cur = conn.execute("INSERT INTO benchmarks (created_at, benchmark_json) VALUES (?, ?)",
                               (record.created_at, dumps(_benchmark_plain(record))))
            return int(cur.lastrowid or 0)

    def list_benchmarks(self, limit: int | None = None) -> builtins.list[BenchmarkRecord | UnreadableBenchmark]:
        """All benchmarks, newest first; rows that cannot be decoded come as :class:`UnreadableBenchmark`."""
        return [_benchmark(r) for r in self._newest("benchmarks", limit)]

    def delete_benchmark(self, bench_id: int) -> bool:
        """Forget a benchmark, and delete its ORT profiles kept in the workspace (``profiles/``). Returns whether
        a row was removed."""
        with self._writing() as conn:
            row = conn.execute("SELECT * FROM benchmarks WHERE id = ?", (int(bench_id),)).fetchone()
            removed = conn.execute("DELETE FROM benchmarks WHERE id = ?", (int(bench_id),)).rowcount > 0
        record = _benchmark(row) if row is not None else None
        if isinstance(record, BenchmarkRecord):
            _remove_profiles(self.db_path.parent / "profiles", record.summaries)
        return removed

    def _newest(self, table: str, limit: int | None) -> builtins.list[sqlite3.Row]:
        sql = f"SELECT * FROM {table} ORDER BY id DESC"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        with self._reading() as conn:
            return conn.execute(sql, params).fetchall()


# -- rows ↔ typed records ---------------------------------------------------------------------------------


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _unusable(path: Path) -> str | None:
    """What makes ``path`` unusable as the history database before SQLite tries it (it is a directory, not a
    regular file, or this user may not read and write it), or None (it is a usable file, or there is none)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be reached: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return "it is a directory, not a database file"
    if not stat.S_ISREG(mode):
        return "it is not a regular file"
    if not os.access(path, os.R_OK | os.W_OK):
        return "this user may not read and write it: permission denied"
    return None


FULL_BELOW_BYTES = 1 << 20  # free bytes under which a history that cannot be opened is taken to be on a full disk


def full_disk_message(folder: Path) -> str:
    """The one line for a history on a full disk: it can be read, not changed, and what frees space."""
    free = free_bytes(folder)
    return (f"The workspace disk is full ({format_bytes(free) if free is not None else 'no space'} free at {folder}'s "
            "volume): the run history can be read but not changed. Delete runs on the app's History page (each "
            "deletes its files) or remove other files on that disk.")


def busy_message(db_path: Path) -> str:
    """What a run hears when another process held the history locked longer than :data:`BUSY_TIMEOUT_S`."""
    return (f"The history database {Path(db_path).name} was busy: another process held it locked for more than "
            f"{BUSY_TIMEOUT_S:g} s.")


def newest_run_id(db_path: str | Path) -> int | None:
    """The highest run id the history at ``db_path`` has given out (0: none; ids are never given out again), read
    without changing anything (a damaged history is left for the run that records to recover); None when it cannot
    be read."""
    path = Path(db_path)
    if not path.is_file():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True,
                                     timeout=BUSY_TIMEOUT_S)) as conn:
            return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0])
    except (sqlite3.Error, OSError, ValueError, TypeError):
        return None


def defer_run(db_path: str | Path, artifact: Artifact) -> Path:
    """Keep a finished run that could not be recorded (the history was busy) beside the history database, to be
    stored by the next :meth:`History.reindex` (every start of the app or of a CLI command); returns the file."""
    pending = Path(db_path).parent / PENDING_DIR
    pending.mkdir(mode=0o700, parents=True, exist_ok=True)
    plain = {**artifact.to_dict(), "run_id": None, "created_at": artifact.created_at or utc_timestamp()}
    path = pending / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(plain), encoding="utf-8")
    os.replace(tmp, path)
    return path


def record_run(artifact: Artifact, db: Path | None, run_dir: Path, *, into_file: bool) -> Artifact:
    """Save the artifact (unless the run went ``into_file``, an OUT.onnx), then add its row to the history ``db``
    (last: the folder is the source of truth, the history its index) and mark ``run_dir`` as recorded; the artifact
    with its run id. A history that cannot be written leaves a note, not a failure; no ``db``: not recorded."""
    if db is None:
        return artifact
    if not into_file:
        artifact.save()  # complete, with its recipe, before the row that points at it
    try:
        hist = History(db)
        artifact = replace(artifact, run_id=hist.add(artifact))
        if hist.recovered is not None:  # found damaged while recording: the person hears it with the run
            artifact = replace(artifact, notes=[*artifact.notes, hist.recovered.message])
    except (OrtlabError, OSError, sqlite3.Error) as exc:
        return replace(artifact, notes=[*artifact.notes, _not_recorded(artifact, db, exc, into_file=into_file)])
    write_text_atomic(run_dir / RECORDED_FILE, str(artifact.run_id))
    if not into_file:
        artifact.save()  # again, now with its run_id
    return artifact


def _not_recorded(artifact: Artifact, db: Path, exc: BaseException, *, into_file: bool) -> str:
    """The note of a finished run the history could not take: why, where the result is, and when it will be
    listed: a workspace folder is indexed at the next start; a run into OUT.onnx is kept for it beside the
    history (:func:`defer_run`)."""
    later = " and will be listed when ortlab next starts (the app, or any ortlab command that uses the workspace)"
    if into_file:
        try:
            defer_run(db, artifact)
        except OSError:
            later = ""
    return f"Not recorded in the history yet: {one_line(exc).rstrip('.')}. The result is kept{later}."


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says another connection held the database locked past the wait."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the file is not a usable history (corrupt, not SQLite, tables or columns of an
    unknown schema) rather than that it could not be reached right now (locked, I/O)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return True
    text = str(exc).lower()
    return any(k in text for k in ("no such table", "no such column", "has no column", "malformed",
                                   "not a database"))


def _quick_check(conn: sqlite3.Connection) -> None:
    """Raise ``sqlite3.DatabaseError`` ("malformed") when SQLite's ``quick_check`` finds damaged pages (a
    header can be intact while later pages are not)."""
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if not rows or rows[0][0] != "ok":
        detail = "; ".join(str(r[0]) for r in rows[:3])
        raise sqlite3.DatabaseError(f"database disk image is malformed ({detail})")


def _row_for_folder(conn: sqlite3.Connection, folder: str, after: int = 0) -> int | None:
    for run_id, path in conn.execute("SELECT id, json_extract(artifact_json, '$.model_path') FROM runs "
                                     "WHERE problem IS NULL AND id > ? ORDER BY id DESC", (after,)):
        if isinstance(path, str) and str(Path(path).parent) == folder:
            return int(run_id)
    return None


def _probe(conn: sqlite3.Connection) -> None:
    """Raise ``sqlite3.DatabaseError`` when the schema-2 tables or columns are not there."""
    conn.execute("SELECT id, created_at, kind, source_name, source_sha256, sha256, artifact_json, problem "
                 "FROM runs LIMIT 0")
    conn.execute("SELECT id, created_at, benchmark_json, problem FROM benchmarks LIMIT 0")


def _run_row(artifact: Artifact) -> tuple:
    created = artifact.created_at or utc_timestamp()
    plain = artifact.to_dict()
    plain.pop("run_id", None)
    plain["created_at"] = created
    return (created, artifact.kind, artifact.source_name, artifact.source_sha256, artifact.sha256, dumps(plain))


def _rebuild(conn: sqlite3.Connection, artifacts_dir: Path) -> int:
    """Insert every readable ``artifacts/*/artifact.json`` as a run (with its own run id when it has one and
    that id is free), oldest first; returns how many."""

    found = []
    for path in sorted(artifacts_dir.glob(f"*/{ARTIFACT_FILE}")) if artifacts_dir.is_dir() else []:
        if (path.parent / RUNNING_FILE).exists() and owner_alive(path.parent):
            continue  # a run still going (the one recording now, when its child rebuilds): it adds its own row
        try:
            found.append(load_artifact(path.parent))
        except (OrtlabError, OSError):
            continue
    found.sort(key=lambda a: (a.run_id is None, a.run_id or 0, a.created_at))
    used: set[int] = set()
    for a in found:
        row = _run_row(a)
        if a.run_id is not None and a.run_id not in used:
            conn.execute("INSERT INTO runs (id, created_at, kind, source_name, source_sha256, sha256, artifact_json) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", (a.run_id, *row))
            used.add(a.run_id)
        else:
            conn.execute("INSERT INTO runs (created_at, kind, source_name, source_sha256, sha256, artifact_json) "
                         "VALUES (?, ?, ?, ?, ?, ?)", row)
    return len(found)


def _run(row: sqlite3.Row) -> Artifact | UnreadableRun:
    if row["problem"]:
        return UnreadableRun(int(row["id"]), row["created_at"], row["problem"])
    try:
        data = loads(row["artifact_json"])
        if not isinstance(data, dict):
            raise ValueError("the stored run is not a JSON object")
        return Artifact.from_dict({**data, "run_id": int(row["id"])})
    except _DECODE_ERRORS as exc:
        return UnreadableRun(int(row["id"]), row["created_at"], _reason(exc))


def _benchmark_plain(record: BenchmarkRecord) -> dict[str, Any]:
    return {"schema_version": BENCHMARK_SCHEMA_VERSION, "variants": to_plain(record.variants),
            "config": to_plain(record.config), "summaries": to_plain(record.summaries), "origin": record.origin,
            "machine": to_plain(record.machine)}


def _remove_profiles(root: Path, summaries: Sequence[LatencySummary]) -> None:
    """Delete the benchmark's profile folder (``root/<id>/``) named by the profile files of ``summaries``."""
    import shutil

    root = root.resolve()
    for s in summaries:
        if not s.profile_path:
            continue
        p = Path(s.profile_path).resolve()
        if root not in p.parents:
            continue  # a folder the user chose (ortlab bench --profile DIR) is theirs
        shutil.rmtree(root / p.relative_to(root).parts[0], ignore_errors=True)


def _benchmark(row: sqlite3.Row) -> BenchmarkRecord | UnreadableBenchmark:
    if row["problem"]:
        return UnreadableBenchmark(int(row["id"]), row["created_at"], row["problem"])
    try:
        data = loads(row["benchmark_json"])
        if not isinstance(data, dict):
            raise ValueError("the stored benchmark is not a JSON object")
        data = dict(data)
        version = data.pop("schema_version", 1)
        if not isinstance(version, int) or version > BENCHMARK_SCHEMA_VERSION:
            raise ValueError(f"written with schema version {version!r}, newer than this ortlab reads")
        return from_plain(BenchmarkRecord, {**data, "id": int(row["id"]), "created_at": row["created_at"]})
    except _DECODE_ERRORS as exc:
        return UnreadableBenchmark(int(row["id"]), row["created_at"], _reason(exc))


# -- migration from schema 1 ------------------------------------------------------------------------------

_V1_RUN_JSON = {"recipe_json": "recipe", "metrics_json": "evaluation", "timings_json": "timings",
                "warnings_json": "warnings", "providers_json": "providers", "notes_json": "notes"}
_V1_BENCH_JSON = {"variants_json": "variants", "config_json": "config", "summary_json": "summaries"}


def _v1_plain(row: sqlite3.Row, json_cols: Mapping[str, str], plain_cols: Sequence[str]) -> tuple[dict, str | None]:
    """A schema-1 row as the plain data of schema 2 (not checked against the types: a row that does not fit
    is found when read). When a JSON column cannot be decoded, the row's columns are kept as they were and
    the problem is returned."""
    out: dict[str, Any] = {"schema_version": 1}
    for col in plain_cols:
        out[col] = row[col]
    for col, key in json_cols.items():
        raw = row[col]
        try:
            out[key] = json.loads(raw) if raw is not None else None
        except (TypeError, ValueError) as exc:
            problem = f"{col} of the schema-1 row is not valid JSON ({exc})"
            return {"schema_version": 1, "v1_row": {k: row[k] for k in row.keys()}}, problem  # noqa: SIM118
    return out, None


def _migrate_v1(conn: sqlite3.Connection, tables: set[str]) -> None:
    """Rewrite the schema-1 ``runs`` and ``benchmarks`` tables as schema 2 (inside the caller's transaction)."""
    conn.row_factory = sqlite3.Row
    seq: dict[str, int] = {}
    if "sqlite_sequence" in tables:
        seq = {r["name"]: int(r["seq"] or 0) for r in conn.execute("SELECT name, seq FROM sqlite_sequence")}
    for name in ("runs", "benchmarks"):
        if name in tables:
            conn.execute(f"ALTER TABLE {name} RENAME TO {name}_v1")
    conn.execute("DROP INDEX IF EXISTS runs_created")
    for stmt in _SCHEMA:
        conn.execute(stmt)
    if "runs" in tables:
        for row in conn.execute("SELECT * FROM runs_v1 ORDER BY id").fetchall():
            plain, problem = _v1_plain(row, _V1_RUN_JSON, ("created_at", "source_path", "source_sha256",
                                                           "model_path", "sha256", "size_bytes",
                                                           "source_size_bytes"))
            if problem is None:
                plain["random_data"] = bool(row["random_data"])
                if plain.get("notes") is None:
                    plain["notes"] = []
            conn.execute("INSERT INTO runs (id, created_at, kind, source_name, source_sha256, sha256, artifact_json, "
                         "problem) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (row["id"], row["created_at"], row["kind"], row["source_name"], row["source_sha256"],
                          row["sha256"], dumps(plain), problem))
        conn.execute("DROP TABLE runs_v1")
    if "benchmarks" in tables:
        for row in conn.execute("SELECT * FROM benchmarks_v1 ORDER BY id").fetchall():
            plain, problem = _v1_plain(row, _V1_BENCH_JSON, ())
            conn.execute("INSERT INTO benchmarks (id, created_at, benchmark_json, problem) VALUES (?, ?, ?, ?)",
                         (row["id"], row["created_at"], dumps(plain), problem))
        conn.execute("DROP TABLE benchmarks_v1")
    # AUTOINCREMENT goes on from the old tables' counters: ids of deleted runs are not given out again
    conn.execute("DELETE FROM sqlite_sequence WHERE name IN ('runs', 'benchmarks')")
    for name in ("runs", "benchmarks"):
        top = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {name}").fetchone()[0]
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, max(int(top), seq.get(name, 0))))
