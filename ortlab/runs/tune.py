"""Automatic recipe search: try recipes within a time budget, keep those the accuracy policy accepts, and
recommend the fastest (or smallest).

One verdict: every trial is judged by the same :class:`ortlab.checks.verdict.VerdictPolicy` as ``optimize`` and
``compare`` (ok / degraded / broken / unknown, never relabelled). The search's own bar is an extra objective on top
of "ok": the task's own measure when the model has one (``--min-task``), else an SQNR bar (default 20 dB): a trial
can be "ok, below this search's bar of 20 dB". Trials are ranked by the task
(:func:`task_quality`): the verdict level, then the task's own measure (detections kept, confident flips, nearest-
neighbour agreement, threshold crossings), then the SQNR that matters for the task (a detector's worst channel group,
i.e. its score channels, before any whole-tensor SQNR). Speed-ups come from the benchmark's clock: each trial and
the fp32 source timed in child processes, interleaved block by block (:class:`ortlab.timing.child_runs.PairTimer`),
summarised by the one statistic (:mod:`ortlab.timing.stats`: the median of the per-round ratios with its 95 %
interval); identical graphs (same sha256) are timed once; the finalists are re-timed at the end.

:class:`Tuner` runs every trial through the run service (a child process per recipe, recorded in the workspace
history) and times it against the source, as Benchmark and Compare do, at the given batch sizes. The search space
(:func:`search_space`) covers static vs dynamic, QDQ vs QOperator, U8S8/S8S8/U8U8, per-channel, the calibration
method and its parameters, reduce-range, op types and the graph-optimization level (gpu: fp16 with and without
kept I/O types), ordered by what this CPU favours (:mod:`ortlab.runtime.hardware`). Once the starting recipe and its
twin without bias correction ran (a YOLO-style detector starts without it, with its stem and head in float, and on a
CPU without VNNI its full-range twin runs second), the accuracy-controlled stage (:mod:`ortlab.runs.tune_accuracy`) keeps nodes in
float in the order the task's metric ranks them, screened in memory and confirmed by trials; a dynamic int8 trial's
keep-in-float set grows greedily from the per-node analysis (:mod:`ortlab.checks.analyze`), each step a measured
trial kept only when it helps; then 16-bit weights (ORT's TensorQuantOverrides) on the analysis's worst weighted
nodes, grown the same way.

:meth:`Tuner.trials` yields each finished :class:`Trial` (Pareto flags of all trials are updated in place), so
a UI can draw the front live; :meth:`Tuner.cancel` stops after the running trial is terminated.
Evaluation always uses the evaluation data, never the calibration samples.

Size: the :class:`Tuner` is one search loop (trials, keep-in-float steps, 16-bit weights, finalists), kept
whole so a search reads top to bottom; its space is :mod:`ortlab.runs.tune_space`, what it judges
:mod:`ortlab.runs.tune_policy`, its accuracy-controlled stage :mod:`ortlab.runs.tune_accuracy`.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortlab.settings.config import (
    BenchConfig, OptLevel, Recipe,
    Target, replace, validate_recipe,
)
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.checks.eval_report import EvalReport
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES, DataRef, RunSpec
from ortlab.checks.task_kind import claim_bar
from ortlab.checks.verdict import Level, Verdict, VerdictPolicy, judge
from ortlab.core.layout import QDQ_FILE
from ortlab.timing.child_runs import PairTimer
from ortlab.timing.stats import SpeedUp
from ortlab.runtime import cpu_time
from ortlab.runtime.hardware import detect
from ortlab.runs.workspace import Workspace
from ortlab.runs.stored_timing import record_pair_timing
from ortlab.model.inspect import inspect_model, sha256_file_cached
from ortlab.data.inputs import infer_specs
from ortlab.runtime.providers import working_providers
from ortlab.checks.analyze import analyze
from ortlab.data import samples
from ortlab.data.preprocess import resolve_preprocess
from ortlab.core.serial import dumps
from ortlab.runs.tune_policy import (
    _LEVEL_RANK, CHAIN_MAX, CLOSEST_DIR, FAILURES_TO_STOP, FINALISTS, INT16_STEP, MIN_GAIN_DB, TRIALS_FILE, Policy, Trial,
    TuneResult, _rank_key, pareto_front, task_quality, verdict_policy,
)
from ortlab.runs.tune_accuracy import AccuracySearch
from ortlab.runs.tune_evidence import SampleEvidence, evidence_of
from ortlab.runs.tune_pick import claim_of, decide, set_choosing_measure, step_gain
from ortlab.runs.tune_recommend import Recommendation
from ortlab.runs import service
from ortlab.runs.tune_cluster import ClusterTrials
from ortlab.runs.tune_space import DETECTOR_PERCENTILE_NOTE, dedupe, search_space
from ortlab.transforms.float_revert import producer_chain
from ortlab.model.patterns import DETECTOR_TUNE_NOTE, ENCODER_NOTE, is_detector_file, is_encoder_file


# -- the tuner -------------------------------------------------------------------------------------------------


class LocalTrials:
    """Where trials run without ``--ray``: each a child process through the run service; timings on this machine
    (the cluster's runner: :class:`ortlab.runs.tune_cluster.ClusterTrials`)."""

    where = ""
    timing_machine = None
    retried: tuple[str, ...] = ()

    def start(self, spec: RunSpec, out: Path | None, workspace: Any) -> Any:
        return service.start_recipe(spec, out, workspace=workspace, origin="tune")

    def prefetch(self, specs: Iterable[RunSpec], workspace: Any) -> None:
        """Here trials run one at a time: nothing starts ahead (``specs`` is not read)."""

    def close(self) -> None:
        pass


ALL_SAMPLES = 0  # TuneSettings.verify_samples: every evaluation sample given


@dataclass
class TuneSettings:
    """How long and what for: ``budget_s`` wall seconds, ``budget_cpu_s`` CPU seconds (this process and every
    process it starts, :func:`ortlab.runtime.cpu_time.cpu_seconds`; None: no CPU budget), ``max_trials`` trials at
    most (None: no limit) — the search stops at the first limit it reaches —, ``objective`` "latency" or "size",
    ``target``, ``batch_sizes`` timed per trial for ``bench_s`` seconds each, ``exclusion_steps`` keep-in-float
    trials at most per stage (accuracy-controlled, dynamic greedy), ``int16_steps`` greedy 16-bit-weight steps at
    most (:data:`INT16_STEP` nodes each), ``verify_samples`` evaluation samples per trial (0: all the evaluation
    data given, resolved when the search starts)."""

    budget_s: float = 600.0
    objective: str = "latency"
    target: Target = Target.CPU
    batch_sizes: tuple[int, ...] = (1,)
    bench_s: float = 1.0
    exclusion_steps: int = 6
    verify_samples: int = ALL_SAMPLES
    opt_level: OptLevel = OptLevel.EXTENDED
    max_trials: int | None = None
    int16_steps: int = 3
    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape: {input name: shape} for open dims
    budget_cpu_s: float | None = None
    ray: str | None = None  # --ray: a Ray cluster's address ("auto" or HOST:PORT); None: trials run here
    timing_resource: str | None = None  # --timing-resource: the custom resource of the cluster node(s) timings run on
    values: dict[str, float] = field(default_factory=dict)  # --input-value: control inputs' values (a VAD's sr)


class Tuner:
    """One search; iterate :meth:`trials` (or call :meth:`run`), then read :attr:`result`."""

    def __init__(self, model, calibration: DataRef | None, evaluation: DataRef, *, settings: TuneSettings | None = None,
                 policy: Policy | None = None, preprocess=None, sample: str | None = None, workspace=None,
                 out_dir=None, recipes: Sequence[Recipe] | None = None) -> None:

        self.model = str(Path(model).resolve())
        self.calibration, self.evaluation = calibration, evaluation
        self.settings = settings or TuneSettings()
        if self.settings.objective not in ("latency", "size"):
            raise OrtlabError(f"Unknown objective {self.settings.objective!r}: latency or size.")
        self.policy = policy or verdict_policy()
        self.preprocess, self.sample = preprocess, sample
        self.workspace = workspace if workspace is not None else Workspace()
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._recipes = list(recipes) if recipes is not None else None
        self._cancel = False
        self._out_of_time = False
        self._handle: Any = None
        self._started = 0  # trials started, the one stopped by the budget or a cancel included
        self._stopped_in = ""  # where the trial the budget stopped was: ", 290 s into it, in stage 3 of 5, …"
        self.trials_done: list[Trial] = []
        self.baseline_ms: dict[str, float] = {}
        self.result: TuneResult | None = None
        self.notes: list[str] = []
        self._start = 0.0
        self.verdict_policy: VerdictPolicy = getattr(self.policy, "verdict_policy", None) or VerdictPolicy()
        self.timing_shapes: dict[str, list[int]] = dict(self.settings.shapes)  # --shape + dims the data sets
        self._pair_timer: PairTimer | None = None  # the source's timing child stays loaded from trial to trial
        self._measure = self._time_against_source  # tests swap in a fake timer
        self._cpu_clock = cpu_time.cpu_seconds  # tests swap in a fake CPU clock
        self._cpu_start = self._machine_start = 0.0
        self._token = CancelToken()
        self._timed: dict[tuple[str, int, float], SpeedUp] = {}  # (sha256, batch, seconds): identical graphs timed once
        self._timed_pairs: dict[tuple[str, int, float], Any] = {}  # the same keys: (source, trial) summaries
        self.trial_runner: LocalTrials | ClusterTrials = LocalTrials()  # where trials run: here or on a cluster
        self.evidence: dict[int, SampleEvidence | None] = {}  # trial index → its task measure per sample

    # -- control
    def cancel(self) -> None:
        """Stop: the running recipe or benchmark is cancelled and no further trial starts."""
        self._cancel = True
        self._token.cancel()
        h = self._handle
        if h is not None:
            h.cancel()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start if self._start else 0.0

    def _left(self) -> float:
        return self.settings.budget_s - self.elapsed

    @property
    def cpu_used(self) -> float:
        """CPU seconds the search has used so far (this process and the processes it started)."""
        return self._cpu_clock() - self._cpu_start

    def _out_of_budget(self) -> bool:
        """The wall-time budget or the CPU budget is spent."""
        cpu = self.settings.budget_cpu_s
        return self._left() <= 0 or (cpu is not None and self.cpu_used >= cpu)

    def _stop(self) -> bool:
        s = self.settings
        return self._cancel or self._out_of_budget() or (s.max_trials is not None and len(self.trials_done) >= s.max_trials)

    def run(self) -> TuneResult:
        for _ in self.trials():
            pass
        assert self.result is not None
        return self.result

    # -- the search
    def trials(self) -> Iterator[Trial]:
        """Run the search; yield each finished trial. ``result`` is set when the generator ends."""

        self._start = time.monotonic()
        self._cpu_start = self._cpu_clock()
        self._machine_start = cpu_time.machine_busy_s() or 0.0
        info = inspect_model(self.model)
        if self.settings.ray:
            self.trial_runner = ClusterTrials(self.settings.ray, self.settings.timing_resource, self.model,
                                              launch=service.start_unrecorded_recipe)
            self._measure = self.trial_runner.measure
            self.notes.append(self.trial_runner.where)
        ops = sorted({op for (_, op) in info.op_counts})
        self.timing_shapes = self._data_shapes(info)
        if self.settings.verify_samples == ALL_SAMPLES:  # every sample the person gave: evidence sized to the data
            self.settings = replace(self.settings, verify_samples=self._evaluation_count())
        try:
            encoder = self._recipes is None and self.settings.target == Target.CPU and is_encoder_file(self.model)
            detector = self._recipes is None and self.settings.target == Target.CPU and is_detector_file(self.model)
            recipes = self._recipes if self._recipes is not None else search_space(
                self.settings.target, detect(), self.settings.opt_level, ops, self.settings.objective, encoder,
                detector)
            self.notes += [ENCODER_NOTE] if encoder else []
            self.notes += [DETECTOR_TUNE_NOTE, DETECTOR_PERCENTILE_NOTE] if detector else []
            recipes, dropped = dedupe(recipes)
            self.notes += dropped
            recipes = [r for r in recipes if self._valid(r)]
            queue = list(recipes)
            split = _keep_in_float_after(queue) if self.settings.exclusion_steps else len(queue)
            if detector and len(queue) > 1 and not queue[1].quant.reduce_range and queue[0].quant.reduce_range:
                split = max(split, 2)  # its full-range twin too: the keep-in-float search starts from the better
            # 1: the start of the search space; 2: keep-in-float; 3: what is left of the search space
            while queue and not self._stop() and (len(self.trials_done) < split or not self.settings.exclusion_steps):
                # on a cluster, free nodes start the recipes after the split too: when the keep-in-float stage
                # runs, its float sets take their place (they are cancelled), else they are the next trials
                self._prefetch(queue)
                t = self._trial(queue.pop(0), "search")
                queue = self._reorder(t, queue)
                yield t
            if self.settings.exclusion_steps and not self._stop():
                yield from AccuracySearch(self).trials()
                if not self._stop():
                    yield from self._exclusions()
            if self.settings.int16_steps and not self._stop():
                yield from self._int16_weights()
            while queue and not self._stop():
                self._prefetch(queue)
                t = self._trial(queue.pop(0), "search")
                queue = self._reorder(t, queue)
                yield t
        except Cancelled:
            if not self._out_of_time:
                self._cancel = True
        finally:
            try:
                self.result = self._finish()
            finally:
                self.release_timing()

    def _prefetch(self, queue: list[Recipe]) -> None:
        """On a cluster, the accuracy work of ``queue[0]`` (the next trial) and of the recipes after it starts on
        free nodes (:meth:`ClusterTrials.prefetch`); no more than the trials left before ``max_trials``."""
        limit = self.settings.max_trials
        ahead = queue[:max(0, limit - len(self.trials_done))] if limit is not None else queue
        self.trial_runner.prefetch((self._spec(r) for r in ahead), self.workspace)

    def _reorder(self, trial: Trial, queue: list[Recipe]) -> list[Recipe]:
        """The trials still to run, by what is likely to pass: when ``trial`` is the model's first finished static
        int8 trial and the verdict calls it broken, the dynamic int8 recipes move ahead of the remaining static ones
        (as for a recognised encoder), and a note says so."""
        static = [t for t in self.trials_done if t.status == "done" and t.recipe.is_static]
        if not (trial.broken and static == [trial]):
            return queue
        dynamic = [r for r in queue if r.is_dynamic]
        if not dynamic or queue[:len(dynamic)] == dynamic:
            return queue
        self.notes.append(f"The first static int8 trial ({trial.label}) is broken: the {len(dynamic)} dynamic int8 "
                          "trial(s) run before the remaining static ones.")
        return dynamic + [r for r in queue if not any(r is d for d in dynamic)]

    def release_timing(self) -> None:
        """End the source's timing children (the search does when it ends)."""
        if self._pair_timer is not None:
            self._pair_timer.close()
            self._pair_timer = None
        self.trial_runner.close()

    def _time_against_source(self, reference, candidate, cfg: BenchConfig, batch_size: int, *,
                             shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp:
        if self._pair_timer is None:
            self._pair_timer = PairTimer(reference, shapes=shapes, values=dict(self.settings.values) or None)
        return self._pair_timer(candidate, cfg, batch_size, cancel=cancel)

    def _data_shapes(self, info: Any) -> dict[str, list[int]]:
        """``--shape`` plus the shapes the evaluation data gives the inputs' open dims (a text's sequence length,
        ``--seq-len``; a tensor file's shapes), so the timing runs what the evaluation ran."""

        out = dict(self.settings.shapes)
        try:
            ds = self.evaluation.load()
            specs = infer_specs(info, self.preprocess, ds, self.settings.shapes, strict=False)
        except (OrtlabError, OSError, ValueError):
            return out
        for spec in specs:
            if spec.name not in out and spec.resolved and any(d.source not in ("model", "batch") for d in spec.dims):
                out[spec.name] = list(spec.shape)
        return out

    def _evaluation_count(self) -> int:
        try:
            return max(1, len(self.evaluation.load()))
        except (OrtlabError, OSError, ValueError):
            return DEFAULT_VERIFY_SAMPLES

    def _valid(self, r: Recipe) -> bool:
        errors = [f for f in validate_recipe(r, working_providers()) if f.level == "error"]
        if errors:
            self.notes.append(f"Skipped {r.label()}: {errors[0].message}")
        return not errors

    def _spec(self, recipe: Recipe) -> RunSpec:
        vp = getattr(self.policy, "verdict_policy", None)
        return RunSpec(self.model, recipe, self.sample, self.calibration, self.evaluation, self.preprocess,
                       self.settings.verify_samples, policy=vp, shapes=dict(self.settings.shapes))

    def _trial(self, recipe: Recipe, stage: str, note: str = "") -> Trial:
        index = len(self.trials_done) + 1
        self._started += 1
        t = Trial(index, recipe.name or recipe.label(), stage, recipe, note=note)
        start = time.monotonic()
        spec = self._spec(recipe)
        t.cli_line = spec.cli_line()
        out = self.out_dir / "trials" / f"{index:02d}" if self.out_dir is not None else None
        try:
            self._handle = self.trial_runner.start(spec, out, self.workspace)
            artifact = self._wait(self._handle)
            t.ran_on = getattr(self._handle, "node", "")
            t.run_id, t.model_path, t.size_bytes = artifact.run_id, str(artifact.model_path), artifact.size_bytes
            self._judge(t, artifact.evaluation, artifact.verdict)
            self._time(t)
        except Cancelled:
            raise
        except OrtlabError as exc:
            if self._cancel or self._out_of_time:
                raise Cancelled() from None
            t.status, t.error, t.verdict = "failed", exc.message, f"failed: {exc.message}"
            last = [x.error for x in self.trials_done[-(FAILURES_TO_STOP - 1):]]
            if len(last) == FAILURES_TO_STOP - 1 and all(e == exc.message for e in last):
                self._cancel = True  # the same failure again and again: the environment, not the recipe
                self.notes.append(f"Stopped after {FAILURES_TO_STOP} trials failed alike: {exc.message}")
        finally:
            self._handle = None
            t.seconds = time.monotonic() - start
        self.trials_done.append(t)
        self._mark_pareto()
        return t

    def _record_timing(self, t: Trial, cfg: BenchConfig, pairs: list[Any]) -> None:
        """The trial's timing against the source, kept in History with this machine (its report, Compare and
        History show it); a graph timed before (same sha256) is recorded with that measurement."""
        if t.run_id is None or not pairs or any(p is None for p in pairs):
            return
        try:
            record_pair_timing(self.workspace.history(), self.model, t.run_id, t.label, str(t.model_path), cfg, pairs,
                               machine=self.trial_runner.timing_machine)
        except OrtlabError as exc:
            self.notes.append(f"The timing of {t.label} was not kept in History: {exc.message}")

    def _judge(self, t: Trial, report: EvalReport | None, verdict: Verdict | None) -> None:
        """The run's own verdict (the one optimize prints for this recipe; judged here with the same policy when the
        run has none), the task's measure, and the policy's answer, which can only add the search's bar to "ok"."""
        v = verdict if verdict is not None else judge(report, self.verdict_policy)
        decision = self.policy(report)
        q = task_quality(report, v.level.value)
        t.level = v.level.value
        t.task_measure, t.task_value, t.score_what, t.score_db = q.measure, q.value, q.sqnr_what, q.sqnr_db
        t.accepted = decision.accept and v.level == Level.OK
        t.verdict = decision.reason if v.level == Level.OK else v.headline
        t.edge = v.edge
        if t.edge and v.level == Level.OK and not t.verdict.startswith("ok, on the edge"):
            t.verdict = "ok, on the edge" + t.verdict[2:]
        self.evidence[t.index] = evidence_of(report)
        set_choosing_measure(t, self.evidence[t.index])
        if report is not None and report.outputs:
            t.sqnr_db = min(o.sqnr_db for o in report.outputs)
            t.top1_agreement = report.top1_agreement

    def _time(self, t: Trial, duration_s: float | None = None) -> None:
        """Time ``t`` against the source at every batch size with the benchmark's clock (:class:`PairTimer`); a
        graph already timed for as long (the same sha256) keeps that measurement."""
        s = self.settings
        seconds = float(duration_s if duration_s is not None else s.bench_s)
        cfg = BenchConfig(batch_sizes=tuple(s.batch_sizes), warmup=3, target=s.target, duration_s=seconds)
        sha = sha256_file_cached(t.model_path)
        ratios: list[SpeedUp] = []
        for b in s.batch_sizes:
            key = (sha, int(b), seconds)
            if key not in self._timed:
                try:
                    self._timed[key] = self._measure(self.model, t.model_path, cfg, b, shapes=self.timing_shapes,
                                                     cancel=self._token)
                    self._timed_pairs[key] = getattr(self._pair_timer or self.trial_runner, "last", None)
                except OrtlabError:
                    raise
                except Exception as exc:  # ORT's own errors while timing
                    raise OrtlabError(f"Timing {t.label} failed: {exc}") from exc
            ratios.append(self._timed[key])
        if self._cancel:
            raise Cancelled()
        t.speed = ratios
        t.timed_on = getattr(self.trial_runner, "timing_node", "")
        self._record_timing(t, cfg, [self._timed_pairs.get((sha, int(b), seconds)) for b in s.batch_sizes])
        t.latency_ms = {str(r.batch_size): r.candidate_p50_ms for r in ratios}
        t.baseline_ms = {str(r.batch_size): r.reference_p50_ms for r in ratios}
        good = [r.ratio for r in ratios if r.ratio > 0 and math.isfinite(r.ratio)]
        t.relative_latency = math.exp(sum(math.log(x) for x in good) / len(good)) if good else None
        t.p50_ms = t.latency_ms.get(str(s.batch_sizes[0]))
        t.cost = t.relative_latency if s.objective == "latency" else float(t.size_bytes or 0)

    def _wait(self, handle) -> Any:
        while not handle.wait(0.2):
            handle.drain()
            if self._cancel or self._out_of_budget():
                if not self._cancel:
                    self._out_of_time = True
                    self._stopped_in = stopped_where(handle)
                    self.notes.append("The budget ran out during a trial; it was stopped and is not counted.")
                handle.cancel()
                handle.wait()
                raise Cancelled()
        handle.drain()
        if handle.error is not None:
            raise handle.error
        return handle.result

    def _mark_pareto(self) -> None:
        done = [t for t in self.trials_done if t.status == "done"]
        if any(t.task_value is not None for t in done):  # the measure that decides, as the chart draws it
            flags = pareto_front([(t.cost, t.task_value) for t in done])
        else:
            flags = pareto_front([(t.cost, t.score_db if t.score_db is not None else t.sqnr_db) for t in done])
        for t, flag in zip(done, flags):
            t.pareto = flag

    # -- greedy keep-in-float sets
    def _static_trials(self) -> list[Trial]:
        return [t for t in self.trials_done if t.status == "done" and t.recipe.is_static
                and t.model_path and (Path(t.model_path).parent / QDQ_FILE).is_file()]  # a QDQ file: static QDQ

    def _exclusion_base(self, dynamic: bool = False) -> Trial | None:
        """The seed of a keep-in-float search: the best trial by the task (:func:`_rank_key`: verdict level, task
        measure, task SQNR — never the whole-output SQNR alone), among the faster-than-fp32 ones when any. A broken
        trial seeds a search only when every candidate is broken (the search may then mend it: e.g. a detector whose
        score channels one node crushes); then a note says so. ``dynamic``: the best dynamic int8 trial instead."""
        if dynamic:
            pool = [t for t in self.trials_done if t.status == "done" and t.recipe.is_dynamic and not t.broken]
        else:
            pool = self._static_trials()
        if not pool:
            return None
        fine = [t for t in pool if not t.broken]
        seeded = ("Every static int8 trial is broken; the keep-in-float search starts from the least broken by the "
                  "task's measure.")
        if not fine and not dynamic and seeded not in self.notes:  # asked again for each later search stage
            self.notes.append(seeded)
        pool = fine or pool
        faster = [t for t in pool if t.relative_latency is not None and t.relative_latency < 1.0] or pool
        return max(faster, key=lambda t: (_rank_key(t), -(t.cost or 0)))

    def _exclusions(self) -> Iterator[Trial]:
        """Grow a keep-in-float set of the best dynamic int8 trial greedily, over the MatMul/Gemm nodes the per-node
        analysis of the best static QDQ trial ranks worst (a transformer's second FFN MatMul, fed by GELU, is the
        usual one): each step keeps one more node (and, when that alone does not help, the node with its producer
        chain) in float; a step is kept only when the task ranks it better (:func:`_keep_if_gains`). A dynamic graph
        has no Q/DQ pairs to screen in memory: each step is a trial."""

        current = self._exclusion_base(dynamic=True)
        if current is None or current.accepted:
            return
        ranker = self._exclusion_base()
        if ranker is None:
            return
        tried: set[tuple[str, ...]] = set()
        steps = 0
        ops = self._node_ops(ranker)
        while steps < self.settings.exclusion_steps and not self._stop():
            nodes = [n for n in self._analyze(analyze, ranker) if ops.get(n) in ("MatMul", "Gemm")]
            excluded = set(current.recipe.quant.nodes_to_exclude)
            pick = next((n for n in nodes if (n,) not in tried and n not in excluded), None)
            if pick is None:
                return
            for group in (self._chain_step(ranker, pick, excluded, tried, single=True),
                          self._chain_step(ranker, pick, excluded, tried, single=False)):
                if group is None or steps >= self.settings.exclusion_steps or self._stop():
                    continue
                tried.add(group)
                steps += 1
                q = replace(current.recipe.quant, nodes_to_exclude=tuple(sorted(excluded | set(group))))
                name = f"{current.label.split(' + float')[0]} + float {len(q.nodes_to_exclude)}"
                what = f"keep {pick} in float" if len(group) == 1 else \
                    f"keep {pick} with its producers {', '.join(n for n in group if n != pick)} in float"
                t = self._trial(replace(current.recipe, quant=q, name=name), "exclude", what)
                before = current
                current = _keep_if_gains(t, current, self.evidence)
                yield t
                if current.accepted or current is not before:
                    break
            if current.accepted:
                return

    def _chain_step(self, ranker: Trial, pick: str, excluded: set[str], tried: set[tuple[str, ...]],
                    single: bool) -> tuple[str, ...] | None:
        if single:
            return (pick,)
        chain = tuple(n for n in self._chain(ranker, pick) if n not in excluded)
        return chain if len(chain) > 1 and chain not in tried else None

    def _chain(self, trial: Trial, name: str) -> list[str]:
        """``name`` and the producers that feed only it in ``trial``'s QDQ model
        (:func:`ortlab.transforms.float_revert.producer_chain`, up to :data:`CHAIN_MAX` nodes)."""
        import onnx

        path = Path(trial.model_path or "").parent / QDQ_FILE
        if not path.is_file():
            return [name]
        return producer_chain(onnx.load(str(path), load_external_data=False).graph, name, CHAIN_MAX)

    def _node_ops(self, trial: Trial) -> dict[str, str]:
        import onnx

        path = Path(trial.model_path or "").parent / QDQ_FILE
        if not path.is_file():
            return {}
        return {n.name: n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}

    def _int16_weights(self) -> Iterator[Trial]:
        """Grow the set of nodes with 16-bit weights along the per-node analysis ranking of the best static QDQ
        trial, :data:`INT16_STEP` weighted nodes a step; a step is kept only when it adds SQNR. On
        EfficientNet-Lite0 int8 weights alone cap the logits at about 18.5 dB (activations at 16 bits), so no
        activation or calibration setting reaches 20 dB; 16-bit weights do, but ORT runs those nodes in float."""

        current = self._exclusion_base()
        if current is None or current.accepted:
            return
        ranked = self._analyze(analyze, current)
        weighted = self._weighted_nodes(current)
        queue = [n for n in ranked if n in weighted and n not in current.recipe.quant.nodes_to_exclude]
        steps = 0
        while queue and steps < self.settings.int16_steps and not self._stop():
            chunk, queue = queue[:INT16_STEP], queue[INT16_STEP:]
            steps += 1
            nodes = tuple(dict.fromkeys([*current.recipe.quant.int16_weight_nodes, *chunk]))
            q = replace(current.recipe.quant, int16_weight_nodes=nodes)
            name = f"{current.label.split(' + int16')[0]} + int16 weights {len(nodes)}"
            t = self._trial(replace(current.recipe, quant=q, name=name), "int16", f"16-bit weights in {', '.join(chunk)}")
            current = _keep_if_gains(t, current, self.evidence)
            yield t
            if current.accepted:
                return

    @staticmethod
    def _weighted_nodes(trial: Trial) -> set[str]:
        """Names of the Conv/Gemm/MatMul nodes of ``trial``'s QDQ model whose weight is a quantized constant."""
        import onnx

        model = onnx.load(str(Path(trial.model_path or "").parent / "model.qdq.onnx"), load_external_data=False)
        dq_outputs = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"
                      and n.input[0] in {t.name for t in model.graph.initializer}}
        return {n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 1
                and n.input[1] in dq_outputs}

    def _eval_data(self) -> tuple[Any, Any]:
        """The evaluation data set (with the sample's labels) and the preprocessing that feeds it."""
        sample = samples.get_sample(self.sample) if self.sample else samples.find_for_model(self.model)
        labels = sample.labels if sample is not None and sample.labels else None
        ds = self.evaluation.load(labels)
        pre = self.preprocess
        if pre is None and ds.kind == "images":
            pre = resolve_preprocess(inspect_model(self.model).inputs, sample, ds)
        return ds, pre

    def _analyze(self, analyze_fn, trial: Trial) -> list[str]:
        """Node names of ``trial``'s QDQ model, worst local error first (cached per trial)."""
        cache = getattr(self, "_analysis_cache", {})
        self._analysis_cache = cache
        if trial.index not in cache:
            ds, pre = self._eval_data()
            result = analyze_fn(self.model, trial.model_path, ds, pre, n=min(32, self.settings.verify_samples or 32),
                                shapes=self.settings.shapes)
            cache[trial.index] = [e.name for e in result.nodes]
        return cache[trial.index]

    # -- the recommendation
    def _choose(self, done: list[Trial], accepted: list[Trial], usable: list[Trial]
                ) -> tuple[Trial | None, list[Trial], Recommendation | None]:
        """The pick, the accepted trials it stands for, and the recommender's decision: against the default (trial
        1) on the same samples when it has a per-sample record (:func:`ortlab.runs.tune_pick.decide`); else the
        fastest accepted trial that is not both less accurate and slower than the default, or the closest usable."""
        default = next((t for t in done if t.index == 1), None)
        if accepted:
            self._retime(accepted)
            if default is not None and default.speed and not default.retimed:
                self._retime([default])  # compared with the finalists: timed as long
            accepted = [t for t in accepted if not slower_than_source(t)]  # the finalists' longer timing may say so
        rec = decide(done, self.evidence, lambda t: not t.broken and not slower_than_source(t), self.settings.objective)
        if rec is not None and rec.pick is not None:
            best = next(t for t in done if t.index == rec.pick)
            self.notes += _unsettled(rec, done)
            return best, ([best] if best.accepted else []), rec
        if accepted:
            return min(_not_worse_and_slower(accepted, default),
                       key=lambda t: (t.cost, tuple(-x for x in _rank_key(t)))), accepted, None
        if usable:
            top = max(_rank_key(t) for t in usable)
            close = [t for t in usable if _rank_key(t)[:2] == top[:2]]  # the best level and task measure
            self._retime(close)
            close = [t for t in close if not slower_than_source(t)]
            return (max(close, key=lambda t: (_rank_key(t), -(t.cost or 0))) if close else None), accepted, None
        return None, accepted, None

    def _claim_bar(self, best: Trial) -> float | None:
        """The bar the pick's held-out claim is worded against: the search's ``--min-task`` when given, else the
        verdict's own bar for a detector's F1 (the other measures' bars are the verdict's, judged on its figure)."""
        min_task = getattr(self.policy, "min_task", None)
        if min_task is not None:
            return float(min_task)
        return claim_bar(best.task_measure, self.verdict_policy)

    def _retime(self, trials: list[Trial]) -> None:
        """Re-time the finalists (the cheapest :data:`FINALISTS` of ``trials``) interleaved with the source, twice
        as long as a trial's timing, so the recommendation's speed-up is not one noisy measurement."""
        if self._cancel or self.settings.objective != "latency":
            return
        for t in sorted(trials, key=lambda t: t.cost if t.cost is not None else math.inf)[:FINALISTS]:
            try:
                self._time(t, 2 * self.settings.bench_s)
                t.retimed = True
            except (OrtlabError, Cancelled):
                return

    def _finish(self) -> TuneResult:
        s = self.settings
        self.trial_runner.prefetch([], self.workspace)  # on a cluster: no trial starts ahead any more, none runs
        done = [t for t in self.trials_done if t.status == "done" and t.cost is not None]
        accepted = [t for t in done if t.accepted and not slower_than_source(t)]
        usable = [t for t in done if not t.broken and not slower_than_source(t)]
        best, accepted, rec = self._choose(done, accepted, usable)
        claim = claim_of(best, self._claim_bar(best), self.evidence.get(best.index)) if best is not None else None
        if claim is not None and best is not None and claim.word == "below the bar" and accepted:
            accepted = []  # the samples it was not chosen on say it misses the bar: never recommended "ok"
            self.notes.append(f"Not recommended: on the samples it was not chosen on, {best.label}'s "
                              f"{best.task_measure} interval lies below the bar; it is written as the closest.")
        self._mark_pareto()
        self.notes += self.trial_runner.retried
        slow = [t for t in done if slower_than_source(t)]
        if slow:
            self.notes.append(slower_note(slow))
        sentence, line = _sentence(best, bool(accepted), s, len(self.trials_done), bool(done), bool(slow)), ""
        if rec is not None and best is not None:
            sentence = _pick_sentence(best, bool(accepted), s, len(self.trials_done), rec.reason)
        cpu = s.budget_cpu_s is not None and self.cpu_used >= s.budget_cpu_s
        spent = s.budget_cpu_s if cpu and s.budget_cpu_s is not None else s.budget_s
        hint = budget_hint_s(spent) if best is None and not self._cancel and self._out_of_budget() else None
        budget = f"{'CPU' if cpu else 'time'} budget of {spent:g} s"
        give = f"give {hint:g} {'CPU ' if cpu else ''}s or more" if hint is not None else ""
        if best is None and not done:
            failed = sum(t.status == "failed" for t in self.trials_done)
            how = f"stopped when the {budget} ran out" if hint is not None else ("cancelled" if self._cancel else "")
            sentence = none_finished(self._started, failed, how, self._stopped_in, give or "nothing to recommend")
            self.notes = [n for n in self.notes if not n.startswith("The budget ran out during a trial")]  # said
        elif hint is not None:
            sentence += f" The {budget} was too short: {give}."
        busy = self.cpu_share().busy_note() if not self.settings.ray else None  # a cluster's work is elsewhere
        if busy is not None:
            self.notes.append(busy)
        written = None
        if best is not None and accepted:
            self._mark_recommended(best)
        if best is not None:
            line = best.cli_line
            if self.out_dir is not None:
                written = self._write_out(best, bool(accepted))
        pol = self.verdict_policy
        bar = getattr(self.policy, "bar_text", None)
        baseline = dict(best.baseline_ms) if best is not None else {}
        if claim is not None and best is not None:
            held_out = claim.chosen_on.startswith("chosen on")
            sentence += (f" On the {claim.evidence} it was {'not ' if held_out else ''}chosen on"
                         f" ({claim.chosen_on}): "
                         f"{best.task_measure} {claim.value:.3f} (95% interval {claim.low:.3f}–{claim.high:.3f})"
                         f"{_against(claim.bar)}: {claim.text()}.")
        result = TuneResult(
            self.model, s.objective, Target(s.target).value,
            (f"verdict ok (the same policy as optimize: broken below {pol.min_sqnr_db:g} dB, confident-flip margin "
             f"{pol.margin:g})" + (f" and this search's bar: {bar}" if bar is not None else "")),
            (m.summary() if (m := self.trial_runner.timing_machine) is not None else detect().summary()),
            list(s.batch_sizes), baseline, list(self.trials_done),
            best, bool(accepted), sentence, line, self.elapsed, self._cancel, list(self.notes), written, hint)
        if claim is not None:
            result.claim, result.claim_low, result.claim_high = claim.value, claim.low, claim.high
            result.claim_evidence, result.claim_word, result.chosen_on = claim.evidence, claim.word, claim.chosen_on
            result.claim_settle = claim.settle
        result.baseline_index = 1 if rec is not None else None
        result.cpu_seconds = None if self.settings.ray else self.cpu_used  # a cluster's CPU is elsewhere
        if self.out_dir is not None:

            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / TRIALS_FILE).write_text(dumps(result, indent=2), encoding="utf-8")
        return result

    def cpu_share(self) -> cpu_time.CpuShare:
        """What the search got of the machine so far: its CPU seconds over its wall time, and what other processes
        used meanwhile (when the machine says)."""
        mine = self.cpu_used
        machine = cpu_time.machine_busy_s()
        others = max(0.0, machine - self._machine_start - mine) if machine is not None and self._machine_start else None
        return cpu_time.CpuShare(mine, self.elapsed, cpu_time.cores(), others)

    def _mark_recommended(self, best: Trial) -> None:
        """Note on the recommended trial's History record that its search recommended it (History shows a
        search as one row named after it)."""
        if best.run_id is None:
            return
        try:
            history = self.workspace.history()
            artifact = history.get(best.run_id)
            if RECOMMENDED_NOTE not in artifact.notes:
                artifact.notes.append(RECOMMENDED_NOTE)
                history.update(artifact)
        except OrtlabError:  # History unreadable now: the search's result stands without the mark
            return

    def _write_out(self, best: Trial, accepted: bool) -> str | None:
        """The recommendation as ``model.onnx`` + ``recipe.json``; a closest trial that did not meet the bar under
        ``closest/`` instead, so it is never taken for a recommendation."""
        assert self.out_dir is not None
        folder = self.out_dir if accepted else self.out_dir / CLOSEST_DIR
        folder.mkdir(parents=True, exist_ok=True)
        written = None
        if best.model_path and Path(best.model_path).is_file():
            shutil.copyfile(best.model_path, folder / "model.onnx")
            written = str(folder / "model.onnx")
        (folder / "recipe.json").write_text(best.recipe.to_json(), encoding="utf-8")
        return written


