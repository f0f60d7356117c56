"""A benchmark across the machines of a Ray cluster: every kind of node (its custom resources, else its CPU) times
every variant side by side in one task pinned to one node of that kind, with the one clock
(:func:`ortlab.timing.child_runs.time_interleaved`: each variant in its own child, warmed up, then timed in turn
block by block, as a benchmark on this machine times them), so
each speed-up is measured on one machine and stamped with it. Nodes on one host time one after the other (two
timings on one CPU would disturb each other); nodes on different hosts time at once.

The models travel through the cluster's object store (once per file, by hash); the node writes them to a
temporary folder and times them there. Each node kind's timing is recorded in the History as its own benchmark,
with that node's :class:`ortlab.runtime.machine.Machine`.
"""

from __future__ import annotations

import functools
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from ortlab.core.errors import BenchmarkError, Cancelled, OrtlabError
from ortlab.core.progress import ProgressEvent
from ortlab.core.text import one_line, utc_timestamp
from ortlab.model.inspect import external_data_files
from ortlab.runs.bench_queue import bench_queue_position, enqueue, leave_queue, wait_for_slot
from ortlab.runs.history import BenchVariant
from ortlab.runs.service import DONE, RUNNING, Handle, end_with_error, start_time_limit, timeout_from_env
from ortlab.runs.workspace import Workspace
from ortlab.runtime.executor import RayExecutor, TimeLimit
from ortlab.runtime import ray_cluster
from ortlab.runtime.child import default_memory_gb
from ortlab.runtime.machine import Machine, this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing import child_runs
from ortlab.timing.bench import LatencySummary
from ortlab.timing.compare import BenchComparison, ComparisonRow, compare_benchmarks

# resources every Ray node has: what is left (a user's own, such as "cpu_epyc") names the kind of machine
STANDARD_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


@dataclass(frozen=True)
class NodeKind:
    """One kind of node of the cluster: ``label`` (its custom resources, e.g. "cpu_epyc", else its CPU), the node
    that times for it (``node_id``, ``address``) and the CPUs it has (the timing task takes them all)."""

    label: str
    node_id: ray_cluster.NodeId
    address: str
    cpus: float = 1.0


@dataclass(frozen=True)
class PlannedVariant:
    """A variant as the node receives it: its id and name, and its files (the model first, then its external
    data, named relative to the model's folder), whose bytes follow the plan in this order."""

    id: str
    name: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class NodeBenchPlan:
    """What the timing task of a node is given: the benchmark's ``config``, the ``variants``, the inputs' shapes
    and values, and whether each child's peak memory is kept."""

    config: BenchConfig
    variants: tuple[PlannedVariant, ...]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    measure_memory: bool = False


@dataclass
class NodeTiming:
    """What the timing task of one node sends back: the machine it ran on and every variant × batch size."""

    machine: Machine
    summaries: list[LatencySummary]
    seconds: float


@dataclass
class KindResult:
    """One node kind's benchmark: its timing and speed-ups against the baseline on that node, or the error."""

    kind: NodeKind
    timing: NodeTiming | None = None
    comparison: BenchComparison | None = None
    error: str | None = None
    bench_id: int | None = None  # its History benchmark
    ran_on: ray_cluster.NodeId | None = None  # the node that timed it


@dataclass(frozen=True)
class ClusterRow:
    """One variant × batch size on one kind of machine, with its speed-up against the baseline on that machine."""

    variant: str
    name: str
    kind: str
    machine: Machine
    comparison: ComparisonRow
    is_baseline: bool

    @property
    def summary(self) -> LatencySummary:
        return self.comparison.summary

    @property
    def stamp(self) -> str:
        """The machine that timed it: "AMD EPYC 7B13 · AVX2 · 1 thread" (threads: the timing's setting)."""
        return machine_stamp(self.machine)


def machine_stamp(m: Machine) -> str:
    """CPU model, ISA flags and the timing's threads of ``m`` in one line."""
    threads = "default threads" if not m.threads else f"{m.threads} thread{'s' if m.threads > 1 else ''}"
    return " · ".join((m.cpu or m.arch or "unknown CPU", m.isa or "no SIMD flags read", f"{m.cores} cores", threads))


