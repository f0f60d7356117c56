"""What a tune search judges and keeps: the accuracy policy (one verdict, an extra bar), the task's own
measure of a trial, the trials and the search's result, the Pareto front."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ortlab.settings.config import (
    Recipe,
)
from ortlab.checks.eval_report import EvalReport
from ortlab.checks.task_kind import kinds_of, main_kind
from ortlab.checks.verdict import Level, VerdictPolicy, judge
from ortlab.timing.stats import SpeedUp

DEFAULT_MIN_SQNR_DB = 20.0
MIN_GAIN_DB = 0.1  # an exclusion step is kept only when it adds at least this much SQNR
TRIALS_FILE = "trials.json"
INT16_STEP = 4  # weighted nodes given 16-bit weights per greedy step
FAILURES_TO_STOP = 3  # consecutive trials failing with the same message end the search
CLOSEST_DIR = "closest"  # where a search that met no bar writes its closest non-broken trial
FINALISTS = 3  # trials re-timed at the end, interleaved with the source
CHAIN_MAX = 4  # nodes in one keep-in-float step's producer chain
LEVEL_RANK = {"ok": 0, "unknown": 1, "": 1, "degraded": 2, "broken": 3}


# -- accuracy policy -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A policy's answer on one trial's evaluation: ``accept`` and why; ``level`` the verdict's level when the
    policy judged one (never changed by the search's bar)."""

    accept: bool
    reason: str
    level: str = ""



@dataclass(frozen=True)
class Quality:
    """What a trial's accuracy is ranked by, task first: the verdict ``level``; the task's own ``measure`` and its
    ``value`` (higher is better, a share in [0, 1]; None for plain tensors); the SQNR that matters for the task
    (``sqnr_what``: a detector's worst channel group — its scores — else the worst output)."""

    level: str
    measure: str
    value: float | None
    sqnr_what: str
    sqnr_db: float | None

    def text(self) -> str:
        bits = [f"{self.measure} {self.value:.1%}"] if self.value is not None else []
        if self.sqnr_db is not None:
            bits.append(f"{self.sqnr_what} {self.sqnr_db:.1f} dB")
        return ", ".join(bits)


def task_quality(report: EvalReport | None, level: str = "") -> Quality:
    """The task's measure of ``report`` (see :class:`Quality`): the F1 of decoded detections against the reference
    (else detections kept: 1 − the share that appear or disappear), 1 − the confident top-1 flip rate, the lowest
    nearest-neighbour agreement, 1 − the share of a recognizer's decoded strings that changed, 1 − the threshold
    crossings of dense maps (the first task kind that has a measure: :func:`ortlab.checks.task_kind.main_kind`); and
    the SQNR of a detector's worst channel group before the worst whole output's."""
    if report is None or not report.outputs:
        return Quality(level, "", None, "SQNR", None)
    tm = report.task
    measure, value = "", None
    sqnrs: dict[str, float] = {o.name: o.sqnr_db for o in report.outputs}
    what = "worst output SQNR"
    kind = main_kind(tm)
    if tm is not None and kind is not None:
        measure, value = kind.measure(tm) or ("", None)
    for k in kinds_of(tm):  # a detector's channel groups; integer outputs have no SQNR
        what = k.task_sqnr(tm, sqnrs, what)  # type: ignore[arg-type]
    finite = [v for v in sqnrs.values() if not math.isnan(v)]
    worst = min(finite) if finite else None
    return Quality(level, measure, value, what, worst)


@dataclass(frozen=True)
class SearchBar:
    """The verdict policy of a search: accept when :func:`ortlab.checks.verdict.judge` says OK under
    ``verdict_policy`` **and** this search's bar holds (see :func:`verdict_policy`). Called on an evaluation, it
    returns the :class:`Decision`."""

    verdict_policy: VerdictPolicy
    bar_db: float = DEFAULT_MIN_SQNR_DB
    min_task: float | None = None
    explicit: bool = False  # the SQNR bar was given: it holds for every model

    @property
    def bar_text(self) -> str | None:
        return bar_sentence(self.explicit, self.bar_db, self.min_task)

    def __call__(self, report: EvalReport | None) -> Decision:
        v = judge(report, self.verdict_policy)
        if v.level != Level.OK:
            return Decision(False, v.headline, v.level.value)
        q = task_quality(report, v.level.value)
        got = f" ({q.sqnr_what} {q.sqnr_db:.1f} dB)" if q.sqnr_db is not None else ""
        min_task, bar = self.min_task, self.bar_db
        if q.value is not None and min_task is not None and q.value < min_task:
            return Decision(False, f"ok, below this search's bar of {q.measure} {min_task:.1%} ({q.text()})",
                            v.level.value)
        if q.value is not None and not self.explicit:
            bar_text = f"{q.measure} ≥ {min_task:.1%}" if min_task is not None else "the verdict's task bars"
            return Decision(True, f"ok, meets this search's bar: {bar_text} ({q.text()})", v.level.value)
        if q.sqnr_db is not None and q.sqnr_db < bar:
            return Decision(False, f"ok, below this search's bar of {bar:g} dB ({q.sqnr_what} {q.sqnr_db:.1f} dB)",
                            v.level.value)
        return Decision(True, f"ok, meets this search's bar of {bar:g} dB{got}", v.level.value)


