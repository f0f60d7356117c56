"""Work on a Ray cluster (the optional extra ``ortlab[ray]``): connect to a running cluster, list its nodes with
the machine each one is, ship bytes through its object store once, run functions as Ray tasks (anywhere, on
nodes that carry a resource, or on one node), wait for them with Cancel and a time limit, and retry a task once
elsewhere when its node is lost.

``ray`` is imported only inside the functions that need it: without the extra, ortlab works as before and only
asking for a cluster fails, with :class:`RayUnavailable`.

Nothing leaves the machine unasked: usage statistics are off (``RAY_USAGE_STATS_ENABLED=0``) in this process
and in every task (``runtime_env``), as is ONNX Runtime's telemetry, and Ray's probe of this machine's address
aims at the cluster's head instead of 8.8.8.8 (:func:`ortlab.runtime.ray_quiet.quiet_ray`).

**Trust.** Ray hands results between processes with pickle: whatever a node returns is unpickled here, so every
member of a cluster can run code in every driver connected to it, this process included. Connect only to a
cluster whose every node you run (the server connects only to the one its operator configured:
:mod:`ortlab.runtime.cluster_setting`). Connections use Ray's token authentication (``RAY_AUTH_MODE=token``, the
token in :func:`ortlab.runtime.cluster_setting.token_path`), as the nodes ``ortlab cluster start`` starts do.

One process holds one Ray driver: :meth:`RayCluster.connect` shares it among the jobs of a process (a tune and a
benchmark of the app's server) and the last :meth:`RayCluster.close` ends it; a second, different cluster is
refused while the first is in use.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ortlab import NO_TELEMETRY_ENV
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.runtime.cluster_setting import TOKEN_ENV_VAR, auth_env, token_path
from ortlab.runtime.machine import Machine, this_machine
from ortlab.runtime.ray_quiet import quiet_ray
from ortlab.runtime.threads import THREADS_ENV

__all__ = ["CLUSTER_ENV", "ClusterError", "ClusterNode", "ClusterTask", "ClusterTaskFailed", "RayCluster",
           "RayUnavailable", "ray_module"]

CLUSTER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", **NO_TELEMETRY_ENV}  # in the driver and every task
INSTALL_HINT = "pip install 'ortlab[ray]'"
_POLL_S = 0.2  # how often wait() looks at Cancel while tasks run
_STRANDED_CHECK_S = 2.0  # how often wait() looks for tasks whose node is gone
_PROBE_S = 3.0
_NODE_NOTE = "ortlab: raised on node "  # how long connect() waits for a TCP answer from host:port


class RayUnavailable(OrtlabError):
    """Ray is not installed here."""

    def __init__(self, message: str | None = None):
        super().__init__(message or f"Running on a cluster needs Ray: install it with {INSTALL_HINT}.")


class ClusterError(OrtlabError):
    """The cluster cannot be reached or has no node that can run the work."""


class ClusterTaskFailed(OrtlabError):
    """A task that did not give a result: its node was lost (after the retry), it raised, or it ran out of time.
    ``node`` names the node (address and id) it failed on; ``cause`` is the error the task raised, if any."""

    def __init__(self, message: str, *, node: str = "", cause: BaseException | None = None,
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

    node_id: str
    address: str
    resources: dict[str, float]
    machine: Machine

    def name(self) -> str:
        """"127.0.0.1:40123 (node 8cefa471)": how messages name a node."""
        return f"{self.address} (node {self.node_id[:8]})"


@dataclass
class ClusterTask:
    """A submitted task. ``num_cpus`` None: all the CPUs of the node it is pinned to; ``ran_on``: the node id that
    gave the result (set by :meth:`RayCluster.wait`); ``lost_on``: nodes it was lost on before."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    resources: dict[str, float] | None
    node_id: str | None
    retries: int
    num_cpus: float | None
    spread: bool = False
    ref: Any = None
    ran_on: str | None = None
    lost_on: list[str] = field(default_factory=list)
    submitted_at: float = 0.0

    @property
    def least_cpus(self) -> float:
        """The CPUs a node needs to run it at all."""
        return self.num_cpus if self.num_cpus is not None else 1.0


