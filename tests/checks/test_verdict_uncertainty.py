"""The verdict states its uncertainty: the deciding figure's 95% interval from its sample count, "on the edge"
with a sample count that settles it when the interval straddles a bar; a detector's channel groups are held to
the same SQNR bar as whole outputs, and the sentence names the deciding figure once."""

from __future__ import annotations

import math
from dataclasses import replace

from ortlab.checks.eval_report import (BoxesMetrics, ClassificationMetrics, EvalReport, OutputError, Task,
                                       TaskMetrics)
from ortlab.checks.uncertainty import about, wilson
from ortlab.checks.verdict import Level, Verdict, judge
from ortlab.cli.render import verdict_block
from ortlab.core.serial import from_plain, to_plain

Z = 1.959963984540054


def _score_test_bounds(k: float, n: int) -> tuple[float, float]:
    """The Wilson interval found the long way: the p where |k/n - p| = z·√(p(1-p)/n), by bisection."""
    phat = k / n

    def outside(p: float) -> bool:
        return abs(phat - p) > Z * math.sqrt(p * (1 - p) / n)

    def bisect(lo: float, hi: float) -> float:  # outside(lo) != outside(hi)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if outside(mid) == outside(lo) else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else bisect(0.0, phat)
    high = 1.0 if k == n else bisect(phat, 1.0)
    return low, high


def _classifier(n: int, confident: int, output: str = "logits") -> EvalReport:
    cm = ClassificationMetrics(output, 10, n, 1 - confident / n, flip_margins=[0.5] * confident)
    tm = TaskMetrics(Task.CLASSIFICATION, True, "test", classification=cm)
    return EvalReport(n, [OutputError(output, 0.1, 0.01, 0.999, 30.0)], task=tm)


def test_the_interval_is_wilsons_computed_independently():
    for k, n in ((0, 64), (1, 20), (3, 64), (17, 23), (64, 64)):
        got, want = wilson(k, n), _score_test_bounds(k, n)
        assert abs(got[0] - want[0]) < 1e-9 and abs(got[1] - want[1]) < 1e-9, (k, n, got, want)
    v = judge(_classifier(64, 3))
    assert v.uncertainty is not None
    low, high = _score_test_bounds(3, 64)
    assert abs(v.uncertainty.low - low) < 1e-9 and abs(v.uncertainty.high - high) < 1e-9
    assert v.uncertainty.method == "Wilson, 64 samples"


def test_a_figure_exactly_at_a_bar_on_few_samples_is_on_the_edge():
    v = judge(_classifier(20, 1))  # 1/20 = 5%: exactly the broken bar, not above it
    assert v.level == Level.DEGRADED
    assert v.uncertainty is not None and v.uncertainty.bar == 0.05
    assert v.edge.startswith("on the edge: the 95% interval 0.9%–23.6%")
    assert "5% bar" in v.edge and "sits on the bar" in v.edge  # no sample count moves a figure off its bar
    assert v.uncertainty.settle_samples is None
    # one bar in the verdict: the edge's 5%, not also the 1% bar the figure is degraded by
    assert "on the edge" in v.headline and v.reasons == ["logits: 1/20 confident top-1 flips (5.0%)"]


def test_near_a_bar_the_edge_says_how_many_samples_would_settle_it():
    v = judge(_classifier(50, 4))  # 8%, above the 5% broken bar; Wilson 3.2%–18.8% reaches back across it
    assert v.level == Level.BROKEN and v.uncertainty is not None and v.uncertainty.bar == 0.05
    n = v.uncertainty.settle_samples
    assert n is not None and f"--verify-samples {n}" in v.edge
    # at that count the same share's interval clears the bar; at a tenth fewer it does not yet
    assert _score_test_bounds(0.08 * n, n)[0] > 0.05
    m = int(n * 0.9)
    assert _score_test_bounds(0.08 * m, m)[0] < 0.05


def test_far_from_every_bar_the_verdict_is_not_on_the_edge():
    clean = judge(_classifier(2000, 0))  # 0 of 2000: the interval ends at 0.19%, below the 1% bar
    assert clean.level == Level.OK and clean.uncertainty is not None and not clean.uncertainty.on_edge
    assert clean.edge == "" and "on the edge" not in clean.headline
    wrecked = judge(_classifier(400, 200))  # 50% flips: far above the 5% broken bar
    assert wrecked.level == Level.BROKEN and wrecked.edge == ""
    block = verdict_block(clean)
    assert block[0].startswith("verdict    OK  ")
    assert block[2] == "  interval   95% interval 0.0%–0.2% (Wilson, 2000 samples)"
    assert not any(ln.startswith("  edge") for ln in block)


