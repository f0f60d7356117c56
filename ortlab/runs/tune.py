"""Automatic recipe search: try recipes within a time budget, keep those the accuracy policy accepts, and
recommend the fastest (or smallest).

:class:`Tuner` runs every trial through the run service (a child process per recipe, recorded in the workspace
history) and times it with the service's benchmark at the given batch sizes. The search space
(:func:`search_space`) covers static vs dynamic, QDQ vs QOperator, U8S8/S8S8/U8U8, per-channel, the calibration
method and its parameters, reduce-range, op types and the graph-optimization level (gpu: fp16 with and without
kept I/O types), ordered by what this CPU favours (:mod:`ortlab.runtime.hardware`). Then keep-in-float sets grow
greedily from the per-node analysis (:mod:`ortlab.checks.analyze`) of the best static QDQ trial: each step is a
measured trial, kept only when it improves the output SQNR; then 16-bit weights (ORT's TensorQuantOverrides) on
the analysis's worst weighted nodes, grown the same way.

:meth:`Tuner.trials` yields each finished :class:`Trial` (Pareto flags of all trials are updated in place), so
a UI can draw the front live; :meth:`Tuner.cancel` stops after the running trial is terminated.
Evaluation always uses the evaluation data, never the calibration samples.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortlab.settings.config import (
    BenchConfig, CalibrationMethod, OptLevel, Precision, QuantConfig, QuantFormat, QuantMode, QuantType, Recipe,
    Target, replace, validate_recipe,
)
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.checks.eval_report import EvalReport
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.checks.verdict import Level, VerdictPolicy, judge

DEFAULT_MIN_SQNR_DB = 20.0
MIN_GAIN_DB = 0.1  # an exclusion step is kept only when it adds at least this much SQNR
TRIALS_FILE = "trials.json"
INT16_STEP = 4  # weighted nodes given 16-bit weights per greedy step
FAILURES_TO_STOP = 3  # consecutive trials failing with the same message end the search


# -- accuracy policy -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A policy's answer on one trial's evaluation."""

    accept: bool
    reason: str


Policy = Callable[[EvalReport | None], Decision]


def verdict_policy(policy: VerdictPolicy | None = None, min_sqnr_db: float = DEFAULT_MIN_SQNR_DB) -> Policy:
    """Accept when :func:`ortlab.checks.verdict.judge` says OK under ``policy`` (default: the verdict's defaults with
    ``min_sqnr_db``): every float output at or above the SQNR bar, and for classifiers no more confident top-1
    flips (reference softmax margin ≥ ``policy.margin``) than the policy allows."""
    vp = policy if policy is not None else VerdictPolicy(min_sqnr_db=min_sqnr_db)

    def decide(report: EvalReport | None) -> Decision:
        v = judge(report, vp)
        return Decision(v.level == Level.OK, v.headline)

    decide.verdict_policy = vp  # type: ignore[attr-defined]
    return decide


def sqnr_policy(min_sqnr_db: float = DEFAULT_MIN_SQNR_DB, min_top1_agreement: float | None = None) -> Policy:
    """Accept when every output's SQNR ≥ ``min_sqnr_db`` and (when given) top-1 agreement ≥ the threshold."""

    def decide(report: EvalReport | None) -> Decision:
        if report is None or not report.outputs:
            return Decision(False, "not evaluated")
        worst = min(report.outputs, key=lambda o: o.sqnr_db)
        if not worst.sqnr_db >= min_sqnr_db:
            return Decision(False, f"{worst.name}: SQNR {worst.sqnr_db:.1f} dB < {min_sqnr_db:g} dB")
        if min_top1_agreement is not None and report.top1_agreement is not None \
                and report.top1_agreement < min_top1_agreement:
            return Decision(False, f"top-1 agreement {report.top1_agreement:.1%} < {min_top1_agreement:.1%}")
        return Decision(True, f"SQNR {worst.sqnr_db:.1f} dB ≥ {min_sqnr_db:g} dB")

    return decide


# -- results -------------------------------------------------------------------------------------------------


