"""Tune's trials on a Ray cluster (``ortlab tune --ray ADDRESS``): :class:`ClusterTrials`, the tuner's trial
runner beside :class:`ortlab.runs.tune.LocalTrials` (a child process per recipe here: the behaviour without
``--ray``).

On a cluster the accuracy work of a trial (quantize + evaluate) is a Ray task on any node (round robin over
the nodes); the source model, the evaluation/calibration files and the workspace's kept calibrations go through
the object store once, by hash (:meth:`RayCluster.put`); calibrations a node makes are kept here, for the next
trial on any node. Timing runs only on a node carrying ``timing_resource``, the same node for every
trial and finalist, with the one clock (:class:`ortlab.timing.child_runs.PairTimer`), and each timing records
that node's machine. The trial comes back here as an artifact folder recorded in this workspace's History. A
node lost mid-trial: the trial runs once more on another node, then fails with the node named.

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

On its node a trial runs as a local one does: in a recipe child of the run service
(:func:`ortlab.runs.service.start_unrecorded_recipe`, through :class:`ortlab.runtime.child.Child`), under the
same memory limit (``$ORTLAB_RUN_MEMORY_GB`` where the search runs, else the node's default) and time limit; a
trial over the limit fails with the local message and the node named. Ray reuses its worker processes, so the
limit is set in the child, never in the worker. The trial's files (the child's scratch folder too) live in a
folder ``ortlab-trial-<worker pid>-ns<pid namespace>-…`` in the node's temp folder, removed when the task ends. Cancelling the
task (the search no longer wants a prefetched trial, Cancel, a time limit) force-kills its Ray worker, and Ray
kills that worker's child processes (its default, ``RAY_kill_child_processes_on_worker_exit``); where it does
not, the child sees its pipe to the worker close, removes the trial folder and kills its process group. A
folder left by a killed trial is removed by the next trial task that starts on that node, once both the worker
and the child named in it are gone (only folders with that name, of this user and pid namespace, whose pids
are dead); when
the search ends, each node it used removes the folders its cancelled trials left (:func:`clean_trial_folders`), and
``ortlab cluster stop`` removes what is left on its machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.layout import ARTIFACT_FILE
from ortlab.core.progress import CancelToken
from ortlab.model.inspect import external_data_files
from ortlab.runs.artifact import Artifact
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.history import History
from ortlab.runs.prepare import prepare_run
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.trial_folders import CLEAN_WAIT_S, clean_trial_folders, pid_namespace, remove_stale_trial_folders
from ortlab.runs.trial_folders import trial_folder_prefix
from ortlab.runtime.child import MEMORY_ENV, STOP_GRACE_S, default_memory_gb, error_of
from ortlab.runtime.machine import Machine, this_machine
from ortlab.runtime.ray_cluster import ClusterError, ClusterNode, ClusterTask, ClusterTaskFailed, RayCluster, ray_module
from ortlab.settings.config import BenchConfig
from ortlab.timing.stats import SpeedUp

__all__ = ["ClusterTrials", "clean_trial_folders", "pid_namespace", "run_trial_on_node", "time_pair_on_node",
           "trial_folder_prefix"]

_TIMING_SHARE = 0.01  # how much of the timing resource a timing task asks for (any node that has it qualifies)
_REFILL_S = 1.0  # how often free nodes are looked for while the tuner waits


# -- on the node --------------------------------------------------------------------------------------------------


def _unpack(blob: bytes, is_dir: bool, name: str, into: Path) -> str:
    into.mkdir()
    target = into / name
    if is_dir:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            zf.extractall(target)
    else:
        target.write_bytes(blob)
    return str(target)


def _pack_dir(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(folder).as_posix())
    return buf.getvalue()


def run_trial_on_node(launch: Callable[..., Any], spec_plain: dict[str, Any], model_name: str, model_blob: bytes,
                      calibration: tuple[str, bool] | None, calibration_blob: bytes | None,
                      evaluation: tuple[str, bool] | None, evaluation_blob: bytes | None,
                      calibrations_blob: bytes | None = None, memory_setting: str | None = None,
                      ) -> tuple[dict[str, Any], bytes, bytes, tuple[float, float]]:
    """A Ray task: run the prepared spec on this node in a recipe child (the run service's, with its memory and
    time limits; the source and path data — ``(name, is a folder)`` and its bytes, a folder zipped — written to a
    trial folder first) and return the artifact (plain) and its folder's files (zip), the calibration cache
    after the run (zip) and when the work started and ended (epoch seconds). ``calibrations_blob``: the
    workspace's kept calibrations (zip), so a trial reuses one made on any node. ``launch``: the run service's
    :func:`ortlab.runs.service.start_unrecorded_recipe` (handed in by the tuner, which imports the service: this
    module stays below it). ``memory_setting``:
    ``$ORTLAB_RUN_MEMORY_GB`` where the search runs (None: this node's default limit). The blobs are top-level
    arguments: Ray hands them over from the object store."""
    began = time.time()
    here = Path(tempfile.gettempdir())
    remove_stale_trial_folders(here)
    tmp = Path(tempfile.mkdtemp(prefix=trial_folder_prefix(), dir=here))
    handle: Any = None
    try:
        source = tmp / "source"
        source.mkdir()
        (source / model_name).write_bytes(model_blob)
        spec = RunSpec.from_dict(spec_plain)
        spec = replace(spec, model=str(source / model_name),
                       calibration=_moved(spec.calibration, calibration, calibration_blob, tmp / "calibration"),
                       evaluation=_moved(spec.evaluation, evaluation, evaluation_blob, tmp / "evaluation"))
        kept = tmp / "calibrations"
        kept.mkdir()
        if calibrations_blob:
            with zipfile.ZipFile(io.BytesIO(calibrations_blob)) as zf:
                zf.extractall(kept)
        out = tmp / "out"
        out.mkdir()
        handle = launch(spec, out, calibrations=kept, owned_dir=tmp,
                        memory_gb=default_memory_gb(spec.recipe.target, memory_setting))
        artifact = handle.follow()  # Ray's cancel without force (KeyboardInterrupt here) stops the child
        return artifact.to_dict(), _pack_dir(out), _pack_dir(kept), (began, time.time())
    finally:
        if handle is not None and not handle.wait(0):  # left by an error here: its child stops first
            handle.cancel()
            handle.wait(STOP_GRACE_S * 2)
        shutil.rmtree(tmp, ignore_errors=True)


def time_pair_on_node(source_name: str, source_blob: bytes, candidate_blob: bytes, cfg: BenchConfig,
                      batch_size: int, shapes: dict[str, list[int]]) -> tuple[SpeedUp, Any, Machine]:
    """A Ray task: time the candidate against the source on this node with the one clock; returns the speed-up,
    the (source, candidate) summaries and this node's machine."""
    from ortlab.timing.child_runs import PairTimer

    tmp = Path(tempfile.mkdtemp(prefix="ortlab-timing-"))
    try:
        ref, cand = tmp / source_name, tmp / f"candidate-{source_name}"
        ref.write_bytes(source_blob)
        cand.write_bytes(candidate_blob)
        timer = PairTimer(str(ref), shapes=shapes)
        try:
            speed = timer(str(cand), cfg, batch_size, cancel=CancelToken())
            return speed, timer.last, this_machine(cfg.intra_op_threads)
        finally:
            timer.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _keep_new_calibrations(blob: bytes, folder: Path) -> None:
    """Calibrations a node made, added to this workspace's (a file already here is kept)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        for name in zf.namelist():
            target = folder / Path(name).name
            if name.endswith(".json") and not target.exists():
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))


def _moved(ref: DataRef | None, what: tuple[str, bool] | None, blob: bytes | None, into: Path) -> DataRef | None:
    if ref is None or what is None or blob is None:
        return ref
    return replace(ref, path=_unpack(blob, what[1], what[0], into))


# -- here ---------------------------------------------------------------------------------------------------------


class _ClusterHandle:
    """A trial on the cluster, as the tuner waits for a run service handle: ``wait``/``drain``/``cancel``,
    then ``result`` (an :class:`Artifact` recorded here) or ``error``."""

    def __init__(self, trials: ClusterTrials, spec: RunSpec, out: Path | None, workspace: Any,
                 task: ClusterTask | None = None) -> None:
        self._trials, self._spec, self._out, self._ws = trials, spec, out, workspace
        self._cancel = False
        self.result: Artifact | None = None
        self.error: OrtlabError | Cancelled | None = None
        self.node = ""
        self._task = task or trials.submit_trial(spec, workspace)
        self._thread = threading.Thread(target=self._follow, name="ortlab-cluster-trial", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            outcome = self._trials.cluster.wait([self._task], cancelled=lambda: self._cancel)[0]
            if isinstance(outcome, ClusterTaskFailed):
                cause = outcome.cause
                self.error = _on_node(cause, outcome.node) if isinstance(cause, OrtlabError) and not outcome.lost \
                    else OrtlabError(f"On the cluster: {outcome.message}")
                return
            self.node = self._trials.node_name(self._task.ran_on)
            if self._task.lost_on:
                lost = ", ".join(dict.fromkeys(self._trials.node_name(n) for n in self._task.lost_on))
                self._trials.retried.append(f"A trial's node was lost ({lost}); the trial ran again on {self.node}.")
            self.result = self._trials.adopt(outcome, self._spec, self._out, self._ws, self.node)
        except (OrtlabError, Cancelled) as exc:
            self.error = exc
        except Exception as exc:  # Ray's own errors while waiting
            self.error = OrtlabError(f"On the cluster: {type(exc).__name__}: {exc}")

    def wait(self, timeout: float | None = None) -> bool:
        if not self._cancel:
            self._trials.refill()  # while the tuner waits for this trial, a node that is free takes the next one
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def drain(self, on_event: Any = None) -> list[Any]:
        return []

    def cancel(self) -> None:
        self._cancel = True


class ClusterTrials:
    """Tune's trials on a Ray cluster (see the module's docstring). ``timing_resource``: the custom resource of
    the node(s) timings run on (None: any node, chosen once)."""

    def __init__(self, address: str, timing_resource: str | None, model: str, *,
                 launch: Callable[..., Any]) -> None:
        self.launch = launch  # run_trial_on_node's recipe child: ortlab.runs.service.start_unrecorded_recipe
        self.cluster = RayCluster.connect(address)
        self.timing_resource = timing_resource
        self.model = model
        self._names: dict[str, str] = {}
        self.nodes = self.cluster.nodes()
        for n in self.nodes:
            self._names[n.node_id] = n.name()
        self._timing_node = self._pick_timing_node(self.nodes)
        self.timing_machine: Machine = self._timing_node.machine
        self.where = (f"Trials ran on a Ray cluster at {address} ({len(self.nodes)} nodes); timings on "
                      f"{self._timing_node.name()}: {self.timing_machine.summary()}.")
        self._packed: dict[str, Any] = {}
        self._placed: dict[str, int] = {}  # trials given to each node
        self._data = self._data_refs()
        self.last: Any = None
        self.ran_on: list[str] = []  # the node of each trial, in order
        self.timed_on: list[str] = []  # the node of each timing
        self.timing_node = ""  # the node of the last timing
        self.retried: list[str] = []  # a note for each trial that ran again after its node was lost
        self.spans: list[tuple[str, float, float]] = []  # (node, start, end) of each trial's accuracy work, taken
        self._prefetched: dict[str, ClusterTask] = {}  # by the spec: trials started ahead of the tuner
        self._inflight: list[ClusterTask] = []  # trial tasks submitted and maybe not finished
        self._ahead: list[RunSpec] = []  # the trials the tuner runs next, in its order (its last prefetch)
        self._workspace: Any = None
        self._timing = False  # a timing waits for the timing node or runs there: no trial starts there meanwhile
        self._next_refill = 0.0

    def _pick_timing_node(self, nodes: list[ClusterNode]) -> ClusterNode:
        if not self.timing_resource:
            return nodes[0]
        carrying = [n for n in nodes if n.resources.get(self.timing_resource, 0) > 0]
        if not carrying:
            have = sorted({k for n in nodes for k in n.resources if k not in ("CPU", "GPU", "memory",
                                                                             "object_store_memory")})
            raise ClusterError(f"No node of the cluster carries the timing resource {self.timing_resource!r} "
                               f"(custom resources there: {', '.join(have) or 'none'}); start the target node with "
                               f"`ray start --address HEAD:PORT --resources '{{\"{self.timing_resource}\": 1}}'`.")
        return carrying[0]

    def node_name(self, node_id: str | None) -> str:
        return self._names.get(node_id or "", "") or self.cluster.node_name(node_id)

    def _data_refs(self) -> dict[str, Any]:
        model = Path(self.model)
        if external_data_files(model):
            raise ClusterError("A model with external data files cannot be tuned on a cluster yet: "
                               "save it as one .onnx file (under 2 GB), or tune without --ray.")
        return {"model": self.cluster.put(model.read_bytes())}

    def _data_blob(self, ref: DataRef | None) -> tuple[tuple[str, bool] | None, Any]:
        """((name, is a folder), its object-store reference) of path data; (None, None) for a bundled sample's
        set or random data (every node has those)."""
        if ref is None or ref.path is None:
            return None, None
        path = Path(ref.path)
        key = str(path.resolve())
        if key not in self._packed:  # a folder is zipped once; put() ships the same bytes once
            self._packed[key] = self.cluster.put(_pack_dir(path) if path.is_dir() else path.read_bytes())
        return (path.name, path.is_dir()), self._packed[key]

    def submit_trial(self, spec: RunSpec, workspace: Any, node: str | None = None) -> Any:
        """The trial's Ray task, on ``node`` or else the least busy node (among those, round robin); it takes all
        the node's CPUs."""
        spec = prepare_run(spec)
        if node is None:
            alive = self.cluster.fitting()
            busy = self._busy()
            node = min(alive, key=lambda n: (busy.get(n, 0), self._placed.get(n, 0), alive.index(n))) if alive else None
        if node is not None:
            self._placed[node] = self._placed.get(node, 0) + 1
        task = self.cluster.submit(run_trial_on_node, self.launch, spec.to_dict(), Path(self.model).name, self._data["model"],
                                   *self._data_blob(spec.calibration), *self._data_blob(spec.evaluation),
                                   self._calibrations(workspace), os.environ.get(MEMORY_ENV), node_id=node,
                                   spread=True, num_cpus=None)
        self._inflight.append(task)
        return task

    def _busy(self) -> dict[str, int]:
        """Trial tasks still running (or waiting) on each node."""
        pending = [t for t in self._inflight if t.ref is not None]
        if pending:
            _, waiting = ray_module().wait([t.ref for t in pending], num_returns=len(pending), timeout=0)
            waiting_ids = {id(r) for r in waiting}
            self._inflight = [t for t in pending if id(t.ref) in waiting_ids]
        out: dict[str, int] = {}
        for t in self._inflight:
            out[t.node_id or ""] = out.get(t.node_id or "", 0) + 1
        return out

    def prefetch(self, specs: Iterable[RunSpec], workspace: Any) -> None:
        """The trials that come next (``specs``, in the tuner's order; the first is the next :meth:`start`). A
        trial started ahead that is no longer among them (the queue changed) is cancelled; the first ones not
        started yet start now on the nodes with nothing to do, and more as nodes free up (:meth:`refill`)."""
        self._ahead, self._workspace = list(specs), workspace
        wanted = {_key(s) for s in self._ahead}
        for key in [k for k in self._prefetched if k not in wanted]:
            self.cluster.cancel([self._prefetched.pop(key)])
        self.refill(now=True)

    def refill(self, now: bool = False) -> None:
        """Starts the next trials of :meth:`prefetch`, in order, on the nodes that have nothing to do: no trial task
        there, and not the timing node while a timing waits for it. Called while the tuner waits for a trial or a
        timing, so a node that finishes early takes the next trial at once (at most once a second unless
        ``now``). A trial that cannot start ahead is left to :meth:`start`, which reports its error as the
        trial's."""
        if not self._ahead or (not now and time.monotonic() < self._next_refill):
            return
        self._next_refill = time.monotonic() + _REFILL_S
        busy = self._busy()
        for node in self.cluster.fitting():
            if busy.get(node) or (self._timing and node == self._timing_node.node_id):
                continue
            spec = next((s for s in self._ahead if _key(s) not in self._prefetched), None)
            if spec is None:
                return
            try:
                self._prefetched[_key(spec)] = self.submit_trial(spec, self._workspace, node)
            except OrtlabError:
                self._ahead.remove(spec)

    def _calibrations(self, workspace: Any) -> Any:
        """The workspace's kept calibrations as one object-store reference (the same files: the same one)."""
        folder = CalibrationCache.in_workspace(workspace.root).folder
        return self.cluster.put(_pack_dir(folder)) if folder.is_dir() else None

    def start(self, spec: RunSpec, out: Path | None, workspace: Any) -> _ClusterHandle:
        """The trial of ``spec``: its prefetched task when there is one, else a new task."""
        key = _key(spec)
        self._ahead = [s for s in self._ahead if _key(s) != key]
        return _ClusterHandle(self, spec, out, workspace, self._prefetched.pop(key, None))

    def adopt(self, outcome: tuple[dict[str, Any], bytes, bytes, tuple[float, float]], spec: RunSpec, out: Path | None, workspace: Any,
              node: str) -> Artifact:
        """The artifact a node made, written into this workspace (``out`` or a new run folder) and recorded in
        its History."""
        plain, files, calibrations, (began, ended) = outcome
        self.spans.append((node, began, ended))
        _keep_new_calibrations(calibrations, CalibrationCache.in_workspace(workspace.root).folder)
        run_dir = Path(out) if out is not None else workspace.new_artifact_dir()
        run_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(files)) as zf:
            zf.extractall(run_dir)
        artifact = Artifact.from_dict(plain)
        artifact.model_path = run_dir / Path(artifact.model_path).name
        artifact.source_path = Path(self.model)
        artifact.origin, artifact.spec = "tune", spec.undecided()
        artifact.notes.append(f"Quantized and evaluated on the cluster node {node}.")
        (run_dir / ARTIFACT_FILE).unlink(missing_ok=True)
        self.ran_on.append(node)
        artifact.save()
        try:
            artifact.run_id = History(workspace.db_path).add(artifact)
            artifact.save()
        except OrtlabError as exc:
            artifact.notes.append(f"Not recorded in History: {exc.message}")
        return artifact

    def measure(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, *,
                shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp:
        """The tuner's clock on the timing node: ``candidate`` against the source, interleaved, on that node; the task
        takes all the node's CPUs (nothing else runs there meanwhile) and times with as many threads, unless
        ``cfg`` names a count."""
        cand = self.cluster.put(Path(candidate).read_bytes())
        task = self.cluster.submit(time_pair_on_node, Path(reference).name, self._data["model"], cand, cfg,
                                   batch_size, shapes, node_id=self._timing_node.node_id,
                                   resources={self.timing_resource: _TIMING_SHARE} if self.timing_resource else None,
                                   num_cpus=None)
        self._timing = True
        try:
            outcome = self.cluster.wait([task], cancelled=lambda: self._refilled(cancel))[0]
        finally:
            self._timing = False
        if isinstance(outcome, ClusterTaskFailed):
            raise outcome.cause if isinstance(outcome.cause, OrtlabError) and not outcome.lost else \
                OrtlabError(f"Timing on the cluster: {outcome.message}")
        speed, self.last, machine = outcome
        self.timing_machine = machine
        self.timing_node = self.node_name(task.ran_on)
        self.timed_on.append(self.timing_node)
        return speed

    def _refilled(self, cancel: CancelToken) -> bool:
        """While a timing waits: free nodes take the next trials; whether the search was cancelled."""
        self.refill()
        return cancel.cancelled

    def close(self) -> None:
        """Cancels the prefetched trials the search did not take, removes the folders cancelled trials left on
        each node (:func:`clean_trial_folders`), and disconnects."""
        self._ahead = []
        self.cluster.cancel(list(self._prefetched.values()))
        self._prefetched.clear()
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


def _on_node(error: OrtlabError, node: str) -> OrtlabError | Cancelled:
    """A trial's error as the node raised it (its class, message and step), with the node named."""
    return error_of(type(error).__name__, f"{error.message} It ran on the cluster node {node}.", error.step)


def _key(spec: RunSpec) -> str:
    return json.dumps(spec.to_dict(), sort_keys=True, default=str)
