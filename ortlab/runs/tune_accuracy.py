"""The accuracy-controlled stage of a tune search: which nodes to keep in float, ranked by the task's metric they
cost, as NNCF's ``quantize_with_accuracy_control`` does, on ORT's QDQ output.

From the best static QDQ trial by the task, and from its twin with bias correction the other way when that ran (the
two interact: the corrections downstream of a node were fitted to its int8 error, so on a corrected model a node put
back in float alone rarely helps — 1 of 12 units on the yolov8 fixture, 6 of 12 without the correction), the
per-node analysis names the :data:`CANDIDATES` worst nodes by their local error; each, with its producer chain
(a SiLU's Conv → Sigmoid → Mul is one unit), is reverted to float alone in memory and ranked on the evaluation
samples where the int8 model errs most (:data:`SCREEN_SAMPLES` of up to :data:`~ortlab.checks.revert_screen.RANKING_POOL`, NNCF's
ranking subset, :class:`ortlab.checks.revert_screen.RevertScreen`), scored by the verdict level, then the task's
SQNR (continuous: it tells apart units that an F1 over a few detections, saturated at 100%, cannot), then the task's
measure. The units that help are then reverted cumulatively in that order on a stratified split (representative,
so that its acceptance means what a trial's does) — a unit that makes the set worse there is skipped — until the
screened evaluation is one the search accepts (verdict ok
and its bar); that set is confirmed by one real trial through the run service (quantize with
``nodes_to_exclude``, verify on the full split, timed against the source with the one clock), stage "accuracy".
When the trial is not accepted, the set grows by half again before the next confirmation, within the search's
``exclusion_steps`` trials; when the screen accepted a set the trial did not, the screen is shown too lenient and
a note says so: the intermediate sets it accepted are skipped for the best set it found. Of the two bases, the sets
are confirmed from the one whose screen reaches furthest.
The first accepted set is what passed, not what is needed: it is then trimmed (:meth:`AccuracySearch._trim`) — its
units dropped one at a time on the screen, the costliest in float first, while the screen still accepts — and the
smaller set confirmed by one more trial, so tune, which recommends the fastest accepted trial, can pick it (on a
YOLOv8n at F1 ≥ 0.97 the first accepted set held 13 nodes; the trimmed one, 4, was accepted too). A detector's
trim screens on enough evaluation samples for :data:`MIN_REFERENCE_DETECTIONS` reference detections: on 16 samples a
detection F1 moves in steps of several percent.
Screening time is bounded (:data:`SCREEN_SHARE` of the budget left, at most :data:`SCREEN_MAX_S` seconds per pass,
shared by the bases) and stated in a note. On a Ray cluster the sets after the one being confirmed start at once on
free nodes (the screen fixed them all); once one is accepted, those still running are cancelled.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortlab.core.progress import CancelToken

from ortlab.checks.eval_report import EvalReport
from ortlab.checks.task_kind import reference_detections
from ortlab.checks.revert_screen import RANKING_POOL, SCREEN_SAMPLES, RevertScreen, Screened
from ortlab.checks.verdict import Level, VerdictPolicy, judge
from ortlab.core.errors import OrtlabError
from ortlab.core.layout import QDQ_FILE
from ortlab.runs.tune_policy import CHAIN_MAX, LEVEL_RANK, Policy, Stage, Trial, judging_policy, task_quality
from ortlab.runs.tune_steps import Ahead, Finished, Say, Steps, ask
from ortlab.settings.config import Recipe, replace
from ortlab.transforms.quantize import ort_arguments, preprocess_for_quantization

CANDIDATES = 40  # the worst nodes by local error screened as units
SCREEN_SHARE = 0.3  # of the budget left that one screening pass may take
SCREEN_MAX_S = 120.0
STAGE = Stage.ACCURACY
GROWTH = 1.5  # a set confirmed after one the screen accepted holds at least this many times its units
MIN_REFERENCE_DETECTIONS = 50  # a trim screens a detector on enough samples to hold this many reference detections


def screen_score(report: EvalReport | None, policy: VerdictPolicy) -> tuple[float, float, float]:
    """A screened evaluation's rank, higher is better: the verdict level, the task's SQNR (continuous), then the
    task's measure (on a screen's few samples an F1 moves in steps of several percent and saturates at 100%)."""
    level = judge(report, policy).level.value
    q = task_quality(report, level)
    sq = q.sqnr_db if q.sqnr_db is not None and not math.isnan(q.sqnr_db) else -math.inf
    return (-LEVEL_RANK.get(level, 1), sq, q.value if q.value is not None else 0.0)


def screen_accepts(report: EvalReport | None, policy: Policy) -> bool:
    """Whether the search would accept a trial with this evaluation: verdict ok and the policy's bar."""
    return judge(report, judging_policy(policy)).level == Level.OK and policy(report).accept


