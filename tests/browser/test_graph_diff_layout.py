"""Issue 28 (1, 2, 8) at 1280×720 in a real browser, measured on the page: the graph diff's panes take the width
(no details column until a node is picked), their titles and the count of changes are whole; a node's details
panel is readable (names at least 80 px wide, no value cut, the heading broken between words only); a search
(the page's one search box) narrows both panes to its hits, in their own colour, every hit inside its pane;
"Fit" shows the whole graph. Screenshots go to $ORTLAB_SHOTS (default: the test's screenshot folder)."""

from __future__ import annotations

import re

from playwright.sync_api import Error as PlaywrightError

from tests.browser.test_browser import graphdiff_frame, wait_quiet
from tests.browser.test_demo_view import MATCHED_GROUPS_JS, _assert_lined_up

KIND_RGB = {"removed": (214, 39, 40), "fused": (148, 103, 189), "quantized": (31, 119, 180), "added": (44, 160, 44),
            "changed": (240, 160, 0), "unchanged": (158, 158, 158), "match": (0, 160, 255)}

# Each pane's drawn boxes of one class (every node when none is given) that stick out of the pane, with the
# pane's size: a box inside its pane has 0 <= x1, x2 <= width, 0 <= y1, y2 <= height.
OUTSIDE_JS = """(cls) => {
    const out = {};
    for (const side of ['before', 'after']) {
        const cy = window.ortlabPanes[side].cy, W = cy.width(), H = cy.height();
        const nodes = cls ? cy.nodes(cls) : cy.nodes();
        out[side] = {n: nodes.length, W, H, zoom: cy.zoom(), outside: nodes.filter(n => {
            const b = n.renderedBoundingBox();
            return b.x1 < -0.5 || b.y1 < -0.5 || b.x2 > W + 0.5 || b.y2 > H + 0.5;
        }).map(n => [n.id(), n.renderedBoundingBox()])};
    }
    return out;
}"""


def _frame(page):
    for _ in range(3):  # a rerun right after landing may draw the frame again: find it again
        try:
            page.locator('iframe[src*="graphdiff"]').first.scroll_into_view_if_needed()
            break
        except PlaywrightError:
            page.wait_for_timeout(1000)
            wait_quiet(page)
    frame = graphdiff_frame(page)
    page.wait_for_timeout(600)
    return frame


def _open_every_group_and_fit(page, frame) -> None:
    """Every group open in both panes, then "Fit" pressed."""
    frame.evaluate("""() => { for (const side of ['before', 'after']) { const p = window.ortlabPanes[side];
        p.order.filter(id => p.data[id].group).forEach(id => p.toggle(id, true)); } }""")
    page.wait_for_timeout(300)
    frame.locator("#fit").click()
    page.wait_for_timeout(500)


def _assert_panes_on_screen(page) -> None:
    """The graph-diff frame is whole in the 1280×720 viewport, so a box inside a pane is a box on screen."""
    box = page.locator('iframe[src*="graphdiff"]').first.bounding_box()
    assert box and box["y"] >= -1 and box["y"] + box["height"] <= 721 and box["x"] + box["width"] <= 1281, box


def test_a_the_panes_take_the_width_with_whole_titles_and_header(demo):
    page, shots = demo
    page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.wait_for(timeout=60_000)
    wait_quiet(page)
    frame = _frame(page)
    got = frame.evaluate("""() => {
        const box = id => { const e = document.getElementById(id), r = e.getBoundingClientRect();
            return {width: r.width, height: r.height, cut: e.scrollWidth > e.clientWidth + 1
                    || e.scrollHeight > e.clientHeight + 1, text: e.textContent}; };
        return {frame: innerWidth, before: box('cy-before'), after: box('cy-after'), panel: box('panel'),
                titleBefore: box('title-before'), titleAfter: box('title-after')};
    }""")
    # no node picked: no details column beside the panes, which share the frame's width
    assert got["panel"]["width"] == 0, got
    assert got["before"]["width"] + got["after"]["width"] >= got["frame"] - 4, got
    assert abs(got["before"]["width"] - got["after"]["width"]) <= 2, got
    for side in ("titleBefore", "titleAfter"):  # the pane titles whole: no "…"
        assert not got[side]["cut"], (side, got)
    # the count of changes whole, also with the error overlay's switch in the bar (shown once per-node error is
    # analysed; made visible here to measure the bar as it then is)
    frame.evaluate("() => { document.getElementById('overlay-toggle').style.display = ''; }")
    header = frame.evaluate("""() => { const h = document.getElementById('header'), t = document.getElementById('tools');
        const a = h.getBoundingClientRect(), b = t.getBoundingClientRect();
        return {cut: h.scrollWidth > h.clientWidth + 1 || h.scrollHeight > h.clientHeight + 1,
                overlap: a.right > b.left + 1 && a.bottom > b.top + 1 && b.bottom > a.top + 1,
                text: h.textContent, shown: h.innerText}; }""")
    assert not header["cut"] and not header["overlap"], header
    assert re.search(r"\d+ unchanged$", header["text"]), header
    from tests.browser.test_detector_diff import HEADER_LINES_JS

    lines = frame.evaluate(HEADER_LINES_JS)  # one line (issue 38: it wrapped to two), the tools in the frame
    assert lines["lines"] == 1 and not lines["overlap"] and lines["tools_in_frame"], lines
    page.screenshot(path=str(shots / "compare_graph_width_1280x720.png"))
    frame.evaluate("() => { document.getElementById('overlay-toggle').style.display = 'none'; }")


