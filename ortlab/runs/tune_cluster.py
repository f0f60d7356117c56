"""Tune's trials on a Ray cluster (``ortlab tune --ray ADDRESS``): :class:`ClusterTrials`, the tuner's trial
runner beside :class:`ortlab.runs.tune.LocalTrials` (a child process per recipe here: the behaviour without
``--ray``).

On a cluster the accuracy work of a trial (quantize + evaluate) is a Ray task on any node (round robin over
the nodes); the source model, the evaluation/calibration files and the workspace's kept calibrations and node fits
(GPTQ roundings, bias corrections) go through the object store once, by hash (:meth:`RayCluster.put`); those a node
makes are kept here, for the next trial on any node. Timing runs only on a node carrying ``timing_resource``, the
same node for every trial and finalist, with the one clock (:class:`ortlab.timing.child_runs.PairTimer`), and each
timing records that node's machine. The trial comes back here as an artifact folder recorded in this workspace's
History. A node lost mid-trial: the trial runs once more on another node, then fails with the node named.

With N nodes that fit a trial, up to N trials' accuracy work runs at once. The tuner tells the runner which
trials come next (:meth:`ClusterTrials.prefetch`: the search space's next recipes, or the accuracy stage's next
float sets, which its screen fixed before the first is confirmed); whenever a node has nothing to do — checked while
the tuner waits for a trial or a timing — it takes the next of them (:meth:`ClusterTrials.refill`), so a node that
finishes early never waits for the tuner. A trial whose task started ahead waits for that task, and one the
search no longer wants is cancelled (its files never reach this workspace: a trial's files are written here only
when the tuner takes its result). Timing stays one trial at a time on the timing node: a timing task takes all
that node's CPUs, nothing else runs there meanwhile, and no trial starts there while a timing waits for it (a
trial already running there finishes first). A trial takes all its node's CPUs too, and every task runs ONNX
Runtime on the CPUs Ray gave it (``$ORTLAB_THREADS``, set in each task and inherited by its recipe child): a trial
on a one-CPU node uses one core, not every core of a host it shares with other nodes, and one on a 16-CPU node
16 threads; a timing uses as many threads as its node has CPUs (its machine records them).

On its node a trial runs as a local one does, in a recipe child, under the same memory and time limits
(:mod:`ortlab.runs.trial_on_node`); when the search ends, each node it used removes the folders its cancelled
trials left (:func:`clean_trial_folders`).

All the runner's state (its tasks, the queue of trials to start ahead, the timing node's) belongs to the thread
that runs the search: the runner has no thread of its own, and a trial's handle looks at its task on the thread
that waits for it (the one loop over ``ray.wait``, :meth:`ortlab.runtime.ray_cluster.RayCluster.advance`).
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.layout import ARTIFACT_FILE
from ortlab.core.progress import CancelToken
from ortlab.model.inspect import external_data_files
from ortlab.runs.artifact import Artifact
from ortlab.runs.history import History
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.trial_folders import CLEAN_WAIT_S, clean_trial_folders, pid_namespace, trial_folder_prefix
from ortlab.runs.trial_on_node import keep_new_results, pack_dir, pack_kept, run_trial_on_node, time_pair_on_node
from ortlab.runtime.child import MEMORY_ENV, error_of
from ortlab.runtime.machine import Machine
from ortlab.runtime.ray_cluster import (ClusterError, ClusterNode, ClusterTask, ClusterTaskFailed, NodeId, NodeName,
                                        RayCluster, TaskWait, ray_module)
from ortlab.settings.config import BenchConfig
from ortlab.timing.stats import SpeedUp

__all__ = ["ClusterTrials", "clean_trial_folders", "pid_namespace", "run_trial_on_node", "time_pair_on_node",
           "trial_folder_prefix"]

_TIMING_SHARE = 0.01  # how much of the timing resource a timing task asks for (any node that has it qualifies)
_REFILL_S = 1.0  # how often free nodes are looked for while the tuner waits


class TimingPlace:
    """Where the search times: one node, chosen once, that carries ``resource`` (None: the first node);
    ``waiting``: a timing waits for the node or runs there, so no trial starts there meanwhile."""

    def __init__(self, nodes: list[ClusterNode], resource: str | None) -> None:
        self.resource = resource
        self.node = _timing_node(nodes, resource)
        self.waiting = False

    def resources(self) -> dict[str, float] | None:
        """What a timing task asks for: a share of the timing resource (any node that has it qualifies)."""
        return {self.resource: _TIMING_SHARE} if self.resource else None


def _timing_node(nodes: list[ClusterNode], resource: str | None) -> ClusterNode:
    if not resource:
        return nodes[0]
    carrying = [n for n in nodes if n.resources.get(resource, 0) > 0]
    if not carrying:
        have = sorted({k for n in nodes for k in n.resources if k not in ("CPU", "GPU", "memory",
                                                                         "object_store_memory")})
        raise ClusterError(f"No node of the cluster carries the timing resource {resource!r} "
                           f"(custom resources there: {', '.join(have) or 'none'}); start the target node with "
                           f"`ray start --address HEAD:PORT --resources '{{\"{resource}\": 1}}'`.")
    return carrying[0]


class TrialData:
    """The search's bytes in the cluster's object store, each shipped once: the source model, the path data sets
    (a folder zipped) and the workspace's kept calibrations and node roundings."""

    def __init__(self, cluster: RayCluster, model: Path) -> None:
        if external_data_files(model):
            raise ClusterError("A model with external data files cannot be tuned on a cluster yet: "
                               "save it as one .onnx file (under 2 GB), or tune without --ray.")
        self._cluster = cluster
        self.source = model
        self.source_ref = cluster.put(model.read_bytes())
        self._packed: dict[str, Any] = {}
        self._started = time.time()  # the roundings written since are this search's trials': those it ships

    def path_data(self, ref: DataRef | None) -> tuple[tuple[str, bool] | None, Any]:
        """((name, is a folder), its object-store reference) of path data; (None, None) for a bundled sample's
        set or random data (every node has those)."""
        if ref is None or ref.path is None:
            return None, None
        path = Path(ref.path)
        key = str(path.resolve())
        if key not in self._packed:  # a folder is zipped once; put() ships the same bytes once
            self._packed[key] = self._cluster.put(pack_dir(path) if path.is_dir() else path.read_bytes())
        return (path.name, path.is_dir()), self._packed[key]

    def calibrations(self, workspace: Any) -> Any:
        """The workspace's kept calibrations and the node fits (GPTQ roundings, bias corrections) this search's
        trials made, as one object-store reference."""
        blob = pack_kept(Path(workspace.root), roundings_since=self._started)
        return self._cluster.put(blob) if blob is not None else None