def test_zero_flips_on_64_samples_cannot_rule_out_the_1_percent_bar():
    v = judge(_classifier(64, 0))
    assert v.level == Level.OK and v.uncertainty is not None and v.uncertainty.bar == 0.01
    n = v.uncertainty.settle_samples
    assert n is not None and 370 <= n <= 390  # 0/n clears 1% from n ≈ z²·99 ≈ 380
    block = verdict_block(v)
    assert block[0].startswith("verdict    OK (on the edge)  ")
    assert any(ln.startswith("  edge       on the edge:") and f"--verify-samples {n}" in ln for ln in block)


def _detector(f1_matched: int, ref_total: int, cand_total: int, score_db: float, n: int = 64) -> EvalReport:
    b = BoxesMetrics("output0", 0.3, "probability", 0.1, ref_total / n, cand_total / n, matched=f1_matched,
                     ref_total=ref_total, cand_total=cand_total, score_sqnr_db=score_db, box_sqnr_db=35.0)
    tm = TaskMetrics(Task.BOXES, True, "test", boxes=[b])
    return EvalReport(n, [OutputError("output0", 1.0, 0.1, 0.999, 31.8)], task=tm)


def test_the_detections_f1_on_23_reference_detections_is_on_the_edge():
    v = judge(_detector(18, 23, 23, 25.0))  # F1 0.78: broken, but 23 detections cannot tell 0.78 from 0.8
    assert v.level == Level.BROKEN and v.deciding == "output0: detections F1 vs reference"
    u = v.uncertainty
    assert u is not None and u.bar == 0.8 and u.settle_samples is not None and u.settle_samples > 64
    assert f"about {about(u.settle_samples)} would settle it" in v.edge
    assert "detections in 64 samples" in v.uncertainty.method
    low, high = _score_test_bounds(18, 23)
    assert abs(v.uncertainty.low - low) < 1e-9 and abs(v.uncertainty.high - high) < 1e-9


def test_a_score_group_below_the_sqnr_bar_is_flagged_and_named_once():
    v = judge(_detector(60, 61, 61, 9.4))  # F1 0.98 fine; score channels 9.4 dB < 10 dB, whole output 31.8 dB
    assert v.level == Level.BROKEN
    assert v.deciding == "output0 scores: SQNR" and v.deciding_text == "9.4 dB"
    assert v.reasons == ["output0 scores: SQNR 9.4 dB < 10 dB"]
    ok = judge(_detector(60, 61, 61, 14.0))
    sentence = ok.reasons[0]
    assert ok.level == Level.OK and "worst SQNR 14.0 dB (output0 scores)" in sentence
    assert sentence.count("14.0 dB") == 1 and "31.8" not in sentence and sentence.count("detections F1") == 1


def test_the_sqnr_interval_is_bootstrapped_over_samples_and_stored():
    signal = [1.0] * 16
    noise = [0.02, 0.17] * 8  # per-sample SQNR 17 dB and 7.7 dB: the set's 10.2 dB could be either side of 10 dB
    sqnr = 10 * math.log10(sum(signal) / sum(noise))
    report = EvalReport(16, [OutputError("y", 0.5, 0.1, 0.95, sqnr, sample_signal=signal, sample_noise=noise)])
    v = judge(report)
    assert v.level == Level.OK and v.deciding == "y: SQNR"
    u = v.uncertainty
    assert u is not None and u.unit == "db" and u.low < 10 < u.high and u.bar == 10.0
    assert u.method == "bootstrap over 16 samples" and u.settle_samples and u.settle_samples > 16
    back = from_plain(Verdict, to_plain(v))
    assert back.uncertainty == u and back.edge == v.edge
    far = EvalReport(16, [OutputError("y", 0.5, 0.1, 0.95, 40.0, sample_signal=signal, sample_noise=[1e-4] * 16)])
    assert judge(far).edge == ""


def test_a_dense_maps_crossings_are_bootstrapped_over_samples_not_elements():
    from ortlab.checks.eval_report import DenseMapMetrics

    crossing = [0, 400] * 4  # half the samples cross 4% of their 10,000 elements: 2% overall
    elements = [10_000] * 8
    d = DenseMapMetrics("map", 0.3, "probability", sum(crossing) / sum(elements), 0.1, sample_crossing=crossing,
                        sample_elements=elements)
    tm = TaskMetrics(Task.DENSE_MAP, True, "test", dense_maps=[d])
    v = judge(EvalReport(8, [OutputError("map", 0.5, 0.01, 0.99, 30.0)], task=tm))
    assert v.level == Level.DEGRADED and v.deciding == "map: elements crossing 0.3"
    u = v.uncertainty
    assert u is not None and u.method == "bootstrap over 8 samples"
    # 80,000 independent elements would give a ±0.1% interval; 8 samples of 0% or 4% give about ±1.4%
    assert u.high - u.low > 0.015 and u.low <= 0.01 <= u.high and u.bar == 0.01