@dataclass
class ClusterBenchmark:
    """The variants timed on every node kind of the cluster at ``address``."""

    address: str
    variants: list[BenchVariant]
    config: BenchConfig
    kinds: list[KindResult] = field(default_factory=list)
    seconds: float = 0.0

    def rows(self) -> list[ClusterRow]:
        """One row per variant × machine (× batch size), variant by variant, the machines in the kinds' order."""
        names = {v.id: v.name for v in self.variants}
        order = {v.id: k for k, v in enumerate(self.variants)}
        out = []
        for k in self.kinds:
            if k.comparison is None or k.timing is None:
                continue
            for r in k.comparison.rows:
                out.append(ClusterRow(r.summary.variant, names.get(r.summary.variant, r.summary.variant),
                                      k.kind.label, k.timing.machine, r,
                                      r.summary.variant == k.comparison.baseline))
        kinds = {k.kind.label: j for j, k in enumerate(self.kinds)}
        return sorted(out, key=lambda r: (order.get(r.variant, 0), r.summary.batch_size, kinds[r.kind]))

    @property
    def failures(self) -> list[str]:
        """"<kind>: <why>" for each node kind whose timing failed."""
        return [f"{k.kind.label}: {k.error}" for k in self.kinds if k.error]


# -- which nodes time ------------------------------------------------------------------------------------------

def custom_resources(resources: dict[str, float]) -> list[str]:
    """The resources of a node that a user gave it (not Ray's CPU/GPU/memory, node:…, accelerator_type:…)."""
    return sorted(k for k, v in resources.items() if v > 0 and k not in STANDARD_RESOURCES
                  and not k.startswith(("node:", "accelerator_type:")))


def _cpu_of(node: Any) -> str:
    machine = getattr(node, "machine", None)
    return str(getattr(machine, "cpu", "") or getattr(machine, "arch", "") or "unknown CPU")


def node_kinds(nodes: Sequence[Any], named: Sequence[str] = ()) -> list[NodeKind]:
    """The kinds of node to time on, one node each: with ``named`` resources, one kind per name (the first node
    that carries it); else one per distinct set of custom resources (nodes without any: one per CPU model), in
    the order of their labels.
    BenchmarkError naming the resources there are when a named one is on no node."""
    ordered = sorted(nodes, key=lambda n: (n.address, n.node_id))

    def kind(label: str, node: Any) -> NodeKind:
        return NodeKind(label, node.node_id, node.address, float(node.resources.get("CPU", 1.0)) or 1.0)

    if named:
        out = []
        for name in named:
            node = next((n for n in ordered if float(n.resources.get(name, 0)) > 0), None)
            if node is None:
                there = sorted({r for n in ordered for r in custom_resources(n.resources)})
                raise BenchmarkError(f"No node of the cluster carries the resource {name!r} (the nodes carry: "
                                     f"{', '.join(there) or 'no custom resources'}). Start a node with "
                                     f"--resources '{{\"{name}\": 1}}' or name one of those.")
            out.append(kind(name, node))
        return out
    seen: dict[str, NodeKind] = {}
    for n in ordered:
        label = ",".join(custom_resources(n.resources)) or _cpu_of(n)
        seen.setdefault(label, kind(label, n))
    return sorted(seen.values(), key=lambda k: k.label.lower())


def waves(kinds: Sequence[NodeKind]) -> list[list[NodeKind]]:
    """The kinds grouped into waves that time at once: at most one node per host in each wave."""
    by_host: dict[str, list[NodeKind]] = {}
    for k in kinds:
        by_host.setdefault(k.address.rsplit(":", 1)[0], []).append(k)
    return [[k for k in wave if k is not None] for wave in zip_longest(*by_host.values())]


# -- the task on a node ------------------------------------------------------------------------------------------

def _model_files(path: str) -> list[tuple[str, Path]]:
    """The model file and its external data files, as (name relative to the model's folder, path)."""
    model = Path(path)
    return [(model.name, model), *((loc, p) for loc, p in external_data_files(model).items())]


