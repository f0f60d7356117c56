"""A pair timed until its speed-up is settled: interleaved rounds go on until the 95 % interval is within ±10 % or a
cap, and the result says "faster"/"slower", "no clear difference" or "noisy: the machine was busy". The same engine
call serves Compare's speed cards and ``ortlab compare``."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ortlab.cli import main as cli
from ortlab.runs import bench_service
from ortlab.runs.history import BenchVariant
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import BenchConfig
from ortlab.timing import settle
from ortlab.timing.bench import LatencySample
from ortlab.timing.child_runs import time_interleaved
from ortlab.timing.settle import CAP, TIGHT, SettledSpeed, UntilSettled, settled
from ortlab.timing.stats import paired
from tests.timing.test_one_clock import LONG, SHORT, chain_model


class ClockedSeries:
    """A fake series on a fake clock: each block of ``runs`` runs of ``ms`` milliseconds (× 1 ± ``noise``, drawn
    per run, × a busy machine's factor e^(``busy`` × N(0, 1)), drawn per block) advances the shared clock by the
    block's time."""

    def __init__(self, variant: str, ms: float, clock: dict, noise: float = 0.0, seed: int = 0,
                 busy: float = 0.0) -> None:
        self.variant, self.ms, self.clock, self.noise, self.busy = variant, ms, clock, noise, busy
        self.rng = np.random.default_rng(seed)
        self.samples: list[LatencySample] = []
        self.batch_size, self.peak_rss_mb, self.cancelled = 1, None, False

    def start(self) -> None:
        pass

    def ready(self, cancel=None) -> bool:
        return True

    def block(self, runs, seconds, rnd, cancel=None):
        n = runs or 5
        load = float(np.exp(self.busy * self.rng.standard_normal()))
        ms = np.abs(self.ms * load * (1 + self.noise * self.rng.standard_normal(n)))
        new = [LatencySample(self.variant, 1, len(self.samples) + k, float(m), 0.0, rnd) for k, m in enumerate(ms)]
        self.samples += new
        self.clock["t"] += float(ms.sum()) / 1000
        return new, float(ms.sum()) / 1000

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self, peak_rss_mb=None):
        from ortlab.timing.bench import summarize
        return summarize(self.samples, peak_rss_mb=peak_rss_mb)


def _time(ref_ms: float, cand_ms: float, noise: float, cap_s: float = 20.0, busy: float = 0.0):
    clock = {"t": 0.0}
    rule = UntilSettled(cap_s=cap_s, clock=lambda: clock["t"])
    ref, cand = (ClockedSeries(v, ms, clock, noise, seed, busy) for v, ms, seed in (("ref", ref_ms, 1),
                                                                                     ("cand", cand_ms, 2)))
    assert time_interleaved([ref, cand], BenchConfig(duration_s=1.0), until=rule)
    sp = paired(1, ref.summary().round_p50s, cand.summary().round_p50s)
    return settled(sp, rule), rule, clock["t"]


def test_a_quiet_pair_of_known_cost_ratio_stops_as_soon_as_the_interval_is_tight():
    s, rule, took = _time(40.0, 10.0, noise=0.02)  # the candidate does a quarter of the work
    assert rule.stop == TIGHT and s.stop == TIGHT and s.speed.rounds == 10  # the first check already settles it
    assert took < 3.0 and s.seconds == pytest.approx(took)  # 10 rounds of 5 runs each, far from the 20 s cap
    assert s.speed.speedup == pytest.approx(4.0, rel=0.05) and settle.half_width(s.speed) <= 0.10
    assert s.verdict == "faster" and s.caveat() == ""
    assert s.text().startswith("4.0") and "faster (95% " in s.text() and "settled within ±10%" in s.text()


def test_a_noisy_machine_runs_to_the_cap_and_says_so():
    s, rule, took = _time(10.0, 8.0, noise=0.1, cap_s=20.0, busy=0.8)  # every block's load swings 0.45-2.2×
    assert rule.stop == CAP and s.stop == CAP and 20.0 <= took < 21.0
    assert settle.half_width(s.speed) > 0.10 and s.speed.rounds > 10
    assert s.verdict == "noisy" and s.caveat().startswith("noisy: the machine was busy")
    assert s.text().startswith("noisy: the machine was busy") and "20 s cap reached" in s.text()


