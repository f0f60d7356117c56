"""Issue 20 at 1280×720 in a real browser: after the demo, Compare shows a speed figure; the graph diff's two
panes open the same groups and keep matched groups side by side; a node click in the graph diff lights exactly
its match, both in view; after "Run recipe" its progress panel is in the viewport; a cancelled
tune search ends without an error element and with its controls enabled again. Screenshots go to
$ORTLAB_SHOTS (default: the test's screenshot folder)."""

from __future__ import annotations

import re

from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import LAPTOP
from tests.browser.test_browser import button, go_to, graphdiff_frame, wait_quiet



def _in_viewport(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 60) <= LAPTOP["height"]


def test_a_compare_shows_a_speed_figure_after_the_demo(demo):
    page, shots = demo
    speed = page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)")
    speed.first.wait_for(timeout=60_000)
    assert re.search(r"\d+\.\d\d×", speed.first.inner_text())
    page.screenshot(path=str(shots / "compare_1280x720.png"))


# Every matched group (its twin, or the same name scope) whose top is on screen in the before pane: its top on
# the page in each pane; and each pane's vertical pan.
MATCHED_GROUPS_JS = """() => {
    const L = window.ortlabPanes.before, R = window.ortlabPanes.after;
    const top = (p, n) => p.cy.container().getBoundingClientRect().top + n.renderedBoundingBox().y1;
    const pairs = [];
    L.cy.nodes('.group').forEach(n => {
        const m = R.cy.getElementById(n.data('twin') || n.id());
        const y = n.renderedBoundingBox().y1;
        if (m.nonempty() && m.data('group') && y >= 0 && y < L.cy.height() - 20) {
            pairs.push([n.id(), top(L, n), top(R, m)]);
        }
    });
    return {pairs, pan: [L.cy.pan().y, R.cy.pan().y]};
}"""


def _drag_up(page, frame, side: str, dy: int) -> None:
    """A real mouse drag upwards by ``dy`` pixels in the ``side`` pane (a drag pans, also over a box)."""
    box = frame.locator(f"#cy-{side}").bounding_box()
    assert box is not None
    bottom = min(box["y"] + box["height"], LAPTOP["height"]) - 30
    assert bottom - dy > max(box["y"], 0) + 10, (box, dy)  # the whole drag on the visible part of the pane
    x = box["x"] + box["width"] * 0.3
    page.mouse.move(x, bottom)
    page.mouse.down()
    page.mouse.move(x, bottom - dy / 2, steps=4)
    page.mouse.move(x, bottom - dy, steps=4)
    page.mouse.up()
    page.wait_for_timeout(300)


def _assert_lined_up(state: dict, where: str) -> None:
    assert state["pairs"], (where, state)  # some matched group is on screen
    for gid, left, right in state["pairs"]:
        assert abs(left - right) < 3, (where, gid, left, right, state)


