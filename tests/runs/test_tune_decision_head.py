"""Tune on a detector: the default with its class-score branch in float is tried right after the default, and the
near-threshold score error per sample decides whether it is worth its cost: recorded as the test computes it
independently, and "clearly more accurate" only where its paired interval lies wholly below zero and the F1 is not
worse."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ortlab.checks.eval_report import Task
from ortlab.checks.task_kind import Detections, TopOneFlips
from ortlab.core.layout import QDQ_FILE
from ortlab.model.decision_head import LOGITS_HEAD, SCORE_BRANCH, DecisionHead, ScalePart
from ortlab.checks.task_metrics import TaskAccumulator
from ortlab.runs.tune_evidence import SampleEvidence
from ortlab.runs.tune_policy import Stage, Trial, TrialLevel
from ortlab.runs.tune_recommend import Candidate, Timing, compare, error_difference, recommend
from ortlab.runs.tune_search import SearchStrategy
from ortlab.runs.tune_settings import TuneSettings
from ortlab.runs.tune_steps import Proposal, Say
from ortlab.settings.config import Precision, QuantConfig, Recipe


def _yolo(scores: np.ndarray) -> np.ndarray:
    """[1, 4 + classes, anchors]: boxes far apart (no NMS between them), the given class probabilities."""
    anchors = scores.shape[1]
    boxes = np.stack([np.arange(anchors) * 50.0 + 20, np.full(anchors, 20.0), np.full(anchors, 10.0),
                      np.full(anchors, 10.0)])
    return np.concatenate([boxes, scores]).astype(np.float32)[None]


def test_the_evaluation_records_each_samples_near_threshold_score_error_as_computed_apart():
    rng = np.random.default_rng(5)
    refs = [rng.uniform(0.01, 0.99, size=(3, 40)) for _ in range(4)]
    cands = [np.clip(r + rng.normal(0, 0.05, size=r.shape), 0.001, 0.999) for r in refs]
    acc = TaskAccumulator(["output0"], [_yolo(refs[0])], False, Task.BOXES)
    for r, c in zip(refs, cands):
        acc.add([_yolo(r)], [_yolo(c)])
    (b,) = acc.result().boxes
    cut = math.log(b.threshold / (1 - b.threshold))
    for i, (r, c) in enumerate(zip(refs, cands)):
        r32, c32 = r.astype(np.float32).astype(np.float64), c.astype(np.float32).astype(np.float64)
        errors = [(math.log(y / (1 - y)) - math.log(x / (1 - x))) ** 2
                  for x, y in zip(r32.ravel(), c32.ravel()) if abs(math.log(x / (1 - x)) - cut) <= 1.5]
        assert b.sample_score_count[i] == len(errors) > 0
        assert b.sample_score_error[i] == pytest.approx(sum(errors), rel=1e-6)


def _evidence(n: int, errors: list[float], miss_every: int = 0) -> SampleEvidence:
    """``n`` samples with one reference detection each, all matched (or missed on every ``miss_every``-th), and
    each sample's near-threshold error over 10 scores."""
    hits = tuple(0.0 if miss_every and i % miss_every == 0 else 2.0 for i in range(n))
    return SampleEvidence("detection F1", hits, (2.0,) * n, n, "reference detections", per_unit=2.0,
                          units=(1.0,) * n, errors=tuple(errors), error_counts=(10.0,) * n,
                          error_measure="near-threshold score error (mean squared logit)")


def _cand(index: int, ev: SampleEvidence, speed: tuple[float, float, float]) -> Candidate:
    return Candidate(index, f"t{index}", True, True, ev, ev.value(), Timing(*speed))


def test_the_paired_error_difference_matches_the_normal_interval_of_the_per_sample_differences():
    rng = np.random.default_rng(2)
    base = rng.gamma(2.0, 0.02, size=800) * 10
    cand = base * rng.uniform(0.6, 1.1, size=800)  # paired: the candidate's error follows the default's
    d = error_difference(_evidence(800, list(cand)), _evidence(800, list(base)))
    assert d is not None
    diffs = (cand - base) / 10  # equal counts: the difference of means is the mean of per-sample differences
    half = 1.959964 * diffs.std(ddof=1) / math.sqrt(len(diffs))
    assert d.value == pytest.approx(diffs.mean())
    assert d.low == pytest.approx(diffs.mean() - half, rel=0.15)
    assert d.high == pytest.approx(diffs.mean() + half, rel=0.15)
    assert error_difference(_evidence(10, [1.0] * 10), SampleEvidence("detection F1", (2.0,) * 10, (2.0,) * 10, 10,
                                                                   "reference detections")) is None