class InFlight:
    """The trial tasks submitted and maybe not ended, and how many trials each node was given."""

    def __init__(self, cluster: RayCluster) -> None:
        self._cluster = cluster
        self.tasks: list[ClusterTask] = []
        self.placed: dict[NodeId, int] = {}

    def busy(self) -> dict[NodeId, int]:
        """Trial tasks still running (or waiting) on each node; the ended ones leave the set."""
        self.tasks = self._cluster.unfinished(self.tasks)
        out: dict[NodeId, int] = {}
        for t in self.tasks:
            node = t.node_id or NodeId("")
            out[node] = out.get(node, 0) + 1
        return out

    def least_busy(self, alive: list[NodeId]) -> NodeId | None:
        """The node with the fewest trial tasks, among those the one given the fewest trials (round robin)."""
        busy = self.busy()
        return min(alive, key=lambda n: (busy.get(n, 0), self.placed.get(n, 0), alive.index(n))) if alive else None


@dataclass
class Ahead:
    """The trials the tuner runs next (its last prefetch), in its order, and the tasks of those started ahead (by
    the spec's key)."""

    specs: list[RunSpec] = field(default_factory=list)
    workspace: Any = None
    started: dict[str, ClusterTask] = field(default_factory=dict)
    next_refill: float = 0.0

    def unwanted(self) -> list[ClusterTask]:
        """The tasks started ahead whose trial is no longer among ``specs``, taken out."""
        wanted = {_key(s) for s in self.specs}
        return [self.started.pop(k) for k in [k for k in self.started if k not in wanted]]

    def next_to_start(self) -> RunSpec | None:
        return next((s for s in self.specs if _key(s) not in self.started), None)

    def take(self, spec: RunSpec) -> ClusterTask | None:
        """``spec`` leaves the queue; its task if it started ahead."""
        key = _key(spec)
        self.specs = [s for s in self.specs if _key(s) != key]
        return self.started.pop(key, None)


