"""Issue 28 (7) in a real browser at 1280×720: an uploaded YOLO-shaped detector is offered the YOLO preset on the
Data page, and "Use this preset" shows it everywhere: the preset select, the Resize mode radio on letterbox (a
browser kept showing "stretch" when the widget's state was only deleted) and the table crediting the preset."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_browser import PHOTOS, go_to, laptop, laptop_shot, upload_detector, wait_quiet  # noqa: F401

pytestmark = pytest.mark.browser


def test_the_yolo_preset_is_offered_and_shown_once_chosen(app, laptop, screenshots):  # noqa: F811
    page = laptop
    upload_detector(page, app["url"])
    go_to(page, "Data", "data")
    page.get_by_text("Upload images (files or a .zip)").click()
    wait_quiet(page)
    page.locator('.st-key-data_upload input[type="file"]').set_input_files([str(p) for p in sorted(PHOTOS.glob("*.jpg"))[:4]])
    page.locator('[data-testid="stSidebar"]').get_by_text("uploaded images (4)").first.wait_for()
    wait_quiet(page)
    offer = page.locator('[data-testid="stAlert"]').filter(has_text="This model's shapes fit the YOLO (Ultralytics)")
    offer.first.wait_for()
    assert "[1, 3, 640, 640]" in offer.first.inner_text()
    laptop_shot(page, screenshots, "data_yolo_offer")
    page.locator(".st-key-data-use_suggested_preset button").click()
    wait_quiet(page)
    page.wait_for_function("""() => { const r = document.querySelector('.st-key-pre-resize_mode input:checked');
        return r && r.closest('label').innerText.trim() === 'letterbox'; }""", timeout=30_000)
    shown = page.evaluate("""() => { const e = document.querySelector('.st-key-data-preset');
        return e.innerText + ' ' + [...e.querySelectorAll('input')].map(i => i.value).join(' '); }""")
    assert "YOLO (Ultralytics)" in shown, shown  # the select shows the chosen preset
    assert not offer.count()  # chosen: no longer offered
    laptop_shot(page, screenshots, "data_yolo_applied")


def test_a_preset_that_changes_the_samples_manifest_is_named_in_a_warning(app, laptop, screenshots):  # noqa: F811
    """The bundled sample's manifest is the preprocessing its model was made with: a preset that changes it is
    named, value by value, in a warning (an ImageNet mean/std on EfficientNet-Lite0 broke its verdict silently)."""
    page = laptop
    page.goto(app["url"])
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
    wait_quiet(page)
    go_to(page, "Data", "data")
    page.locator(".st-key-data-preset").wait_for()
    warning = page.locator('[data-testid="stAlert"]').filter(has_text="This is the bundled sample")
    assert not warning.count()
    box = page.locator(".st-key-data-preset input")
    box.scroll_into_view_if_needed()
    box.click()
    box.fill("ImageNet mean/std: torch")  # the select filters its options by what is typed
    page.get_by_role("option", name=re.compile(r"^ImageNet mean.std")).wait_for()
    page.keyboard.press("Enter")
    wait_quiet(page)
    warning.first.wait_for()
    text = warning.first.inner_text()
    assert "(preset imagenet)" in text and "→" in text, text
    laptop_shot(page, screenshots, "data_manifest_changed")