def ray_module() -> Any:
    """The ``ray`` package, or :class:`RayUnavailable` when the extra is not installed."""
    try:
        import ray
    except ImportError as err:
        raise RayUnavailable() from err
    return ray


def _run_and_say_where(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """Body of every task: the node it ran on and ``fn``'s result."""
    import ray

    os.environ.update(CLUSTER_ENV)
    context = ray.get_runtime_context()
    # ONNX Runtime's sessions here and in the task's children use the CPUs Ray gave the task, not every core
    os.environ[THREADS_ENV] = str(max(1, round(context.get_assigned_resources().get("CPU", 1.0))))
    node_id = context.get_node_id()
    try:
        return node_id, fn(*args)
    except Exception as exc:  # any error of the task gets its node noted, then re-raised
        exc.add_note(f"{_NODE_NOTE}{node_id}")  # travels with the error: wait() names the node
        raise


def _machine_here() -> tuple[str, Machine]:
    import ray

    return ray.get_runtime_context().get_node_id(), this_machine()


def _check_listening(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"Cluster address {address!r} is not HOST:PORT (or 'auto'), e.g. 10.0.0.5:6379.")
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_S):
            pass
    except OSError as err:
        raise ClusterError(
            f"Nothing listens at {address} ({err.strerror or err}): start a head there with "
            f"`ortlab cluster start --head --port {port}`, or give the address it printed.") from err


