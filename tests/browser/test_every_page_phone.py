"""Issue 38: every page with the YOLOv8-shaped detector (int8 static QDQ run, a one-trial tune search), at 1280×720
and on a phone (390×844): nothing crosses the phone's screen sideways (no horizontal scroll of the page, no element
wider than the screen outside a container that scrolls it). Screenshots go to $ORTLAB_SHOTS (or the test's
screenshot folder)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.browser.conftest import LAPTOP
from tests.browser.test_browser import (DEMO_TIMEOUT_MS, PHOTOS, STEP_TIMEOUT_MS, button, go_to, laptop,  # noqa: F401
                                        laptop_shot, upload_model, upload_photos, wait_quiet)
from tests.browser.test_detector_diff import YOLOV8
from tests.browser.test_openvino_and_phone import PHONE, full_shot

pytestmark = pytest.mark.browser

# elements of the main column that reach past the screen's sides, unless an ancestor clips or scrolls them
CROSSING_JS = """() => {
    const W = document.documentElement.clientWidth, out = [];
    const main = document.querySelector('[data-testid="stMain"]');
    const clipped = el => {
        for (let p = el.parentElement; p && p !== main; p = p.parentElement) {
            const o = getComputedStyle(p).overflowX;
            if (o !== 'visible') { const r = p.getBoundingClientRect(); if (r.right <= W + 1 && r.left >= -1) return true; }
        }
        return false;
    };
    for (const el of main.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (!r.width || !r.height || (r.right <= W + 1 && r.left >= -1)) continue;
        if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;  // an inactive tab's
        if (el.closest('[role="tabpanel"][hidden], [aria-hidden="true"]')) continue;
        if (clipped(el)) continue;
        const p = el.parentElement, pr = p && p.getBoundingClientRect();
        if (pr && (pr.right > W + 1 || pr.left < -1) && !clipped(p)) continue;  // its parent is reported already
        out.push({tag: el.tagName, testid: el.getAttribute('data-testid') || '', cls: String(el.className).slice(0, 60),
                  left: Math.round(r.left), right: Math.round(r.right), text: (el.innerText || '').slice(0, 60),
                  tab: (el.closest('[role="tabpanel"]') || {id: ''}).id});
    }
    const doc = document.documentElement;
    return {page_scroll: doc.scrollWidth - doc.clientWidth, main_scroll: main.scrollWidth - main.clientWidth, out};
}"""

PAGES = [("Model", "model"), ("Data", "data"), ("Recipe", "recipe"), ("Compare", "compare"),
         ("Benchmark", "benchmark"), ("Tune", "tune"), ("History", "history")]


def _shots(screenshots) -> Path:
    shots = Path(os.environ.get("ORTLAB_SHOTS") or screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def _both_sizes(page, shots: Path, name: str) -> dict:
    """Screenshots at 1280×720 and 390×844; what crosses the phone's screen."""
    laptop_shot(page, shots, name)
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(1500)
    wait_quiet(page)
    full_shot(page, shots / f"phone_{name}.png")
    crossing = page.evaluate(CROSSING_JS)
    page.set_viewport_size(LAPTOP)
    page.wait_for_timeout(800)
    return crossing


def _detector_with_a_run(page, url: str) -> None:
    upload_model(page, url, YOLOV8)
    go_to(page, "Data", "data")
    upload_photos(page, 8)
    page.locator(".st-key-data-use_suggested_preset button").click()
    wait_quiet(page)
    page.get_by_text("This data fits the model").first.wait_for(timeout=STEP_TIMEOUT_MS)
    go_to(page, "Recipe", "recipe")
    page.locator(".st-key-recipe_preset").click()
    page.get_by_role("option", name=re.compile("int8 static QDQ")).click()
    wait_quiet(page)
    button(page, ["recipe_load_preset"], re.compile("Load preset")).click()
    wait_quiet(page)
    button(page, ["recipe.run"], re.compile("Run recipe")).click()
    page.get_by_text(re.compile(r"int8 static QDQ · cpu · \w+ ran in|Finished int8 static QDQ|recipe failed")
                     ).first.wait_for(timeout=DEMO_TIMEOUT_MS)
    wait_quiet(page)


def _one_trial_search(page) -> None:
    go_to(page, "Tune", "tune")
    for key, value in (("tune.max_trials", "1"), ("tune.steps", "0"), ("tune.bench_s", "0.2")):
        box = page.locator(f".st-key-{key.replace('.', '-')} input")
        box.fill(value)
        box.press("Tab")
    button(page, ["tune-form"], re.compile("Start tuning")).click()
    page.get_by_text(re.compile(r"The budget bought|Stopped after|No trial finished")).first.wait_for(
        timeout=DEMO_TIMEOUT_MS)
    wait_quiet(page)


def test_every_page_with_the_detector_fits_a_phone(app, laptop, screenshots):  # noqa: F811
    page, shots = laptop, _shots(screenshots)
    page.goto(app["url"])
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
    page.locator("h1").filter(has_text="Model").first.wait_for(timeout=60_000)
    wait_quiet(page)
    page.wait_for_timeout(1500)
    found = {"home": _both_sizes(page, shots, "00_home")}
    _detector_with_a_run(page, app["url"])
    if os.environ.get("ORTLAB_SHOTS_TUNE", "1") == "1":
        _one_trial_search(page)
    for k, (title, path) in enumerate(PAGES, start=1):
        if path == "model":  # the sidebar's Model link is the app's start page ("/start")
            page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Model").first.click()
            wait_quiet(page)
        else:
            go_to(page, title, path)
        page.locator("h1").filter(has_text=title).first.wait_for()
        page.wait_for_timeout(1500)
        wait_quiet(page)
        found[path] = _both_sizes(page, shots, f"{k:02d}_{path}")
    bad = {k: v for k, v in found.items() if v["page_scroll"] > 0 or v["out"]}
    assert not bad, bad
