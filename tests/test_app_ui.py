"""Helpers of the Streamlit UI that need no browser: jobs and the benchmark queue, generated forms, colours,
error messages, and benchmark tables."""

from __future__ import annotations

import threading
import time

import pytest

from ortlab.bench import LatencySummary
from ortlab.bench_compare import compare_benchmarks, running_stats
from ortlab.config import QuantConfig, Recipe
from ortlab.errors import Cancelled, QuantizationError
from ortlab.progress import ProgressEvent
from ortlab.ui import bench_view, charts, forms, jobs
from ortlab.ui.guard import error_message


def wait_until(condition, timeout: float = 10.0, what: str = "the condition") -> None:
    """Poll ``condition()`` until it is true; fail after ``timeout`` seconds (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def test_job_runs_in_a_thread_and_reports_progress_and_items(monkeypatch):
    monkeypatch.delenv("ORTLAB_SYNC_JOBS", raising=False)
    gate, emitted = threading.Event(), threading.Event()
    caller = threading.get_ident()

    def work(job):
        job.report(ProgressEvent("calibrate", 1, 4, "one"))
        job.emit("sample-1")
        emitted.set()
        gate.wait(5)
        job.report(ProgressEvent("calibrate", 4, 4, "all"))
        return threading.get_ident()

    job = jobs.Job("t", work).start(sync=False)
    assert emitted.wait(5)
    assert not job.done
    assert job.drain() == ["sample-1"]
    assert job.progress["calibrate"].done == 1
    gate.set()
    assert job.wait(5) and job.state == jobs.DONE
    job.drain()
    assert job.progress["calibrate"].fraction == 1.0 and job.stages == ["calibrate"]
    assert job.result != caller


def test_sync_mode_runs_in_the_calling_thread(monkeypatch):
    monkeypatch.setenv("ORTLAB_SYNC_JOBS", "1")
    job = jobs.Job("t", lambda j: threading.get_ident()).start()
    assert job.done and job.result == threading.get_ident()


def test_job_errors_and_cancel_are_kept_not_raised():
    def boom(job):
        raise QuantizationError("ORT failed.", step="quantize")

    def cancelled(job):
        job.cancel.cancel()
        job.cancel.raise_if_cancelled("calibrate")

    j1 = jobs.Job("a", boom).start(sync=True)
    j2 = jobs.Job("b", cancelled).start(sync=True)
    assert j1.state == jobs.FAILED and isinstance(j1.error, QuantizationError)
    assert j2.state == jobs.CANCELLED and isinstance(j2.error, Cancelled)


def test_one_exclusive_job_at_a_time_others_queue_in_order():
    order, first_running, release = [], threading.Event(), threading.Event()

    def slow(job):
        order.append(("start", job.name))
        first_running.set()
        release.wait(5)
        order.append(("end", job.name))

    def quick(job):
        order.append(("start", job.name))

    a = jobs.Job("a", slow, exclusive=True).start(sync=False)
    assert first_running.wait(5)
    b = jobs.Job("b", quick, exclusive=True).start(sync=False)
    wait_until(lambda: jobs.busy() == 2, what="b to queue")  # b queues before c is started
    c = jobs.Job("c", quick, exclusive=True).start(sync=False)
    wait_until(lambda: jobs.busy() == 3, what="c to queue")
    assert jobs.queue_position(b.id) == 1 and jobs.queue_position(c.id) == 2
    wait_until(lambda: b.drain() == [] and "queued" in b.progress, what="b's queued message")
    assert b.state == jobs.QUEUED and b.progress["queued"].message == "Queued behind 1 benchmark."
    release.set()
    for j in (a, b, c):
        assert j.wait(10) and j.state == jobs.DONE
    assert order == [("start", "a"), ("end", "a"), ("start", "b"), ("start", "c")]
    assert jobs.busy() == 0


def test_a_queued_job_can_be_cancelled():
    release, running = threading.Event(), threading.Event()
    a = jobs.Job("a", lambda j: (running.set(), release.wait(5)), exclusive=True).start(sync=False)
    assert running.wait(5)
    b = jobs.Job("b", lambda j: "never", exclusive=True).start(sync=False)
    wait_until(lambda: b.state == jobs.QUEUED, what="b to queue")
    b.cancel.cancel()
    assert b.wait(5) and b.state == jobs.CANCELLED
    release.set()
    assert a.wait(5) and a.state == jobs.DONE and jobs.busy() == 0


@pytest.mark.parametrize("field,values,visible", [
    ("quant_format", {"mode": "static"}, True),
    ("quant_format", {"mode": "dynamic"}, False),
    ("percentile", {"mode": "static", "calibration_method": "Percentile"}, True),
    ("percentile", {"mode": "static", "calibration_method": "MinMax"}, False),
    ("averaging_constant", {"mode": "static", "calibration_method": "MinMax", "moving_average": True}, True),
    ("averaging_constant", {"mode": "static", "calibration_method": "MinMax", "moving_average": False}, False),
    ("weight_type", {"mode": "dynamic"}, True),
])
def test_when_rules_decide_which_quantization_fields_show(field, values, visible):
    import dataclasses

    f = {x.name: x for x in dataclasses.fields(QuantConfig)}[field]
    from ortlab.config import CalibrationMethod, QuantMode

    typed = {k: (QuantMode(v) if k == "mode" else CalibrationMethod(v) if k == "calibration_method" else v)
             for k, v in values.items()}
    assert forms.visible(f.metadata, typed) is visible


def test_extra_rule_hides_quantization_for_fp32():
    assert forms.visible({}, {"precision": Recipe().precision}, {"precision": ["int8"]}) is False


def test_variant_colours_are_stable_and_distinct():
    c = charts.variant_colors(["original", "run1", "run2"])
    assert c["original"] == charts.PALETTE[0] and len(set(c.values())) == 3
    assert charts.variant_colors(["original", "run1", "run2", "run3"])["run2"] == c["run2"]


def test_charts_use_the_shared_style_and_domains():
    fig = charts.op_histogram({("", "Conv"): 3, ("com.microsoft", "FusedConv"): 2})
    assert fig.layout.template.layout.font is not None and fig.layout.font.size == charts.FONT_SIZE
    names = {t.name for t in fig.data}
    assert names == {"ai.onnx", "com.microsoft"}
    ms = next(t for t in fig.data if t.name == "com.microsoft")
    assert list(ms.y) == ["FusedConv (com.microsoft)"] and ms.marker.color == charts.DOMAIN_COLORS["com.microsoft"]


def test_error_messages_for_people():
    level, text = error_message("Quantizing", QuantizationError("ORT failed.", step="quantize"))
    assert (level, text) == ("error", "Quantizing failed: quantize: ORT failed.")
    level, text = error_message("Quantizing", ValueError("bad shape"))
    assert level == "error" and text.startswith("Unexpected error in Quantizing: ValueError: bad shape.")
    assert "still usable" in text and "Traceback" not in text
    assert error_message("Benchmarking", Cancelled())[0] == "warning"


def test_benchmark_tables_format_the_engine_comparison():
    s = lambda v, b, p50, mem=None: LatencySummary(v, b, 10, p50, p50, p50, p50, 0.0, p50, p50, b * 1000 / p50, mem,
                                                   ["CPUExecutionProvider"])
    comparison = compare_benchmarks([s("original", 1, 2.0, 80.0), s("run1", 1, 0.5), s("original", 8, 8.0),
                                     s("run1", 8, 4.0)])
    rows = bench_view.result_rows(comparison, {"original": "original", "run1": "#1 int8"})
    assert [r["speedup (p50)"] for r in rows] == ["1.00×", "4.00×", "1.00×", "2.00×"]
    assert rows[0]["peak memory MB"] == 80.0 and rows[1]["peak memory MB"] is None
    assert rows[1]["variant"] == "#1 int8" and rows[0]["providers"] == "CPU"
    stats = bench_view.live_rows(running_stats({"run1@1": [1.0, 2.0, 3.0]}), {"run1": "#1"})
    assert stats == [{"variant": "#1", "batch": 1, "runs": 3, "p50 ms": 2.0, "p90 ms": 2.8, "p99 ms": 2.98}]
    slow = compare_benchmarks([s("original", 1, 0.2), s("run1", 1, 0.3)], precisions={"run1": "int8"})
    [line] = bench_view.slowdown_lines(slow, {"original": "original", "run1": "#1 int8"})
    assert line.startswith("**#1 int8** is slower than **original** at batch 1: p50 0.300 ms vs 0.200 ms "
                           "(0.67×, +0.100 ms per run).") and "tiny" in line


@pytest.mark.parametrize("n", [0, 1, 1500, 1501, 4097, 250_000])
def test_downsampling_keeps_at_most_the_cap_and_the_last_point(n):
    idx = charts.downsample_indices(n, cap=1500)
    assert len(idx) <= 1500 and len(idx) == min(n, len(idx))
    if n:
        assert idx[0] == 0 and idx[-1] == n - 1 and all(idx[1:] > idx[:-1])
    if n <= 1500:
        assert list(idx) == list(range(n))


def test_rolling_median_uses_every_raw_value_of_its_window():
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 2.0]
    assert list(charts.rolling_median(values, 3)) == [5.0, 3.0, 3.0, 2.0, 3.0, 4.0, 4.0]
    assert list(charts.rolling_median(values, 3, at=[1, 6])) == [3.0, 4.0]


def test_live_latency_chart_is_log_scale_with_a_median_per_series_and_capped_markers():
    import numpy as np

    rng = np.random.default_rng(0)
    big = list(0.2 + rng.random(10_000) * 0.01)
    big[5000] = 300.0  # one spike: the median line ignores it, the log axis keeps the rest readable
    series = {"original@1": big, "run1@1": [0.5] * 40, "original@8": [1.0] * 3}
    colors = charts.variant_colors(["original", "run1"])
    fig = charts.latency_lines(series, {"original@1": "orig · batch 1"}, colors)
    assert fig.layout.yaxis.type == "log"
    markers = [t for t in fig.data if t.mode == "markers"]
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(markers) == len(lines) == 3
    by_group = {t.legendgroup: t for t in lines}
    assert set(by_group) == set(series)
    assert by_group["original@1"].name == "orig · batch 1" and by_group["original@1"].line.width >= 3
    assert by_group["original@1"].line.color == by_group["original@8"].line.color == colors["original"]
    assert by_group["run1@1"].line.color == colors["run1"]
    assert by_group["original@1"].line.dash != by_group["original@8"].line.dash  # batch sizes differ by dash
    big_markers = next(t for t in markers if t.legendgroup == "original@1")
    assert len(big_markers.x) <= charts.LIVE_POINT_CAP and big_markers.x[-1] == 10_000
    assert big_markers.marker.opacity < 0.5 and big_markers.meta["runs"] == 10_000
    assert max(by_group["original@1"].y) < 0.3  # the spike is among the raw runs, not in the median
