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
    # three significant digits: "321–473", not "321.476–472.82" cut in its cell; 3.21 samples/s, not "3"
    assert bench_view.interval_text(321.476, 472.82) == "321–473" and bench_view.interval_text(1.23456, 2.0) == \
        "1.23–2"
    assert bench_view.sig(321.476) == 321.0 and bench_view.sig(3.2109) == 3.21 and bench_view.sig(0.0123456) == 0.0123
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


def _timed(variant, batch, p50, *, n=40, spread=0.05, providers=("CPUExecutionProvider",), low=None, high=None):
    from dataclasses import replace

    s = LatencySummary(variant, batch, n, p50, p50 * 1.1, p50 * 1.2, p50, 0.0, p50 * 0.95, p50 * 1.05,
                       batch * 1000 / p50, None, list(providers))
    return replace(s, p25=p50 * (1 - spread / 2), p75=p50 * (1 + spread / 2))


def test_the_results_area_says_noise_once_names_the_winner_and_fits_the_main_column():
    """Issue 28: one compact noise note instead of one paragraph per row; the clearly fastest row gets a sentence;
    the table's shown columns fit the main column at 1280 px (about 820 px)."""
    from ortlab.timing.compare import ComparisonRow, BenchComparison

    noisy = [_timed("original", 1, 0.59, spread=0.8), _timed("run1", 1, 0.42, spread=0.6, n=7),
             _timed("original", 8, 38.0, spread=1.0), _timed("run1", 8, 36.0, spread=0.4)]
    comparison = BenchComparison("original", [ComparisonRow(noisy[0], 1.0),
                                              ComparisonRow(noisy[1], 1.4, 1.3, 1.5, paired=True),
                                              ComparisonRow(noisy[2], 1.0),
                                              ComparisonRow(noisy[3], 1.05, 0.9, 1.2, paired=True)])
    names = {"original": "original", "run1": "#1 int8"}
    note = bench_view.noise_note(comparison, names)
    assert note is not None and note.startswith("Noisy timing: 4 of 4 rows spread over 20% of their p50 "
                                                "(widest: original at batch 8, 100%); 1 of 4 rows had fewer "
                                                "than 10 runs."), note
    assert bench_view.noise_note(BenchComparison("original", [ComparisonRow(_timed("original", 1, 1.0), 1.0)]),
                                 names) is None
    # the clear winner at batch 1 gets its sentence; at batch 8 the interval holds 1: no winner
    assert bench_view.winner_lines(comparison, names) == [
        "**#1 int8** is the fastest at batch 1: 1.40× as fast as **original** (95 % interval 1.30–1.50×): p50 0.420 ms vs "
        "0.590 ms."]
    rows = bench_view.result_rows(comparison, names)
    assert [r["speedup (p50)"] for r in rows] == ["baseline", "1.40× (1.30–1.50)", "baseline", "≈ 1.05× (0.90–1.20)"]
    for memory in (False, True):
        cols = bench_view.result_columns(memory=memory)
        shown = {k: c for k, c in cols.items() if c is not None and not c.get("hidden")}
        assert sum(c["width"] for c in shown.values()) <= 820, shown
        assert {"variant", "p50 ms", "p50 95% interval", "speedup (p50)"} <= set(shown)
        assert ("peak memory MB" in shown) == memory
        assert cols["variant"]["width"] >= 290  # "#1 int8 static QDQ · cpu · extended · OpenVINO" whole


def test_the_live_chart_draws_one_batch_size_and_keeps_the_others_in_the_legend():
    colors = charts.variant_colors(["original", "run1"])
    series = {f"{v}@{b}": [1.0, 1.1] for v in ("original", "run1", "original · OpenVINO", "run1 · OpenVINO")
              for b in (1, 8)}
    fig = charts.latency_lines(series, {}, colors, batches_shown=[1])
    drawn = {t.legendgroup for t in fig.data if t.visible in (None, True)}
    legend_only = {t.legendgroup for t in fig.data if t.visible == "legendonly"}
    assert drawn == {sid for sid in series if sid.endswith("@1")} and legend_only == set(series) - drawn
    assert all(t.visible in (None, True) for t in charts.latency_lines(series, {}, colors).data)


def test_a_stage_bar_does_not_say_its_title_twice():
    from ortlab.runs.pipeline import stage_labels
    from ortlab.ui.jobs.progress_view import stage_text

    labels = stage_labels()
    assert stage_text(labels["bias_correction"], " 10/10", "bias correction 10/10") == "Bias correction 10/10"
    assert stage_text(labels["validate"], "", "Checking the recipe, the model and the data") == labels["validate"]
    assert stage_text("Calibrate", " 3/8", "batch 3 of 8 (24 images)") == "Calibrate 3/8 — batch 3 of 8 (24 images)"
    assert stage_text("Quantize", "", None) == "Quantize"


def test_no_change_in_accuracy_is_a_grey_card_delta_without_an_arrow():
    from streamlit.testing.v1 import AppTest

    from ortlab.ui.views.cards import signed_delta

    assert [signed_delta(v, "pts") for v in (0.0, -0.04, 0.04, 1.26, -2.0)] == \
        ["±0.0 pts", "±0.0 pts", "±0.0 pts", "+1.3 pts", "-2.0 pts"]

    def page():
        from ortlab.ui.views.cards import metric_row, signed_delta

        metric_row([("Top-1 same", "97.5%", signed_delta(0.0, "pts"), None),
                    ("Top-1 better", "98.5%", signed_delta(1.0, "pts"), None)])

    at = AppTest.from_function(page).run()
    from streamlit.proto.Metric_pb2 import Metric

    same, better = at.metric
    assert (same.proto.color, same.proto.direction) == (Metric.MetricColor.GRAY, Metric.MetricDirection.NONE)
    assert (better.proto.color, better.proto.direction) == (Metric.MetricColor.GREEN, Metric.MetricDirection.UP)


@pytest.mark.parametrize("key", ["history.delete_yes", "history.stored.yes.model-abc123"])
def test_the_delete_confirmations_are_styled_red(key):
    """Streamlit marks a widget's container with the class ``st-key-<key>`` (characters outside [A-Za-z0-9_-] as
    "-"); the shared CSS colours the "Yes, delete" buttons' containers red."""
    import re

    from ortlab.ui.session.sidebar import CSS

    cls = "st-key-" + re.sub(r"[^A-Za-z0-9_-]", "-", key)
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)
    red = [rule for rule in re.findall(r"([^{}]+)\{([^}]*)\}", css) if "#b3261e" in rule[1]]
    assert red, CSS
    selectors = [s.strip() for sel, _ in red for s in sel.split(",")]
    matched = [s for s in selectors if s.startswith(f".{cls} ")
               or any(cls.startswith(p) for p in re.findall(r'\[class\*="([^"]+)"\]', s))]
    assert matched, (cls, selectors)
