"""Tune never recommends a trial slower than its fp32 source (nor writes it as the closest), and runs dynamic int8
ahead of the remaining static trials once the first static one is broken."""

from __future__ import annotations

from dataclasses import replace


from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_policy import CLOSEST_DIR, Trial, TrialLevel
from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe
from ortlab.timing.stats import paired

from tests.runs.test_tune import _finished, _out_tuner
from tests.support.models import conv_bn_model


def _timed(tmp_path, trials, ratios):
    """A tuner of ``trials``, each timed through the tuner's own timing with a fake clock: candidate ÷ source =
    ``ratios[label]``."""
    def measure(reference, candidate, cfg, batch_size, *, shapes, cancel):
        r = ratios[next(t.label for t in trials if t.model_path == candidate)]
        return paired(batch_size, [10.0] * 12, [10.0 * r * (1 + 0.01 * (i % 3 - 1)) for i in range(12)])

    tuner = _out_tuner(tmp_path, [], timer=measure)
    tuner.trials_done.extend(tuner.timing.time(t, tuner.budget.token) for t in trials)
    return tuner


def _model_files(tmp_path, n: int) -> list:
    """``n`` distinct stand-in model files (their bytes tell them apart)."""
    files = [tmp_path / f"m{i}.onnx" for i in range(n)]
    for i, f in enumerate(files):
        f.write_bytes(b"model %d" % i)
    return files


def test_a_trial_slower_than_the_source_is_never_recommended(tmp_path):
    files = _model_files(tmp_path, 2)
    # the most accurate accepted trial runs at 0.8× the source; the other accepted one is 1.5× faster
    trials = [_finished(1, "ok", True, None, 40.0, files[0], "int8 dynamic conv"),
              _finished(2, "ok", True, None, 25.0, files[1], "int8 static")]
    tuner = _timed(tmp_path, trials, {"int8 dynamic conv": 1.25, "int8 static": 1 / 1.5})
    tuner.settings.objective = "size"  # the slower trial is the smaller: without the speed rule it is picked
    tuner.trials_done[:] = [replace(tuner.trials_done[0], cost=100.0), replace(tuner.trials_done[1], cost=200.0)]
    r = tuner.finish()
    assert r.best is not None and r.best.label == "int8 static" and r.accepted
    assert any(n.startswith("Never recommended: 1 trial(s) ran slower than the fp32 source") and
               "#1 int8 dynamic conv (0.80×" in n for n in r.notes), r.notes


def test_a_slower_trial_is_not_written_as_the_closest(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x")
    trials = [_finished(1, "ok", False, None, 17.0, f, "ok below bar but slower")]
    tuner = _timed(tmp_path, trials, {"ok below bar but slower": 1.3})
    r = tuner.finish()
    assert r.best is None and r.written is None
    assert not (tmp_path / "out" / CLOSEST_DIR).exists()
    assert "at least as fast as the fp32 source" in r.sentence and "Never recommended" in r.notes[-1]


def test_a_trial_whose_interval_straddles_1_stays_a_candidate(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x")
    trials = [_finished(1, "ok", True, None, 30.0, f, "same speed")]
    tuner = _timed(tmp_path, trials, {"same speed": 1.0})
    r = tuner.finish()
    assert r.best is not None and r.accepted and not any("Never recommended" in n for n in r.notes)


class _OrderTuner(Tuner):
    """A search over given recipes whose trials are canned: every static int8 trial broken, dynamic ones ok."""

    def _trial(self, recipe, stage, note=""):
        static = recipe.is_static
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, level=TrialLevel.BROKEN if static else TrialLevel.OK,
                  accepted=not static, cost=0.5, relative_latency=0.5, sqnr_db=3.0 if static else 30.0,
                  model_path="x")
        self.trials_done.append(t)
        return t

    def finish(self):
        return None


def _recipes():
    s = [Recipe(precision=Precision.INT8, quant=q, name=f"static {i}")
         for i, q in enumerate((QuantConfig(), QuantConfig(per_channel=False), QuantConfig(reduce_range=True)))]
    d = [Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC, per_channel=pc), name=f"dynamic {i}")
         for i, pc in enumerate((True, False))]
    return [s[0], s[1], d[0], s[2], d[1]]


def test_a_broken_first_static_trial_moves_dynamic_trials_up(tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    tuner = _OrderTuner(model, None, DataRef(random=4), workspace=object(), recipes=_recipes(),
                        settings=TuneSettings(budget_s=60, exclusion_steps=0, int16_steps=0))
    order = [t.label for t in tuner.trials()]
    assert order == ["static 0", "dynamic 0", "dynamic 1", "static 1", "static 2"]
    assert any(n.startswith("The first static int8 trial (static 0) is broken: the 2 dynamic int8 trial(s) run "
                            "before the remaining static ones") for n in tuner.notes), tuner.notes


def test_a_good_first_static_trial_keeps_the_order(tmp_path):
    class Good(_OrderTuner):
        def _trial(self, recipe, stage, note=""):
            t = replace(super()._trial(recipe, stage, note), level="ok")
            self.trials_done[-1] = t
            return t

    model = conv_bn_model(tmp_path / "m.onnx")
    tuner = Good(model, None, DataRef(random=4), workspace=object(), recipes=_recipes(),
                 settings=TuneSettings(budget_s=60, exclusion_steps=0, int16_steps=0))
    tuner.budget.start()
    assert [t.label for t in tuner.trials()] == [r.name for r in _recipes()]


def test_a_search_for_size_names_the_slower_trials_smallest_first_with_their_sizes(tmp_path):
    """An LSTM shrinks only in dynamic int8, which ran 0.74× on openWakeWord's hey_mycroft: a search for size keeps
    the rule (never a model slower than its source) but lists the smaller, slower trials first, with their sizes."""
    files = _model_files(tmp_path, 3)
    trials = [_finished(1, "ok", True, None, 40.0, files[0], "int8 static"),
              _finished(2, "ok", True, None, 45.0, files[1], "int8 dynamic + LSTM"),
              _finished(3, "ok", True, None, 60.0, files[2], "fp32 opt all")]
    tuner = _timed(tmp_path, trials, {"int8 static": 1 / 0.93, "int8 dynamic + LSTM": 1 / 0.74, "fp32 opt all": 1.0})
    tuner.settings.objective = "size"
    sizes = {1: 512_220, 2: 145_970, 3: 503_850}
    tuner.trials_done[:] = [replace(t, size_bytes=sizes[t.index], cost=float(sizes[t.index]))
                            for t in tuner.trials_done]
    r = tuner.finish()
    assert r.best is not None and r.best.label == "fp32 opt all"
    note = next(n for n in r.notes if n.startswith("Never recommended: 2 trial(s) ran slower"))
    assert note.index("#2 int8 dynamic + LSTM (145.97 kB, 0.74×") < note.index("#1 int8 static (512.22 kB, 0.93×"), note