def test_evaluate_keeps_each_samples_energies_and_their_sums_are_the_sqnr(tmp_path):
    import numpy as np

    from ortlab.checks.evaluate import evaluate
    from ortlab.data.loaders import load_tensor_file
    from tests.checks.test_verdict import gemm_model, npy

    eye = np.eye(3, dtype=np.float32)
    ref = gemm_model(tmp_path / "ref.onnx", eye)
    cand = gemm_model(tmp_path / "cand.onnx", eye * np.float32(1.05))
    x = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)
    report = evaluate(ref, cand, load_tensor_file(npy(tmp_path / "x.npy", x)), None)
    (o,) = report.outputs
    assert len(o.sample_signal) == len(o.sample_noise) == 12
    assert math.isclose(10 * math.log10(sum(o.sample_signal) / sum(o.sample_noise)), o.sqnr_db, rel_tol=1e-9)
    assert all(math.isclose(s, float(r @ r), rel_tol=1e-5) for s, r in zip(o.sample_signal, x.astype(np.float64)))


def test_the_bootstrap_without_numpy_agrees_with_the_one_with_it(monkeypatch):
    import sys

    from ortlab.checks.uncertainty import sqnr_interval

    signal = [1.0 + 0.1 * (i % 5) for i in range(40)]
    noise = [0.01 * (1 + i % 7) for i in range(40)]
    with_np = sqnr_interval(signal, noise)
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now fails: the pure-Python path
    without = sqnr_interval(signal, noise)
    assert with_np is not None and without is not None
    assert abs(with_np[0] - without[0]) < 0.3 and abs(with_np[1] - without[1]) < 0.3
    point = 10 * math.log10(sum(signal) / sum(noise))
    assert with_np[0] < point < with_np[1]


def test_a_broken_outputs_sqnr_is_said_before_its_cosine_as_before():
    v = judge(EvalReport(4, [OutputError("maps", 1.0, 0.5, 0.871, -1.7)]))
    assert v.reasons == ["maps: SQNR -1.7 dB < 10 dB", "maps: cosine 0.871 < 0.9"]


def test_a_detector_verdict_names_one_bar_its_evidence_and_a_sample_count_the_data_has():
    """Issue 38 (4): F1 0.86 is degraded (< 0.95) but its interval (0.74–0.93) reaches across the 0.8 broken bar
    only: the verdict names that one bar, says the detections and samples it rests on, and never asks for more
    samples than the evaluation data has."""
    report = _detector(43, 50, 50, 25.0, n=13)  # 43 of 50 reference detections matched: F1 0.86
    v = judge(report)
    assert v.level == Level.DEGRADED and v.uncertainty is not None and v.uncertainty.bar == 0.8
    assert not any("0.95" in r for r in v.reasons) and "0.95" not in v.edge  # one bar: 0.8
    assert v.reasons[0].startswith("output0: detections F1 0.86 vs the reference")
    assert "the 0.8 bar" in v.edge
    assert v.uncertainty.method == "Wilson, 50 reference and 50 candidate detections in 13 samples"
    need = v.uncertainty.settle_samples
    assert need is not None and need > 13
    short = judge(replace(report, available_samples=need - 1))  # the data has fewer samples than would settle it
    assert "--verify-samples" not in short.edge and f"more than the {need - 1:,} samples" in short.edge
    assert "cannot settle it" in short.edge
    enough = judge(replace(report, available_samples=need + 100))
    assert f"--verify-samples {need};" in enough.edge and f"the evaluation data has {need + 100:,}" in enough.edge
    # a degraded figure whose interval reaches across its own bar keeps that bar in its reason
    own = judge(_detector(35, 40, 40, 25.0, n=13))  # F1 0.875, interval 0.74–0.95: nearest bar 0.8 again
    assert own.uncertainty is not None
    edge_bar = own.uncertainty.bar
    assert (edge_bar == 0.95) == any(r.endswith("< 0.95") for r in own.reasons)


def test_an_extrapolated_sample_count_is_said_to_two_figures():
    assert [about(n) for n in (7, 581, 999, 1_049, 98_719, 1_000_000)] == [
        "7", "581", "999", "1,000", "99,000", "1,000,000"]