def verdict_policy(policy: VerdictPolicy | None = None, min_sqnr_db: float | None = None,
                   min_task: float | None = None) -> SearchBar:
    """Accept when :func:`ortlab.checks.verdict.judge` says OK under ``policy`` (default: the verdict's defaults,
    the same as optimize's) **and** this search's bar holds. The bar is the task's own measure when the model has
    one (:func:`task_quality`: detection F1, strings kept, no confident flip, NN agreement…): at least ``min_task``
    when given, else the verdict's own bars decide. A model without one (plain tensors) must reach
    ``min_sqnr_db`` (default 20 dB) on its worst output; a ``min_sqnr_db`` given explicitly holds for every model
    (a detector's score channels, else the worst output). The bar never changes the verdict: a trial below it is
    "ok, below this search's bar"."""
    return SearchBar(policy if policy is not None else VerdictPolicy(),
                     float(min_sqnr_db) if min_sqnr_db is not None else DEFAULT_MIN_SQNR_DB, min_task,
                     min_sqnr_db is not None)


def bar_sentence(explicit: bool, bar: float, min_task: float | None) -> str:
    """How :func:`verdict_policy`'s bar reads in a search's summary."""
    task = f"the task's measure ≥ {min_task:.1%}" if min_task is not None else "the task's own measure"
    if explicit:
        return f"task SQNR ≥ {bar:g} dB" + (f" and {task}" if min_task is not None else "")
    return f"{task} where the model has one, else worst-output SQNR ≥ {bar:g} dB"


@dataclass(frozen=True)
class SqnrBar:
    """Accept when every output's SQNR ≥ ``min_sqnr_db`` and (when given) top-1 agreement ≥ the threshold; the
    run's verdict is judged with the verdict's defaults."""

    min_sqnr_db: float = DEFAULT_MIN_SQNR_DB
    min_top1_agreement: float | None = None
    verdict_policy: VerdictPolicy | None = None  # None: the verdict's defaults
    min_task: float | None = None  # no task bar
    bar_text: str | None = None  # no search bar beyond the verdict's words

    def __call__(self, report: EvalReport | None) -> Decision:
        min_sqnr_db, min_top1_agreement = self.min_sqnr_db, self.min_top1_agreement
        if report is None or not report.outputs:
            return Decision(False, "not evaluated")
        worst = min(report.outputs, key=lambda o: o.sqnr_db)
        if not worst.sqnr_db >= min_sqnr_db:
            return Decision(False, f"{worst.name}: SQNR {worst.sqnr_db:.1f} dB < {min_sqnr_db:g} dB")
        if min_top1_agreement is not None and report.top1_agreement is not None \
                and report.top1_agreement < min_top1_agreement:
            return Decision(False, f"top-1 agreement {report.top1_agreement:.1%} < {min_top1_agreement:.1%}")
        return Decision(True, f"SQNR {worst.sqnr_db:.1f} dB ≥ {min_sqnr_db:g} dB")


def sqnr_policy(min_sqnr_db: float = DEFAULT_MIN_SQNR_DB, min_top1_agreement: float | None = None) -> SqnrBar:
    """Accept when every output's SQNR ≥ ``min_sqnr_db`` and (when given) top-1 agreement ≥ the threshold."""
    return SqnrBar(min_sqnr_db, min_top1_agreement)


Policy = SearchBar | SqnrBar  # what a search accepts: its verdict policy, its task bar and its words


def judging_policy(policy: Policy) -> VerdictPolicy:
    """The verdict policy a search judges its trials with: ``policy``'s own, else the verdict's defaults."""
    return policy.verdict_policy or VerdictPolicy()


# -- results -------------------------------------------------------------------------------------------------


