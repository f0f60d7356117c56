"""Permission faults met for real: the CLI runs as an unprivileged user (``setpriv``/``runuser`` from root) against
a history file or a workspace that user may not read. Root ignores permissions, so only this makes them real.
Each case says what is wrong and what to do in one line, without a traceback; the run goes on or says why not."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ortlab.runs.artifact import Artifact
from ortlab.runs.history import History
from tests.support.models import conv_bn_model

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _drop_command() -> tuple[list[str] | None, str]:
    """The command prefix that runs a program as ``nobody``, or (None, why there is none)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "needs root, to make files another user owns and to run the CLI as an unprivileged user"
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], ""
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"], ""
    return None, "neither setpriv nor runuser is installed, so the CLI cannot run as an unprivileged user"


def _env(home: Path, scratch: Path) -> dict[str, str]:
    paths = dict.fromkeys([str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    return {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
            "ORTLAB_HOME": str(home), "PYTHONPATH": os.pathsep.join(paths), "ORT_DISABLE_TELEMETRY": "1"}


def _interpreter(drop: list[str], scratch: Path) -> str | None:
    """An interpreter ``nobody`` can start, and that can start itself again (the run's child), with this
    checkout's packages: this one, or the system's of the same version (a virtual environment under /root is
    out of that user's reach)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    probe = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import onnxruntime, ortlab'], check=True)"
    for candidate in (sys.executable, f"/usr/bin/python{version}"):
        if not Path(candidate).exists():
            continue
        done = subprocess.run([*drop, candidate, "-c", probe], env=_env(scratch, scratch), cwd=scratch,
                              capture_output=True, timeout=120)
        if done.returncode == 0:
            return candidate
    return None


DROP, WHY_NOT = _drop_command()


@pytest.fixture(scope="module")
def place() -> Iterator[tuple[Path, str, Path]]:
    """(a folder everybody may enter, the interpreter, a model in it that ``nobody`` can read)."""
    if DROP is None:
        pytest.skip(WHY_NOT)
    top = Path(tempfile.mkdtemp(prefix="ortlab-unprivileged-"))
    try:
        top.chmod(0o755)
        scratch = top / "scratch"
        scratch.mkdir(mode=0o777)
        scratch.chmod(0o777)
        python = _interpreter(DROP, scratch)
        if python is None:
            pytest.skip("no Python with this checkout's packages that an unprivileged user may start")
        model = conv_bn_model(top / "conv.onnx")
        model.chmod(0o644)
        yield top, python, model
    finally:
        shutil.rmtree(top, ignore_errors=True)


def run_as_nobody(place, home: Path, out: Path) -> subprocess.CompletedProcess:
    top, python, model = place
    assert DROP is not None
    return subprocess.run([*DROP, python, "-m", "ortlab", "optimize", str(model), str(out), "--opt-level", "basic"],
                          env=_env(home, top / "scratch"), cwd=top / "scratch", capture_output=True, text=True,
                          timeout=300)


def roots_history(home: Path) -> Path:
    """A history.sqlite in ``home`` that only root may read (0600, owned by root), with one table in it."""
    db = home / "history.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    db.chmod(0o600)
    return db


def one_line_no_traceback(err: str) -> None:
    assert "Traceback" not in err and "unexpected" not in err.lower(), err


def test_a_history_of_another_owner_is_moved_aside_and_the_run_recorded(place, tmp_path):
    top, _, _ = place
    home = top / "home-own"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    roots_history(home)
    out = top / "scratch" / "own.onnx"
    done = run_as_nobody(place, home, out)
    assert done.returncode == 0, done.stderr
    one_line_no_traceback(done.stderr)
    assert ("The run history could not be read (this user may not read and write it: permission denied); it was "
            "moved aside to history.sqlite.broken-") in done.stderr
    assert out.is_file() and out.stat().st_uid == NOBODY
    (moved,) = home.glob("history.sqlite.broken-*")
    assert moved.stat().st_uid == 0  # root's file, set aside untouched
    (row,) = [r for r in History(home / "history.sqlite").list() if isinstance(r, Artifact)]
    assert Path(row.model_path) == out


def test_a_workspace_this_user_may_not_read_is_named_with_what_to_do(place):
    top, _, _ = place
    home = top / "home-roots"
    home.mkdir(mode=0o700)
    home.chmod(0o700)
    out = top / "scratch" / "refused.onnx"
    done = run_as_nobody(place, home, out)
    assert done.returncode == 1, done.stdout
    one_line_no_traceback(done.stderr)
    assert done.stderr.strip().splitlines()[-1] == (
        f"ortlab: error: The workspace {home} cannot be used: this user (nobody) may not read and write it. Set "
        "$ORTLAB_HOME to a folder this user owns, or give this user access to that one.")
    assert not out.exists() and list(home.iterdir()) == []


def test_a_history_that_cannot_be_moved_aside_is_named_and_the_run_goes_on(place):
    """A shared workspace folder (world-writable, sticky, like /tmp) holding root's history: the unprivileged user
    may neither read it nor move it aside. The run is made, kept, and listed once the history is usable."""
    top, _, _ = place
    home = top / "home-sticky"
    home.mkdir()
    home.chmod(0o1777)
    db = roots_history(home)
    out = top / "scratch" / "sticky.onnx"
    done = run_as_nobody(place, home, out)
    assert done.returncode == 0, done.stderr
    one_line_no_traceback(done.stderr)
    assert (f"ortlab: warning: The history database history.sqlite cannot be used (this user may not read and write "
            f"it: permission denied) and could not be moved aside (Operation not permitted): move or remove {db}."
            ) in done.stderr
    assert out.is_file()
    text = " ".join(done.stdout.split())
    assert "Not recorded in the history yet" in text and "will be listed when ortlab next starts" in text
    assert "history not recorded yet" in text
    assert db.stat().st_uid == 0 and len(list((home / "pending").glob("*.json"))) == 1


def nobody_runs(place, home: Path, *argv) -> subprocess.CompletedProcess:
    top, python, _ = place
    assert DROP is not None
    return subprocess.run([*DROP, python, "-m", "ortlab", *map(str, argv)], env=_env(home, top / "scratch"),
                          cwd=top / "scratch", capture_output=True, text=True, timeout=300)


def test_an_out_in_a_folder_this_user_may_not_write_is_named_before_any_work(place):
    """It was "unexpected PermissionError … .ortlab-run-…" after the model and the data had been loaded."""
    top, _, model = place
    home = top / "home-ro-out"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    locked = top / "locked"
    locked.mkdir(mode=0o755)
    for out, flag in ((locked / "o.onnx", "OUT"), (locked / "folder", "OUT"), (locked / "new" / "o.onnx", "OUT")):
        done = nobody_runs(place, home, "optimize", model, out, "--opt-level", "basic")
        assert done.returncode == 2, done.stderr
        one_line_no_traceback(done.stderr)
        assert done.stderr.strip().splitlines()[-1] == (
            f"ortlab: error: {flag} {out} cannot be written: this user (nobody) may not create files in {locked}. "
            "Give an OUT in a folder you can write to.")
        assert "preprocessing" not in done.stderr and "using sample" not in done.stderr  # before any work
    assert list(locked.iterdir()) == []


def test_a_model_of_another_user_that_is_0600_is_named_with_what_to_do(place):
    """ONNX Runtime said "Load model from … failed:system error number 13", other commands "unexpected
    PermissionError"."""
    top, _, model = place
    home = top / "home-secret"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    secret = top / "secret.onnx"
    secret.write_bytes(model.read_bytes())
    secret.chmod(0o600)
    for argv, what in ((["inspect", secret], "Model"), (["compare", secret, model], "Reference model"),
                       (["optimize", secret, top / "scratch" / "s.onnx"], "Model"),
                       (["bench", secret, "--runs", "2"], "Model")):
        done = nobody_runs(place, home, *argv)
        assert done.returncode == 2, done.stderr
        one_line_no_traceback(done.stderr)
        assert done.stderr.strip().splitlines()[-1] == (
            f"ortlab: error: {what} {secret} cannot be read: this user (nobody) may not read it. Give a copy this "
            "user can read, or run as a user who may.")
