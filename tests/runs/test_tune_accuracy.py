"""Tune's accuracy-controlled stage: units screened in memory, reverted cumulatively in the order of the task's
metric, each set the screen accepts confirmed by one trial; and on the yolov8 fixture, end to end."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.reference import photo_parts

from ortlab.checks.eval_report import EvalReport, OutputError
from ortlab.checks.revert_screen import RevertScreen
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_search import keep_in_float_after
from ortlab.runs.tune_accuracy import STAGE, AccuracySearch
from ortlab.runs.tune_policy import Stage, Trial, TrialLevel, verdict_policy
from ortlab.runtime.hardware import advised_recipe
from ortlab.settings.config import Precision, QuantConfig, Recipe
from ortlab.timing.stats import paired

GAIN = {"a": 5.0, "b": 3.0, "c": 2.0, "d": -1.0, "e": 1.5, "e2": 0.0}
BASE_DB = 12.0


def sqnr(nodes) -> float:
    """The canned output SQNR with ``nodes`` in float: the gains add up, except that c and a together lose 4 dB."""
    s = set(nodes)
    return BASE_DB + sum(GAIN[n] for n in s) - (4.0 if {"a", "c"} <= s else 0.0)


class _Screen(RevertScreen):
    """The screen's ranking logic on canned evaluations (no model runs)."""

    def __init__(self) -> None:
        self.n = self.pool_size = 16
        self.hardest = False
        self.asked: list[frozenset[str]] = []

    def chain(self, name, max_nodes):
        return ("e", "e2") if name == "e" else (name,)

    def float_costs(self):
        return {}

    def report(self, nodes=()):
        nodes = frozenset(nodes)
        self.asked.append(nodes)
        return EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, sqnr(nodes))])


class _Tuner(Tuner):
    """Confirmed trials measure 1 dB below the screen (the full split is harder than 16 samples)."""

    def __init__(self, tmp_path, steps=6, runner=None):
        super().__init__(tmp_path / "m.onnx", None, DataRef(random=4), workspace=object(),
                         policy=verdict_policy(min_sqnr_db=20),
                         settings=TuneSettings(budget_s=600, exclusion_steps=steps), runner=runner)
        self.budget.start()
        self.base = Trial(1, "int8 static", Stage.SEARCH, Recipe(precision=Precision.INT8), sqnr_db=BASE_DB, level=TrialLevel.OK,
                          relative_latency=0.5, cost=0.5, model_path="x")
        self.trials_done.append(self.base)

    def ranked(self, trial):
        return ["a", "d", "b", "e", "c", "e2"]  # the local error's order, not the task's; e2 joins e's chain

    def _trial(self, recipe, stage, note=""):
        db = sqnr(recipe.quant.nodes_to_exclude) - 1.0
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, sqnr_db=db, level=TrialLevel.OK,
                  accepted=db >= vars(self.policy)["bar_db"], relative_latency=0.6, cost=0.6, note=note, model_path="x")
        self.trials_done.append(t)
        return t


def _stage(tuner: _Tuner, open_screen, static=None, **context) -> AccuracySearch:
    """The stage from ``tuner.base`` (``static``: the static trials that ran, the base alone when not given),
    screening on what ``open_screen`` gives; ``context`` replaces what the tuner's context says."""
    ctx = replace(tuner.stage_context(), open_screen=open_screen, **context)
    return AccuracySearch(ctx, tuner.base, static if static is not None else [tuner.base], tuner.ranked)


def _search(tuner: _Tuner, screen: _Screen, static=None) -> list[Trial]:
    return list(tuner.run_steps(_stage(tuner, lambda base, tmp, n=16, pool=None: screen, static).steps()))


