"""Work on a Ray cluster (the optional extra ``ortlab[ray]``): connect to a running cluster, list its nodes with
the machine each one is, ship bytes through its object store once, run functions as Ray tasks (anywhere, on
nodes that carry a resource, or on one node), wait for them with Cancel and a time limit, and retry a task once
elsewhere when its node is lost.

A :class:`RayCluster` is one job's use of this process's one Ray driver connection (:mod:`ortlab.runtime.ray_driver`:
shared by the jobs of a process, such as a tune and a benchmark of the app's server, ended by the last; there too
what keeps the connection quiet and whom it trusts). A job's caches and whether it is open are guarded by its own
lock; a task is changed only by the thread that waits for it.

Two kinds of node names, two types: :data:`NodeId`, Ray's hex id of a node (what tasks are pinned to), and
:data:`NodeName`, how messages name one ("127.0.0.1:40123 (node 8cefa471)").
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.runtime import ray_driver
from ortlab.runtime.machine import Machine, this_machine
from ortlab.runtime.ray_driver import CLUSTER_ENV, ClusterError, RayUnavailable, ray_module
from ortlab.runtime.threads import THREADS_ENV

__all__ = ["CLUSTER_ENV", "ClusterError", "ClusterNode", "ClusterTask", "ClusterTaskFailed", "NodeId", "NodeName",
           "RayCluster", "RayUnavailable", "TaskWait", "ray_module"]

NodeId = NewType("NodeId", str)  # Ray's hex id of a node: what a task is pinned to
NodeName = NewType("NodeName", str)  # how messages name a node: "127.0.0.1:40123 (node 8cefa471)"

_POLL_S = 0.2  # how often wait() looks at Cancel while tasks run
_STRANDED_CHECK_S = 2.0  # how often wait() looks for tasks whose node is gone
_NODE_NOTE = "ortlab: raised on node "


class ClusterTaskFailed(OrtlabError):
    """A task that did not give a result: its node was lost (after the retry), it raised, or it ran out of time.
    ``node`` names the node (address and id) it failed on; ``cause`` is the error the task raised, if any."""

    def __init__(self, message: str, *, node: NodeName = NodeName(""), cause: BaseException | None = None,
                 lost: bool = False, timed_out: bool = False):
        super().__init__(message)
        self.node = node
        self.cause = cause
        self.lost = lost
        self.timed_out = timed_out


@dataclass(frozen=True)
class ClusterNode:
    """One alive node: Ray's ``node_id``, its ``address`` ("ip:port" of its raylet), its ``resources`` (CPU,
    memory, custom ones such as ``cpu_epyc``) and the :class:`Machine` it is (asked on the node itself)."""

    node_id: NodeId
    address: str
    resources: dict[str, float]
    machine: Machine

    def name(self) -> NodeName:
        """"127.0.0.1:40123 (node 8cefa471)": how messages name a node."""
        return _name(self.address, self.node_id)


@dataclass
class ClusterTask:
    """A submitted task. ``num_cpus`` None: all the CPUs of the node it is pinned to; ``ran_on``: the node that
    gave the result (set while it is waited for); ``lost_on``: nodes it was lost on before. Only the thread that
    waits for it (:meth:`RayCluster.wait`, :meth:`RayCluster.advance`) changes it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    resources: dict[str, float] | None
    node_id: NodeId | None
    retries: int
    num_cpus: float | None
    spread: bool = False
    ref: Any = None
    ran_on: NodeId | None = None
    lost_on: list[NodeId | None] = field(default_factory=list)
    submitted_at: float = 0.0

    @property
    def least_cpus(self) -> float:
        """The CPUs a node needs to run it at all."""
        return self.num_cpus if self.num_cpus is not None else 1.0


def _run_and_say_where(fn: Callable[..., Any], *args: Any) -> tuple[NodeId, Any]:
    """Body of every task: the node it ran on and ``fn``'s result."""
    import ray

    os.environ.update(CLUSTER_ENV)
    context = ray.get_runtime_context()
    # ONNX Runtime's sessions here and in the task's children use the CPUs Ray gave the task, not every core
    os.environ[THREADS_ENV] = str(max(1, round(context.get_assigned_resources().get("CPU", 1.0))))
    node_id = NodeId(context.get_node_id())
    try:
        return node_id, fn(*args)
    except Exception as exc:  # any error of the task gets its node noted, then re-raised
        exc.add_note(f"{_NODE_NOTE}{node_id}")  # travels with the error: wait() names the node
        raise