def time_on_node(plan: NodeBenchPlan, *blobs: bytes) -> NodeTiming:
    """Runs on a cluster node: write the variants' files (``blobs``, in the order ``plan`` lists them) to a
    temporary folder and time them with the one clock: at each batch size every variant in its own child, all
    warmed up, then timed in turn block by block (:func:`ortlab.timing.child_runs.time_interleaved`)."""
    config = plan.config
    began = time.monotonic()
    it = iter(blobs)
    summaries: list[LatencySummary] = []
    with tempfile.TemporaryDirectory(prefix="ortlab-cluster-bench-") as tmp:
        paths = []
        for k, v in enumerate(plan.variants):
            folder = Path(tmp) / str(k)
            for name in v.files:
                target = folder / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(next(it))
            paths.append((v.id, folder / v.files[0]))
        blocks = functools.partial(child_runs.latency_blocks, memory_gb=default_memory_gb(config.target))
        for batch in config.batch_sizes:
            series = [blocks(path, config, batch, variant=vid, shapes=plan.shapes or None, values=plan.values or None)
                      for vid, path in paths]
            try:
                child_runs.time_interleaved(series, config)
                for s in series:
                    s.finish()
                summaries += [s.summary(peak_rss_mb=s.peak_rss_mb if plan.measure_memory else None)
                              for s in series]
            finally:
                for s in series:
                    s.close()
    order = {vid: k for k, (vid, _) in enumerate(paths)}
    summaries.sort(key=lambda s: order[s.variant])  # variant by variant, as a benchmark here lists them
    return NodeTiming(this_machine(config.intra_op_threads), summaries, time.monotonic() - began)


# -- the driver --------------------------------------------------------------------------------------------------

class ClusterBenchHandle(Handle):
    """A benchmark across a Ray cluster; ``result`` is the :class:`ClusterBenchmark`, ``bench_id`` the History
    benchmark of its first node kind."""

    kind = "bench"

    def __init__(self, variants: Sequence[BenchVariant], config: BenchConfig, address: str,
                 nodes: Sequence[str] = ()) -> None:
        super().__init__()
        self.variants = list(variants)
        self.config = config
        self.address = address
        self.nodes = list(nodes)
        self.shapes: dict[str, list[int]] = {}
        self.values: dict[str, float] = {}
        self.bench_id: int | None = None
        self.record = None  # a benchmark across a cluster is one record per node kind (``result.kinds``)
        self.baseline_rss_mb: float | None = None  # no memory baseline: the nodes report each child's peak
        self.timeout_s: float | None = None
        self.timed_out = False

    def time_out(self) -> None:
        if not self.done:
            self.timed_out = True
            self._cancel.cancel()

    @property
    def queue_position(self) -> int:
        return bench_queue_position(self.id)


def start(variants: Sequence[BenchVariant], config: BenchConfig, address: str, *, nodes: Sequence[str] = (),
          measure_memory: bool = False, workspace=None, origin: str = "app",
          shapes: dict[str, list[int]] | None = None, values: dict[str, float] | None = None,
          connect: Callable[[str], Any] | None = None) -> ClusterBenchHandle:
    """Time ``variants`` on every node kind of the Ray cluster at ``address`` ("auto" or host:port; or only on the
    ``nodes`` resources named), in the background after the benchmarks queued in this process; each kind recorded
    in the History. Returns the handle at once (:class:`ClusterBenchHandle`)."""
    if not variants:
        raise BenchmarkError("Pick at least one variant to time.")
    if config.openvino:
        raise BenchmarkError("OpenVINO rows are timed on this machine only: leave out --openvino with a cluster.")
    if config.profile:
        raise BenchmarkError("Profiles are written on this machine only: leave out profiling with a cluster.")
    ws = workspace if workspace is not None else Workspace()
    handle = ClusterBenchHandle(variants, config, address.strip(), nodes)
    handle.timeout_s = timeout_from_env()
    handle.shapes = {k: [int(x) for x in v] for k, v in (shapes or {}).items()}
    handle.values = dict(values or {})
    enqueue(handle)
    threading.Thread(target=_worker, args=(handle, ws, origin, measure_memory, connect or ray_cluster.RayCluster.connect),
                     name=f"ortlab-cluster-bench-{handle.id}", daemon=True).start()
    return handle


