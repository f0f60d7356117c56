"""Issue 20 in a real browser, after the demo: a benchmark with OpenVINO rows at 1280×720 (one colour per variant on
every chart, the runtime told apart by dash, marker or pattern; titles, legends, toolbar and plots apart; full names
on hover), and Compare on a phone (390×844): the graph-diff panes stacked above the details panel, nothing wider
than the screen. Screenshots go to $ORTLAB_SHOTS (default: the test's screenshot folder)."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from tests.browser.conftest import LAPTOP
from tests.browser.test_browser import STEP_TIMEOUT_MS, TALLEST_JS, button, go_to, graphdiff_frame, wait_quiet

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}

# every chart's traces as drawn: name, the colour it is drawn in and what else tells it apart
TRACES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => el.data.map(t => {
    const m = t.marker || {}, l = t.line || {};
    const lines = t.type === 'scatter' && (t.mode || '').includes('lines');
    return {name: t.name || null, type: t.type, mode: t.mode || null, color: lines ? l.color : m.color,
            dash: l.dash || null, symbol: m.symbol || null, pattern: (m.pattern || {}).shape || null};
}))"""

# the boxes (left, top, right, bottom) of each shown chart's parts, in page pixels
LAYOUT_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(el => el.getClientRects().length
        && el.getBoundingClientRect().width > 0).map(el => {
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const one = s => { const e = el.querySelector(s); return e && e.getBoundingClientRect().width ? box(e) : null; };
    return {title: one('.gtitle'), legend: one('.legend'), modebar: one('.modebar'), figure: box(el),
            text: (el.layout.title || {}).text || '',
            plots: [...el.querySelectorAll('.draglayer .nsewdrag')].map(box),
            subtitles: [...el.querySelectorAll('.annotation')].filter(a => a.getBoundingClientRect().width).map(box)};
})"""

# hover the first point of trace i of chart k (through plotly's own hover) and read the label it shows
HOVER_JS = """([k, i]) => {
    const el = document.querySelectorAll('.js-plotly-plot')[k], t = el._fullData[i];
    window.Plotly.Fx.hover(el, [{curveNumber: i, pointNumber: 0}], t.xaxis + t.yaxis);
    const text = [...el.querySelectorAll('.hoverlayer .hovertext')].map(h => h.textContent).join(' | ');
    window.Plotly.Fx.unhover(el);
    return text;
}"""

OVERFLOW_JS = """() => ({width: innerWidth, page: document.scrollingElement.scrollWidth,
    main: Math.max(0, ...[...document.querySelectorAll('[data-testid="stMain"], [data-testid="stAppViewContainer"]')]
                          .map(e => e.scrollWidth - e.clientWidth))})"""

BOXES_JS = """(ids) => Object.fromEntries(ids.map(id => { const e = document.getElementById(id), r = e.getBoundingClientRect();
    return [id, {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height,
                 cut: e.scrollWidth > e.clientWidth + 1}]; }))"""


def full_shot(page, path: Path) -> None:
    """The whole page at the current width: Streamlit scrolls inside its main container, so the viewport is grown
    to the content's height for the picture and restored afterwards."""
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": min(int(page.evaluate(TALLEST_JS)) + 40, 12_000)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)
    page.wait_for_timeout(500)


def _overlap(a, b) -> bool:
    """Whether two boxes (left, top, right, bottom) share more than a pixel's edge."""
    return bool(a and b) and a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


def _inside(a, b) -> bool:
    return a[0] >= b[0] - 1 and a[1] >= b[1] - 1 and a[2] <= b[2] + 1 and a[3] <= b[3] + 1


def layout_clashes(page) -> list[str]:
    """What covers what on each shown chart (its title, legend, toolbar, subplot titles, plot areas), and a title
    or legend cut by the chart's edge."""
    out = []
    for c in page.evaluate(LAYOUT_JS):
        name = re.sub(r"<[^>]+>", "", c["text"]) or "a chart without a title"
        tops = [("title", c["title"]), ("legend", c["legend"]), ("toolbar", c["modebar"])]
        rest = [("plot", p) for p in c["plots"]] + [("subplot title", s) for s in c["subtitles"]]
        for i, (what, box) in enumerate(tops):
            if box is not None and what != "toolbar" and not _inside(box, c["figure"]):
                out.append(f"{name}: the {what} {box} is cut by the chart's edge {c['figure']}")
            for other, obox in tops[i + 1:] + rest:
                if _overlap(box, obox):
                    out.append(f"{name}: the {what} {box} covers the {other} {obox}")
    return out


# " · OpenVINO bf16": the baseline compiled in bf16, where the CPU ortlab sees has bf16 (AVX-512 BF16 or AMX)
VARIANT_TRACE = re.compile(r"^(?P<variant>.+?)(?P<ov> · OpenVINO(?: bf16)?)?(?P<batch> · batch \d+)?(?P<runs> · runs)?$")


def openvino_bf16_here() -> bool:
    """The benchmark adds the baseline compiled in bf16 where the CPU ortlab sees ($ORTLAB_CPU may set it) has bf16."""
    from ortlab.runtime import hardware, openvino

    return openvino.bf16_supported(hardware.detect())


