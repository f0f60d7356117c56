"""The one way ortlab starts a child process (:class:`Child`), and what every child shares: its environment, its
memory limit, how it is reaped, how its error comes back as the same typed :class:`OrtlabError`, and the last
line of its log when it dies. :class:`ChildExecutor` (the child-process kind of
:class:`ortlab.runtime.executor.Executor`) runs a typed request in one: the request crosses as its pickle on the
child's command line (:func:`encode`, :func:`decode`).

Recipe runs (:mod:`ortlab.runs.service`), timed benchmark children (:mod:`ortlab.timing`) and isolated model reads
(:mod:`ortlab.model.isolated`) all start their children through these; no other module of ortlab starts a process
(``tests/test_child_runner.py`` checks it).
"""

from __future__ import annotations

import base64
import importlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from multiprocessing import Pipe
from pathlib import Path
from typing import IO, Any, TypeVar

from ortlab import NO_TELEMETRY_ENV
from ortlab.core import errors, limits
from ortlab.core.errors import OrtlabError
from ortlab.runtime.executor import TimeLimit

STOP_GRACE_S = 3.0  # after a stop request or terminate(), how long a child may take before it is killed
_POLL_S = 0.2  # how often a waiting parent looks whether its child is still there
MEMORY_ENV = "ORTLAB_RUN_MEMORY_GB"  # address-space limit (GB) of a recipe's or benchmark's child; 0 = none


def child_env() -> tuple[dict[str, str], str]:
    """The environment and working folder of a child interpreter: it imports this same ortlab, wherever the
    parent was started from, with ONNX Runtime's telemetry off (:data:`ortlab.NO_TELEMETRY_ENV`) before the child
    loads it."""
    env = {**os.environ, **NO_TELEMETRY_ENV}
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env, pkg_parent


def memory_limit_gb(setting: str | None = None) -> float | None:
    """The address-space limit (GB) of each recipe and benchmark child: ``$ORTLAB_RUN_MEMORY_GB`` when set
    (``0`` = no limit), else ``limits.default_run_memory_gb()`` (min(8 GB, 60 % of the machine's RAM)).
    ``setting``: that variable's text to use instead of this process's (a cluster node gets the driver's)."""
    text = (os.environ.get(MEMORY_ENV, "") if setting is None else setting).strip()
    if not text:
        return limits.default_run_memory_gb()
    try:
        value = float(text)
    except ValueError:
        return limits.default_run_memory_gb()
    return value if value > 0 else None


def default_memory_gb(target: Any, setting: str | None = None) -> float | None:
    """The default limit for a run on ``target``: none for a GPU run (CUDA reserves far more address space
    than it uses, so an address-space limit would break it), else :func:`memory_limit_gb` (``setting``: as
    there)."""
    text = (os.environ.get(MEMORY_ENV, "") if setting is None else setting).strip()
    if str(getattr(target, "value", target)).lower() == "gpu" and not text:
        return None
    return memory_limit_gb(text)


def too_big(limit: float | None, what: str = "This run", todo: str = "use smaller inputs or fewer samples") -> str:
    """The message of a child that ran out of memory under ``limit`` GB."""
    if not limit:
        return f"{what} ran out of memory."
    return (f"{what} needed more than {float(limit):g} GB of memory (the limit of its process, "
            f"${MEMORY_ENV}); {todo}, or raise the limit.")


def error_of(kind: str, message: str, step: str | None,
             default: type[OrtlabError] = OrtlabError) -> OrtlabError | errors.Cancelled:
    """The error a child reported (its class name, message and step), as that :class:`OrtlabError` subclass of
    :mod:`ortlab.core.errors` (every error class the engine raises across a process lives there), or
    :class:`~ortlab.core.errors.Cancelled`; ``default`` for a name that is not one, or a subclass that takes other
    arguments."""
    if kind == "Cancelled":
        return errors.Cancelled(message, step=step)
    cls = getattr(errors, str(kind), None)
    if not (isinstance(cls, type) and issubclass(cls, OrtlabError)):
        cls = default
    try:
        return cls(message, step=step)
    except TypeError:  # a subclass with another signature
        return default(message, step=step)