def _quality_text(report: EvalReport, policy: VerdictPolicy) -> str:
    v = judge(report, policy)
    text = task_quality(report, v.level.value).text()
    return f"{v.level.value}" + (f", {text}" if text else "")


@dataclass(frozen=True)
class StageContext:
    """What the stage needs of its search: the source ``model``, the ``policy`` that accepts a trial, at most
    ``exclusion_steps`` trials, ``verify_samples`` evaluation samples a trial (0: all), the ``shapes`` of open dims;
    the budget (``stop``: no further trial may start; ``left``: wall seconds left; ``cancel``: the search's token);
    the evaluation data the search chooses on and its preprocessing (``eval_data``: never the samples held out to
    confirm the pick); and ``open_screen`` (None: a
    :class:`RevertScreen` of the trial's QDQ model on ``n`` samples, the hardest of ``pool`` when given,
    :meth:`AccuracySearch.open_screen`)."""

    model: str
    policy: Policy
    exclusion_steps: int
    verify_samples: int
    shapes: dict[str, list[int]]
    stop: Callable[[], bool]
    left: Callable[[], float]
    cancel: CancelToken
    eval_data: Callable[[], tuple[Any, Any]]
    open_screen: Callable[[Trial, Path, int, int | None], RevertScreen] | None = None

    @property
    def verdict_policy(self) -> VerdictPolicy:
        return judging_policy(self.policy)


_Step = tuple[list[tuple[str, ...]], Screened]  # the units of a set to confirm, and its screened evaluation


@dataclass
class _Plan:
    """One base's screening: its own screened evaluation (``start``), the sets to confirm in order (``steps``), the
    ``screen`` and each helping unit's score alone (``benefit``)."""

    start: Screened
    steps: list[_Step]
    screen: RevertScreen
    benefit: dict[tuple[str, ...], Any] = field(default_factory=dict)


def _unit_text(unit: tuple[str, ...]) -> str:
    return unit[0] + (f" (+{len(unit) - 1})" if len(unit) > 1 else "")


