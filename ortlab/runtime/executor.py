"""One way out of the process: an :class:`Executor` takes a typed request (a frozen dataclass) and a function to
run it with somewhere else, and returns a :class:`Job`, which can be cancelled and given a time limit. Two
kinds: :class:`ortlab.runtime.child.ChildExecutor` runs the function in a fresh interpreter on this machine (beside
:class:`~ortlab.runtime.child.Child`, the one way a child starts, and the request's wire form), :class:`RayExecutor`
(here) as a task on a Ray cluster (:class:`ortlab.runtime.ray_cluster.RayCluster`, which retries a task once
elsewhere when its node is lost). The time limit of both is :class:`TimeLimit`.

A request crosses the process boundary as the object it is, pickled, for both kinds: a child reads it back from its
command line (:func:`ortlab.runtime.child.encode`, :func:`~ortlab.runtime.child.decode`), Ray pickles a task's
request itself. The child is this same ortlab (:func:`ortlab.runtime.child.child_env`), so it gets the same frozen
dataclass the parent built, nothing to parse or check again.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol


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