def test_a_a_benchmark_with_openvino_keeps_one_colour_per_variant(demo):
    if importlib.util.find_spec("openvino") is None:  # requirements-dev.txt has it: under CI that is a failure
        (pytest.fail if os.environ.get("CI") else pytest.skip)("the openvino package is not installed")
    page, shots = demo
    go_to(page, "Benchmark", "benchmark")
    chips = page.locator(".st-key-bench-variants [data-tag]")
    chips.first.wait_for()
    variants = list(dict.fromkeys(t.get_attribute("aria-label") for t in chips.all()))
    assert len(variants) >= 2 and all(variants), variants
    duration = page.locator(".st-key-bench-duration_s input").first
    duration.fill("1")
    duration.press("Enter")
    wait_quiet(page)
    page.locator(".st-key-bench-openvino label").first.click()
    wait_quiet(page)
    assert page.locator(".st-key-bench-openvino input").first.is_checked()
    button(page, ["bench.run"], re.compile(r"Run benchmark")).click()
    page.get_by_text("Results", exact=True).first.wait_for(timeout=180_000)
    wait_quiet(page)
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=STEP_TIMEOUT_MS)
    page.wait_for_timeout(800)
    full_shot(page, shots / "benchmark_openvino_1280x720.png")
    assert not page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count()

    charts = page.evaluate(TRACES_JS)
    assert len(charts) >= 3, charts  # the runs as they came, latency per batch size, throughput per batch size
    colour: dict[str, set[str]] = {v: set() for v in variants}
    hover: list[tuple[int, int, str]] = []  # chart, trace, the name its hover label must show whole
    for k, traces in enumerate(charts):
        style: dict[tuple, tuple] = {}  # (variant, batch, runs?, openvino?) → how the trace is drawn
        for i, t in enumerate(traces):
            if not t["name"]:
                continue  # a p90 diamond or a p99 note: neutral, not a variant's
            m = VARIANT_TRACE.match(t["name"])
            assert m and m["variant"] in variants, f"chart {k}: a trace of no chosen variant: {t['name']!r}"
            colour[m["variant"]].add(t["color"])
            hover.append((k, i, m["variant"] + (m["ov"] or "")))
            key = (m["variant"], m["batch"], bool(m["runs"]), m["ov"] or "")
            style[key] = (t["type"], t["mode"], t["dash"], t["symbol"], t["pattern"])
        for v in variants:  # each variant ran under both runtimes, told apart by how they are drawn
            ort = {k2: s for k2, s in style.items() if k2[0] == v and not k2[3]}
            assert ort, f"chart {k}: no ONNX Runtime trace of {v!r}"
            for k2, s in ort.items():
                twin = style.get((*k2[:3], " · OpenVINO"))
                assert twin is not None, f"chart {k}: no OpenVINO trace beside {k2}"
                assert twin != s, f"chart {k}: {v!r} under OpenVINO is drawn exactly like under ORT: {s}"
                bf16 = style.get((*k2[:3], " · OpenVINO bf16"))  # the baseline, where the CPU ortlab sees has bf16
                assert bf16 is None or bf16 not in (s, twin), f"chart {k}: {v!r}'s bf16 row is drawn like another"
        bf16_rows = {k2[0] for k2 in style if k2[3] == " · OpenVINO bf16"}
        assert len(bf16_rows) == int(openvino_bf16_here()), (k, bf16_rows)
    assert all(len(c) == 1 for c in colour.values()), f"a variant in several colours: {colour}"
    firsts = [next(iter(c)) for c in colour.values()]
    assert len(set(firsts)) == len(firsts), f"variants share a colour: {colour}"

    # hovering a bar, a line or a run's dot names the whole variant (and its runtime), never a cut name
    for k, i, full in hover:
        text = page.evaluate(HOVER_JS, [k, i])
        assert full in text, f"chart {k}: hovering {charts[k][i]['name']!r} shows {text!r}"
    assert layout_clashes(page) == []


def test_b_compare_on_a_phone_stacks_the_graph_diff_and_fits_the_screen(demo):
    page, shots = demo
    go_to(page, "Compare", "compare")
    page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.wait_for(timeout=60_000)
    page.set_viewport_size(PHONE)
    try:
        page.wait_for_timeout(1500)
        wait_quiet(page)
        page.get_by_role("tab", name="Graph diff").click()
        wait_quiet(page)
        full_shot(page, shots / "compare_390x844.png")
        iframe = page.locator('iframe[src*="graphdiff"]').first
        iframe.scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        page.screenshot(path=str(shots / "compare_graph_diff_390x844.png"))

        wide = page.evaluate(OVERFLOW_JS)
        assert wide["page"] <= wide["width"] + 1 and wide["main"] <= 1, wide
        outer = iframe.bounding_box()
        assert outer and outer["x"] >= 0 and outer["x"] + outer["width"] <= PHONE["width"] + 1, outer

        frame = graphdiff_frame(page)
        b = frame.evaluate(BOXES_JS, ["cy-before", "cy-after", "panel", "header"])
        before, after, panel = b["cy-before"], b["cy-after"], b["panel"]
        # stacked: before above after, the same column, each wide enough to read; the details under both
        assert before["bottom"] <= after["top"] + 1 and abs(before["left"] - after["left"]) < 2, b
        for side in (before, after):
            assert side["width"] >= 300 and side["height"] >= 150, b
        assert panel["top"] >= after["bottom"] - 1 and panel["width"] >= 300 and panel["height"] >= 60, b
        assert not b["header"]["cut"], b["header"]  # the count of changes wraps, it is not cut short
        search = page.locator(".st-key-compare-focus input").bounding_box()  # the diff's one search box
        assert search and search["width"] >= 200 and search["x"] + search["width"] <= PHONE["width"], search
        inner = frame.evaluate("() => [document.scrollingElement.scrollWidth, innerWidth]")
        assert inner[0] <= inner[1] + 1, inner

        assert layout_clashes(page) == []  # e.g. the op-count chart's wrapped legend over its title
    finally:
        page.set_viewport_size(LAPTOP)