RECOMMENDED_NOTE = "Recommended by its tune search."  # on that trial's History record
MIN_USEFUL_BUDGET_S = 120.0  # a few trials of a small model, each verified and timed


def budget_hint_s(budget_s: float) -> float:
    """The budget to suggest after ``budget_s`` ran out before a usable trial: four times as much, rounded up to
    whole minutes, and at least :data:`MIN_USEFUL_BUDGET_S`."""
    return max(MIN_USEFUL_BUDGET_S, 60.0 * math.ceil(4 * budget_s / 60.0))


def slower_than_source(t: Trial) -> bool:
    """Whether a trial's timing says it runs slower than the fp32 source at some batch size: the whole 95 %
    interval of its speed-up lies below 1. Such a trial is never recommended, nor written as the closest."""
    return any(sp.paired and sp.speedup_range[1] < 1.0 for sp in t.speed)


def slower_note(trials: Sequence[Trial]) -> str:
    """The note that names the trials left out of the recommendation for running slower than the source."""
    names = ", ".join(f"#{t.index} {t.label} ({t.speed_text()})" for t in trials[:4]) + (" …" if len(trials) > 4 else "")
    return (f"Never recommended: {len(trials)} trial(s) ran slower than the fp32 source (the speed-up's 95% interval "
            f"lies below 1×): {names}.")


