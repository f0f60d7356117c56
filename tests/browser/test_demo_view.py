"""Issue 20 at 1280×720 in a real browser: after the demo, Compare shows a speed figure; a node click in the graph
diff lights exactly its match, both in view; after "Run recipe" its progress panel is in the viewport; a cancelled
tune search ends without an error element and with its controls enabled again. Screenshots go to
$ORTLAB_SHOTS (default: the test's screenshot folder)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.browser.test_browser import STEP_TIMEOUT_MS, button, go_to, graphdiff_frame, wait_quiet

LAPTOP = {"width": 1280, "height": 720}


@pytest.fixture(scope="module")
def demo(app, browser_page, screenshots):
    page, _ = browser_page
    page.set_viewport_size(LAPTOP)
    page.goto(app["url"])
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
    wait_quiet(page)
    button(page, ["demo_run"], re.compile("demo", re.I)).click()
    page.wait_for_url(re.compile(r"/compare/?$"), timeout=120_000)
    wait_quiet(page)
    shots = Path(os.environ.get("ORTLAB_SHOTS") or screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    return page, shots


def _in_viewport(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 60) <= LAPTOP["height"]


def test_a_compare_shows_a_speed_figure_after_the_demo(demo):
    page, shots = demo
    speed = page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)")
    speed.first.wait_for(timeout=60_000)
    assert re.search(r"\d+\.\d\d×", speed.first.inner_text())
    page.screenshot(path=str(shots / "compare_1280x720.png"))


def test_b_a_node_click_lights_exactly_its_match_and_both_are_in_view(demo):
    page, shots = demo
    page.locator('iframe[src*="graphdiff"]').first.scroll_into_view_if_needed()
    frame = graphdiff_frame(page)
    page.wait_for_timeout(600)
    picked = frame.evaluate("""() => {
        const p = window.ortlabPanes.after, o = window.ortlabPanes.before;
        const n = p.cy.nodes('.op').filter(x => o.data[x.id()] && !o.data[x.id()].group)[0];
        n.emit('tap');
        return n.id();
    }""")
    page.wait_for_timeout(700)
    got = frame.evaluate("""(id) => {
        const o = window.ortlabPanes.before, p = window.ortlabPanes.after;
        const lit = o.cy.nodes('.match').map(n => n.id());
        const inside = (cy, n) => { const b = n.renderedBoundingBox();
            return b.x2 > 0 && b.y2 > 0 && b.x1 < cy.width() && b.y1 < cy.height(); };
        return {lit, status: document.getElementById('match').textContent,
                inBefore: lit.length ? inside(o.cy, o.cy.getElementById(lit[0])) : false,
                inAfter: inside(p.cy, p.cy.getElementById(id))};
    }""", picked)
    assert got["lit"] == [picked], got  # the matched node itself, not the group holding it
    assert got["inBefore"] and got["inAfter"], got
    assert got["status"].startswith("Matched in the before graph"), got
    page.screenshot(path=str(shots / "compare_graph_click_1280x720.png"))


def test_c_the_progress_panel_is_in_view_right_after_run_recipe(demo):
    page, shots = demo
    go_to(page, "Recipe", "recipe")
    run = button(page, ["recipe.run"], re.compile("Run recipe"))
    run.scroll_into_view_if_needed()
    run.click()
    panel = page.get_by_text(re.compile(r"^Running .* on ")).first
    panel.wait_for(timeout=30_000)
    assert _in_viewport(page, panel)
    page.screenshot(path=str(shots / "recipe_running_1280x720.png"))
    page.get_by_text(re.compile(r"Finished|ran in")).first.wait_for(timeout=120_000)
    wait_quiet(page)
    page.screenshot(path=str(shots / "recipe_done_1280x720.png"))


def test_d_a_cancelled_tune_ends_without_an_error_and_with_controls_enabled(demo):
    page, shots = demo
    go_to(page, "Tune", "tune")
    start = page.get_by_role("button", name=re.compile("Start tuning"))
    start.click()
    cancel = button(page, ["tune.cancel"], re.compile("Cancel"))
    cancel.wait_for(timeout=30_000)
    assert start.is_disabled()
    page.wait_for_timeout(1500)
    cancel.click()
    page.get_by_text(re.compile(r"Stopped after \d+ trials?")).first.wait_for(timeout=120_000)
    wait_quiet(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    assert not page.get_by_role("button", name=re.compile("Start tuning")).is_disabled()
    page.screenshot(path=str(shots / "tune_cancelled_1280x720.png"))
    for name, path in (("Benchmark", "benchmark"), ("History", "history")):
        go_to(page, name, path)
        page.screenshot(path=str(shots / f"{path}_1280x720.png"))