@dataclass
class Trial:
    """One tried recipe: its evaluation against the source, latency and size, and whether the policy accepts
    it. ``latency_ms`` maps batch size (as text) → p50 ms; ``relative_latency`` is the geometric mean over the
    batch sizes of the trial's fastest run / the source's fastest run, both timed in the same benchmark (below
    1 = faster): on a shared machine the fastest run is what other processes disturb least, p50 moved by 2-4×
    between identical models here. ``cost`` is what the objective minimises."""

    index: int
    label: str
    stage: str  # "search", "exclude" or "int16"
    recipe: Recipe
    status: str = "done"  # "done" or "failed"
    accepted: bool = False
    verdict: str = ""
    sqnr_db: float | None = None  # worst output's SQNR
    top1_agreement: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    baseline_ms: dict[str, float] = field(default_factory=dict)  # the source's p50, timed in the same benchmark
    min_ms: dict[str, float] = field(default_factory=dict)  # fastest run by batch size
    baseline_min_ms: dict[str, float] = field(default_factory=dict)
    p50_ms: float | None = None  # at the first batch size
    relative_latency: float | None = None
    size_bytes: int | None = None
    cost: float | None = None
    pareto: bool = False
    run_id: int | None = None
    bench_id: int | None = None
    model_path: str | None = None
    cli_line: str = ""
    note: str = ""
    error: str | None = None
    seconds: float = 0.0

    @property
    def speedup(self) -> float | None:
        return 1.0 / self.relative_latency if self.relative_latency else None


@dataclass
class TuneResult:
    """The search's outcome: every trial, the recommendation (``best``: fastest/smallest accepted, or the
    closest when none was accepted, with ``accepted`` False), one sentence why and the CLI line reproducing it."""

    model: str
    objective: str
    target: str
    policy: str
    hardware: str
    batch_sizes: list[int]
    baseline_ms: dict[str, float]
    trials: list[Trial]
    best: Trial | None
    accepted: bool
    sentence: str
    cli_line: str
    seconds: float
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """For each (cost, quality) point — cost minimised, quality maximised — whether no other point is at least
    as good in both and strictly better in one. Points with a None are never on the front; equal points are
    both on it."""
    flags = []
    for i, (c, q) in enumerate(points):
        if c is None or q is None or math.isnan(c) or math.isnan(q):
            flags.append(False)
            continue
        dominated = False
        for j, (c2, q2) in enumerate(points):
            if j == i or c2 is None or q2 is None or math.isnan(c2) or math.isnan(q2):
                continue
            if c2 <= c and q2 >= q and (c2 < c or q2 > q):
                dominated = True
                break
        flags.append(not dominated)
    return flags


# -- the search space ------------------------------------------------------------------------------------------