def stopped_where(handle: Any, now: float | None = None) -> str:
    """How far a stopped run got, from its progress events: ``, 290 s into it, in stage 3 of 5 (calibrate:
    calibration sample 37/100)``; the stage is the last one that reported."""
    seconds = (now if now is not None else time.time()) - handle.started_at
    reported = [name for name in handle.stages if name in handle.progress]
    if not reported:
        return f", {seconds:.0f} s into it, before its first stage ({len(handle.stages)} planned) reported"
    name = reported[-1]
    event = handle.progress[name]
    detail = f": {event.message}" if event.message else (f": {event.done} of {event.total}" if event.total else "")
    return f", {seconds:.0f} s into it, in stage {handle.stages.index(name) + 1} of {len(handle.stages)} ({name}{detail})"


def none_finished(started: int, failed: int, how: str, stopped_in: str = "", then: str = "nothing to recommend") -> str:
    """The sentence of a search where no trial finished: how many started and failed, and how the one still
    running was ended (``how``: "stopped when the time budget of 300 s ran out", "cancelled", "" when none was;
    ``stopped_in``: :func:`stopped_where`), then ``then`` (what to do)."""
    if started == 0:
        return f"No trial finished: none started{' before ' + how.split(' when ')[-1] if how else ''}; {then}."
    if not how or started == failed:
        return f"No trial finished: {started} started and {'it' if started == 1 else 'all'} failed; {then}."
    if failed:
        return f"No trial finished: {started} started; {failed} failed and the last was {how}{stopped_in}; {then}."
    return f"No trial finished: 1 started and was {how}{stopped_in}; {then}."