def _machine_here() -> tuple[NodeId, Machine]:
    import ray

    return NodeId(ray.get_runtime_context().get_node_id()), this_machine()


@dataclass
class TaskWait:
    """Tasks being waited for, and the result of each that has ended, by its position (see
    :meth:`RayCluster.advance`). Belongs to the thread that waits."""

    tasks: list[ClusterTask]
    results: dict[int, Any] = field(default_factory=dict)
    next_check: float = field(default_factory=lambda: time.monotonic() + _STRANDED_CHECK_S)

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.tasks)

    def pending(self) -> list[int]:
        """Positions of the tasks not ended yet."""
        return [i for i in range(len(self.tasks)) if i not in self.results]

    def in_order(self) -> list[Any]:
        return [self.results[i] for i in range(len(self.tasks))]


class RayCluster:
    """A job's use of this process's connection to a Ray cluster (:meth:`connect`, :meth:`close`). Its caches and
    whether it is open are guarded by its lock; once closed it refuses work (Ray would start a cluster of its own
    for a call without a connection)."""

    def __init__(self, address: str, remote: Any):
        self.address = address
        self._lock = threading.Lock()
        self._refs: dict[str, Any] = {}
        self._machines: dict[NodeId, Machine] = {}
        self._remote = remote
        self._open = True

    @classmethod
    def connect(cls, address: str) -> RayCluster:
        """Connects to the cluster at ``address`` ("auto": the one started on this machine, or ``RAY_ADDRESS``;
        "host:port": its head's GCS port), or shares this process's connection when it is to the same address.
        :class:`ClusterError` with what to do when nothing answers, the token is missing or another cluster is
        in use here."""
        address = ray_driver.join(address)
        return cls(address, ray_module().remote(_run_and_say_where))

    def _ray(self) -> Any:
        """``ray``, while this job's use of the connection is open."""
        with self._lock:
            if not self._open:
                raise ClusterError("This job has closed its connection to the cluster.")
        return ray_module()

    def nodes(self) -> list[ClusterNode]:
        """The alive nodes, each with the machine it is (asked once per node by a tiny task pinned to it)."""
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in ray.nodes() if n.get("Alive")]
        with self._lock:
            unknown = [NodeId(n["NodeID"]) for n in alive if n["NodeID"] not in self._machines]
        ask = {node_id: ray.remote(_machine_here).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
            for node_id in unknown}
        for node_id, ref in ask.items():
            try:
                machine = ray.get(ref, timeout=120)[1]
            except ray.exceptions.RayError:  # a node lost (or silent) while asked: left out of the list
                continue
            with self._lock:
                self._machines[node_id] = machine
        with self._lock:
            known = dict(self._machines)
        return [ClusterNode(NodeId(n["NodeID"]), _address(n), {k: float(v) for k, v in n.get("Resources", {}).items()
                                                               if not k.startswith("node:")}, known[n["NodeID"]])
                for n in alive if n["NodeID"] in known]

    def node_name(self, node_id: NodeId | None) -> NodeName:
        """"address (node id8)" of a node alive or dead; "an unknown node" for ``None``."""
        if not node_id:
            return NodeName("an unknown node")
        for n in self._ray().nodes():
            if n["NodeID"] == node_id:
                return _name(_address(n), node_id)
        return NodeName(f"node {node_id[:8]}")

    def put(self, blob: bytes) -> Any:
        """An object-store reference to ``blob``; the same bytes go to the store once (by SHA-256)."""
        ray = self._ray()
        key = hashlib.sha256(blob).hexdigest()
        with self._lock:
            if key not in self._refs:
                self._refs[key] = ray.put(blob)
            return self._refs[key]

    def submit(self, fn: Callable[..., Any], *args: Any, resources: dict[str, float] | None = None,
               node_id: NodeId | None = None, retries: int = 1, num_cpus: float | None = 1,
               spread: bool = False) -> ClusterTask:
        """Runs ``fn(*args)`` as a Ray task: on any node with ``num_cpus`` free, on nodes carrying
        ``resources`` (e.g. ``{"cpu_epyc": 0.01}``), or on ``node_id`` only. References from :meth:`put` among
        ``args`` arrive as their bytes. ``num_cpus`` None: all the CPUs of the node (``node_id``, or wherever a
        lost task runs again; 1 for a task not pinned), which the task's ONNX Runtime sessions then use.
        ``retries``: how often a task whose node is lost runs again elsewhere; ``spread``: spread such tasks over
        the nodes (Ray's SPREAD) instead of filling one node first."""
        task = ClusterTask(fn, args, dict(resources) if resources else None, node_id, retries, num_cpus, spread)
        if self._stranded(task):
            where = f"node {node_id[:8]} is not alive or lacks" if node_id else "no alive node of the cluster has"
            raise ClusterError(f"Cannot run the task: {where} {_needs(task.resources, task.least_cpus)}. Start a node "
                               "with the resource, e.g. `ray start --address HEAD:PORT --resources '{\"NAME\": 1}'`.")
        self._start(task)
        return task

    def _start(self, task: ClusterTask) -> None:
        cpus = task.num_cpus if task.num_cpus is not None else self._node_cpus(task.node_id)
        options: dict[str, Any] = {"num_cpus": cpus, "max_retries": 0}
        if task.resources:
            options["resources"] = task.resources
        if task.node_id:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(task.node_id, soft=False)
        elif task.spread:
            options["scheduling_strategy"] = "SPREAD"
        task.submitted_at = time.monotonic()
        task.ref = self._remote.options(**options).remote(task.fn, *task.args)

    def _outcome(self, task: ClusterTask) -> Any:
        """The task's result, ``None`` after starting it again (node lost, retries left), or ClusterTaskFailed."""
        ray = self._ray()
        from ray import exceptions as rx

        try:
            task.ran_on, result = ray.get(task.ref)
            return result
        except rx.RayTaskError as err:  # the function itself raised
            cause = err.cause if isinstance(getattr(err, "cause", None), BaseException) else err
            if isinstance(cause, Cancelled):
                raise cause from None
            return ClusterTaskFailed(f"{cause}", node=self.node_name(_node_of(cause)), cause=cause)
        except (rx.NodeDiedError, rx.WorkerCrashedError, rx.ObjectLostError, rx.OwnerDiedError,
                rx.LocalRayletDiedError, rx.TaskUnschedulableError, rx.RaySystemError) as err:
            return self._lost(task, err)

    def _lost(self, task: ClusterTask, err: BaseException | None) -> ClusterTaskFailed | None:
        """Starts a task whose node was lost once more on another node that fits (while retries are left);
        else the ClusterTaskFailed that names the node."""
        node_id = (_node_of(err) if err is not None else None) or task.node_id or self._died_since()
        task.lost_on.append(node_id)
        name = self.node_name(node_id)
        other = self._elsewhere(task)
        if len(task.lost_on) <= task.retries and other:
            task.node_id = other  # not the lost node, even while Ray still counts it alive
            self._start(task)
            return None
        tried = ", ".join(dict.fromkeys(self.node_name(n) for n in task.lost_on))
        why = f" ({type(err).__name__})" if err is not None else ""
        nowhere = "" if other else f"; no other alive node has {_needs(task.resources, task.least_cpus)}"
        return ClusterTaskFailed(f"The task was lost with its node {name}{why}; ran on: {tried}{nowhere}.",
                                 node=name, cause=err, lost=True)

    def fitting(self, resources: dict[str, float] | None = None, num_cpus: float = 1) -> list[NodeId]:
        """Ids of the alive nodes whose resources fit such a task (free or not)."""
        need = {**(resources or {}), "CPU": num_cpus}
        return [NodeId(n["NodeID"]) for n in self._ray().nodes() if n.get("Alive")
                and all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in need.items() if v > 0)]

    def _node_cpus(self, node_id: NodeId | None) -> float:
        """The CPUs Ray counts on the node (1 for none or an unknown one)."""
        for n in self._ray().nodes() if node_id else ():
            if n["NodeID"] == node_id:
                return float(n.get("Resources", {}).get("CPU", 1.0)) or 1.0
        return 1.0

    def _elsewhere(self, task: ClusterTask) -> NodeId | None:
        fits = [n for n in self.fitting(task.resources, task.least_cpus) if n not in task.lost_on]
        return fits[0] if fits else None

    def _stranded(self, task: ClusterTask) -> bool:
        """The task waits for a node that is gone: pinned to a dead node, or no alive node fits it (Ray would
        keep it waiting for a node to join)."""
        fits = self.fitting(task.resources, task.least_cpus)
        return (task.node_id not in fits) if task.node_id else not fits

    def _died_since(self) -> NodeId | None:
        dead = [NodeId(n["NodeID"]) for n in self._ray().nodes() if not n.get("Alive")]
        return dead[-1] if dead else None

    def wait(self, tasks: Sequence[ClusterTask], *, cancelled: Callable[[], bool] | None = None,
             timeout_s: float | None = None) -> list[Any]:
        """Each task's result, in order, or a :class:`ClusterTaskFailed` for one that failed or ran past
        ``timeout_s`` (those are cancelled). ``cancelled()`` true: every unfinished task is cancelled and
        :class:`~ortlab.core.errors.Cancelled` raised."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waiting = TaskWait(list(tasks))
        while not waiting.done:
            if cancelled is not None and cancelled():
                self.cancel([waiting.tasks[i] for i in waiting.pending()])
                raise Cancelled()
            if deadline is not None and time.monotonic() > deadline:
                late = waiting.pending()
                self.cancel([waiting.tasks[i] for i in late])
                for i in late:
                    waiting.results[i] = ClusterTaskFailed(
                        f"The task did not finish within {timeout_s:g} s and was cancelled.",
                        node=self.node_name(waiting.tasks[i].node_id), timed_out=True)
                break
            self.advance(waiting)
        return waiting.in_order()

    def advance(self, waiting: TaskWait) -> bool:
        """One look at ``waiting``'s tasks, of up to a fraction of a second (the loop over ``ray.wait`` that
        :meth:`wait` runs to the end, for a caller with other work between looks): takes the results Ray has,
        starts again elsewhere a task whose node was lost (while retries are left) and, every few seconds, fails
        or restarts the tasks stranded on a node that is gone. Whether every task has ended."""
        ray = self._ray()
        if time.monotonic() >= waiting.next_check:
            waiting.next_check = time.monotonic() + _STRANDED_CHECK_S
            for i in [i for i in waiting.pending() if self._stranded(waiting.tasks[i])]:
                self.cancel([waiting.tasks[i]])
                failed = self._lost(waiting.tasks[i], None)
                if failed is not None:
                    waiting.results[i] = failed
            if waiting.done:
                return True
        pending = {waiting.tasks[i].ref: i for i in waiting.pending()}
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
        for ref in ready:
            task = waiting.tasks[pending[ref]]
            result = self._outcome(task)
            if result is not None or task.ran_on is not None:
                waiting.results[pending[ref]] = result
        return waiting.done

    def unfinished(self, tasks: Sequence[ClusterTask]) -> list[ClusterTask]:
        """The tasks still running or waiting for a node (at once: nothing waits)."""
        started = [t for t in tasks if t.ref is not None]
        if not started:
            return []
        _, waiting = self._ray().wait([t.ref for t in started], num_returns=len(started), timeout=0)
        waiting_ids = {id(r) for r in waiting}
        return [t for t in started if id(t.ref) in waiting_ids]

    def cancel(self, tasks: Sequence[ClusterTask]) -> None:
        """Stops the tasks (their worker processes are killed: ONNX Runtime's C++ code would not hear a softer
        request). After :meth:`close` it does nothing: the tasks went with the connection, or belong to the
        jobs still using it."""
        with self._lock:
            if not self._open:
                return
        ray = ray_module()
        for task in tasks:
            if task.ref is not None:
                try:
                    ray.cancel(task.ref, force=True)
                except (ray.exceptions.RayError, ValueError, TypeError):  # finished already, or its node is gone
                    pass

    def close(self) -> None:
        """Ends this job's use of the connection; the last user disconnects this process (the cluster keeps
        running). A second call does nothing."""
        with self._lock:
            self._refs.clear()
            was_open, self._open = self._open, False
        if was_open:
            ray_driver.leave()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _needs(resources: dict[str, float] | None, num_cpus: float) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in {"CPU": num_cpus, **(resources or {})}.items())


def _node_of(err: BaseException) -> NodeId | None:
    """The node id a Ray error names, if it names one."""
    for attr in ("node_id", "_node_id"):
        v = getattr(err, attr, None)
        if isinstance(v, str) and v:
            return NodeId(v)
    for note in getattr(err, "__notes__", ()):
        if isinstance(note, str) and note.startswith(_NODE_NOTE):
            return NodeId(note[len(_NODE_NOTE):])
    text = str(err)
    marker = "node ID: "
    if marker in text:
        return NodeId(text.split(marker, 1)[1].split()[0].strip(",."))
    return None


def _address(node: dict[str, Any]) -> str:
    """"ip:port" of the raylet of a node as ``ray.nodes()`` lists it."""
    return f"{node.get('NodeManagerAddress', '?')}:{node.get('NodeManagerPort', '?')}"


def _name(address: str, node_id: NodeId) -> NodeName:
    return NodeName(f"{address} (node {node_id[:8]})")