def search_space(target: Target = Target.CPU, features: Any = None, opt_level: OptLevel = OptLevel.EXTENDED,
                 model_ops: Sequence[str] = ()) -> list[Recipe]:
    """The recipes to try, most promising first for this CPU (``features``: :func:`ortlab.runtime.hardware.detect`)."""
    from ortlab.runtime.hardware import advise, detect

    f = features if features is not None else detect()
    adv = advise(f, target)
    if Target(target) == Target.GPU:
        s8 = QuantConfig(activation_type=QuantType.INT8, weight_type=QuantType.INT8, symmetric_activation=True)
        return [Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=True),
                Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=False),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level, quant=s8),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level,
                       quant=replace(s8, per_channel=False))]
    base = QuantConfig(activation_type=adv.activation_type, weight_type=adv.weight_type, reduce_range=adv.reduce_range)
    other_act = QuantType.INT8 if adv.activation_type == QuantType.UINT8 else QuantType.UINT8
    pct = CalibrationMethod.PERCENTILE
    quants: list[tuple[str, QuantConfig]] = [
        ("static", base),
        ("percentile 99.999", replace(base, calibration_method=pct, percentile=99.999)),
        ("bias correction", replace(base, bias_correction=True)),  # +5 dB on EfficientNet-Lite0, same speed
        ("Conv/MatMul/Gemm only", replace(base, op_types=("Conv", "MatMul", "Gemm"))),
        ("dynamic", QuantConfig(mode=QuantMode.DYNAMIC, reduce_range=adv.reduce_range)),
        ("percentile 99.99", replace(base, calibration_method=pct, percentile=99.99)),
        ("symmetric activations", replace(base, symmetric_activation=True)),
        ("QOperator", replace(base, quant_format=QuantFormat.QOPERATOR)),
        ("reduce-range" if not adv.reduce_range else "full range", replace(base, reduce_range=not adv.reduce_range)),
        ("per-tensor", replace(base, per_channel=False)),
        (f"{other_act.value} activations", replace(base, activation_type=other_act)),
        ("MinMax moving average", replace(base, moving_average=True, averaging_constant=0.01)),
        ("percentile 99.9", replace(base, calibration_method=pct, percentile=99.9)),
        ("U8U8", replace(base, activation_type=QuantType.UINT8, weight_type=QuantType.UINT8)),
        ("dynamic per-channel", QuantConfig(mode=QuantMode.DYNAMIC, per_channel=True, reduce_range=adv.reduce_range)),
        # histogram methods calibrate far slower (minutes on an ImageNet CNN): last
        ("entropy", replace(base, calibration_method=CalibrationMethod.ENTROPY)),
        ("distribution", replace(base, calibration_method=CalibrationMethod.DISTRIBUTION)),
        ("entropy 512 bins", replace(base, calibration_method=CalibrationMethod.ENTROPY, num_bins=512,
                                     num_quantized_bins=128)),
    ]
    ops = set(model_ops)
    out = []
    for name, q in quants:
        if q.mode == QuantMode.DYNAMIC and ops and not ops & {"MatMul", "Gemm", "Attention", "LSTM", "GRU"}:
            continue
        out.append(Recipe(precision=Precision.INT8, target=Target.CPU, opt_level=opt_level, quant=q, name=""))
        out[-1] = replace(out[-1], name=f"int8 {name}")
    out.insert(min(3, len(out)), replace(out[0], opt_level=OptLevel.ALL, name="int8 static, opt all"))
    out.append(Recipe(precision=Precision.FP32, target=Target.CPU, opt_level=OptLevel.ALL, name="fp32 opt all"))
    return out


# -- the tuner -------------------------------------------------------------------------------------------------


@dataclass
class TuneSettings:
    """How long and what for: ``budget_s`` wall seconds, ``objective`` "latency" or "size", ``target``,
    ``batch_sizes`` timed per trial for ``bench_s`` seconds each, ``exclusion_steps`` greedy keep-in-float
    steps at most, ``int16_steps`` greedy 16-bit-weight steps at most (:data:`INT16_STEP` nodes each),
    ``verify_samples`` evaluation samples per trial."""

    budget_s: float = 600.0
    objective: str = "latency"
    target: Target = Target.CPU
    batch_sizes: tuple[int, ...] = (1,)
    bench_s: float = 1.0
    exclusion_steps: int = 6
    verify_samples: int = 32
    opt_level: OptLevel = OptLevel.EXTENDED
    max_trials: int | None = None
    int16_steps: int = 3
    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape: {input name: shape} for open dims


