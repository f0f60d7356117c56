"""Issue 28 (10) at 1280×720 in a real browser: during the demo run its progress panel keeps full opacity (it
faded grey while its fragment reran) and the demo button's tooltip is gone (it stayed over the intro); History
after the demo and a tune search, one row per search. Screenshots go to $ORTLAB_SHOTS (default: the test's
screenshot folder)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.browser.conftest import LAPTOP, REPO
from tests.browser.test_browser import DEMO_TIMEOUT_MS, STEP_TIMEOUT_MS, button, go_to, wait_quiet

# the progress panel's effective opacity (its own and every ancestor's, multiplied), and whether a tooltip shows
SAMPLE_JS = """() => {
    const caption = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
        .find(e => /^Running for \\d+ s/.test(e.innerText));
    let opacity = null; const faded = [];
    if (caption) {
        opacity = 1;
        for (let el = caption.parentElement; el; el = el.parentElement) {  // a caption is 0.6 by its own style
            const o = parseFloat(getComputedStyle(el).opacity);
            if (o < 1) faded.push([el.tagName, el.getAttribute('data-testid'), el.className.toString().slice(0, 80),
                                   el.getAttribute('data-stale'), o]);
            opacity *= o;
        }
    }
    const tip = [...document.querySelectorAll('[data-testid="stTooltipContent"], [data-baseweb="tooltip"]')]
        .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
                     && getComputedStyle(e).visibility !== 'hidden' && parseFloat(getComputedStyle(e).opacity) > 0.1; })
        .map(e => e.innerText.slice(0, 60)).join(' | ');
    const disabled = !!document.querySelector('.st-key-demo_run button[disabled]');
    return {opacity, tip, faded, disabled};
}"""


def test_the_demo_panel_never_fades_and_its_tooltip_goes(app, browser_page, screenshots):
    page, _ = browser_page
    page.set_viewport_size(LAPTOP)
    page.goto(app["url"])
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
    wait_quiet(page)
    demo = button(page, ["demo_run"], re.compile("demo", re.I))
    demo.hover()
    page.wait_for_timeout(1500)
    deadline = time.monotonic() + 15
    while not page.evaluate(SAMPLE_JS)["tip"] and time.monotonic() < deadline:  # a rerun took it away: hover again
        page.mouse.move(0, 0)
        demo.hover()
        page.wait_for_timeout(1000)
    assert page.evaluate(SAMPLE_JS)["tip"], "the button's tooltip should show on hover (else the test sees nothing)"
    demo.click()  # the pointer stays on the button, as a person's does
    clicked, samples, faded = time.monotonic(), [], []
    deadline = clicked + DEMO_TIMEOUT_MS / 1000
    while time.monotonic() < deadline and not re.search(r"/compare/?$", page.url):
        try:
            s = page.evaluate(SAMPLE_JS)
        except Exception:  # the page is switching to Compare
            break
        samples.append((time.monotonic() - clicked, s["opacity"], s["tip"], s["disabled"]))
        if s["faded"]:
            faded.append(s["faded"])
        if len(samples) == 25:
            page.screenshot(path=str(screenshots / "demo_running_1280x720.png"))
        page.wait_for_timeout(100)
    panel = [(t, o) for t, o, _, _ in samples if o is not None]
    assert len(panel) >= 10, samples  # the panel was seen while the demo ran
    assert min(o for _, o in panel) > 0.99, ([p for p in panel if p[1] <= 0.99][:10], faded[:3])
    # the click's rerun draws the button disabled, without its tooltip, whose fade-out ends well within 1 s
    off = next((t for t, _, _, disabled in samples if disabled), None)
    assert off is not None, samples[:10]
    late_tips = [(t, tip) for t, _, tip, _ in samples if tip and t > off + 1.0]
    assert not late_tips, (off, late_tips[:10])


def test_history_after_the_demo_and_a_tune_search(app, browser_page, screenshots, tmp_path):
    """One row per search in History's table; screenshots of History at 1280×720."""
    page, _ = browser_page
    env = {**os.environ, "ORTLAB_HOME": str(app["home"])}
    out = subprocess.run([sys.executable, "-m", "ortlab.cli.main", "tune", "digits_cnn", "--budget", "90",
                          "--max-trials", "3", "--exclusion-steps", "0", "--bench-seconds", "0.2",
                          "--verify-samples", "16", "--out", str(tmp_path / "tune")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    go_to(page, "History", "history")
    page.reload()  # the runs the command line added
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
    wait_quiet(page)
    shots = Path(os.environ.get("ORTLAB_SHOTS") or screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    table = page.locator('[data-testid="stDataFrame"]').first
    table.locator("canvas").first.wait_for(timeout=STEP_TIMEOUT_MS)  # drawn, not its loading skeleton
    page.wait_for_timeout(800)
    page.screenshot(path=str(shots / "history_1280x720.png"))
    box, frame = table.bounding_box(), page.locator('[data-testid="stDataFrame"] .dvn-scroller').first
    assert box is not None and box["x"] + box["width"] <= LAPTOP["width"]
    # every column of the table fits its frame: no horizontal scroll, nothing cut at the right
    assert frame.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), frame.evaluate("e => [e.scrollWidth, e.clientWidth]")
    heading = page.locator('[data-testid="stMarkdownContainer"] h5').first.inner_text()
    assert heading.endswith("· 2 runs"), heading  # the demo and the search
    trials = page.locator('[data-testid="stExpander"] summary').filter(has_text="Trials of the tune search")
    assert trials.count() == 1
    trials.first.click()
    page.wait_for_timeout(800)
    inner = page.locator('[data-testid="stExpander"] [data-testid="stDataFrame"] .dvn-scroller').first
    assert inner.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), inner.evaluate("e => [e.scrollWidth, e.clientWidth]")
    trials.first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "history_trials_1280x720.png"))
    page.screenshot(path=str(shots / "history_full_1280.png"), full_page=True)