def test_the_same_cost_twice_is_no_clear_difference():
    s, rule, _ = _time(10.0, 10.0, noise=0.05)
    assert rule.stop == TIGHT
    lo, hi = s.speed.speedup_range
    assert lo < 1.0 < hi and s.verdict == "no clear difference"
    assert s.caveat() == "no clear difference" and s.text().startswith("no clear difference: 1.0")


def test_a_stored_timing_is_judged_by_its_interval():
    tight = paired(1, [10.0] * 12, [5.0] * 12)
    assert settled(tight).stop == TIGHT and settled(tight).verdict == "faster"
    wide = paired(1, [10, 30, 10, 30, 10, 30, 10, 30, 10, 30], [10, 10, 30, 30, 10, 10, 30, 30, 10, 10])
    assert settled(wide).stop == settle.PLANNED and settled(wide).verdict == "noisy"
    assert SettledSpeed(wide, CAP, 20.0).text().startswith("noisy: the machine was busy; no clear difference")


@pytest.mark.slow
def test_compare_times_a_real_pair_of_known_cost_ratio_until_settled(tmp_path, monkeypatch):
    """Two real models, one doing 4× the other's work, in child processes through the engine call Compare's speed
    cards make: it stops before the cap with an interval within ±10 % that lies above 1 (the ratio is 4; a busy
    2-core machine may move it, so within a factor of 2), or at the cap saying the machine was too busy. One ORT
    thread, as in test_one_clock (two threads on a busy 2-core machine read 30× for this pair)."""
    monkeypatch.setattr(bench_service, "PAIR_TIMING", replace(bench_service.PAIR_TIMING, intra_op_threads=1))
    ref, cand = chain_model(tmp_path / "long.onnx", LONG), chain_model(tmp_path / "short.onnx", SHORT)
    ws = Workspace(tmp_path / "ws")
    h = bench_service.start_pair_timing(BenchVariant("long", "long", str(ref)),
                                        BenchVariant("short", "short", str(cand)), workspace=ws, origin="test")
    h.follow()
    s = h.settled()
    assert s is not None, h.error
    print(s.text())
    assert s.stop in (TIGHT, CAP) and s.speed.rounds >= 10
    if s.stop == TIGHT:  # a quiet enough machine
        assert s.seconds < settle.CAP_S and settle.half_width(s.speed) <= 0.10 and s.verdict == "faster"
        assert 2.0 < s.speed.speedup < 8.0
    else:  # a machine too busy to settle it in 20 s (load 15 on 2 cores here): said so, not a bare figure
        assert s.seconds >= settle.CAP_S and s.verdict == "noisy" and s.text().startswith("noisy: the machine")
    stored = ws.history().list_benchmarks()[0]
    assert stored.id == h.bench_id and len(stored.summaries) == 2


def test_cli_compare_times_the_pair_with_the_same_call(tmp_path, monkeypatch, capsys):
    """``ortlab compare --speed-cap`` goes through ``start_pair_timing`` (here with fake series on a fake clock)
    and prints the settled speed-up; ``--speed-cap 0`` does not time."""
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    clock = {"t": 0.0}
    calls = []
    real = bench_service.start_pair_timing

    def fake(ref, cand, **kw):
        calls.append((ref.name, cand.name, kw["cap_s"]))

        def blocks(path, cfg, bs, variant, cancel, profile_dir=None, **_):
            return ClockedSeries(variant, 12.0 if variant == "reference" else 6.0, clock, 0.02, len(variant))

        return real(ref, cand, **{**kw, "blocks": blocks, "clock": lambda: clock["t"]})

    from ortlab import api
    monkeypatch.setattr(api.benchmarks, "start_pair_timing", fake)
    args = ["compare", "digits_cnn", "digits_cnn", "--n", "4"]
    assert cli.main([*args, "--speed-cap", "5"]) in (0, 3)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("speed at batch 1"))
    assert "2.0" in line and "× faster (95% " in line and "settled within ±10%" in line
    assert calls == [("model.onnx", "model.onnx", 5.0)]
    cli.main([*args, "--speed-cap", "5", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert got["speed"]["verdict"] == "faster" and got["speed"]["stop"] == TIGHT
    cli.main([*args, "--speed-cap", "0"])
    assert "speed at batch 1" not in capsys.readouterr().out and len(calls) == 2
