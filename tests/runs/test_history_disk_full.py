"""A full disk leaves the history readable and a run deletable, with one line that says what frees space.

SQLite said only "disk I/O error" (it cannot make its -shm file on a full disk), so ``ortlab history`` and ``ortlab
bench`` stopped with "Cannot open the history database: disk I/O error", and the advice to delete runs on History
could not be followed. The real case runs on a small tmpfs filled to the last byte (root, where ``mount`` is
allowed, as in CI); the same faults are also made at the SQLite boundary, so that they are tested everywhere."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ortlab.runs import history as history_module
from ortlab.runs.history import History, HistoryFull
from ortlab.runs.run_recovery import startup
from ortlab.runs.workspace import Workspace
from tests.runs.test_workspace import stored_runs
from tests.support.models import conv_bn_model

REPO = Path(__file__).resolve().parents[2]


def fill(volume: Path) -> None:
    """Write ``volume`` full, to the last byte it takes."""
    fd = os.open(volume / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert os.statvfs(volume).f_bavail == 0


@pytest.fixture
def full_volume(tmp_path) -> Iterator[Path]:
    """A 4 MB tmpfs mounted for this test (skipped where this user may not mount one)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    volume = tmp_path / "vol"
    volume.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(volume)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], capture_output=True)


def cli(home: Path, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORTLAB_HOME": str(home), "PYTHONPATH": str(REPO), "ORT_DISABLE_TELEMETRY": "1"}
    return subprocess.run([sys.executable, "-m", "ortlab", *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=300)


def one_line(err: str) -> str:
    assert "Traceback" not in err and "disk I/O error" not in err and "unexpected" not in err.lower(), err
    (line,) = [ln for ln in err.splitlines() if "disk is full" in ln]
    return line


def test_on_a_full_tmpfs_history_reads_bench_runs_and_a_delete_frees_the_disk(full_volume, tmp_path):
    ws = Workspace(full_volume / "home")
    runs = stored_runs(ws, 2)
    for r in runs:  # results big enough that deleting one leaves room for SQLite's -wal and -shm
        Path(r.model_path).write_bytes(os.urandom(300_000))
    model = conv_bn_model(tmp_path / "conv.onnx")
    fill(full_volume)

    h = History(ws.db_path)
    assert h.read_only is not None and h.read_only.startswith("The workspace disk is full (0 B free at ")
    assert "can be read but not changed" in h.read_only and "History page" in h.read_only
    assert [r.run_id for r in h.list()] == [2, 1] and h.list_benchmarks() == []
    assert [n.message for n in startup(ws)] == [h.read_only]  # said once, where every command starts

    listed = cli(ws.root, "history")
    assert listed.returncode == 0, listed.stderr
    assert one_line(listed.stderr).startswith("ortlab: warning: The workspace disk is full (0 B free at ")
    assert [ln.split()[0] for ln in listed.stdout.splitlines() if ln.strip()[:1].isdigit()] == ["2", "1"]

    timed = cli(ws.root, "bench", model, "--runs", "3")  # the timings stand; only the record is missing
    assert timed.returncode == 0, timed.stderr
    one_line(timed.stderr)
    assert "history    not recorded: The workspace disk is full" in timed.stdout

    run_id = runs[1].run_id
    assert run_id is not None
    deleted = ws.delete_run(run_id)  # its folder goes first: that frees the room SQLite needs
    assert deleted.freed_bytes >= 300_000 and not Path(runs[1].model_path).parent.exists()
    again = History(ws.db_path)
    assert again.read_only is None and [r.run_id for r in again.list()] == [1]
    assert cli(ws.root, "history").stderr == ""


def test_the_same_faults_made_at_the_sqlite_boundary(tmp_path, monkeypatch):
    """Where no tmpfs can be mounted: SQLite's "disk I/O error" on every connection that would write, and 0 bytes
    free on the workspace's volume."""
    ws = Workspace(tmp_path / "home")
    stored_runs(ws, 2)
    real_connect = sqlite3.connect

    def connect(target, *a, **k):
        if "immutable=1" not in str(target):
            raise sqlite3.OperationalError("disk I/O error")
        return real_connect(target, *a, **k)

    monkeypatch.setattr(history_module.sqlite3, "connect", connect)
    monkeypatch.setattr(history_module, "free_bytes", lambda p: 0)
    h = History(ws.db_path)
    assert h.read_only is not None and h.read_only.startswith("The workspace disk is full (0 B free at ")
    assert [r.run_id for r in h.list()] == [2, 1] and h.get(1).run_id == 1 and h.list_benchmarks() == []
    assert h.reindex() == []  # nothing can be added: not tried
    with pytest.raises(HistoryFull) as err:
        h.delete(1)
    assert err.value.message.startswith("The workspace disk is full (") and "\n" not in err.value.message
    with pytest.raises(HistoryFull):
        h.add_benchmark([], {}, [])
    monkeypatch.setattr(history_module, "free_bytes", lambda p: 10**9)  # an I/O error with room: not a full disk
    with pytest.raises(history_module.HistoryError, match="Cannot open the history database"):
        History(ws.db_path)