def _sentence(best: Trial | None, accepted: bool, s: TuneSettings, n: int, any_done: bool = True,
              any_slower: bool = False) -> str:
    if best is None:
        if any_slower:
            return (f"No trial of {n} is both usable by the verdict and at least as fast as the fp32 source; nothing "
                    f"is recommended and no model was written.")
        if any_done:
            return (f"Every trial of {n} that finished is broken by the verdict; nothing is recommended and no model "
                    f"was written.")
        return f"No trial finished ({n} started); nothing to recommend."
    q = best.quality()
    quality = f"verdict {best.level or 'unknown'}" + (f", {q.text()}" if q.text() else "")
    if s.objective == "latency":
        gain = (f"{best.speed_words()} (timed interleaved at batch {', '.join(str(b) for b in s.batch_sizes)})"
                if best.speed else "of unknown speed")
    else:
        gain = f"{(best.size_bytes or 0) / 1e6:.1f} MB"
    if accepted:
        return f"{best.label} is the {'fastest' if s.objective == 'latency' else 'smallest'} recipe the policy " \
               f"accepts of {n} tried: {gain}; {quality}."
    return f"No recipe of {n} tried meets the bar; the closest that is not broken, {best.label}, is {gain}; " \
           f"{quality} ({best.verdict}). It is written under {CLOSEST_DIR}/, not as the recommendation."