def test_b_a_nodes_details_are_readable(demo):
    page, shots = demo
    frame = _frame(page)
    picked = frame.evaluate("""() => {  // a com.microsoft int8 node (scales and zero points to show), after side
        const p = window.ortlabPanes.after;
        const n = p.cy.nodes('.op').filter(x => /^QLinear(Add|Mul|Sigmoid|Concat|GlobalAveragePool)/.test(x.data('label')))[0]
               || p.cy.nodes('.op').filter(x => /^QLinear/.test(x.data('label')))[0];
        n.emit('tap');
        return n.id();
    }""")
    page.wait_for_timeout(700)
    got = frame.evaluate("""() => {
        const panel = document.getElementById('panel'), r = panel.getBoundingClientRect();
        const cells = [...panel.querySelectorAll('td')].map(td => ({
            cls: td.className, text: td.textContent, width: td.getBoundingClientRect().width,
            cut: td.scrollWidth > td.clientWidth + 1,
            out: td.getBoundingClientRect().right > r.right + 0.5}));
        // the heading's words: each on one line (a word broken across lines has two boxes)
        const h = panel.querySelector('h3'), words = [], walker = document.createTreeWalker(h, NodeFilter.SHOW_TEXT);
        for (let t = walker.nextNode(); t; t = walker.nextNode()) {
            for (const m of t.textContent.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(t, m.index);
                range.setEnd(t, m.index + m[0].length);
                words.push([m[0], range.getClientRects().length]);
            }
        }
        return {heading: h.textContent, words, cells, panelCut: panel.scrollWidth > panel.clientWidth + 1,
                panelWidth: r.width, quantRows: [...panel.querySelectorAll('h4')].map(x => x.textContent)};
    }""")
    assert "Quantization (scale, zero point)" in got["quantRows"], got
    names = [c for c in got["cells"] if c["cls"] == "k"]
    assert any(re.search(r"_scale$", c["text"]) for c in names), names
    for c in names:  # the name column: at least 80 px, never a letter per line
        assert c["width"] >= 80, (c, got["panelWidth"])
    for c in got["cells"]:  # no value cut at the right edge: it wraps inside its cell
        assert not c["cut"] and not c["out"], c
    assert not got["panelCut"], got
    assert got["words"] and all(n == 1 for _, n in got["words"]), got["words"]  # "com.micr / osoft" no more
    # the picked node and its match stay in their (now narrower) panes
    inside = frame.evaluate("""(id) => {
        const within = (cy, n) => { const b = n.renderedBoundingBox();
            return b.x1 >= -1 && b.y1 >= -1 && b.x2 <= cy.width() + 1 && b.y2 <= cy.height() + 1; };
        const a = window.ortlabPanes.after.cy, b = window.ortlabPanes.before.cy;
        return {after: within(a, a.getElementById(id)), before: b.nodes('.match').map(n => within(b, n))};
    }""", picked)
    assert inside["after"] and inside["before"] and all(inside["before"]), inside
    page.screenshot(path=str(shots / "compare_node_details_1280x720.png"))
    frame.locator("#close-panel").click()
    page.wait_for_timeout(300)
    assert frame.evaluate("() => document.getElementById('panel').getBoundingClientRect().width") == 0


def _search(page, text: str) -> None:
    box = page.locator(".st-key-compare-focus input")
    box.scroll_into_view_if_needed()
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(800)
    wait_quiet(page)


def _drawn_leaves(frame) -> dict:
    return frame.evaluate("""() => Object.fromEntries(['before', 'after'].map(s => [s,
        window.ortlabPanes[s].order.filter(id => !window.ortlabPanes[s].data[id].group).length]))""")


