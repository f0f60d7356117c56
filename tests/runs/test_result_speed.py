"""The speed record a run keeps after its verdict: what it says for faster, slower, unclear and failed timings, and
that a failed timing never takes the verdict with it."""

from __future__ import annotations

import pytest

from ortlab.core.errors import BenchmarkError
from ortlab.runs import result_speed
from ortlab.runs.result_speed import ResultSpeed, SpeedCheck, default_check, time_result
from ortlab.timing.stats import paired


def _record(ref_ms: float, cand_ms: list[float]) -> ResultSpeed:
    return ResultSpeed(1, 3.2, "x86 (AMD EPYC) · AVX2", paired(1, [ref_ms] * len(cand_ms), cand_ms))


def test_faster_slower_and_unclear_are_said_plainly():
    fast = _record(2.0, [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.01, 0.99, 1.0])
    assert fast.faster and not fast.slower
    assert fast.sentence().startswith("Speed: 2.00× faster than the source (95% 1.9")
    assert "12 rounds at batch 1, 3.2 s, x86 (AMD EPYC) · AVX2)" in fast.sentence()

    slow = _record(1.0, [1.22, 1.2, 1.25, 1.21, 1.23, 1.19, 1.22, 1.24, 1.2, 1.21])
    assert slow.slower and not slow.faster
    assert slow.sentence().startswith("Speed: slower than the source: 0.82× (95% 0.8")

    even = _record(1.0, [0.9, 1.1, 0.95, 1.05, 1.0, 0.92, 1.08, 0.97, 1.03, 1.0])
    assert not even.slower and not even.faster
    assert even.sentence().startswith("Speed: no clear speed difference: 1.00×")

    tiny = _record(0.01, [1.0] * 10)
    assert "0.01× (95% 0.01–0.01×" in tiny.sentence()


def test_a_failed_timing_is_kept_as_its_reason():
    def broken_timer(*args, **kwargs):
        raise BenchmarkError("candidate: the timing process stopped unexpectedly: exit status -9")

    rs = time_result("a.onnx", "b.onnx", SpeedCheck(seconds=1), timer=broken_timer)
    assert rs.speed is None and not rs.slower and "exit status -9" in rs.error
    assert rs.sentence() == ("Speed: not timed (candidate: the timing process stopped unexpectedly: exit status -9); "
                             "the verdict stands.")


def test_the_timer_gets_half_the_seconds_for_each_model_at_the_batch():
    seen: dict[str, object] = {}

    def timer(ref, cand, cfg, batch, *, cancel=None, shapes=None):
        seen.update(ref=ref, cand=cand, duration=cfg.duration_s, batch=batch, shapes=shapes)
        return paired(batch, [1.0] * 10, [0.5] * 10)

    rs = time_result("src.onnx", "out.onnx", SpeedCheck(seconds=3, batch_size=1), shapes={"x": [1, 8]}, timer=timer)
    assert seen == {"ref": "src.onnx", "cand": "out.onnx", "duration": 1.5, "batch": 1, "shapes": {"x": [1, 8]}}
    assert rs.faster and rs.error == ""


@pytest.mark.parametrize(("raw", "want"), [("", SpeedCheck()), ("0", SpeedCheck(enabled=False)),
                                           ("5", SpeedCheck(seconds=5.0))])
def test_the_default_check_follows_its_variable(monkeypatch, raw, want):
    monkeypatch.setenv(result_speed.SECONDS_VAR, raw)
    assert default_check() == want
