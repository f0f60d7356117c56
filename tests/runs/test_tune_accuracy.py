"""Tune's accuracy-controlled stage: units screened in memory, reverted cumulatively in the order of the task's
metric, each set the screen accepts confirmed by one trial; and on the yolov8 fixture, end to end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.reference import photo_parts

from ortlab.checks.eval_report import EvalReport, OutputError
from ortlab.checks.revert_screen import RevertScreen
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings, _keep_in_float_after
from ortlab.runs.tune_accuracy import STAGE, AccuracySearch
from ortlab.runs.tune_policy import Trial, verdict_policy
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
        self.n = 16
        self.asked: list[frozenset[str]] = []

    def chain(self, name, max_nodes):
        return ("e", "e2") if name == "e" else (name,)

    def report(self, nodes=()):
        nodes = frozenset(nodes)
        self.asked.append(nodes)
        return EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, sqnr(nodes))])


class _Tuner(Tuner):
    """Confirmed trials measure 1 dB below the screen (the full split is harder than 16 samples)."""

    def __init__(self, tmp_path, steps=6):
        super().__init__(tmp_path / "m.onnx", None, DataRef(random=4), workspace=object(),
                         policy=verdict_policy(min_sqnr_db=20),
                         settings=TuneSettings(budget_s=600, exclusion_steps=steps))
        self._start = time.monotonic()
        self.base = Trial(1, "int8 static", "search", Recipe(precision=Precision.INT8), sqnr_db=BASE_DB, level="ok",
                          relative_latency=0.5, cost=0.5, model_path="x")
        self.trials_done.append(self.base)

    def _exclusion_base(self, dynamic=False):
        return self.base

    def _analyze(self, analyze_fn, trial):
        return ["a", "d", "b", "e", "c", "e2"]  # the local error's order, not the task's; e2 joins e's chain

    def _trial(self, recipe, stage, note=""):
        db = sqnr(recipe.quant.nodes_to_exclude) - 1.0
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, sqnr_db=db, level="ok", accepted=db >= vars(self.policy)["bar_db"],
                  relative_latency=0.6, cost=0.6, note=note, model_path="x")
        self.trials_done.append(t)
        return t


def _search(tuner: _Tuner, screen: _Screen) -> list[Trial]:
    search = AccuracySearch(tuner)
    search._screen = lambda base, tmp: screen  # type: ignore[method-assign]
    return list(search.trials())


def test_units_are_reverted_cumulatively_in_the_order_of_the_task_metric_and_confirmed_by_trials(tmp_path):
    tuner, screen = _Tuner(tmp_path), _Screen()
    twin = Trial(2, "int8 no bias correction", "search",
                 Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False)), level="ok", sqnr_db=11.0)
    tuner._static_trials = lambda: [tuner.base, twin]  # type: ignore[method-assign]
    trials = _search(tuner, screen)
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
    assert "the sets are confirmed from int8 static, whose screen reaches furthest" in tuner.notes[-1]
    assert note.startswith("Accuracy-controlled search from int8 static (bias correction on): screened 5 of 5 units")
    assert "4 improve" in note and "best a" in note


def test_the_sets_are_confirmed_from_the_bias_correction_twin_when_its_screen_reaches_further(tmp_path):
    """On a bias-corrected model a node put back in float alone rarely helps (the corrections after it were fitted
    to its error); the twin without correction is screened too, and confirmed from when it reaches further."""
    tuner = _Tuner(tmp_path)
    twin = Trial(2, "int8 no bias correction", "search",
                 Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False)), level="ok", sqnr_db=11.0)
    tuner._static_trials = lambda: [tuner.base, twin]  # type: ignore[method-assign]

    class _Flat(_Screen):
        def report(self, nodes=()):  # nothing helps on the corrected model
            return EvalReport(16, [OutputError("y", 0.1, 0.01, 0.999, BASE_DB - 0.1 * len(set(nodes)))])

    search = AccuracySearch(tuner)
    search._screen = lambda base, tmp: _Flat() if base is tuner.base else _Screen()  # type: ignore[method-assign]
    trials = list(search.trials())
    assert search.base is twin and trials and all(not t.recipe.quant.bias_correction for t in trials)
    assert trials[0].recipe.quant.nodes_to_exclude == ("a", "b") and trials[0].label == "int8 no bias correction + float 2"


def test_the_stage_confirms_at_most_exclusion_steps_trials_and_nothing_when_the_base_is_accepted(tmp_path):
    tuner = _Tuner(tmp_path, steps=1)
    assert len(_search(tuner, _Screen())) == 1
    tuner = _Tuner(tmp_path)
    tuner.base.accepted = True
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
    assert _keep_in_float_after([on, off, fp32, fp32, fp32]) == 2
    assert _keep_in_float_after([on, fp32, fp32, fp32, fp32]) == 3  # no such twin: 60% of the space


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
                  settings=TuneSettings(budget_s=400, bench_s=0.1, exclusion_steps=1, int16_steps=0, verify_samples=8))
    # accuracy is what this test is about: a steady 2x timing, since int8 of this fixture can time slower than fp32
    # on a CPU without VNNI, and a slower trial is rightly never recommended
    tuner._measure = lambda reference, candidate, cfg, batch_size, *, shapes, cancel: paired(
        batch_size, [10.0] * 12, [5.0] * 12)
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
