"""Benchmark's "Latency per batch size" chart as plotly.js draws it in chromium at a laptop's width (the main column
of a 1280×720 window): no two of its texts (subplot titles, bar labels, notes) overprint, every whisker stays inside
its panel, and no bar label is shrunk to a speck however short its bar is beside a long whisker."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import plotly.io as pio
import pytest

from ortlab.ui.views import charts

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.browser

MAIN_COLUMN_PX = 760  # Streamlit's main column at 1280 px with the sidebar open

# the numbers of the run the issue saw: long p99 whiskers (a busy machine) beside short p50 bars, OpenVINO twins
# and, at batch 1, a machine so busy that p90 and p99 lie 50-100x above the p50s
ROWS = [("original", 1, 0.586, 31.8, 74.8), ("int8", 1, 0.422, 19.5, 78.6),
        ("original · OpenVINO", 1, 18.8, 63.3, 114.0), ("int8 · OpenVINO", 1, 1.35, 4.02, 12.4),
        ("original", 8, 25.2, 26.3, 117.0), ("int8", 8, 11.0, 14.0, 59.6),
        ("original · OpenVINO", 8, 63.8, 70.1, 80.2), ("int8 · OpenVINO", 8, 9.5, 10.0, 30.0)]

GEOMETRY_JS = """() => {
    const el = document.getElementById('chart');
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
    const sel = '.annotation, .bartext, .textpoint, .gtitle, .xaxislayer-above text, .g-xtitle, .g-x2title';
    const texts = [...el.querySelectorAll(sel)].filter(shown)
        .map(e => ({text: e.textContent, box: box(e), font: parseFloat(getComputedStyle(e).fontSize || '0'),
                    height: e.getBoundingClientRect().height}));
    const plots = [...el.querySelectorAll('.draglayer .nsewdrag')].map(box);
    const whiskers = [...el.querySelectorAll('.errorbar path')].filter(shown).map(box);
    return {texts, plots, whiskers};
}"""


def _overlap(a, b) -> bool:
    return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


def _inside_one(box, plots) -> bool:
    return any(box[0] >= p[0] - 1 and box[1] >= p[1] - 1 and box[2] <= p[2] + 1 and box[3] <= p[3] + 1 for p in plots)


def test_latency_panels_texts_never_overprint_and_whiskers_stay_on_the_axis(tmp_path):
    from playwright.sync_api import sync_playwright

    names = {v: v for v, *_ in ROWS}
    colors = charts.variant_colors(list(names))
    summaries = [SimpleNamespace(variant=v, batch_size=b, p50=p50, p90=p90, p99=p99) for v, b, p50, p90, p99 in ROWS]
    fig = charts.latency_panels(summaries, names, colors)
    fig.update_layout(width=MAIN_COLUMN_PX)
    page_file = tmp_path / "latency.html"
    page_file.write_text("<html><body>" + pio.to_html(fig, include_plotlyjs=True, full_html=False, div_id="chart")
                         + "</body></html>", "utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(page_file.as_uri())
        page.wait_for_function("document.querySelectorAll('#chart .main-svg').length > 0")
        page.wait_for_timeout(300)
        got = page.evaluate(GEOMETRY_JS)
        if os.environ.get("ORTLAB_SHOTS"):
            page.screenshot(path=str(Path(os.environ["ORTLAB_SHOTS"]) / "latency_panels_1280.png"))
        browser.close()
    texts, plots, whiskers = got["texts"], got["plots"], got["whiskers"]
    assert len(plots) == 2 and len(whiskers) == len(ROWS), got
    clashes = [(a["text"], b["text"]) for i, a in enumerate(texts) for b in texts[i + 1:] if _overlap(a["box"], b["box"])]
    assert clashes == [], clashes
    assert all(_inside_one(w, plots) for w in whiskers), (whiskers, plots)
    labels = [t for t in texts if t["text"] in {f"{float(f'{r[2]:.3g}'):g} ms" for r in ROWS}]  # "0.586 ms"
    assert len(labels) == len(ROWS), texts
    small = [(t["text"], round(t["height"], 1)) for t in labels if t["height"] < 12]  # 14 px text is ~16 px tall
    assert small == [], small
    # and no label lies under a whisker (a line through it)
    crossed = [t["text"] for t in labels if any(_overlap(t["box"], w) for w in whiskers)]
    assert crossed == [], crossed
