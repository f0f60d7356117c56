"""Helpers of the Streamlit UI that need no browser: generated forms, colours,
error messages, and benchmark tables."""

from __future__ import annotations


import pytest

from ortlab.timing.bench import LatencySummary
from ortlab.timing.compare import compare_benchmarks, running_stats
from ortlab.settings.config import QuantConfig, Recipe
from ortlab.core.errors import Cancelled, QuantizationError
from ortlab.ui.views import bench_view, charts, forms
from ortlab.ui.session.guard import error_message


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
    from ortlab.settings.config import CalibrationMethod, QuantMode

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
    assert [r["speedup (p50)"] for r in rows] == ["baseline", "4.00×", "baseline", "2.00×"]
    assert rows[1]["IQR ms"] == rows[1]["p50 95% interval"] == "–"  # a summary from before spreads were kept
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
