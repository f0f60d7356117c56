"""One way out of the process: an :class:`Executor` takes a typed request (a frozen dataclass) and a function to
run it with somewhere else, and returns a :class:`Job`, which can be cancelled and given a time limit. Two
kinds: :class:`ChildExecutor` runs the function in a fresh interpreter on this machine
(:class:`ortlab.runtime.child.Child`, which the function talks to over a pipe), :class:`RayExecutor` as a task on a
Ray cluster (:class:`ortlab.runtime.ray_cluster.RayCluster`, which retries a task once elsewhere when its node is
lost). The time limit of both is :class:`TimeLimit`.

A request crosses the process boundary as the object it is, pickled, for both kinds: a child reads it back from its
command line (:func:`encode`, :func:`decode`), Ray pickles a task's request itself. The child is this same ortlab
(:func:`ortlab.runtime.child.child_env`), so it gets the same frozen dataclass the parent built, nothing to parse
or check again.
"""

from __future__ import annotations

import base64
import importlib
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ortlab.runtime.child import STOP_GRACE_S, Child, dotted_name

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


class TimeLimit:
    """A time limit: ``on_expiry`` is called once ``seconds`` have passed since :meth:`start` (None: no limit)
    unless :meth:`cancel` came first. ``elapsed()``: seconds since the start."""

    def __init__(self, seconds: float | None, on_expiry: Callable[[], None]) -> None:
        self.seconds = seconds
        self._on_expiry = on_expiry
        self._began = time.monotonic()
        self._timer: threading.Timer | None = None

    def start(self) -> TimeLimit:
        self._began = time.monotonic()
        if self.seconds is not None:
            self._timer = threading.Timer(self.seconds, self._on_expiry)
            self._timer.daemon = True
            self._timer.start()
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self._began

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class Job(Protocol):
    """Work submitted by an :class:`Executor`."""

    def cancel(self) -> None:
        """Stop the work (a child and its process group; a Ray task's worker)."""

    @property
    def timed_out(self) -> bool:
        """Whether the work was stopped by its time limit."""


class Executor(Protocol):
    """Runs ``function(request)`` out of this process and returns its :class:`Job` at once."""

    def submit(self, function: Callable[..., Any], request: Any, *, time_limit_s: float | None = None) -> Job:
        ...


# -- child processes ----------------------------------------------------------------------------------------------


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


# -- Ray tasks ----------------------------------------------------------------------------------------------------


class RayJob:
    """A request running as a Ray task (:class:`ortlab.runtime.ray_cluster.ClusterTask`)."""

    def __init__(self, executor: RayExecutor, task: Any, time_limit_s: float | None = None) -> None:
        self.executor, self.task = executor, task
        self.time_limit_s = time_limit_s
        self.timed_out = False

    @property
    def ran_on(self) -> str | None:
        """The node id that gave the result (once there is one)."""
        return getattr(self.task, "ran_on", None)

    def result(self, cancelled: Callable[[], bool] | None = None) -> Any:
        """The task's result, or the ``ClusterTaskFailed`` that says why there is none; ``cancelled()`` true: the
        task is cancelled and ``Cancelled`` raised."""
        return self.executor.results([self], cancelled=cancelled, timeout_s=self.time_limit_s)[0]

    def cancel(self) -> None:
        self.executor.cluster.cancel([self.task])


class RayExecutor:
    """Runs ``function(request, *extra)`` as a task on ``cluster`` (a connected
    :class:`~ortlab.runtime.ray_cluster.RayCluster`): its placement (``node_id``, ``resources``, ``num_cpus``,
    ``spread``) and ``retries`` (how often a task whose node is lost runs again elsewhere) as
    :meth:`RayCluster.submit <ortlab.runtime.ray_cluster.RayCluster.submit>` takes them."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def submit(self, function: Callable[..., Any], request: Any, *extra: Any, time_limit_s: float | None = None,
               node_id: str | None = None, resources: dict[str, float] | None = None, retries: int = 1,
               num_cpus: float | None = 1, spread: bool = False) -> RayJob:
        placement: dict[str, Any] = {"spread": True} if spread else {}
        task = self.cluster.submit(function, request, *extra, resources=resources, node_id=node_id, retries=retries,
                                   num_cpus=num_cpus, **placement)
        return RayJob(self, task, time_limit_s)

    def results(self, jobs: Sequence[RayJob], *, cancelled: Callable[[], bool] | None = None,
                timeout_s: float | None = None) -> list[Any]:
        """Each job's result in order (a ``ClusterTaskFailed`` for one that failed or ran past ``timeout_s``);
        ``cancelled()`` true, or any error while waiting: every job is cancelled and the error raised."""
        tasks = [j.task for j in jobs]
        try:
            out = self.cluster.wait(tasks, cancelled=cancelled, timeout_s=timeout_s)
        except BaseException:  # interrupted or failed: the tasks are cancelled, then re-raised
            self.cluster.cancel(tasks)
            raise
        for job, got in zip(jobs, out):
            job.timed_out = bool(getattr(got, "timed_out", False))
        return out

    def cancel(self, jobs: Sequence[RayJob]) -> None:
        self.cluster.cancel([j.task for j in jobs])