class Tuner:
    """One search; iterate :meth:`trials` (or call :meth:`run`), then read :attr:`result`."""

    def __init__(self, model, calibration: DataRef | None, evaluation: DataRef, *, settings: TuneSettings | None = None,
                 policy: Policy | None = None, preprocess=None, sample: str | None = None, workspace=None,
                 out_dir=None, recipes: Sequence[Recipe] | None = None) -> None:
        from ortlab.runs.workspace import Workspace

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
        self.trials_done: list[Trial] = []
        self.baseline_ms: dict[str, float] = {}
        self.result: TuneResult | None = None
        self.notes: list[str] = []
        self._start = 0.0

    # -- control
    def cancel(self) -> None:
        """Stop: the running recipe or benchmark is cancelled and no further trial starts."""
        self._cancel = True
        h = self._handle
        if h is not None:
            h.cancel()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start if self._start else 0.0

    def _left(self) -> float:
        return self.settings.budget_s - self.elapsed

    def _stop(self) -> bool:
        s = self.settings
        return self._cancel or self._left() <= 0 or (s.max_trials is not None and len(self.trials_done) >= s.max_trials)

    def run(self) -> TuneResult:
        for _ in self.trials():
            pass
        assert self.result is not None
        return self.result

    # -- the search
    def trials(self) -> Iterator[Trial]:
        """Run the search; yield each finished trial. ``result`` is set when the generator ends."""
        from ortlab.runtime.hardware import detect
        from ortlab.model.inspect import inspect_model

        self._start = time.monotonic()
        info = inspect_model(self.model)
        ops = sorted({op for (_, op) in info.op_counts})
        try:
            self.baseline_ms = self._bench(self.model, "source (fp32)", None)
            recipes = self._recipes if self._recipes is not None else search_space(
                self.settings.target, detect(), self.settings.opt_level, ops)
            recipes = [r for r in recipes if self._valid(r)]
            queue = list(recipes)
            split = max(1, int(len(queue) * 0.6)) if self.settings.exclusion_steps else len(queue)
            # 1: most of the search space; 2: greedy keep-in-float; 3: what is left of the search space
            while queue and not self._stop() and (len(self.trials_done) < split or not self.settings.exclusion_steps):
                yield self._trial(queue.pop(0), "search")
            if self.settings.exclusion_steps and not self._stop():
                yield from self._exclusions()
            if self.settings.int16_steps and not self._stop():
                yield from self._int16_weights()
            while queue and not self._stop():
                yield self._trial(queue.pop(0), "search")
        except Cancelled:
            if not self._out_of_time:
                self._cancel = True
        finally:
            self.result = self._finish()

    def _valid(self, r: Recipe) -> bool:
        from ortlab.runtime.providers import working_providers

        errors = [f for f in validate_recipe(r, working_providers()) if f.level == "error"]
        if errors:
            self.notes.append(f"Skipped {r.label()}: {errors[0].message}")
        return not errors

    def _spec(self, recipe: Recipe) -> RunSpec:
        vp = getattr(self.policy, "verdict_policy", None)
        return RunSpec(self.model, recipe, self.sample, self.calibration, self.evaluation, self.preprocess,
                       self.settings.verify_samples, policy=vp, shapes=dict(self.settings.shapes))

    def _trial(self, recipe: Recipe, stage: str, note: str = "") -> Trial:
        from ortlab.runs import service

        index = len(self.trials_done) + 1
        t = Trial(index, recipe.name or recipe.label(), stage, recipe, note=note)
        start = time.monotonic()
        spec = self._spec(recipe)
        t.cli_line = spec.cli_line()
        out = self.out_dir / "trials" / f"{index:02d}" if self.out_dir is not None else None
        try:
            self._handle = service.start_recipe(spec, out, workspace=self.workspace, origin="tune")
            artifact = self._wait(self._handle)
            t.run_id, t.model_path, t.size_bytes = artifact.run_id, str(artifact.model_path), artifact.size_bytes
            report = artifact.evaluation
            decision = self.policy(report)
            t.accepted, t.verdict = decision.accept, decision.reason
            if report is not None and report.outputs:
                t.sqnr_db = min(o.sqnr_db for o in report.outputs)
                t.top1_agreement = report.top1_agreement
            t.latency_ms = self._bench(t.model_path, t.label, t.run_id, t)
            ratios = [t.min_ms[b] / t.baseline_min_ms[b] for b in t.min_ms if t.baseline_min_ms.get(b)]
            t.relative_latency = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
            t.p50_ms = t.latency_ms.get(str(self.settings.batch_sizes[0]))
            t.cost = t.relative_latency if self.settings.objective == "latency" else float(t.size_bytes or 0)
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

    def _wait(self, handle) -> Any:
        while not handle.wait(0.2):
            handle.drain()
            if self._cancel or self._left() < 0:
                if self._left() < 0 and not self._cancel:
                    self._out_of_time = True
                    self.notes.append("The budget ran out during a trial; it was stopped and is not counted.")
                handle.cancel()
                handle.wait()
                raise Cancelled()
        handle.drain()
        if handle.error is not None:
            raise handle.error
        return handle.result

    def _bench(self, path: str, name: str, run_id: int | None, trial: Trial | None = None) -> dict[str, float]:
        """p50 ms by batch size. A trial is timed in the same benchmark as the source, right after it, so its
        ratio to the source is measured side by side (machine load changes between trials)."""
        from ortlab.runs import service
        from ortlab.runs.history import BenchVariant

        s = self.settings
        cfg = BenchConfig(batch_sizes=tuple(s.batch_sizes), warmup=3, duration_s=s.bench_s, target=s.target)
        variants = [BenchVariant("trial", name, path, run_id)]
        if trial is not None:
            variants.insert(0, BenchVariant("source", "source (fp32)", self.model, None))
        self._handle = service.start_benchmark(variants, cfg, workspace=self.workspace, origin="tune",
                                               shapes=self.settings.shapes)
        summaries = self._wait(self._handle)
        if trial is not None:
            trial.bench_id = self._handle.bench_id
            trial.baseline_ms = {str(x.batch_size): float(x.p50) for x in summaries if x.variant == "source"}
            trial.baseline_min_ms = {str(x.batch_size): float(x.min) for x in summaries if x.variant == "source"}
            trial.min_ms = {str(x.batch_size): float(x.min) for x in summaries if x.variant == "trial"}
        return {str(x.batch_size): float(x.p50) for x in summaries if x.variant == "trial"}

    def _mark_pareto(self) -> None:
        done = [t for t in self.trials_done if t.status == "done"]
        flags = pareto_front([(t.cost, t.sqnr_db) for t in done])
        for t, flag in zip(done, flags):
            t.pareto = flag

    # -- greedy keep-in-float sets
    def _exclusion_base(self) -> Trial | None:
        static = [t for t in self.trials_done if t.status == "done" and t.recipe.precision == Precision.INT8
                  and t.recipe.quant.mode == QuantMode.STATIC and t.recipe.quant.quant_format == QuantFormat.QDQ
                  and t.sqnr_db is not None and t.model_path]
        static = [t for t in static if (Path(t.model_path or "").parent / "model.qdq.onnx").is_file()]
        if not static:
            return None
        faster = [t for t in static if t.relative_latency is not None and t.relative_latency < 1.0] or static
        return max(faster, key=lambda t: (t.sqnr_db or -math.inf, -(t.cost or 0)))

    def _exclusions(self) -> Iterator[Trial]:
        from ortlab.checks.analyze import analyze

        current = self._exclusion_base()
        if current is None or current.accepted:
            return
        tried: set[str] = set()
        steps = 0
        while steps < self.settings.exclusion_steps and not self._stop():
            nodes = self._analyze(analyze, current)
            excluded = set(current.recipe.quant.nodes_to_exclude)
            pick = next((n for n in nodes if n not in tried and n not in excluded), None)
            if pick is None:
                return
            tried.add(pick)
            steps += 1
            q = replace(current.recipe.quant, nodes_to_exclude=tuple(sorted(excluded | {pick})))
            name = f"{current.label.split(' + float')[0]} + float {len(excluded) + 1}"
            t = self._trial(replace(current.recipe, quant=q, name=name), "exclude", f"keep {pick} in float")
            current = _keep_if_gains(t, current)
            yield t
            if current.accepted:
                return

    def _int16_weights(self) -> Iterator[Trial]:
        """Grow the set of nodes with 16-bit weights along the per-node analysis ranking of the best static QDQ
        trial, :data:`INT16_STEP` weighted nodes a step; a step is kept only when it adds SQNR. On
        EfficientNet-Lite0 int8 weights alone cap the logits at about 18.5 dB (activations at 16 bits), so no
        activation or calibration setting reaches 20 dB; 16-bit weights do, but ORT runs those nodes in float."""
        from ortlab.checks.analyze import analyze

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
            current = _keep_if_gains(t, current)
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

    def _analyze(self, analyze_fn, trial: Trial) -> list[str]:
        """Node names of ``trial``'s QDQ model, worst local error first (cached per trial)."""
        cache = getattr(self, "_analysis_cache", {})
        self._analysis_cache = cache
        if trial.index not in cache:
            from ortlab.data import samples

            sample = samples.get_sample(self.sample) if self.sample else samples.find_for_model(self.model)
            labels = sample.labels if sample is not None and sample.labels else None
            ds = self.evaluation.load(labels)
            pre = self.preprocess
            if pre is None and ds.kind == "images":
                from ortlab.data.preprocess import resolve_preprocess
                from ortlab.model.inspect import inspect_model

                pre = resolve_preprocess(inspect_model(self.model).inputs, sample, ds)
            result = analyze_fn(self.model, trial.model_path, ds, pre, n=min(32, self.settings.verify_samples),
                                shapes=self.settings.shapes)
            cache[trial.index] = [e.name for e in result.nodes]
        return cache[trial.index]

    # -- the recommendation
    def _finish(self) -> TuneResult:
        from ortlab.runtime.hardware import detect

        s = self.settings
        done = [t for t in self.trials_done if t.status == "done" and t.cost is not None]
        accepted = [t for t in done if t.accepted]
        best: Trial | None = None
        if accepted:
            best = min(accepted, key=lambda t: (t.cost, -(t.sqnr_db or -math.inf)))
        elif done:
            best = max(done, key=lambda t: (t.sqnr_db if t.sqnr_db is not None else -math.inf, -(t.cost or 0)))
        sentence, line = _sentence(best, bool(accepted), s, len(self.trials_done)), ""
        if best is not None:
            line = best.cli_line
            if self.out_dir is not None:
                self._write_out(best)
        pol = getattr(self.policy, "verdict_policy", None)
        result = TuneResult(
            self.model, s.objective, Target(s.target).value,
            f"verdict OK (min SQNR {pol.min_sqnr_db:g} dB, confident-flip margin {pol.margin:g})" if pol else
            "custom policy", detect().summary(), list(s.batch_sizes), dict(self.baseline_ms), list(self.trials_done),
            best, bool(accepted), sentence, line, self.elapsed, self._cancel, list(self.notes))
        if self.out_dir is not None:
            from ortlab.core.serial import dumps

            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / TRIALS_FILE).write_text(dumps(result, indent=2), encoding="utf-8")
        return result

    def _write_out(self, best: Trial) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if best.model_path and Path(best.model_path).is_file():
            shutil.copyfile(best.model_path, self.out_dir / "model.onnx")
        (self.out_dir / "recipe.json").write_text(best.recipe.to_json(), encoding="utf-8")