class TrialStatus(StrEnum):
    """Whether a trial's run finished (its evaluation judged, its model timed) or failed."""

    DONE = "done"
    FAILED = "failed"


class Stage(StrEnum):
    """The part of the search a trial belongs to."""

    SEARCH = "search"  # the search space
    ACCURACY = "accuracy"  # screened keep-in-float sets (:mod:`ortlab.runs.tune_accuracy`)
    EXCLUDE = "exclude"  # a dynamic int8 trial's greedy keep-in-float step
    INT16 = "int16"  # a greedy 16-bit-weights step


class TrialLevel(StrEnum):
    """A trial's verdict level (:class:`ortlab.checks.verdict.Level`), or none when its run failed."""

    OK = "ok"
    DEGRADED = "degraded"
    BROKEN = "broken"
    UNKNOWN = "unknown"
    NONE = ""  # not judged: the run failed


@dataclass(frozen=True)
class Trial:
    """One tried recipe: its evaluation against the source, latency and size, and whether the policy accepts
    it. ``level`` is the run's verdict (the same as optimize's for this recipe); ``task_measure``/``task_value`` and
    ``score_what``/``score_db`` the task's own measure and SQNR (:func:`task_quality`). ``speed`` holds one
    :class:`SpeedUp` per batch size (timed interleaved with the source by the benchmark's clock: the median of the
    per-round latency ratios, with its interval); ``relative_latency`` is the geometric mean of their ratios (below
    1 = faster); ``latency_ms`` / ``baseline_ms`` map batch size (as text) → the trial's / the source's p50 in
    those rounds. ``cost`` is what the objective
    minimises."""

    index: int
    label: str
    stage: Stage
    recipe: Recipe
    status: TrialStatus = TrialStatus.DONE
    accepted: bool = False
    verdict: str = ""
    level: TrialLevel = TrialLevel.NONE  # the run's verdict
    sqnr_db: float | None = None  # worst output's SQNR
    top1_agreement: float | None = None
    task_measure: str = ""
    task_value: float | None = None
    score_what: str = ""
    score_db: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    baseline_ms: dict[str, float] = field(default_factory=dict)  # the source's p50, timed interleaved with the trial
    speed: list[SpeedUp] = field(default_factory=list)
    retimed: bool = False  # re-timed at the end as a finalist
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
    ran_on: str = ""  # on a Ray cluster: the node that quantized and evaluated it ("": this machine)
    timed_on: str = ""  # on a Ray cluster: the node that timed it ("": this machine)
    # the task measure's 95% interval on the samples the search chooses on (task_value is its point; None: no
    # per-sample record) and the evidence it rests on ("120 reference detections in 200 samples")
    task_low: float | None = None
    task_high: float | None = None
    evidence: str = ""
    edge: str = ""  # the verdict's "on the edge: …" when its deciding figure's interval reaches across a bar
    vs_default: str = ""  # the paired comparison with the default (trial 1) on the same samples
    model_sha: str = ""  # the result's identity (:func:`ortlab.model.inspect.model_identity`)
    same_as: int | None = None  # the earlier trial whose model this one's is, byte for byte (None: a model of its own)

    def __post_init__(self) -> None:  # given as text (a plain record read back, a test): the enum
        object.__setattr__(self, "stage", Stage(self.stage))
        object.__setattr__(self, "status", TrialStatus(self.status))
        object.__setattr__(self, "level", TrialLevel(self.level))

    @property
    def speedup(self) -> float | None:
        return 1.0 / self.relative_latency if self.relative_latency else None

    @property
    def broken(self) -> bool:
        return self.level == Level.BROKEN.value

    def task_text(self) -> str:
        """E.g. "detection F1 0.946 (0.921–0.965), 120 reference detections in 200 samples"; "" without one."""
        if self.task_value is None:
            return ""
        head = f"{self.task_measure} {self.task_value:.3f}"
        if self.task_low is not None and self.task_high is not None:
            head += f" ({self.task_low:.3f}–{self.task_high:.3f})"
        return head + (f", {self.evidence}" if self.evidence else "")

    def quality(self) -> Quality:
        return Quality(self.level, self.task_measure, self.task_value, self.score_what or "worst output SQNR",
                       self.score_db if self.score_db is not None else self.sqnr_db)

    def speed_text(self) -> str:
        """``1.84× (1.71–1.95×, 48 rounds)`` at each batch size, or "-"."""
        if not self.speed:
            return "-"
        if len(self.speed) == 1:
            return self.speed[0].text()
        return "; ".join(f"b{r.batch_size} {r.text()}" for r in self.speed)

    def speed_direction(self) -> str:
        """"faster" when every batch size's 95 % interval of the speed-up lies above 1, "slower" when one lies
        wholly below 1, "unclear" otherwise (an interval holds 1, or a timing without one), "" when not timed."""
        if not self.speed:
            return ""
        if any(sp.paired and sp.speedup_range[1] < 1.0 for sp in self.speed):
            return "slower"
        if all(sp.paired and sp.speedup_range[0] > 1.0 for sp in self.speed):
            return "faster"
        return "unclear"

    def speed_words(self, source: str = "the fp32 source") -> str:
        """``1.84× (1.71–1.95×, 48 rounds) faster than the fp32 source``; ``slower than the fp32 source — 0.80× (…)``;
        ``no clear speed difference from the fp32 source — 1.02× (…)`` (:meth:`speed_direction`); "" untimed."""
        direction = self.speed_direction()
        if direction == "faster":
            return f"{self.speed_text()} faster than {source}"
        if direction == "slower":
            return f"slower than {source} — {self.speed_text()}"
        if direction == "unclear":
            return f"no clear speed difference from {source} — {self.speed_text()}"
        return ""