class _ClusterHandle:
    """A trial on the cluster, as the tuner waits for a run service handle: ``wait``/``drain``/``cancel``, then
    ``result`` (an :class:`Artifact` recorded here) or ``error``; ``node``: the node it ran on, ``span``: when its
    accuracy work ran there (epoch seconds, taken on the node).

    It has no thread: :meth:`wait` looks at its task on the caller's thread (the search's), so the task and the
    runner change on that thread alone; :meth:`cancel`, which may come from another thread (Cancel), sets an
    event that the next look acts on."""

    def __init__(self, trials: ClusterTrials, spec: RunSpec, out: Path | None, workspace: Any,
                 task: ClusterTask) -> None:
        self._trials, self._spec, self._out, self._ws = trials, spec, out, workspace
        self._task = task
        self._waiting = TaskWait([task])
        self._cancel = threading.Event()
        self.result: Artifact | None = None
        self.error: OrtlabError | Cancelled | None = None
        self.node = NodeName("")
        self.span: tuple[float, float] | None = None

    @property
    def ended(self) -> bool:
        return self.result is not None or self.error is not None

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ended:
            self._look()
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self.ended

    def _look(self) -> None:
        if self._cancel.is_set():
            self._trials.cluster.cancel([self._task])
            self.error = Cancelled()
            return
        self._trials.refill()  # while the tuner waits for this trial, a node that is free takes the next one
        try:
            if self._trials.cluster.advance(self._waiting):
                self._settle(self._waiting.in_order()[0])
        except (OrtlabError, Cancelled) as exc:
            self.error = exc
        except (ray_module().exceptions.RayError, OSError, zipfile.BadZipFile) as exc:  # Ray's own, or the files'
            self.error = OrtlabError(f"On the cluster: {type(exc).__name__}: {exc}")

    def _settle(self, outcome: Any) -> None:
        if isinstance(outcome, ClusterTaskFailed):
            cause = outcome.cause
            self.error = _on_node(cause, outcome.node) if isinstance(cause, OrtlabError) and not outcome.lost \
                else OrtlabError(f"On the cluster: {outcome.message}")
            return
        self.node = self._trials.node_name(self._task.ran_on)
        if self._task.lost_on:
            lost = ", ".join(dict.fromkeys(self._trials.node_name(n) for n in self._task.lost_on))
            self._trials.retried.append(f"A trial's node was lost ({lost}); the trial ran again on {self.node}.")
        self.span = outcome[3]
        self.result = self._trials.adopt(outcome, self._spec, self._out, self._ws, self.node)

    def drain(self, on_event: Any = None) -> list[Any]:
        return []

    def cancel(self) -> None:
        self._cancel.set()


