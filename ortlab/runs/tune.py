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
interval); identical graphs (same sha256) are timed once, and a trial whose model is an earlier one's, byte for
byte, is said to be and is no candidate of its own; the finalists are re-timed at the end.

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

Parts: the :class:`Tuner` runs what the search strategy (:mod:`ortlab.runs.tune_search`) proposes on a trial runner
(:mod:`ortlab.runs.trial_runner`: here or on a Ray cluster), judges and times each trial (:mod:`ortlab.runs.tune_timing`)
within its budget (:mod:`ortlab.runs.tune_budget`), and at the end asks the recommender
(:mod:`ortlab.runs.tune_recommender`) for the result, which it writes (:mod:`ortlab.runs.tune_output`). Its space is
:mod:`ortlab.runs.tune_space`, what it judges :mod:`ortlab.runs.tune_policy`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import onnx

from ortlab.checks.analyze import analyze
from ortlab.checks.eval_report import EvalReport
from ortlab.checks.verdict import Level, Verdict, VerdictPolicy, judge
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.data import samples
from ortlab.data.dataset import stratified_sample
from ortlab.data.feeds import control_values
from ortlab.data.inputs import infer_specs
from ortlab.data.preprocess import resolve_preprocess
from ortlab.model.decision_head import DecisionHead, decision_head
from ortlab.model.inspect import inspect_model, model_identity
from ortlab.model.patterns import DETECTOR_TUNE_NOTE, ENCODER_NOTE, detect_patterns, is_detector, is_encoder
from ortlab.runs import prepare
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES, DataRef, RunSpec
from ortlab.runs.trial_runner import LocalTrials, Timer, TrialHandle, TrialRunner
from ortlab.runs.tune_accuracy import StageContext
from ortlab.runs.tune_budget import Clocks, SearchBudget
from ortlab.runs.tune_cluster import ClusterTrials
from ortlab.runs.tune_evidence import SampleEvidence, evidence_of
from ortlab.runs.tune_output import RECOMMENDED_NOTE, mark_recommended, write_recommendation, write_trials
from ortlab.runs.tune_pick import choosing_measure, choosing_part
from ortlab.runs.tune_policy import (
    FAILURES_TO_STOP, Policy, Stage, Trial, TrialLevel, TrialStatus, TuneResult, judging_policy, pareto_front, same_model,
    task_quality, verdict_policy,
)
from ortlab.runs.tune_recommender import BUDGET_NOTE, Recommender, SearchAccount, swap
from ortlab.runs.tune_search import SearchStrategy
from ortlab.runs.tune_settings import ALL_SAMPLES, TuneSettings
from ortlab.runs.tune_space import DETECTOR_PERCENTILE_NOTE, dedupe, search_space
from ortlab.runs.tune_steps import Ahead, Finished, Proposal, Say, Step, Steps
from ortlab.runs.tune_timing import TrialTiming
from ortlab.timing.stats import SpeedUp
from ortlab.runs.tune_words import budget_hint_s, none_finished, stopped_where
from ortlab.runs.workspace import Workspace
from ortlab.runtime.cpu_time import CpuShare
from ortlab.runtime.hardware import detect
from ortlab.runtime.providers import working_providers
from ortlab.settings.config import Recipe, Target

__all__ = ["RECOMMENDED_NOTE", "TrialData", "TuneSettings", "Tuner", "budget_hint_s", "none_finished"]


@dataclass(frozen=True)
class TrialData:
    """What every trial of a search runs on: the source ``model``, the calibration and evaluation data, the
    preprocessing (None: resolved from the model and the data) and the bundled ``sample`` the data came from."""

    model: str
    calibration: DataRef | None
    evaluation: DataRef
    preprocess: Any = None
    sample: str | None = None

    def eval_data(self) -> tuple[Any, Any]:
        """The evaluation data set (with the sample's labels) and the preprocessing that feeds it."""
        sample = samples.get_sample(self.sample) if self.sample else samples.find_for_model(self.model)
        labels = sample.labels if sample is not None and sample.labels else None
        ds = self.evaluation.load(labels)
        pre = self.preprocess
        if pre is None and ds.kind == "images":
            pre = resolve_preprocess(inspect_model(self.model).inputs, sample, ds)
        return ds, pre