def test_units_are_reverted_cumulatively_in_the_order_of_the_task_metric_and_confirmed_by_trials(tmp_path):
    tuner, screen = _Tuner(tmp_path), _Screen()
    twin = Trial(2, "int8 no bias correction", Stage.SEARCH,
                 Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False)), level=TrialLevel.OK, sqnr_db=11.0)
    trials = _search(tuner, screen, [tuner.base, twin])
    # alone: a 17, b 15, c 14, e(+e2) 13.5 help; d 11 hurts. Cumulative: {a} 17; {a, b} 20 the screen accepts →
    # trial at 19, not accepted; the set must grow to 3 units: {a, b, c} 18 is worse than {a, b}, skipped;
    # {a, b, e, e2} 21.5 → trial at 20.5, accepted: the stage ends
    assert [t.recipe.quant.nodes_to_exclude for t in trials] == [("a", "b"), ("a", "b", "e", "e2")]
    assert [t.stage for t in trials] == [STAGE, STAGE] and [t.accepted for t in trials] == [False, True]
    assert frozenset({"d"}) in screen.asked and frozenset({"a", "b", "c"}) in screen.asked
    assert frozenset({"a", "b", "d"}) not in screen.asked  # d never helped: never reverted with others
    assert trials[0].note.startswith("keep 2 unit(s) in float (2 nodes): a, b; screened on 16 samples: ok, ")
    assert "20.0 dB" in trials[0].note and "e (+1)" in trials[1].note
    assert trials[1].label == "int8 static + float 4"
    note, twin_note = [n for n in tuner.notes if n.startswith("Accuracy-controlled search")]
    assert twin_note.startswith("Accuracy-controlled search from int8 no bias correction (bias correction off)")
    assert "the sets are confirmed from int8 static, whose screen reaches furthest" in tuner.notes[-3]
    # the screen accepted {a, b} (20 dB on its 16 samples) and the trial (19 dB) did not: said, and what follows
    assert tuner.notes[-2].startswith("The screen accepted #2 int8 static + float 2 (ok, worst output SQNR 20.0 dB on "
                                      "16 samples) but its trial did not")
    assert "only the best set it found is confirmed next" in tuner.notes[-2]
    # the trim: without a or b the screen no longer accepts; without e the set is {a, b}, which a trial refused
    assert tuner.notes[-1] == ("Trimmed nothing from int8 static + float 4: without any one of its 3 units the screen "
                               "on 16 evaluation samples no longer accepts it (1 of them left a set a trial had not "
                               "accepted).")
    assert note.startswith("Accuracy-controlled search from int8 static (bias correction on): screened 5 of 5 units")
    assert "4 improve" in note and "best a" in note