def _against(bar: float | None) -> str:
    return f" against the bar of {bar:g}" if bar is not None else ""


def _unsettled(rec: Any, done: Sequence[Trial]) -> list[str]:
    """Notes on the faster candidates the data could not tell from the default, with the count that would."""
    out = []
    for comp in rec.comparisons:
        if comp.faster and not comp.not_worse:
            t = next(x for x in done if x.index == comp.index)
            out.append(f"Not decided: #{t.index} {t.label} is faster than the default, but {t.vs_default}.")
    return out


def _pick_sentence(best: Trial, accepted: bool, s: TuneSettings, n: int, why: str) -> str:
    """The sentence of a search decided against its default (trial 1) on the same samples."""
    q = best.quality()
    quality = f"verdict {best.level or 'unknown'}" + (f", {q.text()}" if q.text() else "")
    gain = (f"{best.speed_words()} (timed interleaved at batch {', '.join(str(b) for b in s.batch_sizes)})"
            if s.objective == "latency" and best.speed else f"{(best.size_bytes or 0) / 1e6:.1f} MB")
    who = f"{best.label} (trial 1, the default)" if best.index == 1 else best.label
    if accepted:
        return f"{who} is the pick of {n} tried: {gain}; {quality}. Why: {why}."
    return (f"No recipe of {n} tried meets the bar; the closest, {who}, is {gain}; {quality} ({best.verdict}). Why: "
            f"{why}. It is written under {CLOSEST_DIR}/, not as the recommendation.")