class ClusterTrials:
    """Tune's trials on a Ray cluster (see the module's docstring). ``timing_resource``: the custom resource of
    the node(s) timings run on (None: any node, chosen once).

    Its state (the tasks, the queue, the timing node's) belongs to the thread that runs the search, the one that
    calls its methods and waits for its trials' handles: no thread of its own changes it."""

    def __init__(self, address: str, timing_resource: str | None, model: str, *,
                 launch: Callable[..., Any], values: dict[str, float] | None = None) -> None:
        self.launch = launch  # run_trial_on_node's recipe child: ortlab.runs.prepare.start_unrecorded_recipe
        self.values = dict(values or {}) or None  # control inputs' values (a VAD's sr) for the timing
        with ExitStack() as undo:  # a cluster the search cannot use is let go at once
            self.cluster = RayCluster.connect(address)
            undo.callback(self.cluster.close)
            self.nodes = self.cluster.nodes()
            self.timing = TimingPlace(self.nodes, timing_resource)
            self._data = TrialData(self.cluster, Path(model))
            undo.pop_all()
        self.timing_machine: Machine | None = self.timing.node.machine  # the last timing's (before one: its node's)
        self.timing_node = NodeName("")  # the node of the last timing
        self.last: Any = None  # the last timing's (source, candidate) summaries
        self.where = (f"Trials ran on a Ray cluster at {address} ({len(self.nodes)} nodes); timings on "
                      f"{self.timing.node.name()}: {self.timing.node.machine.summary()}.")
        self._inflight = InFlight(self.cluster)
        self.ahead = Ahead()
        self.retried: list[str] = []  # a note for each trial that ran again after its node was lost

    def node_of(self, handle: Any) -> str:
        """The node a finished trial ran on (:class:`ortlab.runs.trial_runner.TrialRunner`)."""
        return handle.node

    def node_name(self, node_id: NodeId | None) -> NodeName:
        return next((n.name() for n in self.nodes if n.node_id == node_id), None) or self.cluster.node_name(node_id)

    def submit_trial(self, spec: RunSpec, workspace: Any, node: NodeId | None = None) -> ClusterTask:
        """The trial's Ray task, on ``node`` or else the least busy node (among those, round robin); it takes all
        the node's CPUs. The spec is prepared on the node (the launch's :func:`ortlab.runs.prepare.prepare_run`): its
        recipe is validated against that node's providers and CPU, which run it."""
        if node is None:
            node = self._inflight.least_busy(self.cluster.fitting())
        if node is not None:
            self._inflight.placed[node] = self._inflight.placed.get(node, 0) + 1
        data = self._data
        task = self.cluster.submit(run_trial_on_node, self.launch, spec.to_dict(), data.source.name, data.source_ref,
                                   *data.path_data(spec.calibration), *data.path_data(spec.evaluation),
                                   data.calibrations(workspace), os.environ.get(MEMORY_ENV), node_id=node,
                                   spread=True, num_cpus=None)
        self._inflight.tasks.append(task)
        return task

    def prefetch(self, specs: Iterable[RunSpec], workspace: Any) -> None:
        """The trials that come next (``specs``, in the tuner's order; the first is the next :meth:`start`). A
        trial started ahead that is no longer among them (the queue changed) is cancelled; the first ones not
        started yet start now on the nodes with nothing to do, and more as nodes free up (:meth:`refill`)."""
        self.ahead.specs, self.ahead.workspace = list(specs), workspace
        self.cluster.cancel(self.ahead.unwanted())
        self.refill(now=True)

    def refill(self, now: bool = False) -> None:
        """Starts the next trials of :meth:`prefetch`, in order, on the nodes that have nothing to do: no trial task
        there, and not the timing node while a timing waits for it. Called while the tuner waits for a trial or a
        timing, so a node that finishes early takes the next trial at once (at most once a second unless
        ``now``). A trial that cannot start ahead is left to :meth:`start`, which reports its error as the
        trial's."""
        ahead = self.ahead
        if not ahead.specs or (not now and time.monotonic() < ahead.next_refill):
            return
        ahead.next_refill = time.monotonic() + _REFILL_S
        busy = self._inflight.busy()
        for node in self.cluster.fitting():
            if busy.get(node) or (self.timing.waiting and node == self.timing.node.node_id):
                continue
            spec = ahead.next_to_start()
            if spec is None:
                return
            try:
                ahead.started[_key(spec)] = self.submit_trial(spec, ahead.workspace, node)
            except OrtlabError:
                ahead.specs.remove(spec)

    def start(self, spec: RunSpec, out: Path | None, workspace: Any) -> _ClusterHandle:
        """The trial of ``spec``: its prefetched task when there is one, else a new task."""
        task = self.ahead.take(spec) or self.submit_trial(spec, workspace)
        return _ClusterHandle(self, spec, out, workspace, task)

    def adopt(self, outcome: tuple[dict[str, Any], bytes, bytes, tuple[float, float]], spec: RunSpec, out: Path | None,
              workspace: Any, node: NodeName) -> Artifact:
        """The artifact a node made, written into this workspace (``out`` or a new run folder) and recorded in
        its History."""
        plain, files, calibrations, _ = outcome
        keep_new_results(calibrations, Path(workspace.root))
        run_dir = Path(out) if out is not None else workspace.new_artifact_dir()
        run_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(files)) as zf:
            zf.extractall(run_dir)
        made = Artifact.from_dict(plain)
        artifact = replace(made, model_path=run_dir / Path(made.model_path).name, source_path=self._data.source,
                           origin="tune", spec=spec.undecided(),
                           notes=[*made.notes, f"Quantized and evaluated on the cluster node {node}."])
        (run_dir / ARTIFACT_FILE).unlink(missing_ok=True)
        artifact.save()
        try:
            artifact = replace(artifact, run_id=History(workspace.db_path).add(artifact))
            artifact.save()
        except OrtlabError as exc:
            artifact = replace(artifact, notes=[*artifact.notes, f"Not recorded in History: {exc.message}"])
        return artifact

    def measure(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, *,
                shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp:
        """The tuner's clock on the timing node: ``candidate`` against ``reference`` (the source, or a trial timed
        head to head), interleaved, on that node; the task takes all the node's CPUs (nothing else runs there
        meanwhile) and times with as many threads, unless ``cfg`` names a count."""
        cand = self.cluster.put(Path(candidate).read_bytes())
        source = self._data.source_ref if Path(reference) == self._data.source else \
            self.cluster.put(Path(reference).read_bytes())
        task = self.cluster.submit(time_pair_on_node, Path(reference).name, source, cand, cfg,
                                   batch_size, shapes, self.values, node_id=self.timing.node.node_id,
                                   resources=self.timing.resources(), num_cpus=None)
        self.timing.waiting = True
        try:
            outcome = self.cluster.wait([task], cancelled=lambda: self._refilled(cancel))[0]
        finally:
            self.timing.waiting = False
        if isinstance(outcome, ClusterTaskFailed):
            raise outcome.cause if isinstance(outcome.cause, OrtlabError) and not outcome.lost else \
                OrtlabError(f"Timing on the cluster: {outcome.message}")
        speed, self.last, self.timing_machine = outcome
        self.timing_node = self.node_name(task.ran_on)
        return speed

    def _refilled(self, cancel: CancelToken) -> bool:
        """While a timing waits: free nodes take the next trials; whether the search was cancelled."""
        self.refill()
        return cancel.cancelled

    def close(self) -> None:
        """Cancels the trial tasks still running (those started ahead that the search did not take), removes the
        folders cancelled trials left on each node (:func:`clean_trial_folders`), and disconnects."""
        self.ahead = Ahead()
        self.cluster.cancel(self._inflight.tasks)
        try:
            self._clean_nodes()
        finally:
            self.cluster.close()

    def _clean_nodes(self) -> list[str]:
        """Runs :func:`clean_trial_folders` on every node the search used; the folders still there after it
        (their trial's processes outlived the wait), as "node: folder"."""
        nodes = [n.node_id for n in self.nodes]
        try:
            tasks = [self.cluster.submit(clean_trial_folders, node_id=n, retries=0, num_cpus=0) for n in nodes]
        except ClusterError:  # a node gone since the search began: nothing of its to clean from here
            return []
        left = []
        for node, got in zip(nodes, self.cluster.wait(tasks, timeout_s=CLEAN_WAIT_S * 3)):
            if isinstance(got, list):
                left += [f"{self.node_name(node)}: {folder}" for folder in got]
        return left


def _on_node(error: OrtlabError, node: NodeName) -> OrtlabError | Cancelled:
    """A trial's error as the node raised it (its class, message and step), with the node named."""
    return error_of(type(error).__name__, f"{error.message} It ran on the cluster node {node}.", error.step)


def _key(spec: RunSpec) -> str:
    return json.dumps(spec.to_dict(), sort_keys=True, default=str)