class _Prefetches:
    """A cluster's trial runner as far as the stage sees it: which sets it is asked to start ahead."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, ...]]] = []
        self.specs: list[dict] = []

    def prefetch(self, specs, workspace) -> None:
        specs = list(specs)
        self.asked.append([s.recipe.quant.nodes_to_exclude for s in specs])
        self.specs += [s.to_dict() for s in specs[:1]]


def test_on_a_cluster_the_later_sets_start_ahead_and_are_dropped_once_one_is_accepted(tmp_path):
    runner = _Prefetches()
    tuner = _Tuner(tmp_path, runner=runner)
    trials = _search(tuner, _Screen())
    sets = [t.recipe.quant.nodes_to_exclude for t in trials]
    assert sets == [("a", "b"), ("a", "b", "e", "e2")]
    # before each confirmation: that set first, then the sets after it; once one is accepted: nothing ahead
    assert runner.asked == [sets, sets[1:], []]
    # what started ahead is the very run each confirmation asks for: the cluster hands that task to the trial
    assert runner.specs == [tuner.spec(t.recipe).to_dict() for t in trials]


def test_the_sets_are_confirmed_from_the_bias_correction_twin_when_its_screen_reaches_further(tmp_path):
    """On a bias-corrected model a node put back in float alone rarely helps (the corrections after it were fitted
    to its error); the twin without correction is screened too, and confirmed from when it reaches further."""
    tuner = _Tuner(tmp_path)
    twin = Trial(2, "int8 no bias correction", Stage.SEARCH,
                 Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False)), level=TrialLevel.OK, sqnr_db=11.0)

    class _Flat(_Screen):
        def report(self, nodes=()):  # nothing helps on the corrected model
            return EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, BASE_DB - 0.1 * len(set(nodes)))])

    search = _stage(tuner, lambda base, tmp, n=16, pool=None: _Flat() if base is tuner.base else _Screen(), [tuner.base, twin])
    trials = list(tuner.run_steps(search.steps()))
    assert search.base is twin and trials and all(not t.recipe.quant.bias_correction for t in trials)
    assert trials[0].recipe.quant.nodes_to_exclude == ("a", "b") and trials[0].label == "int8 no bias correction + float 2"


def test_the_stage_confirms_at_most_exclusion_steps_trials_and_nothing_when_the_base_is_accepted(tmp_path):
    tuner = _Tuner(tmp_path, steps=1)
    assert len(_search(tuner, _Screen())) == 1
    tuner = _Tuner(tmp_path)
    tuner.base = replace(tuner.base, accepted=True)
    assert _search(tuner, _Screen()) == []


def test_when_the_screen_never_accepts_the_best_screened_set_is_confirmed(tmp_path):
    tuner = _Tuner(tmp_path)
    tuner.policy = verdict_policy(min_sqnr_db=40)
    (trial,) = _search(tuner, _Screen())
    assert trial.recipe.quant.nodes_to_exclude == ("a", "b", "e", "e2") and not trial.accepted


def test_keep_in_float_starts_once_bias_correction_on_and_off_both_ran():
    on = Recipe(precision=Precision.INT8, name="int8 static")
    off = Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False), name="no bias correction")
    fp32 = Recipe(precision=Precision.FP32, name="fp32")
    assert keep_in_float_after([on, off, fp32, fp32, fp32]) == 2
    assert keep_in_float_after([on, fp32, fp32, fp32, fp32]) == 3  # no such twin: 60% of the space


@pytest.mark.slow
def test_the_accuracy_stage_mends_the_detector_when_range_split_is_off(tmp_path):
    """The yolov8 fixture with range-split off is broken (its final Concat crushes the scores); the screen, scored
    on detections and score channels, ranks the Concat's unit first and one confirmed trial mends it."""
    from ortlab.runs.workspace import Workspace

    fx = Path(__file__).parents[1] / "fixtures"
    parts = photo_parts(tmp_path)
    recipes = [advised_recipe(Recipe(precision=Precision.INT8, quant=QuantConfig(range_split=False, known_patterns=False),
                                     name="int8 no range-split"))]
    tuner = Tuner(fx / "yolov8_detector.onnx", DataRef(path=str(parts["calibration"])),
                  DataRef(path=str(parts["evaluation"]), count=8), workspace=Workspace(tmp_path / "ws"),
                  out_dir=tmp_path / "out", recipes=recipes,
                  settings=TuneSettings(budget_s=400, bench_s=0.1, exclusion_steps=1, int16_steps=0, verify_samples=8),
                  # accuracy is what this test is about: a steady 2x timing, since int8 of this fixture can time
                  # slower than fp32 on a CPU without VNNI, and a slower trial is rightly never recommended
                  timer=lambda reference, candidate, cfg, batch_size, *, shapes, cancel: paired(
                      batch_size, [10.0] * 12, [5.0] * 12))
    r = tuner.run()
    first, step = r.trials
    assert first.level == "broken" and first.task_measure == "detection F1" and first.score_what == "scores SQNR"
    assert first.score_db is not None and first.score_db < 5 < 30 < (first.sqnr_db or 0)  # whole SQNR hides it
    assert step.stage == STAGE and "/model.22/Concat_5" in step.recipe.quant.nodes_to_exclude
    assert "/model.22/Concat_5" in step.note.split(";")[0] and "screened on 8 samples: broken" in step.note
    assert not step.broken and r.best is step and r.written is not None
    assert first.task_value is not None and step.task_value is not None and step.task_value >= 0.85
    assert step.score_db is not None and step.score_db > 20
    assert any(n.startswith("Accuracy-controlled search from int8 no range-split (bias correction on): screened") for n in r.notes)


# -- the trim after acceptance: p helps most alone, but q and r together do its work; p is the costliest in float
TRIM_GAIN = {"p": 4.0, "p2": 0.0, "q": 3.5, "r": 3.0}
TRIM_COST = {"p": 80.0, "p2": 20.0, "q": 10.0, "r": 5.0}


def trim_sqnr(nodes) -> float:
    s = set(nodes)
    return BASE_DB + sum(TRIM_GAIN[n] for n in s) + (1.5 if {"q", "r"} <= s else 0.0)


class _TrimScreen(_Screen):
    def chain(self, name, max_nodes):
        return ("p", "p2") if name == "p" else (name,)

    def float_costs(self):
        return dict(TRIM_COST)

    def report(self, nodes=()):
        nodes = frozenset(nodes)
        self.asked.append(nodes)
        return EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, trim_sqnr(nodes))])


class _TrimTuner(_Tuner):
    """Trials measure what the screen does; fewer nodes in float run faster."""

    def ranked(self, trial):
        return ["p", "r", "q", "p2"]

    def _trial(self, recipe, stage, note=""):
        nodes = recipe.quant.nodes_to_exclude
        db = trim_sqnr(nodes)
        cost = 0.5 + 0.05 * len(nodes)
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, sqnr_db=db, level=TrialLevel.OK,
                  accepted=db >= vars(self.policy)["bar_db"], relative_latency=cost, cost=cost, note=note,
                  model_path="x")
        self.trials_done.append(t)
        return t


