"""Names that came from a user or a model file are drawn by Plotly as their characters: the chart builders' labels,
legends, ticks and hover texts, rendered by plotly.js in chromium (the same library Streamlit draws with), show
``<b>…</b>``, ``<a href>``, ``%{y}`` and ``&amp;`` literally, with no bold, no link and no substituted value."""

from __future__ import annotations

import json
from types import SimpleNamespace

import plotly.io as pio
import pytest

from ortlab.ui.views import charts

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

HOSTILE = ['<b>bold</b> %{y} &amp; 100%', '<a href="http://example.com/x">link</a>{}']


def _figures():
    names = {"v0": HOSTILE[0], "v1": HOSTILE[1]}
    colors = charts.variant_colors(list(names))
    summaries = [SimpleNamespace(variant=v, batch_size=1, p50=1.0 + i, p90=1.2 + i, p99=1.4 + i,
                                 throughput_per_s=1 / (1.0 + i)) for i, v in enumerate(names)]
    return {
        "latency_panels": charts.latency_panels(summaries, names, colors),
        "throughput_panels": charts.throughput_panels(summaries, names, colors),
        "latency_lines": charts.latency_lines({f"{v}@1": [1.0, 1.1] for v in names},
                                              {f"{v}@1": n for v, n in names.items()}, colors),
        "size_bars": charts.size_bars([{"id": v, "name": n, "mb": 1.0} for v, n in names.items()], colors),
        "op_counts_grouped": charts.op_counts_grouped(
            [{"op_type": HOSTILE[0], "domain": "", "before": 2, "after": 1, "delta": -1}], (HOSTILE[0], HOSTILE[1]),
            (colors["v0"], colors["v1"])),
        "op_histogram": charts.op_histogram({HOSTILE[1]: 3}),
        "per_class_bars": charts.per_class_bars([{"class": HOSTILE[0], "ref_acc": 1.0, "cand_acc": 0.5}],
                                                (HOSTILE[0], HOSTILE[1]), (colors["v0"], colors["v1"])),
    }


@pytest.mark.browser
def test_names_from_users_and_models_are_drawn_as_text(tmp_path):
    from playwright.sync_api import sync_playwright

    figs = _figures()
    html = "".join(pio.to_html(f, include_plotlyjs=(i == 0), full_html=False, div_id=name)
                   for i, (name, f) in enumerate(figs.items()))
    page_file = tmp_path / "charts.html"
    page_file.write_text(f"<html><body>{html}</body></html>", "utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figs)}")
        seen = {}
        for name in figs:
            seen[name] = page.evaluate("""(id) => {
                const el = document.getElementById(id);
                const texts = [...el.querySelectorAll('.legendtext, .xtick text, .ytick text')].map(t => t.textContent);
                const bold = el.querySelectorAll('text tspan[style*="bold"], text b').length;
                const links = el.querySelectorAll('.main-svg a').length;  // (the toolbar's own logo link is not in the SVG)
                return {texts, bold, links};
            }""", name)
            # a hover label: the first trace's first point, as the user's pointer would show it
            hover = page.evaluate("""(id) => {
                const el = document.getElementById(id);
                const i = el.data.findIndex(t => t.hoverinfo !== 'skip' && (t.type === 'bar' || t.mode !== 'text'));
                Plotly.Fx.hover(el, [{curveNumber: i, pointNumber: 0}]);
                const t = [...document.querySelectorAll('.hoverlayer text')].map(x => x.textContent).join(' | ');
                Plotly.Fx.unhover(el);
                return {t, bold: document.querySelectorAll('.hoverlayer tspan[style*="bold"]').length};
            }""", name)
            seen[name]["hover"] = hover
        browser.close()
    assert not [u for u in requests if u.startswith("http")], requests
    for name, got in seen.items():
        drawn = " ".join(got["texts"]) + " " + got["hover"]["t"]
        assert got["bold"] == 0 and got["links"] == 0 and got["hover"]["bold"] == 0, (name, got)
        assert any(h in drawn for h in HOSTILE), (name, json.dumps(got)[:500])
        assert "<b>" not in drawn or "<b>bold</b> %{y} &amp; 100%" in drawn, (name, drawn)