class AccuracySearch:
    """One accuracy-controlled stage from ``seed`` (the best static trial by the task), its twin with bias
    correction the other way among ``static_trials`` when that ran; ``ranked_nodes`` gives a trial's node names,
    worst local error first. Iterate :meth:`steps`: it proposes the sets to confirm and says its notes (also kept in
    ``notes``); ``base`` is the trial the sets were confirmed from."""

    def __init__(self, context: StageContext, seed: Trial, static_trials: list[Trial],
                 ranked_nodes: Callable[[Trial], list[str]]) -> None:
        self.context = context
        self.seed = seed
        self.static_trials = static_trials
        self.ranked_nodes = ranked_nodes
        self.base: Trial | None = None
        self.notes: list[str] = []
        self._told = 0

    def _note(self, text: str) -> Say:
        """``text`` said now (and kept in ``notes``)."""
        self.notes.append(text)
        self._told = len(self.notes)
        return Say(text)

    def _said(self) -> Iterator[Say]:
        """The notes not said yet."""
        new, self._told = self.notes[self._told:], len(self.notes)
        return iter([Say(n) for n in new])

    def steps(self) -> Steps:
        """The sets to confirm, each proposed as a trial and shown when it finished (none when the seed is
        accepted)."""
        c = self.context
        base = self.seed
        if base.accepted:
            return
        bases = [base, *self._bias_twin(base)]
        plans: list[tuple[Trial, _Plan]] = []
        with tempfile.TemporaryDirectory(prefix="ortlab-screen-") as tmp:
            for b in bases:
                if c.stop():
                    break
                planned = self._plan(b, Path(tmp) / str(b.index), len(bases))
                yield from self._said()
                if planned is not None and planned.steps:
                    plans.append((b, planned))
            if not plans:
                return
            chosen, plan = max(plans, key=lambda p: p[1].steps[-1][1].score)  # the best set either base reaches
            self.base = chosen
            screened_both = len(plans) > 1
            del plans  # the other base's screen: its models and outputs are not needed any more
            if screened_both:
                yield self._note(f"Screened from {chosen.label} and its twin with bias correction "
                                 f"{'off' if chosen.recipe.quant.bias_correction else 'on'}: the sets are confirmed "
                                 f"from {chosen.label}, whose screen reaches furthest.")
            confirmed: list[Trial] = []
            lenient = False
            for i, (units, screened) in enumerate(plan.steps):
                if c.stop():
                    return
                if lenient and i < len(plan.steps) - 1:
                    continue  # the screen's acceptance was refused by a trial: only its best set is worth one
                # on a cluster, the next sets start on free nodes while this one runs (each step's set is known
                # from the screen); those the search no longer wants once a set is accepted are cancelled
                ahead = [self._confirm_recipe(chosen, u) for u, _ in plan.steps[i:]]
                trial = yield from ask(ahead[0], STAGE, self._grow_note(units, plan.start, screened), ahead)
                confirmed.append(trial)
                lenient = self._disagreement(screened, trial) or lenient
                yield from self._said()
                yield Finished(trial)
                if trial.accepted:
                    yield Ahead()
                    yield from self._trim(chosen, units, trial, confirmed, plan, Path(tmp) / str(chosen.index))
                    return

    def _disagreement(self, screened: Screened, trial: Trial) -> bool:
        """Notes when the screen and the confirming trial disagree on acceptance; True when the screen accepted
        what the trial did not (the screen is too lenient for this model and data)."""
        c = self.context
        vp = c.verdict_policy
        predicted = screen_accepts(screened.report, c.policy)
        if predicted == trial.accepted:
            return False
        if predicted:
            self.notes.append(f"The screen accepted #{trial.index} {trial.label} ({_quality_text(screened.report, vp)}"
                              f" on {screened.report.n_samples} samples) but its trial did not"
                              + (f" ({trial.verdict})" if trial.verdict else "") + ": the screen's "
                              "acceptance is not trusted further; only the best set it found is confirmed next.")
            return True
        self.notes.append(f"The trial accepted #{trial.index} {trial.label} where the screen did not "
                          f"({_quality_text(screened.report, vp)} on {screened.report.n_samples} samples): the screen "
                          f"was stricter than the full split.")
        return False

    def _bias_twin(self, base: Trial) -> list[Trial]:
        """The static trial that differs from ``base`` only in bias correction, when it ran: bias correction and
        the float scope interact (the corrections downstream of a node were fitted to its int8 error), so both are
        screened."""
        other = replace(base.recipe.quant, bias_correction=not base.recipe.quant.bias_correction)
        return [x for x in self.static_trials if x.recipe.quant == other and x is not base][:1]

    def _plan(self, base: Trial, tmp: Path, shares: int) -> _Plan | None:
        """Screens ``base``'s units (one ``shares``-th of the screening time) and the cumulative sets: the sets to
        confirm, in order, with the base's own screened evaluation. None when it cannot be screened."""
        vp = self.context.verdict_policy
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            screen = self._screen(base, tmp)
            hard = self._screen(base, tmp, pool=RANKING_POOL)
            units = self._units(base, screen)
        except (OrtlabError, OSError, ValueError) as exc:
            self.notes.append(f"The accuracy-controlled search could not screen {base.label}: "
                           f"{getattr(exc, 'message', str(exc))}")
            return None
        if not units:
            return None
        limit = self._limit() / shares
        ranking = hard.rank(units, lambda r: screen_score(r, vp), limit)
        helps = [u for u in ranking.units if u.score > ranking.base.score]
        bias = f" (bias correction {'on' if base.recipe.quant.bias_correction else 'off'})"
        where = (f"the {hard.n} of {hard.pool_size} evaluation samples where int8 errs most" if hard.hardest
                 else f"{hard.n} evaluation samples") + " (of those it chooses on)"
        self.notes.append(
            f"Accuracy-controlled search from {base.label}{bias}: screened {ranking.screened} of {ranking.candidates} "
            f"units (the worst nodes by local error, each with its producer chain) in float one at a time on "
            f"{where} in {ranking.seconds:.1f} s; {len(helps)} improve the task's SQNR or measure there"
            + (f", best {_unit_text(helps[0].unit)}" if helps else "") + ".")
        del hard  # its models and outputs: the sets grow on the stratified screen
        base_report = screen.report()
        start = Screened((), base_report, screen_score(base_report, vp))
        return _Plan(start, self._grow(screen, start, helps, limit), screen,
                     {u.unit: u.score for u in ranking.units})

    def _limit(self) -> float:
        return max(5.0, min(SCREEN_MAX_S, SCREEN_SHARE * self.context.left()))

    def _screen(self, base: Trial, tmp: Path, n: int = SCREEN_SAMPLES, pool: int | None = None) -> RevertScreen:
        c = self.context
        return (c.open_screen or self.open_screen)(base, tmp, n, pool)

    def open_screen(self, base: Trial, tmp: Path, n: int = SCREEN_SAMPLES, pool: int | None = None) -> RevertScreen:
        """A :class:`RevertScreen` of ``base``'s QDQ model on ``n`` evaluation samples (at most the trials'): the
        ``n`` where int8 errs most of the first ``pool`` when given, else a stratified split."""
        c = self.context
        qdq = Path(base.model_path or "").parent / QDQ_FILE
        float_path = None
        if base.recipe.quant.preprocess:  # the float weights the QDQ model was quantized from: BatchNorm folded
            float_path = tmp / "preprocessed.onnx"
            if not float_path.is_file():
                preprocess_for_quantization(c.model, float_path)
        ds, pre = c.eval_data()
        op_types = ort_arguments(base.recipe.quant).quantize["op_types_to_quantize"]
        return RevertScreen(c.model, qdq, ds, pre, min(n, c.verify_samples or n),  # 0: every sample
                            shapes=c.shapes, policy=c.verdict_policy, cancel=c.cancel, float_path=float_path,
                            op_types=op_types, pool=pool)

    def _units(self, base: Trial, screen: RevertScreen) -> list[tuple[str, ...]]:
        """The :data:`CANDIDATES` worst nodes by local error, each with its producer chain; a node already in an
        earlier unit, or already kept in float by the recipe, is not screened again."""
        excluded = set(base.recipe.quant.nodes_to_exclude)
        covered: set[str] = set()
        units = []
        for name in self.ranked_nodes(base)[:CANDIDATES]:
            if name in covered or name in excluded:
                continue
            unit = tuple(n for n in screen.chain(name, CHAIN_MAX) if n not in excluded and n not in covered)
            covered.update(unit)
            units.append(unit)
        return units

    def _grow(self, screen: RevertScreen, start: Screened, helps: list[Screened], limit: float) -> list[_Step]:
        """Reverts ``helps`` cumulatively on the screen (a unit that makes the set worse is skipped): the sets to
        confirm — each the screen accepts, the next at least :data:`GROWTH` times as many units — then the best."""
        c = self.context
        chosen: list[tuple[str, ...]] = []
        current = start
        grow_to = 1
        steps: list[_Step] = []
        deadline = time.perf_counter() + limit
        for s in helps:
            if c.stop() or len(steps) >= c.exclusion_steps or time.perf_counter() > deadline:
                break
            trial_units = [*chosen, s.unit]
            try:
                report = screen.report(_nodes(trial_units))
            except OrtlabError:
                continue
            score = screen_score(report, c.verdict_policy)
            if score <= current.score:
                continue  # helps alone, not with the others
            chosen, current = trial_units, Screened(s.unit, report, score)
            if len(chosen) >= grow_to and screen_accepts(report, c.policy):
                steps.append((chosen, current))
                grow_to = max(len(chosen) + 1, math.ceil(len(chosen) * GROWTH))
        if chosen and (not steps or steps[-1][0] is not chosen) and len(steps) < c.exclusion_steps:
            steps.append((chosen, current))  # the best the screen found
        return steps

    def _grow_note(self, units: list[tuple[str, ...]], start: Screened, screened: Screened) -> str:
        return (f"keep {len(units)} unit(s) in float ({sum(len(u) for u in units)} nodes): "
                f"{', '.join(_unit_text(u) for u in units)}; screened on {start.report.n_samples} samples: "
                f"{_quality_text(start.report, self.context.verdict_policy)} → "
                f"{_quality_text(screened.report, self.context.verdict_policy)}")

    @staticmethod
    def _confirm_recipe(base: Trial, units: list[tuple[str, ...]]) -> Recipe:
        """``base``'s recipe with ``units`` kept in float too, named by how many nodes it keeps in float."""
        nodes = tuple(sorted({*base.recipe.quant.nodes_to_exclude, *_nodes(units)}))
        q = replace(base.recipe.quant, nodes_to_exclude=nodes)
        return replace(base.recipe, quant=q, name=f"{base.label.split(' + float')[0]} + float {len(nodes)}")

    # -- the trim after acceptance
    def _trim(self, base: Trial, units: list[tuple[str, ...]], accepted: Trial, confirmed: list[Trial], plan: _Plan,
              tmp: Path) -> Steps:
        """Once ``accepted`` (``base`` with ``units`` in float) passed, a smaller set that is cheaper in float: the
        units are dropped one at a time on the screen, the costliest in float first (their nodes' estimated work,
        :meth:`RevertScreen.float_costs`; ties: the least benefit alone first), each drop kept while the screen still
        accepts the set; what is left is confirmed by one more trial, which tune recommends when it is accepted
        and faster. Within the stage's ``exclusion_steps`` trials and the screening time of one pass."""
        c = self.context
        vp = c.verdict_policy
        if len(units) < 2 or c.stop() or len(confirmed) >= c.exclusion_steps:
            return
        deadline = time.perf_counter() + self._limit()
        try:
            screen, why = self._trim_screen(base, tmp, plan)
            full = screen.report(_nodes(units))
            costs = screen.float_costs()
        except (OrtlabError, OSError, ValueError) as exc:
            yield self._note(f"The set of {accepted.label} was not trimmed: {getattr(exc, 'message', str(exc))}")
            return
        where = f"the screen on {screen.n} evaluation samples{why}"
        if not screen_accepts(full, c.policy):
            yield self._note(f"The set of {accepted.label} was not trimmed: {where} does not accept it "
                      f"({_quality_text(full, vp)}).")
            return
        tried = {frozenset(c.recipe.quant.nodes_to_exclude) for c in confirmed}
        own = set(base.recipe.quant.nodes_to_exclude)
        cost = {u: sum(costs.get(n, 0.0) for n in u) for u in units}
        kept, current, known, asked = list(units), full, 0, 0
        for u in sorted(units, key=lambda u: (-cost[u], plan.benefit.get(u, ()))):
            rest = [x for x in kept if x != u]
            if not rest:
                continue
            if frozenset({*own, *_nodes(rest)}) in tried:
                known += 1  # a set confirmed before, and not accepted
                continue
            if c.stop() or time.perf_counter() > deadline:
                break
            asked += 1
            try:
                report = screen.report(_nodes(rest))
            except OrtlabError:
                continue
            if screen_accepts(report, c.policy):
                kept, current = rest, report
        dropped = [u for u in units if u not in kept]
        if not dropped:
            if known + asked < len(units) and not c.stop():
                yield self._note(f"Trimmed nothing from {accepted.label}: the screening time ran out after {asked} of "
                               f"its {len(units)} units, none of which {where} lets go.")
                return
            before = f" ({known} of them left a set a trial had not accepted)" if known else ""
            yield self._note(f"Trimmed nothing from {accepted.label}: without any one of its {len(units)} units "
                           f"{where} no longer accepts it{before}.")
            return
        if c.stop():
            return
        total = sum(cost.values())
        share = f", {sum(cost[u] for u in dropped) / total:.0%} of the set's estimated float work" if total > 0 else ""
        note = (f"trimmed from {accepted.label}: dropped {len(dropped)} unit(s) ({len(_nodes(dropped))} nodes"
                f"{share}): {', '.join(_unit_text(u) for u in dropped)}; keep {len(kept)} unit(s) in float "
                f"({len(_nodes(kept))} nodes): {', '.join(_unit_text(u) for u in kept)}; screened on {screen.n} "
                f"samples: {_quality_text(full, vp)} → {_quality_text(current, vp)}")
        trial = yield from ask(self._confirm_recipe(base, kept), STAGE, note)
        yield self._note(f"Trimmed the float set of {accepted.label} after it was accepted: the costliest units in "
                       f"float first, dropped while {where} still accepts ({_quality_text(full, vp)} → "
                       f"{_quality_text(current, vp)}); dropped {', '.join(_unit_text(u) for u in dropped)}; confirmed "
                       f"as #{trial.index} {trial.label}: "
                       + ("accepted." if trial.accepted else f"not accepted ({trial.verdict}), {accepted.label} stays."))
        yield Finished(trial)

    def _trim_screen(self, base: Trial, tmp: Path, plan: _Plan) -> tuple[RevertScreen, str]:
        """The screen the trim judges on, and why it is not the ranking's: a detection F1 over fewer than
        :data:`MIN_REFERENCE_DETECTIONS` reference detections moves in steps of several percent (one missed
        detection of 14 is 7 %), so a detector is screened on as many more evaluation samples as that takes, up to
        the trials' ``verify_samples``."""
        screen = plan.screen
        found = reference_detections(plan.start.report)
        if found is None or found >= MIN_REFERENCE_DETECTIONS:
            return screen, ""
        wanted = math.ceil(screen.n * MIN_REFERENCE_DETECTIONS / max(found, 1))
        n = min(self.context.verify_samples or wanted, wanted)  # verify_samples 0: every sample given
        if n <= screen.n:
            return screen, ""
        bigger = self._screen(base, tmp, n)
        if bigger.n <= screen.n:
            return screen, ""
        return bigger, (f" (the ranking's {screen.n} held {found} reference detections, too few for a detection F1 "
                        f"to tell one set from another)")


def _nodes(units: list[tuple[str, ...]]) -> list[str]:
    return [n for u in units for n in u]