def _sentence(best: Trial | None, accepted: bool, s: TuneSettings, n: int) -> str:
    if best is None:
        return f"No trial finished ({n} started); nothing to recommend."
    quality = f"keeps the outputs at {best.sqnr_db:.1f} dB SQNR" if best.sqnr_db is not None and math.isfinite(
        best.sqnr_db) else "gives identical outputs"
    if s.objective == "latency":
        gain = (f"{best.speedup:.2f}× faster than the fp32 source at batch "
                f"{', '.join(str(b) for b in s.batch_sizes)}") if best.speedup else "of unknown speed"
    else:
        gain = f"{(best.size_bytes or 0) / 1e6:.1f} MB"
    if accepted:
        return f"{best.label} is the {'fastest' if s.objective == 'latency' else 'smallest'} recipe the policy " \
               f"accepts of {n} tried: {gain}, it {quality}."
    return f"No recipe of {n} tried passes the policy; the closest, {best.label}, is {gain} and {quality} " \
           f"({best.verdict})."


def tune(model, calibration: DataRef | None, evaluation: DataRef, **kwargs: Any) -> TuneResult:
    """Run a whole search (:class:`Tuner` arguments) and return its result."""
    return Tuner(model, calibration, evaluation, **kwargs).run()


def _keep_if_gains(trial: Trial, current: Trial) -> Trial:
    """The greedy step's choice: ``trial`` when it finished and adds at least ``MIN_GAIN_DB`` of SQNR over
    ``current``, else ``current``; the trial's note says which."""
    gain = (trial.sqnr_db or -math.inf) - (current.sqnr_db or -math.inf)
    if trial.status == "done" and gain >= MIN_GAIN_DB:
        trial.note += f": kept (+{gain:.1f} dB)"
        return trial
    trial.note += f": dropped ({gain:+.1f} dB)" if trial.status == "done" else ": dropped (failed)"
    return current