def _not_worse_and_slower(trials: list[Trial], default: Trial | None) -> list[Trial]:
    """``trials`` without those both less accurate (task measure below) and slower (speed-up interval wholly
    below) than the ``default`` (a search without per-sample records); all of them when that leaves none."""
    if default is None or default.task_value is None or not default.speed:
        return trials
    d_lo = default.speed[0].speedup_range[0]
    keep = [t for t in trials if not (t is not default and t.task_value is not None and t.speed
                                      and t.task_value < default.task_value and t.speed[0].speedup_range[1] < d_lo)]
    return keep or trials


def _keep_in_float_after(queue: Sequence[Recipe]) -> int:
    """How many search trials run before the keep-in-float stages: up to the first static recipe without bias
    correction, so the stages start from the better of bias correction on and off (the two interact with what is
    kept in float: on a YOLOv8n the best float scope gave F1 0.85 with it, 0.94 without); a space without one: 60%."""
    for i, r in enumerate(queue):
        if r.is_static and not r.quant.bias_correction:
            return i + 1
    return max(1, int(len(queue) * 0.6))


def tune(model, calibration: DataRef | None, evaluation: DataRef, **kwargs: Any) -> TuneResult:
    """Run a whole search (:class:`Tuner` arguments) and return its result."""
    return Tuner(model, calibration, evaluation, **kwargs).run()


