"""The decisions the app's views show, made in the engine and reached through ``ortlab.api``: the per-node
culprit, its bars and the keep-in-float recipe; which stored benchmark speaks for a pair, a run and a report; a
tune search as a job whose trials the page drains."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from ortlab import api
from ortlab.checks.analyze import NodeAnalysis, NodeError
from ortlab.checks.node_findings import SqnrBars, culprit
from ortlab.core.errors import OrtlabError
from ortlab.runs.history import BenchmarkRecord, BenchVariant
from ortlab.runs.stored_timing import ReportTiming


def _node(name: str, acc: float, local: float | None = None) -> NodeError:
    return NodeError(name, "Conv", name + ":0", acc, 0.99, 0.1, local_sqnr_db=local)


ANALYSIS = NodeAnalysis("ref.onnx", "cand.qdq.onnx", 8,
                        [_node("a", 30.0, 40.0), _node("b", 8.0, 25.0), _node("c", 15.0, 12.0), _node("d", math.inf)])


def test_the_culprit_is_the_lowest_accumulated_sqnr_read_against_the_policy_bars():
    bars = api.checks.sqnr_bars(api.VerdictPolicy())
    assert bars == SqnrBars(api.VerdictPolicy().min_sqnr_db, api.VerdictPolicy().min_sqnr_db + 10.0)
    assert culprit(ANALYSIS).name == "b"
    sentence = api.checks.culprit_sentence(ANALYSIS, SqnrBars(10.0, 20.0))
    assert sentence == ("Worst accumulated error: b (Conv) at 8.0 dB, below the verdict's broken bar of 10 dB; "
                        "alone it adds 25.0 dB.")
    assert "above the ok bar of 5 dB" in (api.checks.culprit_sentence(ANALYSIS, SqnrBars(1.0, 5.0)) or "")
    assert culprit(NodeAnalysis("r", "c", 1, [])) is None


def test_ranking_and_overlay_by_accumulated_or_local_sqnr():
    assert [e.name for e in api.checks.ranked_nodes(ANALYSIS)] == ["b", "c", "a", "d"]
    assert [e.name for e in api.checks.ranked_nodes(ANALYSIS, api.checks.ADDED, top=2)] == ["c", "b"]
    assert api.checks.overlay_values(ANALYSIS) == {"a": 30.0, "b": 8.0, "c": 15.0}  # infinite left out
    assert api.checks.overlay_values(ANALYSIS, api.checks.ADDED) == {"a": 40.0, "b": 25.0, "c": 12.0}


def test_the_keep_in_float_recipe_adds_nodes_and_says_what_changed():
    base = api.Recipe(precision=api.Precision.INT8, quant=api.QuantConfig(nodes_to_exclude=("x",)))
    r = api.checks.excluded_recipe(base, ["x", "b", "c"], base_run_id=4)
    assert r.quant.nodes_to_exclude == ("x", "b", "c") and r.name == "#4 + 2 nodes kept in float"
    assert "lowered SQNR from 20.0 dB to 12.0 dB: keep it quantized" in api.checks.exclusion_sentence(20.0, 12.0, ["b"])
    assert api.checks.exclusion_sentence(None, 12.0, ["b"]).endswith("no evaluation to compare the SQNR with.")


def _summary(variant: str, p50: float, batch: int = 1) -> api.LatencySummary:
    return api.LatencySummary(variant, batch, 50, p50, p50 * 1.1, p50 * 1.2, p50, 0.1, p50, p50, 1000 / p50)


@dataclass
class _History:
    records: list = field(default_factory=list)

    def list_benchmarks(self, limit: int = 50) -> list:
        return self.records[:limit]


def test_the_newest_benchmark_of_the_pair_speaks_for_it(tmp_path):
    src = tmp_path / "src.onnx"
    src.write_bytes(b"x")
    old = BenchmarkRecord(1, "t1", [BenchVariant("v0", path=str(src)), BenchVariant("v1", run_id=7)],
                          api.BenchConfig(), [_summary("v0", 4.0), _summary("v1", 2.0)])
    new = BenchmarkRecord(2, "t2", [BenchVariant("v0", path=str(src)), BenchVariant("v1", run_id=7)],
                          api.BenchConfig(), [_summary("v0", 4.0, batch=8), _summary("v1", 1.0)])
    hist: Any = _History([new, old])  # list_benchmarks is all these functions read of a History
    pair = api.benchmarks.latest_pair(hist, api.TimedModel(None, str(src)), api.TimedModel(7, "run.onnx"))
    assert pair is not None and pair.bench_id == 1 and pair.speedup == pytest.approx(2.0)  # #2 has no batch-1 source
    assert api.benchmarks.run_latency(hist, 7).p50 == 1.0  # the newest that timed the run at batch 1
    assert api.benchmarks.latest_pair(hist, api.TimedModel(None, str(tmp_path / "other.onnx")), api.TimedModel(7, "")) is None


def test_the_report_shows_the_benchmark_that_timed_the_run_with_its_source(tmp_path):
    src = tmp_path / "src.onnx"
    src.write_bytes(b"x")

    @dataclass
    class Run:
        run_id: int
        source_path: str

    with_source = BenchmarkRecord(1, "t1", [BenchVariant("s", path=str(src)), BenchVariant("r", run_id=3)],
                                  api.BenchConfig(), [_summary("s", 4.0), _summary("r", 2.0)])
    alone = BenchmarkRecord(2, "t2", [BenchVariant("r", run_id=3)], api.BenchConfig(), [_summary("r", 1.5)])
    timing = api.benchmarks.report_timing(_History([alone, with_source]), Run(3, str(src)))  # type: ignore[arg-type]
    assert timing.bench == with_source.summaries and [s.p50 for s in timing.speed] == [4.0, 2.0]
    none = api.benchmarks.report_timing(_History([]), Run(3, str(src)))  # type: ignore[arg-type]
    assert none == ReportTiming(None, None)


class _Tuner:
    def __init__(self, n: int = 3, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.cancelled = n, fail_at, False
        self.result: str | None = None

    def trials(self):
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise OrtlabError("trial broke")
                if self.cancelled:
                    return
                yield i
        finally:
            self.result = f"{self.n} trials"

    def cancel(self) -> None:
        self.cancelled = True


def test_a_tune_job_pushes_each_trial_for_the_page_to_drain():
    job = api.TuneJob(_Tuner(3)).start()
    assert job.wait(10) and job.state == api.recipes.DONE and job.result == "3 trials"
    assert job.drain() == [0, 1, 2] and job.drain() == [] and job.items == [0, 1, 2]


def test_a_tune_job_in_the_foreground_fails_or_stops_with_the_tuners_result():
    failing = api.TuneJob(_Tuner(3, fail_at=1))
    assert list(failing.follow()) == [0]
    assert failing.state == api.recipes.FAILED and str(failing.error) == "trial broke" and failing.result == "3 trials"
    stopped = api.TuneJob(_Tuner(5))
    trials = stopped.follow()
    assert next(trials) == 0
    stopped.cancel()
    trials.close()  # the command line on Ctrl-C
    assert stopped.done and stopped.state == api.recipes.CANCELLED and stopped.result == "5 trials"


def _speed(ratio: float, low: float, high: float, rounds: int = 23, paired: bool = True) -> api.SpeedUp:
    """A SpeedUp with the candidate ÷ reference ``ratio`` and its interval (``low``–``high``)."""
    return api.SpeedUp(1, ratio, low, high, rounds, rounds, rounds, 0.0, 10.0, 10.0 * ratio, paired=paired)


def test_the_speedup_card_is_never_a_bare_number():
    from ortlab.ui.views.speed import speedup_card

    # a clear speed-up: the interval in the delta and the help, with the rounds
    value, delta, help_ = speedup_card(_speed(1 / 1.07, 1 / 1.36, 1 / 1.02))
    assert value == "1.07×" and delta == "95% interval 1.02–1.36×, 23 rounds"
    assert help_.startswith("95% interval 1.02–1.36×, 23 rounds.")
    # an interval that contains 1: said, and the figure is not called slower
    value, delta, help_ = speedup_card(_speed(1 / 0.97, 1 / 1.05, 1 / 0.9))
    assert value == "0.97×" and delta == "no clear difference · 95% interval 0.90–1.05×, 23 rounds"
    assert "0.90–1.05×" in help_
    # a clearly slower candidate
    value, delta, _ = speedup_card(_speed(1 / 0.82, 1 / 0.85, 1 / 0.80))
    assert value == "0.82× (slower)" and delta.startswith("95% interval 0.80–0.85×")
    # too few rounds or a wide interval: noisy
    _, delta, help_ = speedup_card(_speed(1 / 2.56, 1 / 4.96, 1 / 2.48, rounds=10))
    assert delta == "noisy: the machine was busy · 95% interval 2.48–4.96×, 10 rounds"  # the interval too
    assert "2.48–4.96×, 10 rounds: noisy" in help_
    # an older benchmark's ratio of p50s: no interval, and it says so
    _, delta, help_ = speedup_card(_speed(0.5, 0.5, 0.5, paired=False))
    assert delta == "timed apart: no interval" and "no interval" in help_
