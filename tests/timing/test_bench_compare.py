"""Benchmark maths in the engine: running percentiles, speed-ups against the baseline, slow-down explanations;
and the evaluation sample the Data page chooses."""

from __future__ import annotations

import math

import pytest

from ortlab.timing.bench import LatencySummary
from ortlab.timing.compare import (BenchComparison, ComparisonRow, LatencyStats, compare_benchmarks, running_stats,
                                  slowdown_explanation, split_series_id)
from ortlab.data.dataset import Dataset, Sample, pick_subset, stratified_sample
from ortlab.core.serial import dumps, from_plain, loads, to_plain


def s(variant: str, batch: int, p50: float) -> LatencySummary:
    return LatencySummary(variant, batch, 10, p50, p50, p50, p50, 0.0, p50, p50, batch * 1000 / p50)


def test_running_stats_are_percentiles_per_series():
    stats = running_stats({"run1@1": [1.0, 2.0, 3.0], "empty@1": [], "a@b@8": [5.0]})
    assert stats[0] == LatencyStats("run1", 1, 3, 2.0, pytest.approx(2.8), pytest.approx(2.98))  # type: ignore[arg-type]  # approx compares equal to a float; typed ApproxBase
    assert stats[1] == LatencyStats("a@b", 8, 1, 5.0, 5.0, 5.0)
    assert split_series_id("x@4") == ("x", 4)


def test_speedup_is_against_the_baseline_at_the_same_batch_size():
    summaries = [s("original", 1, 2.0), s("run1", 1, 0.5), s("original", 8, 8.0), s("run1", 8, 4.0), s("run1", 16, 9.0)]
    c = compare_benchmarks(summaries)
    assert c.baseline == "original"
    assert [r.speedup for r in c.rows] == [1.0, 4.0, 1.0, 2.0, None]  # nothing to compare with at batch 16
    assert c.slowdowns == []
    # another baseline: the original is now the slower one
    c = compare_benchmarks(summaries, baseline="run1")
    assert [r.speedup for r in c.rows] == [0.25, 1.0, 0.5, 1.0, 1.0]
    assert [(d.variant, d.baseline, d.batch_size) for d in c.slowdowns] == [("original", "run1", 1),
                                                                           ("original", "run1", 8)]


def test_the_winner_per_batch_size_is_the_clearly_fastest_never_one_whose_interval_holds_1():
    base1, fast1, faster1 = s("original", 1, 2.0), s("run1", 1, 1.0), s("run2", 1, 0.8)
    base8, near8 = s("original", 8, 8.0), s("run1", 8, 7.5)
    c = BenchComparison("original", [ComparisonRow(base1, 1.0), ComparisonRow(fast1, 2.0, 1.8, 2.2, paired=True),
                                      ComparisonRow(faster1, 2.5, 2.3, 2.7, paired=True), ComparisonRow(base8, 1.0),
                                      ComparisonRow(near8, 1.07, 0.9, 1.2, paired=True),
                                      ComparisonRow(s("run1", 16, 3.0), None)])
    winners = c.winners()
    assert [(w.batch_size, w.row.summary.variant, w.baseline) for w in winners] == [(1, "run2", base1)]
    slower = BenchComparison("original", [ComparisonRow(base1, 1.0), ComparisonRow(s("run1", 1, 4.0), 0.5, 0.4, 0.6)])
    assert slower.winners() == []


def test_slowdown_sentence_by_precision():
    summaries = [s("original", 1, 0.2), s("run1", 1, 0.3), s("run2", 1, 0.25), s("run3", 1, 0.21),
                 s("run4", 1, 0.4), s("original", 8, 10.0), s("run1", 8, 20.0)]
    c = compare_benchmarks(summaries, precisions={"run1": "int8", "run2": "fp16", "run3": "int8", "run4": "fp32"})
    notes = {(d.variant, d.batch_size): d for d in c.slowdowns}
    assert set(notes) == {("run1", 1), ("run2", 1), ("run3", 1), ("run4", 1), ("run1", 8)}
    tiny = notes[("run1", 1)]
    assert tiny.sentence("#1 int8", "original").startswith(
        "#1 int8 is slower than original at batch 1: p50 0.300 ms vs 0.200 ms (0.67×, +0.100 ms per run).")
    assert "tiny" in tiny.explanation and "QuantizeLinear/DequantizeLinear" in tiny.explanation
    big = notes[("run1", 8)].explanation
    assert "tiny" not in big and "VNNI" in big
    assert "Cast nodes" in notes[("run2", 1)].explanation
    assert notes[("run3", 1)].explanation.endswith("within run-to-run noise.")  # 0.95× is noise
    assert "did not pay off" in notes[("run4", 1)].explanation
    assert slowdown_explanation("", 0.5, 3.0) == "The graph changes did not pay off for this model on this machine."


def test_a_row_timed_under_another_runtime_is_explained_as_a_runtime_difference_not_a_graph_change():
    from dataclasses import replace

    ort = replace(s("original", 1, 0.2), providers=["CPUExecutionProvider"])
    ov = replace(s("original · OpenVINO", 1, 0.4), providers=["OpenVINO CPU"])
    ov_int8 = replace(s("run1 · OpenVINO", 1, 0.3), providers=["OpenVINO CPU"])
    c = compare_benchmarks([ort, ov, ov_int8], precisions={"run1 · OpenVINO": "int8"})
    assert [d.variant for d in c.slowdowns] == ["original · OpenVINO", "run1 · OpenVINO"]
    for d in c.slowdowns:
        assert "did not pay off" not in d.explanation and "VNNI" not in d.explanation, d.explanation
        assert d.explanation.startswith("It ran under OpenVINO and the baseline under ONNX Runtime: this gap is a "
                                        "runtime difference"), d.explanation


def test_comparison_round_trips_as_plain_data():
    c = compare_benchmarks([s("original", 1, 0.2), s("run1", 1, 0.3), s("run1", 4, math.inf)],
                           precisions={"run1": "int8"})
    back = from_plain(BenchComparison, loads(dumps(c)))
    assert to_plain(back) == to_plain(c) and back.slowdowns[0].ratio == pytest.approx(2 / 3)


def labeled(n: int, classes: int = 4) -> Dataset:
    return Dataset("tensors", [Sample(f"s{i}", i % classes, "tensors:0", i) for i in range(n)],
                   [str(c) for c in range(classes)])


def test_pick_subset_stratified_random_or_all():
    ds = labeled(40)
    assert pick_subset(ds, 0) is ds and pick_subset(ds, 40) is ds and pick_subset(ds, 99) is ds
    strat = pick_subset(ds, 8, stratify=True, seed=3)
    assert [x.name for x in strat.samples] == [x.name for x in stratified_sample(ds, 8, 3).samples]
    assert sorted(x.label for x in strat.samples if x.label is not None) == [0, 0, 1, 1, 2, 2, 3, 3]
    uniform = pick_subset(ds, 8, stratify=False, seed=3)
    assert len(uniform) == 8 and len({x.name for x in uniform.samples}) == 8
    assert [x.name for x in uniform.samples] == [x.name for x in pick_subset(ds, 8, False, 3).samples]
    assert [x.index for x in uniform.samples] == sorted(x.index for x in uniform.samples if x.index is not None)