def _keep_if_gains(trial: Trial, current: Trial, evidence: dict[int, SampleEvidence | None] | None = None) -> Trial:
    """The greedy step's choice, task first: with per-sample records of both (``evidence``), ``trial`` only when
    it is clearly more accurate on the same samples (:func:`ortlab.runs.tune_pick.step_gain`); else ``trial`` when
    it finished and the verdict level improves; or the level is the same and the task's measure improves; or both
    are the same and the task's SQNR (a detector's score channels, else the worst output) gains at least
    ``MIN_GAIN_DB``. Else ``current``; the trial's note says which."""
    if trial.status != "done":
        trial.note += ": dropped (failed)"
        return current
    paired = step_gain(evidence.get(trial.index), evidence.get(current.index)) if evidence else None
    if paired is not None:
        trial.note += f": {paired[1]}"
        return trial if paired[0] else current
    lt, lc = _LEVEL_RANK.get(trial.level, 1), _LEVEL_RANK.get(current.level, 1)
    if lt != lc:
        better = lt < lc
        trial.note += f": {'kept' if better else 'dropped'} (verdict {current.level} → {trial.level})"
        return trial if better else current
    qt, qc = trial.quality(), current.quality()
    if qt.value is not None and qc.value is not None and abs(qt.value - qc.value) > 1e-9:
        better = qt.value > qc.value
        trial.note += f": {'kept' if better else 'dropped'} ({qt.measure} {qc.value:.1%} → {qt.value:.1%})"
        return trial if better else current
    gain = (qt.sqnr_db if qt.sqnr_db is not None else -math.inf) - (qc.sqnr_db if qc.sqnr_db is not None else -math.inf)
    what = qt.sqnr_what if qt.sqnr_what != "worst output SQNR" else "SQNR"
    if gain >= MIN_GAIN_DB:
        trial.note += f": kept (+{gain:.1f} dB {what})"
        return trial
    trial.note += f": dropped ({gain:+.1f} dB {what})"
    return current