def last_line(log: IO[bytes] | None) -> str:
    """``": <the last non-empty line of the child's log>"`` (at most 300 characters), or ``""``."""
    if log is None:
        return ""
    try:
        log.seek(0)
        lines = [ln.strip() for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except (OSError, ValueError):
        return ""
    return f": {lines[-1][:300]}" if lines else ""


def reap(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> int:
    """Wait for the child ``grace`` seconds; then terminate it, then kill it. Never leaves a zombie."""
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        return proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


_CALL = r"""
import importlib, sys
module, _, name = sys.argv[1].partition(":")
getattr(importlib.import_module(module), name)(*sys.argv[2:-1], int(sys.argv[-1]))
"""


class ParentWatch:
    """In a child: watches its end ``fd`` of the pipe to the parent. Once the parent's end closes before the child
    called :meth:`finish` (the parent died: killed, or its worker force-stopped), ``cleanup`` runs (it removes the
    child's folders and says whether they are gone; it is tried a few times, as the run may still be writing
    there) and the child's process group is killed when the child leads one (else the child): nobody is left to
    report to, and native code that would not hear a softer request stops too."""

    def __init__(self, fd: int, cleanup: Callable[[], bool]) -> None:
        self._fd, self._cleanup = fd, cleanup
        self._lock = threading.Lock()
        self._finishing = self._orphaned = False
        self._thread = threading.Thread(target=self._watch, name="ortlab-parent-watch", daemon=True)
        self._thread.start()

    def _parent_gone(self, timeout_ms: int) -> bool:
        poller = select.poll()
        poller.register(self._fd, 0)  # reports only an error or a hang-up: the reading end is gone
        return bool(poller.poll(timeout_ms))

    def _watch(self) -> None:
        while not self._finishing:
            if self._parent_gone(1000):
                with self._lock:
                    if self._finishing:
                        return
                    self._orphaned = True
                self._end()

    def _end(self) -> None:
        try:
            for _ in range(10):
                if self._cleanup():
                    break
                time.sleep(0.1)
        finally:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    def finish(self) -> None:
        """The child's end (also after an error), before it closes ``fd``: the watch stops. When the parent died
        already, the cleanup runs (or is waited for) and ends the process here."""
        with self._lock:
            orphaned = self._orphaned
            self._finishing = True
        if orphaned:
            self._thread.join()
        elif self._parent_gone(0):
            self._end()


def group_members(pgid: int) -> list[int]:
    """The running (not zombie) processes of process group ``pgid``: read from ``/proc`` where there is one, else
    ``[pgid]`` while the system still knows the group and ``[]`` once it does not."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def dotted_name(function: str | Callable[..., Any]) -> str:
    """``"package.module:function"`` for a function (or class) defined at the top level of a module (a string is
    returned as it is)."""
    if isinstance(function, str):
        return function
    name, module = getattr(function, "__qualname__", ""), getattr(function, "__module__", None)
    if not module or module == "__main__" or not name or "." in name or "<" in name:
        raise ValueError(f"a child can only call a function defined at a module's top level, not {function!r}")
    return f"{module}:{name}"


class Child:
    """A fresh interpreter, never a fork of this process: its stdout and stderr go to a private temporary log, and
    a pipe (its file descriptor is the last argument) carries messages back (``duplex``: both ways). Use it as a
    context manager, or call :meth:`close`.

    Two ways to start one:

    - ``Child(code, *args)`` runs ``python -c code *args fd``.
    - ``Child.run(function, *args)`` imports ``function`` in the child (``"package.module:function"``, or the
      function itself when it is defined at a module's top level) and calls ``function(*args, fd)``: the ``args``
      are strings, ``fd`` the child's end of the pipe as an int (``multiprocessing.connection.Connection(fd)``).

    Keyword options of both: ``duplex``; ``env``, variables set in the child on top of :func:`child_env`;
    ``new_session``, the child leads a session and process group of its own, so that :meth:`terminate`,
    :meth:`kill`, :meth:`stop` and :meth:`finish` reach every process it started, and a Ctrl-C in the terminal
    reaches only this process, which decides what to stop.

    Stopping it: :meth:`terminate` asks (SIGTERM), :meth:`kill` forces (SIGKILL), :meth:`stop` asks and forces
    after a grace period, :meth:`finish` closes the pipe and gives the child a grace period to exit on its own
    before it stops it. Each reaps the child: none leaves a zombie.
    """

    def __init__(self, code: str, *args: str, duplex: bool = False, new_session: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        child_vars, cwd = child_env()
        child_vars.update(env or {})
        self.new_session = new_session
        self.conn, theirs = Pipe(duplex=duplex)
        self.log: IO[bytes] | None = tempfile.TemporaryFile()
        try:
            with ExitStack() as undo:  # our end and the log are closed again only when no process starts
                undo.callback(self.log.close)
                undo.callback(self.conn.close)
                self.proc = subprocess.Popen([sys.executable, "-c", code, *args, str(theirs.fileno())],
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self.log,
                                             stderr=self.log, env=child_vars, cwd=cwd, start_new_session=new_session)
                undo.pop_all()
        finally:
            theirs.close()
        self.returncode: int | None = None

    @classmethod
    def run(cls, function: str | Callable[..., Any], *args: str, duplex: bool = False, new_session: bool = False,
            env: Mapping[str, str] | None = None) -> Child:
        """A child that calls ``function(*args, fd)`` (see the class docstring)."""
        return cls(_CALL, dotted_name(function), *args, duplex=duplex, new_session=new_session, env=env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def receive(self) -> Any:
        """The next message, or None once the child closed its end (it ended or died; also when a process it
        forked still holds its end open after the child itself exited)."""
        try:
            while not self.conn.poll(_POLL_S):
                if self.proc.poll() is not None and not self.conn.poll(0):
                    return None
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def receive_bytes(self) -> bytes | None:
        """The next message as bytes, or None once the child closed its end."""
        try:
            return self.conn.recv_bytes()
        except (EOFError, OSError):
            return None

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM), and with ``new_session`` every process of its group, also when the
        child itself has exited; :meth:`finish` kills them if they do not."""
        if self.running() or self.new_session:
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.running() or self.new_session:
            self._signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """Stop the child now: SIGTERM, then SIGKILL when it has not exited within ``grace`` seconds; return its
        exit code. With ``new_session`` the same reaches every process of its group, also those left running after
        the child itself exited (a grandchild it started). The pipe stays open (what the child sent before it
        stopped can still be received)."""
        if self.returncode is None:
            self.terminate()
            try:
                self.returncode = self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
                self.returncode = self.proc.wait()
        if self.new_session:
            self._stop_group(grace)
        return self.returncode

    def finish(self, grace: float = STOP_GRACE_S) -> int:
        """Close the pipe and reap the child (terminated, then killed, when it does not exit within ``grace``);
        return its exit code. With ``new_session`` processes of its group still running after it exited are
        stopped too. The log stays readable (:meth:`last_line`) until :meth:`close`."""
        self.conn.close()
        if self.returncode is None:
            try:
                self.returncode = self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.returncode = self.stop()
        if self.new_session:
            self._stop_group(grace)
        return self.returncode

    def group_members(self) -> list[int]:
        """The processes still running in the child's process group (``new_session`` only; zombies, which only
        wait to be reaped, are not counted): the child itself while it runs, and what it started."""
        if not self.new_session:
            return []
        return group_members(self.proc.pid)

    def _stop_group(self, grace: float) -> None:
        """After the child exited: SIGTERM what is left of its group, SIGKILL what is still there after ``grace``."""
        if not self.group_members():
            return
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.group_members() and time.monotonic() < deadline:
            time.sleep(_POLL_S / 4)
        if self.group_members():
            self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        if not self.new_session:
            self.proc.send_signal(signum)
            return
        # the group's id is the child's pid; the system does not give that number to another process while any
        # process of the group exists, so the group is signalled also after the child itself was reaped
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def log_text(self) -> str:
        """Everything the child wrote to stdout and stderr so far (``""`` once closed)."""
        if self.log is None:
            return ""
        try:
            self.log.seek(0)
            return self.log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def last_line(self) -> str:
        return last_line(self.log)

    def close(self) -> None:
        """Reap the child if needed and drop its log."""
        if self.returncode is None:
            self.finish()
        if self.log is not None:
            self.log.close()
            self.log = None

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the executor of requests in a child ----------------------------------------------------------------------


R = TypeVar("R")


def encode(request: Any) -> str:
    """A request as the text a child receives on its command line (its pickle, in base64)."""
    return base64.b64encode(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def decode(cls: type[R], text: str) -> R:
    """The request that :func:`encode` wrote; ``TypeError`` when it is not a ``cls``. Only for text from this
    process's own parent (it unpickles)."""
    request = pickle.loads(base64.b64decode(text))
    if not isinstance(request, cls):
        raise TypeError(f"expected a {cls.__name__} request, got a {type(request).__name__}")
    return request


class ChildJob:
    """A request running in a child interpreter (:class:`~ortlab.runtime.child.Child`, in a process group of its
    own): messages both ways (:meth:`receive`, :meth:`send`), :meth:`cancel` and a time limit that stop the whole
    group (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`), :meth:`finish` and :meth:`close` that reap it."""

    def __init__(self, child: Child, time_limit_s: float | None = None) -> None:
        self.child = child
        self.timed_out = False
        self.stopped_after: float | None = None  # seconds from the start to the end of a timed-out child
        self.limit = TimeLimit(time_limit_s, self._time_out).start()

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def conn(self) -> Any:
        return self.child.conn

    def running(self) -> bool:
        return self.child.running()

    def receive(self) -> Any:
        return self.child.receive()

    def send(self, message: Any) -> None:
        self.child.conn.send(message)

    def _time_out(self) -> None:
        if self.child.running():
            self.timed_out = True
            self.child.stop(STOP_GRACE_S)
            self.stopped_after = self.limit.elapsed()

    def time_out(self) -> None:
        """What the time limit does when it is reached (also callable at once: tests, a caller's own limit)."""
        self.limit.cancel()
        self._time_out()

    def cancel(self) -> None:
        """Stop the child and its process group in the background (the caller's watcher sees it end)."""
        if self.child.running():
            threading.Thread(target=self.child.stop, args=(STOP_GRACE_S,), name=f"ortlab-stop-{self.child.pid}",
                             daemon=True).start()

    def finish(self, grace: float = STOP_GRACE_S) -> int:
        """Close the pipe, reap the child (stopped when it does not exit within ``grace``); its exit code. The time
        limit ends here."""
        self.limit.cancel()
        return self.child.finish(grace)

    def last_line(self) -> str:
        return self.child.last_line()

    def log_text(self) -> str:
        return self.child.log_text()

    def close(self) -> None:
        self.limit.cancel()
        self.child.close()


def _named(dotted: str) -> Any:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def run_request(function: str, request_text: str, request_class: str, fd: int) -> None:
    """The child's side of :class:`ChildExecutor`: read the request back and call ``function(request, fd)``
    (``function`` and the request's class named ``"package.module:name"``; looked up when the child starts)."""
    _named(function)(decode(_named(request_class), request_text), fd)


class ChildExecutor:
    """Runs ``function(request, fd)`` in a fresh interpreter, in a process group of its own (``duplex``: the pipe
    carries messages both ways): ``function`` (defined at a module's top level) receives the request as the typed
    dataclass it was given (:func:`encode`, read back by :func:`run_request`)."""

    def __init__(self, *, duplex: bool = False) -> None:
        self.duplex = duplex

    def submit(self, function: Callable[..., Any] | str, request: Any, *,
               time_limit_s: float | None = None) -> ChildJob:
        child = Child.run(run_request, dotted_name(function), encode(request), dotted_name(type(request)),
                          duplex=self.duplex, new_session=True)
        return ChildJob(child, time_limit_s)