def rank_key(t: Trial) -> tuple[float, float, float]:
    """Higher is better: verdict level, then the task measure, then the task's SQNR."""
    q = t.quality()
    sq = q.sqnr_db if q.sqnr_db is not None and not math.isnan(q.sqnr_db) else -math.inf
    return (-LEVEL_RANK.get(t.level, 1), q.value if q.value is not None else 0.0, sq)


@dataclass(frozen=True)
class TuneResult:
    """The search's outcome: every trial and the recommendation. ``best``: the fastest/smallest accepted trial
    (``accepted`` True, written as ``model.onnx``), or when none meets the bar the closest trial the verdict does not
    call broken (``accepted`` False, written as ``closest/model.onnx``), or None when every trial is broken (nothing
    written). ``written``: the model file written, if any. One sentence why and the CLI line reproducing it."""

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
    written: str | None = None
    budget_hint_s: float | None = None  # the budget to give when this one ran out before a usable trial
    # the pick's task measure on the evaluation samples it was not chosen on, with its 95% interval (None: no
    # per-sample record), what that rests on, and its word against the bar: "ok" only when the interval clears it
    claim: float | None = None
    claim_low: float | None = None
    claim_high: float | None = None
    claim_evidence: str = ""
    claim_word: str = ""
    claim_settle: int | None = None  # on the edge: about how many evaluation samples would settle it
    chosen_on: str = ""
    baseline_index: int | None = None  # the default trial every candidate was compared with (trial 1)
    cpu_seconds: float | None = None  # CPU the search used (this process and its children): what the budget bought

    def bought(self) -> str:
        """What the budget bought: "8 trials finished (1 failed) in 169 s of wall time and 174 CPU seconds"."""
        done = sum(t.status == TrialStatus.DONE for t in self.trials)
        failed = sum(t.status == TrialStatus.FAILED for t in self.trials)
        cpu = f" and {self.cpu_seconds:.0f} CPU seconds" if self.cpu_seconds is not None else ""
        return (f"{done} trial{'' if done == 1 else 's'} finished" + (f" ({failed} failed)" if failed else "")
                + f" in {self.seconds:.0f} s of wall time{cpu}")



def same_model(t: Trial, earlier: Sequence[Trial]) -> Trial:
    """``t`` marked as the same model as the first of the ``earlier`` trials whose model is byte for byte its own
    (its recipe's changes did nothing to this model): one model is one candidate, and it is said; else ``t``."""
    twin = next((e for e in earlier if t.model_sha and e.model_sha == t.model_sha and e.status == TrialStatus.DONE
                 and e.same_as is None), None)
    if twin is None:
        return t
    said = (f"The same model as trial {twin.index} ({twin.label}), byte for byte: what this recipe changes does not "
            "change this model.")
    return replace(t, same_as=twin.index, note=f"{t.note} {said}".strip())


def as_twin(t: Trial, twin: Trial) -> Trial:
    """Duplicate ``t`` with its twin's timing and comparison (the same model: one figure, not two)."""
    return replace(t, speed=list(twin.speed), latency_ms=dict(twin.latency_ms), baseline_ms=dict(twin.baseline_ms),
                   relative_latency=twin.relative_latency, p50_ms=twin.p50_ms, cost=twin.cost, retimed=twin.retimed,
                   pareto=False, vs_default=f"the same model as trial {twin.index}")


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