class _Driver:
    """This process's one Ray driver connection, shared by the jobs that use it (guarded by ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.address: str | None = None
        self.users = 0


_DRIVER = _Driver()


class RayCluster:
    """A job's use of this process's connection to a Ray cluster (:meth:`connect`, :meth:`close`)."""

    def __init__(self, address: str):
        self.address = address
        self._refs: dict[str, Any] = {}
        self._machines: dict[str, Machine] = {}
        self._remote: Any = None
        self._open = False

    @classmethod
    def connect(cls, address: str) -> RayCluster:
        """Connects to the cluster at ``address`` ("auto": the one started on this machine, or ``RAY_ADDRESS``;
        "host:port": its head's GCS port), or shares this process's connection when it is to the same address.
        :class:`ClusterError` with what to do when nothing answers, the token is missing or another cluster is
        in use here."""
        ray = ray_module()
        address = (address or "").strip()
        if not address:
            raise ClusterError("No cluster address: give HOST:PORT of the head, or 'auto'.")
        if address != "auto":
            _check_listening(address)
        with _DRIVER.lock:
            if _DRIVER.users and _DRIVER.address != address:
                raise ClusterError(f"This process already works with the Ray cluster at {_DRIVER.address}: one at a "
                                   "time per process; run the other job when this one has ended.")
            if not _DRIVER.users:
                _init(ray, address)
                _DRIVER.address = address
            _DRIVER.users += 1
        cluster = cls(address)
        cluster._open = True
        cluster._remote = ray.remote(_run_and_say_where)
        return cluster

    def nodes(self) -> list[ClusterNode]:
        """The alive nodes, each with the machine it is (asked once per node by a tiny task pinned to it)."""
        ray = ray_module()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in ray.nodes() if n.get("Alive")]
        ask = {n["NodeID"]: ray.remote(_machine_here).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in alive if n["NodeID"] not in self._machines}
        for node_id, ref in ask.items():
            try:
                self._machines[node_id] = ray.get(ref, timeout=120)[1]
            except ray.exceptions.RayError:  # a node lost (or silent) while asked: left out of the list
                continue
        return [ClusterNode(n["NodeID"], f"{n.get('NodeManagerAddress', '?')}:{n.get('NodeManagerPort', '?')}",
                            {k: float(v) for k, v in n.get("Resources", {}).items()
                             if not k.startswith("node:")}, self._machines[n["NodeID"]])
                for n in alive if n["NodeID"] in self._machines]

    def node_name(self, node_id: str | None) -> str:
        """"address (node id8)" of a node alive or dead; "an unknown node" for ``None``."""
        if not node_id:
            return "an unknown node"
        ray = ray_module()
        for n in ray.nodes():
            if n["NodeID"] == node_id:
                return f"{n.get('NodeManagerAddress', '?')}:{n.get('NodeManagerPort', '?')} (node {node_id[:8]})"
        return f"node {node_id[:8]}"

    def put(self, blob: bytes) -> Any:
        """An object-store reference to ``blob``; the same bytes go to the store once (by SHA-256)."""
        ray = ray_module()
        key = hashlib.sha256(blob).hexdigest()
        if key not in self._refs:
            self._refs[key] = ray.put(blob)
        return self._refs[key]

    def submit(self, fn: Callable[..., Any], *args: Any, resources: dict[str, float] | None = None,
               node_id: str | None = None, retries: int = 1, num_cpus: float | None = 1,
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

    def _alive_ids(self) -> set[str]:
        return {n["NodeID"] for n in ray_module().nodes() if n.get("Alive")}

    def _outcome(self, task: ClusterTask) -> Any:
        """The task's result, ``None`` after starting it again (node lost, retries left), or ClusterTaskFailed."""
        ray = ray_module()
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

    def _lost(self, task: ClusterTask, err: BaseException | None, node_id: str | None = None) -> ClusterTaskFailed | None:
        """Starts a task whose node was lost once more on another node that fits (while retries are left);
        else the ClusterTaskFailed that names the node."""
        node_id = node_id or (_node_of(err) if err is not None else None) or task.node_id or self._died_since()
        task.lost_on.append(node_id or "")
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

    def fitting(self, resources: dict[str, float] | None = None, num_cpus: float = 1) -> list[str]:
        """Ids of the alive nodes whose resources fit such a task (free or not)."""
        need = {**(resources or {}), "CPU": num_cpus}
        return [n["NodeID"] for n in ray_module().nodes() if n.get("Alive")
                and all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in need.items() if v > 0)]

    def _node_cpus(self, node_id: str | None) -> float:
        """The CPUs Ray counts on the node (1 for none or an unknown one)."""
        for n in ray_module().nodes() if node_id else ():
            if n["NodeID"] == node_id:
                return float(n.get("Resources", {}).get("CPU", 1.0)) or 1.0
        return 1.0

    def _elsewhere(self, task: ClusterTask) -> str | None:
        fits = [n for n in self.fitting(task.resources, task.least_cpus) if n not in task.lost_on]
        return fits[0] if fits else None

    def _stranded(self, task: ClusterTask) -> bool:
        """The task waits for a node that is gone: pinned to a dead node, or no alive node fits it (Ray would
        keep it waiting for a node to join)."""
        fits = self.fitting(task.resources, task.least_cpus)
        return (task.node_id not in fits) if task.node_id else not fits

    def _died_since(self) -> str | None:
        ray = ray_module()
        dead = [n["NodeID"] for n in ray.nodes() if not n.get("Alive")]
        return dead[-1] if dead else None

    def wait(self, tasks: Sequence[ClusterTask], *, cancelled: Callable[[], bool] | None = None,
             timeout_s: float | None = None) -> list[Any]:
        """Each task's result, in order, or a :class:`ClusterTaskFailed` for one that failed or ran past
        ``timeout_s`` (those are cancelled). ``cancelled()`` true: every unfinished task is cancelled and
        :class:`~ortlab.core.errors.Cancelled` raised."""
        ray = ray_module()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        out: dict[int, Any] = {}
        next_check = time.monotonic() + _STRANDED_CHECK_S
        while len(out) < len(tasks):
            if cancelled is not None and cancelled():
                self.cancel([t for i, t in enumerate(tasks) if i not in out])
                raise Cancelled()
            if deadline is not None and time.monotonic() > deadline:
                late = [i for i in range(len(tasks)) if i not in out]
                self.cancel([tasks[i] for i in late])
                for i in late:
                    out[i] = ClusterTaskFailed(f"The task did not finish within {timeout_s:g} s and was cancelled.",
                                               node=self.node_name(tasks[i].node_id), timed_out=True)
                break
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + _STRANDED_CHECK_S
                for i in [i for i in range(len(tasks)) if i not in out and self._stranded(tasks[i])]:
                    self.cancel([tasks[i]])
                    failed = self._lost(tasks[i], None)
                    if failed is not None:
                        out[i] = failed
                if len(out) == len(tasks):
                    break
            pending = {tasks[i].ref: i for i in range(len(tasks)) if i not in out}
            ready, _ = ray.wait([tasks[i].ref for i in pending.values()], num_returns=1, timeout=_POLL_S)
            for ref in ready:
                i = pending[ref]
                result = self._outcome(tasks[i])
                if result is not None or tasks[i].ran_on is not None:
                    out[i] = result
        return [out[i] for i in range(len(tasks))]

    def cancel(self, tasks: Sequence[ClusterTask]) -> None:
        """Stops the tasks (their worker processes are killed: ONNX Runtime's C++ code would not hear a softer
        request)."""
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
        self._refs.clear()
        if not self._open:
            return
        self._open = False
        with _DRIVER.lock:
            _DRIVER.users -= 1
            if _DRIVER.users == 0:
                _DRIVER.address = None
                ray = ray_module()
                if ray.is_initialized():
                    ray.shutdown()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _init(ray: Any, address: str) -> None:
    """Starts this process's driver: telemetry off, Ray's token authentication on, the address probe aimed at the
    head (``_DRIVER.lock`` held)."""
    token = token_path()
    if not token.is_file():
        raise ClusterError(f"No cluster token at {token}: ortlab connects only to clusters with Ray's token "
                           f"authentication. Start the head with `ortlab cluster start --head` (it writes the token "
                           f"there), or copy the head's token file to this machine (or set ${TOKEN_ENV_VAR}).")
    env = {**CLUSTER_ENV, **auth_env()}
    os.environ.update(env)
    _reload_auth_settings()  # Ray read them from the environment when it was imported
    quiet_ray(address.rpartition(":")[0] if address != "auto" else None)
    if ray.is_initialized():  # a connection this class did not make
        ray.shutdown()
    try:
        ray.init(address=address, runtime_env={"env_vars": dict(CLUSTER_ENV)}, log_to_driver=False,
                 logging_level="WARNING")
    except ray.exceptions.AuthenticationError as err:
        raise ClusterError(f"The Ray cluster at {address} refused this process's token: copy the token file of the "
                           "cluster's head to this machine (see `ortlab cluster start --help`).") from err
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ClusterError(f"Cannot connect to the Ray cluster at {address}: {str(err).splitlines()[0]} — start one "
                           "with `ortlab cluster start`, or give HOST:PORT.") from err


def _reload_auth_settings() -> None:
    """Makes Ray's C++ side read ``RAY_AUTH_MODE`` and the token again (as ``ray`` itself does when it turns token
    authentication on in a process that imported it before)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _needs(resources: dict[str, float] | None, num_cpus: float) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in {"CPU": num_cpus, **(resources or {})}.items())


def _node_of(err: BaseException) -> str | None:
    """The node id a Ray error names, if it names one."""
    for attr in ("node_id", "_node_id"):
        v = getattr(err, attr, None)
        if isinstance(v, str) and v:
            return v
    for note in getattr(err, "__notes__", ()):
        if isinstance(note, str) and note.startswith(_NODE_NOTE):
            return note[len(_NODE_NOTE):]
    text = str(err)
    marker = "node ID: "
    if marker in text:
        return text.split(marker, 1)[1].split()[0].strip(",.")
    return None
