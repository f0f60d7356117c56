"""Timings with their noise: spread and run count on every summary, a warning when they are poor, "no clear
difference" when a speed-up's interval holds 1, and speed-ups taken round by round from interleaved timing."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from tests.support.models import conv_bn_model
from ortlab.cli import main as cli
from ortlab.runs import bench_service
from ortlab.runs.history import BenchVariant
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import BenchConfig
from ortlab.timing import child_runs
from ortlab.timing.bench import LatencySample, median_interval, median_rank, summarize
from ortlab.timing.child_runs import round_plan, time_interleaved
from ortlab.timing.compare import NO_CLEAR_DIFFERENCE, compare_benchmarks, noise_warnings


def samples(variant: str, ms, batch: int = 1, rounds=None) -> list[LatencySample]:
    rounds = rounds if rounds is not None else [-1] * len(ms)
    return [LatencySample(variant, batch, i, float(m), 0.0, r) for i, (m, r) in enumerate(zip(ms, rounds))]


class FakeSeries:
    """One interleaved series whose latency is ``base_ms`` × the machine's load at the moment its block runs
    (the load is shared by all series and grows with every block timed), plus ``noise`` (relative)."""

    def __init__(self, variant, batch, base_ms, machine, noise=0.0, seed=0, drift=1.5):
        self.variant, self.batch_size, self.base_ms, self.machine = variant, batch, base_ms, machine
        self.drift = drift
        self.noise, self.rng = noise, np.random.default_rng(seed)
        self.samples: list[LatencySample] = []
        self.peak_rss_mb, self.cancelled, self.started, self.finished = None, False, False, False

    def start(self):
        self.started = True

    def ready(self, cancel=None):
        return self.started

    def block(self, runs, seconds, rnd, cancel=None):
        self.machine["order"].append((rnd, self.variant))
        self.machine["load"] *= self.drift  # the machine gets busier block after block
        n = runs or 4
        ms = self.base_ms * self.machine["load"] * (1 + self.noise * self.rng.standard_normal(n))
        new = [LatencySample(self.variant, self.batch_size, len(self.samples) + k, float(m), 0.0, rnd)
               for k, m in enumerate(np.abs(ms))]
        self.samples += new
        return new, float(sum(ms)) / 1000

    def finish(self):
        self.finished = True

    def close(self):
        pass

    def summary(self, peak_rss_mb=None):
        return summarize(self.samples, peak_rss_mb=peak_rss_mb)


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path / "home")


# -- intervals and warnings -------------------------------------------------------------------------------------


def test_median_interval_uses_binomial_order_statistics():
    # independently: the largest j with P(Binomial(n, 1/2) <= j - 1) <= 2.5 %
    for n in (6, 10, 20, 101):
        cdf = np.cumsum([math.comb(n, i) for i in range(n + 1)]) / 2 ** n
        j = max(1, int(np.searchsorted(cdf, 0.025, side="right")))
        assert median_rank(n) == j
    assert median_rank(10) == 2 and median_rank(20) == 6  # the textbook ranks
    x = np.arange(1.0, 21.0)[::-1]  # unsorted on purpose
    assert median_interval(x) == (6.0, 15.0)


def test_summary_carries_quartiles_interval_and_rounds():
    ms = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    s = summarize(samples("a", ms, rounds=[0] * 4 + [1] * 4 + [2] * 4))
    assert (s.p25, s.p75) == (pytest.approx(np.percentile(ms, 25)), pytest.approx(np.percentile(ms, 75)))
    assert (s.p50_low, s.p50_high) == (3.0, 10.0)  # ranks 3 and 10 of 12
    assert s.round_p50s == [2.5, 6.5, 10.5]
    assert s.spread == pytest.approx((np.percentile(ms, 75) - np.percentile(ms, 25)) / np.median(ms))


def test_noisy_timer_and_few_runs_are_warned_about():
    rng = np.random.default_rng(3)
    noisy = summarize(samples("noisy", 10.0 * rng.lognormal(0.0, 0.6, 200)))
    quiet = summarize(samples("quiet", 10.0 + 0.01 * rng.standard_normal(200)))
    short = summarize(samples("short", [10.0, 10.1, 9.9]))
    assert noisy.spread is not None and noisy.spread > 0.2
    [w] = noise_warnings(noisy)
    assert "noisy at batch 1" in w and f"{noisy.spread:.0%} of its p50" in w
    assert noise_warnings(quiet) == []
    [w] = noise_warnings(short)
    assert "only 3 timed runs (fewer than 10)" in w


def test_overlapping_intervals_say_no_clear_difference():
    rng = np.random.default_rng(5)
    a = summarize(samples("a", 10.0 * rng.lognormal(0.0, 0.5, 40)))
    b = summarize(samples("b", 9.5 * rng.lognormal(0.0, 0.5, 40)))  # 5 % faster at the median, within the noise
    fast = summarize(samples("fast", 5.0 * rng.lognormal(0.0, 0.05, 40)))
    c = compare_benchmarks([a, b, fast])
    rb, rf = c.rows[1], c.rows[2]
    assert rb.low is not None and rb.high is not None and rb.low < 1.0 < rb.high and not rb.clear
    assert rb.speedup_text().startswith(NO_CLEAR_DIFFERENCE)
    assert rf.clear and rf.speedup_text().startswith(f"{a.p50 / fast.p50:.2f}×")
    assert a.p50_low is not None and fast.p50_high is not None
    assert rf.low == pytest.approx(a.p50_low / fast.p50_high) and not rf.paired


# -- interleaved rounds -----------------------------------------------------------------------------------------


def test_round_plan():
    assert round_plan(BenchConfig(duration_s=0, runs=30)) == (3, math.inf, 10)
    assert round_plan(BenchConfig(duration_s=0, runs=5)) == (1, math.inf, 5)
    assert round_plan(BenchConfig(duration_s=2.0)) == (None, pytest.approx(0.2), 10)
    assert round_plan(BenchConfig(duration_s=10.0)) == (None, pytest.approx(0.25), 40)


def test_speedup_comes_from_interleaved_rounds_despite_a_drifting_machine():
    machine: dict = {"load": 1.0, "order": []}
    base, fast = FakeSeries("base", 1, 4.0, machine), FakeSeries("fast", 1, 2.0, machine)
    assert time_interleaved([base, fast], BenchConfig(duration_s=0, runs=30))
    # every round times both, in an order that alternates: base first in even rounds, fast first in odd ones
    assert machine["order"][:4] == [(0, "base"), (0, "fast"), (1, "fast"), (1, "base")]
    assert len(machine["order"]) == 20 and len(base.samples) == len(fast.samples) == 30
    sb, sf = base.summary(), fast.summary()
    assert len(sb.round_p50s) == len(sf.round_p50s) == 10
    # independently, round by round: base's block ran at load L_b, fast's at L_f = L_b × 1.5^(±1)
    ratios = [b / f for b, f in zip(sb.round_p50s, sf.round_p50s)]
    assert sorted({round(r, 6) for r in ratios}) == [round(2 / 1.5, 6), round(2 * 1.5, 6)]
    row = compare_benchmarks([sb, sf]).rows[1]
    # the median of the rounds' ratios (an even count: the geometric mean of the middle two)
    assert row.paired and row.speedup == pytest.approx(float(np.exp(np.median(np.log(ratios)))))
    assert row.speedup == pytest.approx(2.0)  # the alternating order cancels the drift's bias
    assert row.speed is not None and row.speed.rounds == 10 and row.speed.reference_runs == 30
    assert row.low is not None and row.high is not None and row.low <= 2.0 <= row.high
    # timed apart (all of base's blocks, then all of fast's) on the same drifting machine: far from 2
    machine = {"load": 1.0, "order": []}
    base, fast = FakeSeries("base", 1, 4.0, machine), FakeSeries("fast", 1, 2.0, machine)
    for s in (base, fast):
        for _ in range(10):
            s.block(3, math.inf, -1)
    apart = compare_benchmarks([base.summary(), fast.summary()]).rows[1]
    assert not apart.paired and apart.speedup == pytest.approx(2.0 / 1.5 ** 10)


def test_service_times_interleaved_and_records_round_speedups(ws, tmp_path):
    machine = {"load": 1.0, "order": []}
    made = []

    def blocks(path, cfg, bs, variant, cancel, profile_dir, **kw):
        made.append((variant, bs))
        return FakeSeries(variant, bs, {"a": 3.0, "b": 1.0}[variant], machine)

    variants = [BenchVariant("a", "A", str(tmp_path / "a.onnx")), BenchVariant("b", "B", str(tmp_path / "b.onnx"))]
    h = bench_service.start_benchmark(variants, BenchConfig(duration_s=0, runs=20, batch_sizes=(1, 4)), workspace=ws,
                                blocks=blocks)
    summaries = h.follow()
    assert made == [("a", 1), ("b", 1), ("a", 4), ("b", 4)]  # one batch size at a time, every variant at once
    assert [(s.variant, s.batch_size) for s in summaries] == [("a", 1), ("a", 4), ("b", 1), ("b", 4)]
    assert all(len(s.round_p50s) == 10 and s.n == 20 for s in summaries)
    c = compare_benchmarks(summaries)
    assert [r.paired for r in c.rows] == [False, False, True, True]  # the baseline against itself is 1.0
    assert [r.speedup for r in c.rows][2:] == [pytest.approx(3.0)] * 2
    stored = ws.history().list_benchmarks()[0]
    assert stored.summaries[2].round_p50s == summaries[2].round_p50s


def test_cli_bench_shows_spread_warning_and_no_clear_difference(tmp_path, capsys, monkeypatch):
    a, b = conv_bn_model(tmp_path / "a.onnx"), conv_bn_model(tmp_path / "b.onnx")
    machine = {"load": 1.0, "order": []}

    def noisy(path, cfg, bs, variant, cancel, profile_dir=None, memory_gb=None, **kw):
        # a steady machine, the same model twice, but every run swings by ±50 %
        return FakeSeries(variant, bs, 5.0, machine, noise=0.5, seed=len(variant), drift=1.0)

    monkeypatch.setattr(child_runs, "latency_blocks", noisy)
    code = cli.main(["bench", str(a), str(b), "--duration", "0", "--runs", "40"])
    out = capsys.readouterr().out
    assert code == 0
    assert "p50 95% interval" in out and "IQR ms (p25–p75)" in out and "speed-up vs a.onnx" in out
    row_b = next(line for line in out.splitlines() if line.startswith("b.onnx"))
    assert NO_CLEAR_DIFFERENCE in row_b
    warnings = [line for line in out.splitlines() if line.startswith("warning")]
    assert len(warnings) == 2 and all("of its p50 (over 20%)" in w for w in warnings)


def test_real_interleaved_children_time_two_models(tmp_path):
    """Two real child processes, loaded at once and timed in turn (a short run: 6 runs each)."""
    m = conv_bn_model(tmp_path / "m.onnx")
    make = functools.partial(child_runs.latency_blocks, memory_gb=None)
    series = [make(m, BenchConfig(duration_s=0, runs=6, warmup=1), 1, variant=v) for v in ("x", "y")]
    try:
        assert time_interleaved(series, BenchConfig(duration_s=0, runs=6, warmup=1))
        for s in series:
            s.finish()
    finally:
        for s in series:
            s.close()
    sx, sy = (s.summary(s.peak_rss_mb) for s in series)
    assert sx.n == sy.n == 6 and len(sx.round_p50s) == 6 and sx.peak_rss_mb and sx.peak_rss_mb > 20
    assert [smp.round for smp in series[0].samples] == list(range(6)) and sx.providers


def test_a_pair_timer_keeps_the_reference_child_loaded_between_candidates(tmp_path):
    """Tune's clock: two candidates timed in turn against one reference, whose child (one per batch size) is started
    once; each speed-up comes from that call's rounds alone, and closing the timer ends the reference's child."""
    a, b = conv_bn_model(tmp_path / "a.onnx"), conv_bn_model(tmp_path / "b.onnx")
    cfg = BenchConfig(duration_s=0, runs=10, warmup=1)
    with child_runs.PairTimer(a, memory_gb=None) as timer:
        first = timer(b, cfg, 1)
        (reference,) = timer._references.values()
        pid = reference.child_pid
        second = timer(a, cfg, 1)
        assert timer._references[1] is reference and reference.child_pid == pid
        assert len(reference.samples) == 20
    assert first.rounds == second.rounds == 10 and first.reference_runs == second.reference_runs == 10
    assert reference.returncode == 0 and timer._references == {}
