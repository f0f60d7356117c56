"""Issue 38 (1) in a real browser at 1280×720: the YOLOv8-shaped fixture, offered and given the YOLO preset, through
int8 static QDQ; on Compare the graph diff draws no node "removed" that the after graph has under the same name (ORT
keeps a Conv's name on its QLinearConv: before, it was the whole head drawn red beside blue QLinearConvs), the
head's class Convs are matched to their QLinearConv twins, and the page shows one speed figure. Screenshots go to
the test's screenshot folder (or $ORTLAB_SHOTS)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.browser.test_browser import (REPO, STEP_TIMEOUT_MS, DEMO_TIMEOUT_MS, button, go_to, graphdiff_frame,
                                        laptop, laptop_shot, upload_model, upload_photos, wait_quiet)  # noqa: F401

pytestmark = pytest.mark.browser

YOLOV8 = REPO / "tests" / "fixtures" / "yolov8_detector.onnx"

# every drawn node of each pane (groups left out) with its kind and the name and op its details give
DRAWN_JS = """() => {
    const details = window.ortlabDetails(), out = {};
    for (const side of ['before', 'after']) {
        const p = window.ortlabPanes[side];
        out[side] = p.order.filter(id => !p.data[id].group).map(id => {
            const d = details[id] || {};
            return {id, kind: p.data[id].kind, name: side === 'before' && d.matched ? d.matched : d.name,
                    op: side === 'before' && d.before_op_type ? d.before_op_type : d.op_type};
        });
    }
    return out;
}"""


def test_the_yolov8_head_is_matched_by_name_on_compare(app, laptop, screenshots):  # noqa: F811
    page = laptop
    shots = Path(os.environ.get("ORTLAB_SHOTS") or screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    upload_model(page, app["url"], YOLOV8)
    go_to(page, "Data", "data")
    upload_photos(page, 8)
    page.locator(".st-key-data-use_suggested_preset button").click()
    wait_quiet(page)
    page.get_by_text("This data fits the model").first.wait_for(timeout=STEP_TIMEOUT_MS)
    laptop_shot(page, shots, "38_yolov8_data")
    go_to(page, "Recipe", "recipe")
    page.locator(".st-key-recipe_preset").click()
    page.get_by_role("option", name=re.compile("int8 static QDQ")).click()
    wait_quiet(page)
    button(page, ["recipe_load_preset"], re.compile("Load preset")).click()
    wait_quiet(page)
    page.wait_for_function("""() => [...document.querySelectorAll('input[type=radio]')].some(
        r => r.checked && r.closest('label') && r.closest('label').innerText.trim() === 'int8')""",
                           timeout=STEP_TIMEOUT_MS)
    button(page, ["recipe.run"], re.compile("Run recipe")).click()
    page.get_by_text(re.compile(r"int8 static QDQ · cpu · \w+ ran in|Finished int8 static QDQ|recipe failed")
                     ).first.wait_for(timeout=DEMO_TIMEOUT_MS)
    wait_quiet(page)
    assert not page.get_by_text("recipe failed").count(), page.locator('[data-testid="stAlert"]').all_inner_texts()
    go_to(page, "Compare", "compare")
    page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.wait_for(timeout=120_000)
    wait_quiet(page)
    frame = graphdiff_frame(page)
    page.wait_for_timeout(600)
    drawn = frame.evaluate(DRAWN_JS)
    after_names = {n["name"] for n in drawn["after"] if n["name"]}
    removed = [n for n in drawn["before"] if n["kind"] == "removed"]
    assert not [n["name"] for n in removed if n["name"] in after_names], removed
    head = {n["name"]: n for n in drawn["before"] if re.fullmatch(r"/model\.22/cv3\.\d/Conv", n["name"] or "")}
    assert len(head) == 3 and all(n["op"] == "Conv" and n["kind"] in ("quantized", "fused") for n in head.values()), head
    twins = {n["name"]: n for n in drawn["after"] if n["name"] in head}
    assert {n["op"] for n in twins.values()} <= {"QLinearConv", "FusedConv"} and len(twins) == 3, twins
    # one speed figure: the card's, and no other speed-up on the page
    text = page.locator('[data-testid="stMain"]').inner_text()
    card = page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.inner_text()
    figure = re.search(r"(\d+\.\d+)×", card)
    assert figure, card
    others = {m for m in re.findall(r"(\d+\.\d+)× (?:faster|\()", text)} - {figure.group(1)}
    assert not others, (card, others)
    # the count of changes one line beside the tools at 1280, also with the error overlay's switch shown
    frame.evaluate("() => { document.getElementById('overlay-toggle').style.display = ''; }")
    lines = frame.evaluate(HEADER_LINES_JS)
    frame.evaluate("() => { document.getElementById('overlay-toggle').style.display = 'none'; }")
    assert lines["lines"] == 1 and not lines["overlap"] and lines["tools_in_frame"], lines
    assert re.search(r"\d+ unchanged$", lines["text"]), lines
    page.locator('iframe[src*="graphdiff"]').first.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots / "38_yolov8_compare_diff_1280x720.png"))
    laptop_shot(page, shots, "38_yolov8_compare")
    # a search for the head lands inside both panes, and every group's label is whole inside its pane
    from tests.browser.test_graph_diff_layout import OUTSIDE_JS, _search

    for query in ("cv3", "model.22"):
        _search(page, query)
        frame = graphdiff_frame(page)
        frame.wait_for_function("(q) => document.getElementById('found-legend')"
                                " && document.getElementById('found-legend').textContent.includes(q)", arg=query)
        page.wait_for_timeout(800)
        got = frame.evaluate(OUTSIDE_JS, ".found")
        assert all(got[s]["n"] >= 1 and not got[s]["outside"] for s in ("before", "after")), (query, got)
        labels = frame.evaluate(GROUP_LABELS_OUTSIDE_JS)
        page.locator('iframe[src*="graphdiff"]').first.evaluate("e => e.scrollIntoView({block: 'end'})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(shots / f"38_yolov8_search_{query}_1280x720.png"))
        spans = frame.evaluate("""() => ['before', 'after'].map(s => { const p = window.ortlabPanes[s];
            return [p.span(), p.cy.width(), p.cy.zoom()]; })""")
        assert not labels["before"] and not labels["after"], (query, labels, spans)


# how many lines the graph diff's header (its count of changes) takes, and whether the tools' box overlaps it
HEADER_LINES_JS = """() => { const h = document.getElementById('header'), t = document.getElementById('tools');
    const a = h.getBoundingClientRect(), b = t.getBoundingClientRect();
    const line = parseFloat(getComputedStyle(h).lineHeight) || 1.2 * parseFloat(getComputedStyle(h).fontSize);
    return {lines: Math.round(a.height / line), overlap: a.right > b.left + 1 && a.bottom > b.top + 1
            && b.bottom > a.top + 1, tools_in_frame: b.right <= innerWidth + 0.5, height: a.height, line,
            width: a.width, text: h.textContent}; }"""


# each pane's group boxes in view whose label (drawn above the box, often wider) reaches past the pane's left or
# right edge
GROUP_LABELS_OUTSIDE_JS = """() => {
    const out = {};
    for (const side of ['before', 'after']) {
        const cy = window.ortlabPanes[side].cy, W = cy.width(), H = cy.height();
        out[side] = cy.nodes().filter(n => n.data('group') && n.visible()).filter(n => {
            const box = n.renderedBoundingBox({includeLabels: false});
            if (box.x2 < 0 || box.x1 > W || box.y2 < 0 || box.y1 > H) { return false; }  // not in view
            const b = n.renderedBoundingBox({includeLabels: true});
            return b.x1 < -0.5 || b.x2 > W + 0.5;
        }).map(n => [n.id(), n.data('label')]);
    }
    return out;
}"""