def _plan(handle: ClusterBenchHandle, measure_memory: bool) -> tuple[NodeBenchPlan, list[Path]]:
    files: list[Path] = []
    listed = []
    for v in handle.variants:
        named = _model_files(v.path)
        listed.append(PlannedVariant(v.id, v.name, tuple(n for n, _ in named)))
        files += [p for _, p in named]
    return NodeBenchPlan(handle.config, tuple(listed), handle.shapes, handle.values, measure_memory), files


def _connect(connect: Callable[[str], Any], address: str) -> Any:
    try:
        return connect(address)
    except OrtlabError:
        raise
    except Exception as exc:  # ray.init fails in many ways on a bad address: one message names it
        raise BenchmarkError(f"Could not connect to the Ray cluster at {address!r}: {one_line(exc).rstrip('.')}. Check the "
                             "address (host:port of `ray start --head`, or auto) and that the head runs.") from exc


def _time_kinds(handle: ClusterBenchHandle, cluster: Any, kinds: list[NodeKind], plan: NodeBenchPlan,
                files: list[Path]) -> list[KindResult]:
    refs = [cluster.put(p.read_bytes()) for p in files]
    results = {k.label: KindResult(k) for k in kinds}
    executor = RayExecutor(cluster)
    done = 0
    for wave in waves(kinds):
        handle.put(ProgressEvent("bench", done, len(kinds), "timing on " + ", ".join(k.label for k in wave)))
        jobs = [executor.submit(time_on_node, plan, *refs, node_id=k.node_id, retries=0, num_cpus=k.cpus)
                for k in wave]
        got = executor.results(jobs, cancelled=lambda: handle.cancel_requested)
        if handle.cancel_requested:
            executor.cancel(jobs)
            raise Cancelled(step="bench")
        for k, job, out in zip(wave, jobs, got):
            if isinstance(out, NodeTiming):
                results[k.label].timing = out
                results[k.label].ran_on = ray_cluster.NodeId(job.ran_on) if job.ran_on else k.node_id
            else:
                results[k.label].error = one_line(getattr(out, "message", None) or out)
        done += len(wave)
    handle.put(ProgressEvent("bench", len(kinds), len(kinds), "done"))
    return [results[k.label] for k in kinds]


def _worker(handle: ClusterBenchHandle, ws, origin: str, measure_memory: bool, connect: Callable[[str], Any]) -> None:
    timer_limit: TimeLimit | None = None
    began = time.monotonic()
    cluster = None
    try:
        try:
            wait_for_slot(handle)
            handle.state = RUNNING
            began = time.monotonic()
            timer_limit = start_time_limit(handle)
            plan, files = _plan(handle, measure_memory)
            handle.put(ProgressEvent("bench", 0, None, f"connecting to the Ray cluster at {handle.address}"))
            cluster = _connect(connect, handle.address)
            kinds = node_kinds(cluster.nodes(), handle.nodes)
            if not kinds:
                raise BenchmarkError(f"The Ray cluster at {handle.address} has no node to time on.")
            results = _time_kinds(handle, cluster, kinds, plan, files)
        finally:
            if timer_limit is not None:
                timer_limit.cancel()
            if cluster is not None:
                cluster.close()
            leave_queue(handle)
        baseline = handle.variants[0].id
        for r in results:
            if r.timing is not None:
                r.comparison = compare_benchmarks(r.timing.summaries, baseline=baseline)
                r.bench_id = ws.history().add_benchmark(handle.variants, handle.config, r.timing.summaries,
                                                        utc_timestamp(), origin=origin, machine=r.timing.machine)
        bench = ClusterBenchmark(handle.address, list(handle.variants), handle.config, results,
                                 time.monotonic() - began)
        if all(r.timing is None for r in results):
            raise BenchmarkError("No node could time the models: " + "; ".join(bench.failures))
        handle.bench_id = next((r.bench_id for r in results if r.bench_id is not None), None)
        handle.end(DONE, bench)
    except (Cancelled, Exception) as exc:  # any failure ends the job with its words, never lost in the thread
        end_with_error(handle, exc, began)
