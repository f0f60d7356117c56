"""The chart builders: one colour per variant across a page's charts (OpenVINO twins share it, drawn with a
pattern), p50 bars readable under a long p99, legends in a margin of their own."""

from __future__ import annotations

from types import SimpleNamespace

from ortlab.ui.views import charts


def _s(variant: str, p50: float, p90: float, p99: float, batch: int = 1):
    return SimpleNamespace(variant=variant, batch_size=batch, p50=p50, p90=p90, p99=p99, throughput_per_s=batch / p50)


def test_every_variant_has_its_own_colour_and_its_openvino_twin_shares_it():
    ids = ["original", "run1", "original · OpenVINO", "run1 · OpenVINO"]
    colors = charts.variant_colors(ids)
    assert colors["original"] == colors["original · OpenVINO"] != colors["run1"] == colors["run1 · OpenVINO"]
    # the page's colours are kept for the charts drawn from a stored benchmark listing variants in another order
    page = charts.variant_colors(["original", "run1", "run2"])
    later = charts.variant_colors(["run2", "original", "run2 · OpenVINO", "run9"], known=page)
    assert later["run2"] == later["run2 · OpenVINO"] == page["run2"] and later["original"] == page["original"]
    assert later["run9"] not in page.values()
    fig = charts.latency_panels([_s(i, 1.0 + k, 1.2 + k, 1.5 + k) for k, i in enumerate(ids)], {}, colors)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len({b.marker.color for b in bars}) == 2
    assert [b.marker.pattern.shape for b in bars] == ["", "", "/", "/"]



def test_runs_under_openvino_are_diamonds_in_the_variants_colour_and_every_hover_names_its_series():
    names = {"original@1": "orig · batch 1", "original · OpenVINO@1": "orig · OpenVINO · batch 1"}
    colors = charts.variant_colors(["original", "original · OpenVINO"])
    fig = charts.latency_lines({sid: [1.0, 1.1, 0.9] for sid in names}, names, colors)
    runs = {t.legendgroup: t for t in fig.data if t.mode == "markers"}
    ort, ov = runs["original@1"], runs["original · OpenVINO@1"]
    assert ort.marker.color == ov.marker.color and ort.marker.symbol != ov.marker.symbol
    assert all(t.hovertemplate.endswith("</extra>") and "<extra></extra>" not in t.hovertemplate for t in fig.data)

def test_the_bf16_openvino_row_shares_its_variants_colour_and_is_drawn_unlike_both_other_runtimes():
    """On a CPU with bf16 the benchmark adds "original · OpenVINO bf16": it took a colour of its own and was drawn
    as an ONNX Runtime series (dots, plain bars), like a variant nobody chose."""
    ids = ["original", "original · OpenVINO", "original · OpenVINO bf16"]
    colors = charts.variant_colors(ids)
    assert len({colors[i] for i in ids}) == 1 and charts.base_variant(ids[2]) == "original"
    bars = [t for t in charts.latency_panels([_s(i, 1.0, 1.2, 1.5) for i in ids], {}, colors).data if t.type == "bar"]
    assert [b.marker.pattern.shape for b in bars] == ["", "/", "x"]
    names = {f"{i}@1": f"{i} · batch 1" for i in ids}
    fig = charts.latency_lines({sid: [1.0, 1.1, 0.9] for sid in names}, names, colors)
    runs = [t for t in fig.data if t.mode == "markers"]
    assert [t.marker.symbol for t in runs] == ["circle", "diamond", "square"]


def test_a_long_p99_stays_on_the_axis_and_every_p50_is_written_under_its_bar():
    fig = charts.latency_panels([_s("a", 1.0, 1.2, 40.0), _s("b", 2.0, 2.2, 2.5)], {}, {"a": "#000", "b": "#111"})
    top = fig.layout.yaxis.range[1]
    assert 40.0 < top < 48.0  # the whisker up to the 40 ms p99 is drawn whole, inside the panel
    assert not [t for t in fig.data if t.type == "scatter" and t.mode == "text"]  # no notes to overprint
    assert list(fig.layout.xaxis.ticktext) == ["1 ms", "2 ms"] and fig.layout.xaxis.title.text == "p50 (ms)"
    # never in e-notation ("1.31e+03" was seen under a bar)
    big = charts.latency_panels([_s("a", 1310.4, 1400.0, 1500.0), _s("b", 357.2, 360.0, 370.0)], {}, {})
    assert list(big.layout.xaxis.ticktext) == ["1,310 ms", "357 ms"]
    assert fig.layout.legend.yref == "container" and fig.layout.margin.b >= 36
    assert fig.layout.title.x < 0.1 and fig.layout.margin.t >= 80
    # OpenVINO's noisy p90/p99 beside p50s near 0.25 ms (seen on the Benchmark page): on the axis, p50s in words
    noisy = [_s("ort", 0.23, 0.41, 67.0, batch=1), _s("ov", 0.27, 3.53, 72.0, batch=1), _s("ort", 2.0, 2.1, 3.0, 8)]
    fig = charts.latency_panels(noisy, {}, {"ort": "#000", "ov": "#111"})
    assert fig.layout.yaxis.range[1] >= 72.0 and 3.0 <= fig.layout.yaxis2.range[1] < 4.0  # each panel its own
    assert list(fig.layout.xaxis.ticktext) == ["0.23 ms", "0.27 ms"] and list(fig.layout.xaxis2.ticktext) == ["2 ms"]
    assert [t.y[0] for t in fig.data if t.type == "scatter" and t.mode == "markers"] == [0.41, 3.53, 2.1]


def test_size_charts_speak_the_unit_of_the_size_cards():
    """Issue 28: Compare's size cards say "322.02 kB"; its charts beside them say kB too (not 0.322 MB)."""
    from ortlab.core.text import format_bytes

    colors = {"a": "#000", "b": "#111"}
    fig = charts.size_bars([{"id": "a", "name": "a", "bytes": 322_020}, {"id": "b", "name": "b", "bytes": 98_000}],
                           colors)
    assert fig.layout.title.text == "File size (kB)" and list(fig.data[0].y) == [322.02, 98.0]
    assert list(fig.data[0].text) == [format_bytes(322_020), format_bytes(98_000)] == ["322.02 kB", "98.00 kB"]
    big = charts.size_bars([{"id": "a", "name": "a", "bytes": 24_500_000}], colors)
    assert big.layout.title.text == "File size (MB)" and list(big.data[0].y) == [24.5]
    w = charts.initializer_bytes_bars({"a": {"float32": 300_000}, "b": {"int8": 75_000, "float32": 1_200}},
                                      {"a": "a", "b": "b"}, colors)
    assert w.layout.title.text == "Weights by dtype (kB)" and list(w.data[0].y) == [300.0, 0.0]