def test_a2_both_panes_share_groups_and_line_up_matched_groups(demo):
    """Issue 20: the same groups open on both sides (closing or opening one on the left does it on the right
    too), and a matched group starts at the same screen height in both panes at first and after a pan."""
    page, shots = demo
    page.locator('iframe[src*="graphdiff"]').first.scroll_into_view_if_needed()
    frame = graphdiff_frame(page)
    page.wait_for_timeout(600)
    first = frame.evaluate(MATCHED_GROUPS_JS)
    _assert_lined_up(first, "first view")
    assert frame.locator("#link").is_checked()  # "link panes", on by default
    # the whole count of changes is shown (on two lines at 1280 px), not cut after the first
    assert frame.evaluate("() => { const h = document.getElementById('header');"
                          " return h.scrollWidth <= h.clientWidth + 1 && h.scrollHeight <= h.clientHeight + 1; }")
    page.screenshot(path=str(shots / "compare_graph_linked_1280x720.png"))
    # a pan of the left pane with the mouse: the right pane follows, matched groups stay side by side
    _drag_up(page, frame, "before", 250)
    moved = frame.evaluate(MATCHED_GROUPS_JS)
    assert moved["pan"][0] < first["pan"][0] - 200, (first, moved)
    _assert_lined_up(moved, "after a pan of the left pane")
    page.screenshot(path=str(shots / "compare_graph_linked_panned_1280x720.png"))
    # a group open on both sides: closed on the left, it closes on the right; a click on its box on the left
    # opens it on both sides again
    group, twin = frame.evaluate("""() => {
        const L = window.ortlabPanes.before, R = window.ortlabPanes.after;
        const n = L.cy.nodes('.group.open').filter(g => R.cy.getElementById(g.data('twin') || g.id()).nonempty()
            && g.renderedBoundingBox().y1 > 0 && g.renderedBoundingBox().y1 < L.cy.height() - 80)[0];
        return [n.id(), n.data('twin') || n.id()];
    }""")
    state_js = """([g, t]) => ({left: !!window.ortlabPanes.before.opened[g], right: !!window.ortlabPanes.after.opened[t],
        drawnRight: window.ortlabPanes.after.cy.getElementById(t).hasClass('open')})"""
    frame.evaluate("(g) => window.ortlabPanes.before.toggle(g, false)", group)
    assert frame.evaluate(state_js, [group, twin]) == {"left": False, "right": False, "drawnRight": False}
    pos = frame.evaluate("""(g) => {
        const cy = window.ortlabPanes.before.cy, n = cy.getElementById(g);
        const r = cy.container().getBoundingClientRect(), p = n.renderedPosition();
        return {x: r.left + p.x, y: r.top + p.y, inside: p.y > 10 && p.y < cy.height() - 10};
    }""", group)
    assert pos["inside"], pos  # closed in place: still on screen where it was
    box = page.locator('iframe[src*="graphdiff"]').first.bounding_box()
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_timeout(500)
    assert frame.evaluate(state_js, [group, twin]) == {"left": True, "right": True, "drawnRight": True}
    _assert_lined_up(frame.evaluate(MATCHED_GROUPS_JS), "after opening a group")
    # unlinked, a pane pans alone
    frame.locator("#link").uncheck()
    alone = frame.evaluate(MATCHED_GROUPS_JS)
    _drag_up(page, frame, "before", 120)
    after = frame.evaluate(MATCHED_GROUPS_JS)
    assert after["pan"][0] < alone["pan"][0] - 80 and after["pan"][1] == alone["pan"][1], (alone, after)
    frame.locator("#link").check()  # linked again: the right pane comes back in line with the left
    _assert_lined_up(frame.evaluate(MATCHED_GROUPS_JS), "linked again")


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
        const folded = lit.filter(x => x !== id && !(x.startsWith('b') && o.data[x].kind === 'fused'));
        return {lit, folded, status: document.getElementById('match').textContent,
                inBefore: lit.length ? inside(o.cy, o.cy.getElementById(lit[0])) : false,
                inAfter: inside(p.cy, p.cy.getElementById(id))};
    }""", picked)
    # the matched node itself, not the group holding it, and the nodes folded into it (a QLinearConv in place of
    # its Conv, with the BatchNormalization and Relu it absorbed)
    assert picked in got["lit"] and not got["folded"], got
    assert got["inBefore"] and got["inAfter"], got
    assert got["status"].startswith("Matched in the before graph"), got
    page.screenshot(path=str(shots / "compare_graph_click_1280x720.png"))


FOUND_JS = """() => {
    const out = {};
    for (const side of ['before', 'after']) {
        const cy = window.ortlabPanes[side].cy, n = cy.nodes('.found')[0];
        const b = n && n.renderedBoundingBox();
        out[side] = n ? {id: n.id(), x: (b.x1 + b.x2) / 2, width: cy.width(),
                         inside: b.x2 > 0 && b.y2 > 0 && b.x1 < cy.width() && b.y1 < cy.height()} : null;
    }
    return out;
}"""


def test_b2_a_search_keeps_the_linked_panes_in_line(demo):
    """Linked panes: a search (the page's search box) shows the hits of both panes, matched groups side by side
    and each pane's hit in the middle across."""
    page, shots = demo
    page.locator('iframe[src*="graphdiff"]').first.scroll_into_view_if_needed()
    frame = graphdiff_frame(page)
    assert frame.locator("#link").is_checked()
    search = page.locator(".st-key-compare-focus input")
    search.fill("gemm")
    search.press("Enter")
    page.wait_for_timeout(800)
    wait_quiet(page)
    for _ in range(3):  # the rerun may draw the view in a new frame: find it again
        frame = graphdiff_frame(page)
        try:
            frame.wait_for_function("() => window.ortlabPanes.after.cy.nodes('.found').length > 0")
            break
        except PlaywrightError:
            page.wait_for_timeout(1000)
    page.wait_for_timeout(800)
    got = frame.evaluate(FOUND_JS)
    assert got["before"] and got["after"], got
    for side in ("before", "after"):
        assert got[side]["inside"] and abs(got[side]["x"] - got[side]["width"] / 2) < 3, (side, got)
    _assert_lined_up(frame.evaluate(MATCHED_GROUPS_JS), "after a search")
    page.screenshot(path=str(shots / "compare_graph_search_1280x720.png"))
    search.fill("")
    search.press("Enter")
    wait_quiet(page)


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