def test_a_clearly_lower_score_error_makes_a_slower_candidate_with_the_same_f1_the_pick():
    rng = np.random.default_rng(7)
    base = list(rng.gamma(2.0, 0.2, size=300))
    default = _cand(1, _evidence(300, base, miss_every=25), (1.50, 1.46, 1.52))
    lower = _cand(2, _evidence(300, [e * 0.6 for e in base], miss_every=25), (1.34, 1.27, 1.37))
    rec = recommend(default, [default, lower], "latency", 300)
    comp = rec.comparisons[0]
    assert comp.not_worse and comp.more_accurate and comp.slower and rec.pick == 2
    assert comp.error_change is not None and comp.error_change.high < 0
    assert "clearly more accurate" in rec.reason and "near-threshold score error" in rec.reason
    assert "slower than the default" in rec.reason  # the cost is said, not hidden
    # the same error, noise only: not shown more accurate, so the slower candidate is not the pick
    noisy = _cand(3, _evidence(300, [e * f for e, f in zip(base, rng.uniform(0.7, 1.3, size=300))], miss_every=25),
                  (1.34, 1.27, 1.37))
    comp = compare(noisy, default, list(range(200)))
    assert comp.not_worse and not comp.more_accurate and comp.error_change is not None
    assert comp.error_change.low < 0 < comp.error_change.high
    assert recommend(default, [default, noisy], "latency", 300).pick == 1
    # a lower error never makes up for an F1 not shown to be no worse
    worse = _cand(4, _evidence(300, [e * 0.5 for e in base], miss_every=10), (1.34, 1.27, 1.37))
    comp = compare(worse, default, list(range(200)))
    assert not comp.not_worse and not comp.preferred
    assert recommend(default, [default, worse], "latency", 300).pick == 1


def test_the_search_tries_the_default_with_its_decision_head_in_float_right_after_it(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"x")
    (tmp_path / QDQ_FILE).write_bytes(b"x")
    queue = [Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False, nodes_to_exclude=("stem",)),
                    name="int8 static"),
             Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=False, per_channel=False),
                    name="int8 per-tensor")]
    branch = DecisionHead(SCORE_BRANCH, ("/model.22/cv3.0/Conv", "/model.22/cv3.1/Conv"))

    def proposals(detector: bool, head: DecisionHead | None, measure: str = ""
                  ) -> list[tuple[str, Stage, tuple[str, ...]]]:
        strategy = SearchStrategy(TuneSettings(budget_s=60, exclusion_steps=2, int16_steps=0), stop=lambda: False,
                                  evidence={}, ranked_nodes=lambda t: [], stage_context=lambda: None,  # type: ignore
                                  detector=detector, head=head)
        steps, seen = strategy.steps(list(queue)), []
        step = next(steps, None)
        while step is not None:
            if isinstance(step, Proposal):
                seen.append((step.recipe.name, step.stage, step.recipe.quant.nodes_to_exclude))
                trial = Trial(len(seen), step.recipe.name, step.stage, step.recipe, accepted=True, level=TrialLevel.OK,
                              model_path=str(tmp_path / "model.onnx"), task_measure=measure)
                try:
                    step = steps.send(trial)
                except StopIteration:
                    break
            else:
                said.extend([step.text] if isinstance(step, Say) else [])
                step = next(steps, None)
        return seen

    said: list[str] = []
    got = proposals(True, branch, Detections.F1)
    assert [name for name, _, _ in got] == ["int8 static", "int8 static + float class-score branch", "int8 per-tensor"]
    assert got[1][1] == Stage.ACCURACY and set(got[1][2]) == {"stem", *branch.nodes}  # on top of the default's own
    assert [name for name, _, _ in proposals(True, None, Detections.F1)] == ["int8 static", "int8 per-tensor"]
    logits = DecisionHead(LOGITS_HEAD, ("fc",))
    assert [name for name, _, _ in proposals(False, logits, TopOneFlips.NO_FLIP)] == [
        "int8 static", "int8 static + float logits head", "int8 per-tensor"]
    assert not said
    # a branch over several scales: first at the scale with the most anchors alone, then whole
    part, other = ScalePart(("/model.22/cv3.0/Conv",), (40, 40)), ScalePart(("/model.22/cv3.1/Conv",), (20, 20))
    got = proposals(True, DecisionHead(SCORE_BRANCH, branch.nodes, (part, other)), Detections.F1)
    assert [name for name, _, _ in got] == ["int8 static", "int8 static + float class-score branch 40×40",
                                            "int8 static + float class-score branch", "int8 per-tensor"]
    assert set(got[1][2]) == {"stem", *part.nodes} and set(got[2][2]) == {"stem", *branch.nodes}
    # an output judged as an embedding (a projection to a rank-2 vector looks like a logits head) or by SQNR alone:
    # no trial, and the search says why
    assert [name for name, _, _ in proposals(False, logits, "NN agreement")] == [
        "int8 static", "int8 per-tensor"]
    assert [name for name, _, _ in proposals(True, branch, "")] == ["int8 static", "int8 per-tensor"]
    assert said[0] == ("The logits head is not tried in float: this model's outputs are judged by NN agreement, and "
                       "only top-1 flips (no confident flip) could show it more accurate in float.")
    assert "judged by SQNR alone, and only decoded detections (detection F1) could" in said[1]