def test_an_accepted_set_is_trimmed_costliest_unit_first_and_the_smaller_set_confirmed(tmp_path):
    tuner, screen = _TrimTuner(tmp_path), _TrimScreen()
    trials = _search(tuner, screen)
    # grown by benefit alone: {p, p2} 16, + q 19.5, + r 24 → accepted; trimmed: without p (the costliest) {q, r}
    # still reaches 20, without q or r then it would not: confirmed, accepted, with 2 float nodes instead of 4
    first, trimmed = trials
    assert first.accepted and first.recipe.quant.nodes_to_exclude == ("p", "p2", "q", "r")
    assert trimmed.accepted and trimmed.stage == STAGE and trimmed.recipe.quant.nodes_to_exclude == ("q", "r")
    assert len(trimmed.recipe.quant.nodes_to_exclude) < len(first.recipe.quant.nodes_to_exclude)
    assert trimmed.cost is not None and first.cost is not None and trimmed.cost < first.cost
    asked_after = screen.asked[screen.asked.index(frozenset({"p", "p2", "q", "r"})) + 1:]
    assert asked_after[:2] == [frozenset({"p", "p2", "q", "r"}), frozenset({"q", "r"})]  # the set, then without p
    assert trimmed.note.startswith("trimmed from int8 static + float 4: dropped 1 unit(s) (2 nodes, 87% of the set's "
                                   "estimated float work): p (+1); keep 2 unit(s) in float (2 nodes): ")
    assert trimmed.note.endswith("screened on 16 samples: ok, worst output SQNR 24.0 dB → ok, worst output SQNR 20.0 dB")
    assert tuner.notes[-1].startswith("Trimmed the float set of int8 static + float 4 after it was accepted")
    assert tuner.notes[-1].endswith("confirmed as #3 int8 static + float 2: accepted.")


def test_the_trim_respects_exclusion_steps(tmp_path):
    tuner = _TrimTuner(tmp_path, steps=1)
    assert [t.recipe.quant.nodes_to_exclude for t in _search(tuner, _TrimScreen())] == [("p", "p2", "q", "r")]


def test_a_detector_with_few_reference_detections_is_trimmed_on_more_samples(tmp_path):
    """16 samples of a photo set held 14 reference detections: one missed detection moves F1 by 7%. The trim screens
    on enough samples for 50, up to the trials' verify_samples."""
    from ortlab.checks.eval_report import BoxesMetrics, Task, TaskMetrics
    from ortlab.runs.tune_accuracy import MIN_REFERENCE_DETECTIONS, Screened, _Plan

    boxes = BoxesMetrics("output0", 0.25, "probability", 0.0, 14 / 16, 14 / 16, matched=14, ref_total=14,
                         cand_total=14, score_sqnr_db=13.0, box_sqnr_db=30.0)
    start = EvalReport(16, [OutputError("output0", 1.0, 0.1, 0.999, 30.0)],
                       task=TaskMetrics(Task.BOXES, True, "test", boxes=[boxes]))
    tuner = _Tuner(tmp_path)
    asked: list[int] = []

    def screen_of(base, tmp, n=16, pool=None):
        asked.append(n)
        s = _Screen()
        s.n = n
        return s

    search = _stage(tuner, screen_of)
    small = _Screen()
    plan = _Plan(Screened((), start), [], small)
    screen, why = search._trim_screen(tuner.base, tmp_path, plan)
    assert MIN_REFERENCE_DETECTIONS == 50 and asked == [58] and screen.n == 58  # ceil(16 * 50 / 14)
    assert "the ranking's 16 held 14 reference detections" in why
    search = _stage(tuner, screen_of, verify_samples=32)
    assert search._trim_screen(tuner.base, tmp_path, plan)[0].n == 32 and asked[-1] == 32
    plain = _Plan(Screened((), EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, 20.0)])), [], small)
    assert search._trim_screen(tuner.base, tmp_path, plain) == (small, "")  # no detections: the ranking's screen


def test_a_trim_out_of_screening_time_says_so_and_confirms_nothing_more(tmp_path):
    tuner, screen = _TrimTuner(tmp_path), _TrimScreen()
    search = _stage(tuner, lambda base, tmp, n=16, pool=None: screen)
    limits = iter([60.0, -1.0])  # the ranking's, then the trim's: spent before it starts
    search._limit = lambda: next(limits)  # type: ignore[method-assign]
    assert [t.recipe.quant.nodes_to_exclude for t in tuner.run_steps(search.steps())] == [("p", "p2", "q", "r")]
    assert tuner.notes[-1].startswith("Trimmed nothing from int8 static + float 4: the screening time ran out after 0 "
                                      "of its 3 units")