class Tuner:
    """One search; iterate :meth:`trials` (or call :meth:`run`), then read :attr:`result`. ``runner``: where trials
    run (None: here, or on the Ray cluster ``settings.ray`` names); ``timer``: the clock trials are timed with (None:
    the runner's); ``clocks``: the budget's clocks."""

    def __init__(self, model, calibration: DataRef | None, evaluation: DataRef, *, settings: TuneSettings | None = None,
                 policy: Policy | None = None, preprocess=None, sample: str | None = None, workspace=None,
                 out_dir=None, recipes: Sequence[Recipe] | None = None, runner: TrialRunner | None = None,
                 timer: Timer | None = None, clocks: Clocks | None = None) -> None:
        self.data = TrialData(str(Path(model).resolve()), calibration, evaluation, preprocess, sample)
        self.settings = settings or TuneSettings()
        if self.settings.objective not in ("latency", "size"):
            raise OrtlabError(f"Unknown objective {self.settings.objective!r}: latency or size.")
        self.policy: Policy = policy or verdict_policy()
        self.workspace = workspace if workspace is not None else Workspace()
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._recipes = list(recipes) if recipes is not None else None
        s = self.settings
        self.budget = SearchBudget(s.budget_s, s.budget_cpu_s, s.max_trials, clocks)
        self.trial_runner: TrialRunner = runner or LocalTrials(start_here, s.values)
        self._on_cluster = runner is None and bool(s.ray)  # the cluster's runner is made when the search starts
        self.timing = TrialTiming(self.data.model, s, self.trial_runner, self.workspace, self._say, timer)
        self._handle: Any = None
        self.trials_done: list[Trial] = []
        self.result: TuneResult | None = None
        self.notes: list[str] = []
        self.evidence: dict[int, SampleEvidence | None] = {}  # trial index → its task measure per sample

    @property
    def model(self) -> str:
        return self.data.model

    @property
    def verdict_policy(self) -> VerdictPolicy:
        return judging_policy(self.policy)

    def _say(self, text: str) -> None:
        self.notes.append(text)

    # -- control
    def cancel(self) -> None:
        """Stop: the running recipe or benchmark is cancelled and no further trial starts."""
        self.budget.cancel()
        h = self._handle
        if h is not None:
            h.cancel()

    @property
    def elapsed(self) -> float:
        return self.budget.elapsed

    @property
    def cpu_used(self) -> float:
        """CPU seconds the search has used so far (this process and the processes it started)."""
        return self.budget.cpu_used

    def cpu_share(self) -> CpuShare:
        """What the search got of the machine so far (:meth:`SearchBudget.cpu_share`)."""
        return self.budget.cpu_share()

    def stop(self) -> bool:
        """No further trial starts: cancelled, out of budget, or ``max_trials`` done."""
        return self.budget.stop(len(self.trials_done))

    def run(self) -> TuneResult:
        for _ in self.trials():
            pass
        assert self.result is not None
        return self.result

    # -- the search
    def trials(self) -> Iterator[Trial]:
        """Run the search; yield each finished trial. ``result`` is set when the generator ends."""
        self.budget.start()
        info = inspect_model(self.model)
        evaluation = self._evaluation_data()
        self.timing.shapes = self._data_shapes(info, evaluation)
        self._use_data_values(info, evaluation)
        if self._on_cluster:
            self.trial_runner = ClusterTrials(self.settings.ray or "", self.settings.timing_resource, self.model,
                                              launch=prepare.start_unrecorded_recipe, values=self.settings.values)
            self.timing.runner = self.trial_runner
            self.notes.append(self.trial_runner.where)
        ops = sorted({op for (_, op) in info.op_counts})
        if self.settings.verify_samples == ALL_SAMPLES:  # every sample the person gave: evidence sized to the data
            count = max(1, len(evaluation)) if evaluation is not None else DEFAULT_VERIFY_SAMPLES
            self.settings = self.timing.settings = replace(self.settings, verify_samples=count)
        try:
            encoder, detector, head = self._kind()
            yield from self.run_steps(self.strategy(detector, head).steps(self._queue(ops, encoder, detector)))
        except Cancelled:
            if not self.budget.out_of_time:
                self.budget.cancelled = True
        finally:
            try:
                self.result = self.finish()
            finally:
                self.release_timing()

    def _queue(self, ops: list[str], encoder: bool, detector: bool) -> list[Recipe]:
        """The search space (or the recipes given), deduplicated and valid here; notes on what it holds."""
        s = self.settings
        recipes = self._recipes if self._recipes is not None else search_space(
            s.target, detect(), s.opt_level, ops, s.objective, encoder, detector)
        self.notes += [ENCODER_NOTE] if encoder else []
        self.notes += [DETECTOR_TUNE_NOTE, DETECTOR_PERCENTILE_NOTE] if detector else []
        recipes, dropped = dedupe(recipes)
        self.notes += dropped
        return [r for r in recipes if self._valid(r)]

    def _kind(self) -> tuple[bool, bool, DecisionHead | None]:
        """Whether the model is a recognised encoder, a YOLO-style detector (searched from its own space), and its
        decision head (:mod:`ortlab.model.decision_head`), from one reading of its graph (external weights are not
        read); nothing of the kind for recipes given or another target."""
        if self._recipes is not None or self.settings.target != Target.CPU:
            return False, False, None
        graph = onnx.load(str(self.model), load_external_data=False)
        patterns = detect_patterns(graph)
        return is_encoder(graph, patterns), is_detector(patterns), decision_head(graph, patterns, self.timing.shapes)

    def strategy(self, detector: bool = False, head: DecisionHead | None = None) -> SearchStrategy:
        """The search strategy over this search's trials (``detector``: a YOLO-style detector's order; ``head``:
        its decision head, tried in float after the default)."""
        return SearchStrategy(self.settings, stop=self.stop, evidence=self.evidence, ranked_nodes=self._ranked_nodes,
                              stage_context=self.stage_context, detector=detector, head=head)

    def stage_context(self) -> StageContext:
        """What the accuracy-controlled stage needs of this search."""
        s = self.settings
        return StageContext(self.model, self.policy, s.exclusion_steps, s.verify_samples, s.shapes, self.stop,
                            self.budget.left, self.budget.token, self.choosing_data)

    def choosing_data(self) -> tuple[Any, Any]:
        """The evaluation data the search chooses on, and its preprocessing: the samples a trial is verified on
        (drawn as the trial draws them) less those held out to confirm the pick (:func:`choosing_part` of the
        default's record), so neither the per-node analysis nor the accuracy stage's screen looks at the samples the
        pick's claim is stated on; all of them until the default's record is in."""
        ds, pre = self.data.eval_data()
        n = self.settings.verify_samples
        if n and n < len(ds):
            first = next((t for t in self.trials_done if t.index == 1), None)
            ds = stratified_sample(ds, n, first.recipe.quant.seed if first is not None else 0)
        part = choosing_part(self.evidence.get(1))
        if part is not None and part[0] == len(ds):
            ds = ds.subset(part[1])
        return ds, pre

    def run_steps(self, steps: Steps) -> Iterator[Trial]:
        """Carry out a strategy's ``steps``: run each proposed recipe as a trial and send it back, start what is
        ahead, keep its notes; yield each trial it shows."""
        try:
            step: Step | None = next(steps, None)
            while step is not None:
                if isinstance(step, Proposal):
                    if step.ahead is not None:
                        self._prefetch(step.ahead)
                    step = _send(steps, self._trial(step.recipe, step.stage, step.note))
                    continue
                if isinstance(step, Ahead):
                    self._prefetch(step.recipes)
                elif isinstance(step, Say):
                    self.notes.append(step.text)
                elif isinstance(step, Finished):
                    self._put(step.trial)  # with the strategy's word on it
                    yield next(t for t in self.trials_done if t.index == step.trial.index)
                step = next(steps, None)
        finally:
            steps.close()

    def _prefetch(self, queue: Sequence[Recipe]) -> None:
        """On a cluster, the accuracy work of ``queue[0]`` (the next trial) and of the recipes after it starts on
        free nodes (:meth:`ClusterTrials.prefetch`); no more than the trials left before ``max_trials``."""
        limit = self.settings.max_trials
        ahead = queue[:max(0, limit - len(self.trials_done))] if limit is not None else queue
        self.trial_runner.prefetch((self.spec(r) for r in ahead), self.workspace)

    def release_timing(self) -> None:
        """End the source's timing children and the runner (the search does when it ends)."""
        self.trial_runner.close()

    def _evaluation_data(self) -> Any:
        """The evaluation dataset, loaded once before the trials; None when it cannot be (each trial then says why)."""
        try:
            return self.data.evaluation.load()
        except (OrtlabError, OSError, ValueError):
            return None

    def _data_shapes(self, info: Any, evaluation: Any) -> dict[str, list[int]]:
        """``--shape`` plus the open dims the evaluation data sets (a text's ``--seq-len``, a tensor file's shapes)."""
        out = dict(self.settings.shapes)
        try:
            specs = infer_specs(info, self.data.preprocess, evaluation, self.settings.shapes, strict=False) \
                if evaluation is not None else []
        except (OrtlabError, OSError, ValueError):
            return out
        for spec in specs:
            if spec.name not in out and spec.resolved and any(d.source not in ("model", "batch") for d in spec.dims):
                out[spec.name] = list(spec.shape)
        return out

    def _use_data_values(self, info: Any, evaluation: Any) -> None:
        """Time a control input (a VAD's ``sr``) without ``--input-value`` at the value the evaluation data holds, as
        the benchmark does (:func:`ortlab.data.feeds.control_values`); before anything is timed or a cluster joined."""
        try:
            values = control_values(evaluation, info.inputs) | self.settings.values
        except (OrtlabError, OSError, ValueError):  # each trial's run says what is wrong with the data
            return
        if values != self.settings.values:
            self.settings = self.timing.settings = replace(self.settings, values=values)
            if isinstance(self.trial_runner, LocalTrials):
                self.trial_runner.values = dict(values)

    def _valid(self, r: Recipe) -> bool:
        errors = [f for f in prepare.validate_recipe(r, working_providers()) if f.level == "error"]
        if errors:
            self.notes.append(f"Skipped {r.label()}: {errors[0].message}")
        return not errors

    def spec(self, recipe: Recipe) -> RunSpec:
        """The run of ``recipe`` a trial is."""
        d = self.data
        return RunSpec(d.model, recipe, d.sample, d.calibration, d.evaluation, d.preprocess,
                       self.settings.verify_samples, policy=self.policy.verdict_policy,
                       shapes=dict(self.settings.shapes))

    # -- one trial
    def _trial(self, recipe: Recipe, stage: Stage, note: str = "") -> Trial:
        index = len(self.trials_done) + 1
        self.budget.started += 1
        start = time.monotonic()
        spec = self.spec(recipe)
        t = Trial(index, recipe.name or recipe.label(), stage, recipe, note=note, cli_line=spec.cli_line())
        out = self.out_dir / "trials" / f"{index:02d}" if self.out_dir is not None else None
        try:
            self._handle = self.trial_runner.start(spec, out, self.workspace)
            artifact = self._wait(self._handle)
            t = replace(t, ran_on=self.trial_runner.node_of(self._handle), run_id=artifact.run_id,
                        model_path=str(artifact.model_path), size_bytes=artifact.size_bytes,
                        model_sha=_identity(artifact.model_path))
            t = same_model(self._judge(t, artifact.evaluation, artifact.verdict), self.trials_done)
            t = self.timing.time(t, self.budget.token)
        except Cancelled:
            raise
        except OrtlabError as exc:
            if self.budget.cancelled or self.budget.out_of_time:
                raise Cancelled() from None
            t = self._failed(t, exc)
        finally:
            self._handle = None
        self.trials_done.append(replace(t, seconds=time.monotonic() - start))
        self._mark_pareto()
        return self.trials_done[-1]

    def _failed(self, t: Trial, exc: OrtlabError) -> Trial:
        last = [x.error for x in self.trials_done[-(FAILURES_TO_STOP - 1):]]
        if len(last) == FAILURES_TO_STOP - 1 and all(e == exc.message for e in last):
            self.budget.cancelled = True  # the same failure again and again: the environment, not the recipe
            self.notes.append(f"Stopped after {FAILURES_TO_STOP} trials failed alike: {exc.message}")
        return replace(t, status=TrialStatus.FAILED, error=exc.message, verdict=f"failed: {exc.message}")

    def _judge(self, t: Trial, report: EvalReport | None, verdict: Verdict | None) -> Trial:
        """``t`` with the run's own verdict (the one optimize prints for this recipe; judged here with the same
        policy when the run has none), the task's measure, and the policy's answer, which can only add the search's
        bar to "ok"."""
        v = verdict if verdict is not None else judge(report, self.verdict_policy)
        decision = self.policy(report)
        q = task_quality(report, v.level.value)
        words = decision.reason if v.level == Level.OK else v.headline
        if v.edge and v.level == Level.OK and not words.startswith("ok, on the edge"):
            words = "ok, on the edge" + words[2:]
        t = replace(t, level=TrialLevel(v.level.value), task_measure=q.measure, task_value=q.value, score_what=q.sqnr_what,
                    score_db=q.sqnr_db, accepted=decision.accept and v.level == Level.OK, verdict=words, edge=v.edge)
        self.evidence[t.index] = evidence_of(report)
        t = choosing_measure(t, self.evidence[t.index])
        if report is not None and report.outputs:
            t = replace(t, sqnr_db=min(o.sqnr_db for o in report.outputs), top1_agreement=report.top1_agreement)
        return t

    def _wait(self, handle) -> Any:
        b = self.budget
        while not handle.wait(0.2):
            handle.drain()
            if b.cancelled or b.spent():
                if not b.cancelled:
                    b.out_of_time = True
                    b.stopped_in = stopped_where(handle)
                    self.notes.append(f"{BUDGET_NOTE}; it was stopped and is not counted.")
                handle.cancel()
                handle.wait()
                raise Cancelled()
        handle.drain()
        if handle.error is not None:
            raise handle.error
        return handle.result

    def _mark_pareto(self) -> None:
        """Each finished trial's place on the Pareto front of cost and the measure that decides (as the chart draws
        it)."""
        done = [t for t in self.trials_done if t.status == TrialStatus.DONE and t.same_as is None]  # one point a model
        if any(t.task_value is not None for t in done):
            flags = pareto_front([(t.cost, t.task_value) for t in done])
        else:
            flags = pareto_front([(t.cost, t.score_db if t.score_db is not None else t.sqnr_db) for t in done])
        on_front = {t.index: flag for t, flag in zip(done, flags)}
        self.trials_done[:] = [replace(t, pareto=on_front[t.index]) if t.index in on_front and t.pareto !=
                               on_front[t.index] else t for t in self.trials_done]

    def latest(self, trials: list[Trial]) -> list[Trial]:
        """``trials`` as they are now (their Pareto flags, a finalist's re-timing); safe from another thread."""
        return swap(trials, list(self.trials_done))

    def _put(self, trial: Trial) -> None:
        """``trial``'s latest version in place of the one before (the same index)."""
        self.trials_done[:] = swap(self.trials_done, [trial])

    def _ranked_nodes(self, trial: Trial) -> list[str]:
        """Node names of ``trial``'s QDQ model, worst local error first (the per-node analysis)."""
        ds, pre = self.choosing_data()
        result = analyze(self.model, trial.model_path, ds, pre, n=min(32, self.settings.verify_samples or 32),
                         shapes=self.settings.shapes)
        return [e.name for e in result.nodes]

    # -- the recommendation
    def _retime(self, finalists: list[Trial]) -> list[Trial]:
        """``finalists`` re-timed interleaved with the source, twice as long as a trial's timing, so the
        recommendation's speed-up is not one noisy measurement (until one fails or the search is cancelled)."""
        out = list(finalists)
        if self.budget.cancelled:
            return out
        for i, t in enumerate(finalists):
            try:
                out[i] = replace(self.timing.time(t, self.budget.token, 2 * self.settings.bench_s), retimed=True)
            except (OrtlabError, Cancelled):
                break
            self._put(out[i])
        return out

    def _head_to_head(self, candidate: Trial, default: Trial) -> SpeedUp:
        """``candidate`` timed against ``default`` in one interleaved run (:meth:`TrialTiming.head_to_head`)."""
        return self.timing.head_to_head(candidate, default, self.budget.token)

    def finish(self) -> TuneResult:
        """The search's result: the recommender's pick and words; the pick written, and every trial."""
        self.trial_runner.prefetch([], self.workspace)  # on a cluster: no trial starts ahead any more, none runs
        recommender = Recommender(self.settings, self.policy, self.evidence, self._retime, self._head_to_head)
        pick = recommender.pick(self.trials_done)
        self.trials_done[:] = pick.trials
        self._mark_pareto()
        pick = replace(pick, best=next((t for t in self.trials_done if pick.best and t.index == pick.best.index), None))
        best = pick.best
        b = self.budget
        machine = self.trial_runner.timing_machine
        account = SearchAccount(
            self.model, b.started, b.cancelled, b.stopped_in, b.spent(), b.cpu_spent(), b.elapsed,
            None if self.settings.ray else b.cpu_used,  # a cluster's CPU is elsewhere
            machine.summary() if machine is not None else detect().summary(), tuple(self.notes),
            tuple(self.trial_runner.retried),
            None if self.settings.ray else b.cpu_share().busy_note())  # a cluster's work is elsewhere
        if best is not None and pick.accepted:
            mark_recommended(self.workspace, best)
        written = None
        if best is not None and self.out_dir is not None:
            written = write_recommendation(self.out_dir, best, pick.accepted)
        result = recommender.result(self.trials_done, pick, account, written)
        self.notes = list(result.notes)
        if self.out_dir is not None:
            write_trials(self.out_dir, result)
        return result


def start_here(spec: RunSpec, out: Path | None, workspace: Any) -> TrialHandle:
    """A trial on this machine: its recipe in a child process through the run service, recorded in History."""
    return prepare.start_recipe(spec, out, workspace=workspace, origin="tune")


def _identity(model_path) -> str:
    """The result's identity (:func:`model_identity`); "" when it cannot be read (it is then compared with none)."""
    try:
        return model_identity(model_path)
    except (OSError, OrtlabError):
        return ""


def _send(steps: Steps, trial: Trial) -> Step | None:
    try:
        return steps.send(trial)
    except StopIteration:
        return None