@pytest.mark.parametrize("probabilities", [False, True])
def test_the_evaluation_records_how_far_each_samples_top_two_gap_moved(probabilities):
    rng = np.random.default_rng(11)
    refs = [rng.normal(0, 3, size=(1, 20)) for _ in range(5)]
    cands = [r + rng.normal(0, 0.3, size=r.shape) for r in refs]
    if probabilities:  # a Softmax at the end: the gap is read in log probabilities, as logits differences are
        refs, cands = ([np.exp(x) / np.exp(x).sum() for x in xs] for xs in (refs, cands))
    acc = TaskAccumulator(["scores"], [refs[0]], False, Task.CLASSIFICATION)
    for r, c in zip(refs, cands):
        acc.add([r], [c])
    cm = acc.result().classification
    assert cm is not None and len(cm.sample_margin_error) == 5
    for k, (r, c) in enumerate(zip(refs, cands)):
        r, c = r[0].astype(np.float64), c[0].astype(np.float64)
        if probabilities:
            r, c = np.log(r), np.log(c)
        first, second = sorted(range(20), key=lambda i: -r[i])[:2]
        expected = ((c[first] - c[second]) - (r[first] - r[second])) ** 2
        assert cm.sample_margin_error[k] == pytest.approx(expected, rel=1e-6, abs=1e-9)


def _flips(n: int, errors: list[float], flipped: tuple[int, ...] = ()) -> SampleEvidence:
    hits = tuple(0.0 if i in flipped else 1.0 for i in range(n))
    return SampleEvidence("no confident flip", hits, (1.0,) * n, n, "confident samples", binary=True,
                          units=(1.0,) * n, errors=tuple(errors), error_counts=(1.0,) * n,
                          error_measure="top-1 margin error (mean squared logit)")


def test_a_classifier_whose_margin_error_is_clearly_lower_is_preferred_though_no_flip_differs():
    rng = np.random.default_rng(3)
    base = list(rng.gamma(1.0, 0.4, size=300))
    flips = (17, 120)  # the default flips two samples; the head the same two
    default = _cand(1, _flips(300, base, flips), (1.61, 1.59, 1.62))
    head = _cand(2, _flips(300, [e * 0.06 for e in base], flips), (1.55, 1.53, 1.57))
    # on 200 samples where neither flips but the same two, the Wilson floor alone cannot show "not worse" within
    # 0.01 ...
    same = compare(_cand(3, _flips(300, base, flips), (1.55, 1.53, 1.57)), default, list(range(200)))
    assert not same.not_worse and same.difference is not None and same.difference.low < -0.01
    # ... the margin error, lower on the same samples, can: the bootstrap over samples then reads "not worse"
    comp = compare(head, default, list(range(200)))
    assert comp.not_worse and comp.more_accurate and comp.preferred and comp.slower
    assert comp.error_change is not None and comp.error_change.high < 0
    rec = recommend(default, [default, head], "latency", 300)
    assert rec.pick == 2 and "top-1 margin error" in rec.reason and "slower than the default" in rec.reason
    # one more confident flip than the default: not preferred, whatever its margin error says
    flipped = _cand(4, _flips(300, [e * 0.06 for e in base], flipped=(5, *flips)), (1.55, 1.53, 1.57))
    assert not compare(flipped, default, list(range(200))).preferred


def test_a_lower_error_buys_nothing_where_the_default_errs_on_no_sample():
    rng = np.random.default_rng(4)
    base = list(rng.gamma(1.0, 0.4, size=300))
    for make in (_flips, _evidence):  # no flip / every detection matched by both
        default = _cand(1, make(300, base), (1.61, 1.59, 1.62))
        slower = _cand(2, make(300, [e * 0.06 for e in base]), (1.55, 1.53, 1.57))
        comp = compare(slower, default, list(range(200)))
        assert comp.error_change is not None and comp.error_change.high < 0  # still measured and said
        assert not comp.more_accurate and not comp.preferred
        assert recommend(default, [default, slower], "latency", 300).pick == 1


def test_a_greedy_step_with_the_same_f1_is_kept_when_its_score_error_is_clearly_lower():
    from ortlab.runs.tune_pick import step_gain

    rng = np.random.default_rng(9)
    base = list(rng.gamma(2.0, 0.2, size=300))
    current = _evidence(300, base, miss_every=20)
    kept, why = step_gain(_evidence(300, [e * 0.6 for e in base], miss_every=20), current) or (False, "")
    assert kept and why.startswith("kept (not worse, near-threshold score error (mean squared logit) -")
    noisy = [e * f for e, f in zip(base, rng.uniform(0.7, 1.3, size=300))]
    kept, why = step_gain(_evidence(300, noisy, miss_every=20), current) or (True, "")
    assert not kept and why.startswith("dropped, not shown better (detection F1 +0.000")
    # a lower error never makes up for a worse F1, nor counts where the current trial errs on no sample
    assert not (step_gain(_evidence(300, [e * 0.6 for e in base], miss_every=10), current) or (True, ""))[0]
    assert not (step_gain(_evidence(300, [e * 0.6 for e in base]), _evidence(300, base)) or (True, ""))[0]