def _rgb(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_c_a_search_narrows_both_panes_and_every_hit_is_in_its_pane(demo):
    page, shots = demo
    frame = _frame(page)
    whole = _drawn_leaves(frame)
    for query, sides in (("QLinearAdd", ("before", "after")), ("Conv", ("before", "after")),
                         ("layer2", ("before", "after"))):
        _search(page, query)
        frame = _frame(page)
        frame.wait_for_function("(q) => document.getElementById('found-legend')"
                                " && document.getElementById('found-legend').textContent.includes(q)", arg=query)
        page.wait_for_timeout(600)
        _assert_panes_on_screen(page)
        got = frame.evaluate(OUTSIDE_JS, ".found")
        for side in sides:
            assert got[side]["n"] >= 1, (query, side, got)  # the hits (or what replaced them) are lit on both sides
            assert not got[side]["outside"], (query, side, got)  # ... and every one is inside its pane
        narrowed = _drawn_leaves(frame)
        assert narrowed["after"] < whole["after"] and narrowed["before"] < whole["before"], (query, whole, narrowed)
        _assert_lined_up(frame.evaluate(MATCHED_GROUPS_JS), f"after searching {query}")
        page.screenshot(path=str(shots / f"compare_graph_search_{query}_1280x720.png"))
        # the search's colour is its own: far from amber "changed", every change colour and the match's blue
        colour = _rgb(frame.evaluate("() => window.ortlabPanes.after.cy.nodes('.found')[0].style('underlay-color')"))
        for kind, rgb in KIND_RGB.items():
            assert sum(abs(a - b) for a, b in zip(colour, rgb)) > 150, (kind, colour)
    _search(page, "")
    frame = _frame(page)
    assert _drawn_leaves(frame) == whole
    assert frame.evaluate("() => window.ortlabPanes.after.cy.nodes('.found').length") == 0
    # one search box: the page's, and none inside the diff view
    assert page.get_by_label(re.compile("^Find a node")).count() == 1
    assert frame.locator("input[type=search], input[type=text], input:not([type])").count() == 0


def test_d_fit_shows_the_whole_graph(demo):
    page, shots = demo
    frame = _frame(page)
    # every group open: the largest graph this model gives, too tall for the panes at a readable size
    _open_every_group_and_fit(page, frame)
    _assert_panes_on_screen(page)
    got = frame.evaluate(OUTSIDE_JS, "")
    for side in ("before", "after"):
        assert got[side]["n"] >= 15 and not got[side]["outside"], (side, got)
    _assert_lined_up(frame.evaluate(MATCHED_GROUPS_JS), "after Fit")
    page.screenshot(path=str(shots / "compare_graph_fit_1280x720.png"))


# Matched boxes (a closed group and its twin, a node matched across the change, a removed node and the node that
# replaced it: the view's own pairs) that share a rank with
# another matched pair in both panes, and the pairs whose left-to-right order differs between the panes.
MIRRORED_JS = """() => {
    const L = window.ortlabPanes.before, R = window.ortlabPanes.after, both = [];
    window.ortlabPairs().forEach(([a, b]) => {
        const n = L.cy.getElementById(a), m = R.cy.getElementById(b);
        if (!n.isParent() && !m.isParent()) both.push([a, n.position(), m.position()]);
    });
    let sideBySide = 0;
    const flipped = [];
    for (let i = 0; i < both.length; i++) for (let j = i + 1; j < both.length; j++) {
        const [a, pa, qa] = both[i], [b, pb, qb] = both[j];
        if (Math.abs(pa.y - pb.y) > 1 || Math.abs(qa.y - qb.y) > 1) continue;  // not on one rank in both panes
        sideBySide += 1;
        if ((pa.x < pb.x) !== (qa.x < qb.x)) flipped.push([a, b]);
    }
    return {matched: both.length, sideBySide, flipped};
}"""


def test_e_the_panes_lay_branches_out_in_the_same_order(demo):
    """Issue 28 (2): the two panes laid a block's branches out as mirror images (the shortcut left of the main
    branch on one side, right of it on the other). Every pair of matched boxes on one rank keeps its left-to-right
    order in both panes, with every group open and after a search."""
    page, shots = demo
    page.goto(page.url)  # a fresh session on Compare reopens the demo's pair, search empty
    page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.wait_for(timeout=90_000)
    wait_quiet(page)
    frame = _frame(page)
    _open_every_group_and_fit(page, frame)
    page.screenshot(path=str(shots / "compare_graph_branches_1280x720.png"))
    got = frame.evaluate(MIRRORED_JS)
    assert got["sideBySide"] >= 1 and not got["flipped"], got
    _search(page, "layer2")
    frame = _frame(page)
    got = frame.evaluate(MIRRORED_JS)
    page.screenshot(path=str(shots / "compare_graph_branches_layer2_1280x720.png"))
    assert not got["flipped"], got
