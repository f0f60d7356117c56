"""Issue 38's done-when in a real browser at 1280×720: a YOLO-shaped detector whose input leaves its size open
(``images [batch, 3, height, width]`` → ``output0 [1, 12, 2100]``, ``scripts/build_yolov8_fixture.py
--open-input``) and 40 photos: the Data page offers the YOLO preset and one click applies it with its size (320×320,
read from the 2100 anchors); int8 static QDQ runs; on Compare the graph diff draws no node "removed" that the after
graph has under the same name, the page shows one speed figure, and the verdict names one bar."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_browser import (REPO, STEP_TIMEOUT_MS, DEMO_TIMEOUT_MS, button, go_to, graphdiff_frame,
                                        laptop, laptop_shot, upload_model, upload_photos, wait_quiet)  # noqa: F401
from tests.browser.test_detector_diff import DRAWN_JS

pytestmark = pytest.mark.browser

OPEN_DETECTOR = REPO / "tests" / "fixtures" / "yolov8_open_input.onnx"
F1_BAR = re.compile(r"the (0\.\d+) bar|< (0\.\d+)")  # a detection F1's bar, as the verdict words it


def test_an_open_size_detector_gets_its_preset_and_size_in_one_click_and_compares_cleanly(app, laptop, screenshots):  # noqa: F811
    page = laptop
    upload_model(page, app["url"], OPEN_DETECTOR)
    go_to(page, "Data", "data")
    upload_photos(page, 40)
    alerts = page.locator('[data-testid="stAlert"]').all_inner_texts()
    assert [t for t in alerts if "YOLO (Ultralytics)" in t and "320×320" in t], alerts  # offered, with its size
    page.locator(".st-key-data-use_suggested_preset button").click()  # the one click
    wait_quiet(page)
    page.get_by_text("This data fits the model").first.wait_for(timeout=STEP_TIMEOUT_MS)
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "3, 320, 320]" in main and "model input 320×320" in main, main  # the size came with the preset
    laptop_shot(page, screenshots, "38_open_detector_data")
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
    assert any(n["op"] == "QLinearConv" for n in drawn["after"]), drawn["after"][:5]
    text = page.locator('[data-testid="stMain"]').inner_text()
    card = page.locator('[data-testid="stMetric"]').filter(has_text="Speed-up (p50)").first.inner_text()
    figure = re.search(r"(\d+\.\d+)×", card)
    assert figure, card
    assert not {m for m in re.findall(r"(\d+\.\d+)× (?:faster|\()", text)} - {figure.group(1)}, (card, text)
    verdict = page.locator(".ortlab-verdict").first.inner_text()
    assert "Verdict on" in verdict and "detections F1" in verdict, verdict
    bars = {a or b for a, b in F1_BAR.findall(verdict)}
    assert len(bars) <= 1, (bars, verdict)
    laptop_shot(page, screenshots, "38_open_detector_compare")
