"""Issue 28 (7) in a real browser at 1280×720: an uploaded YOLO-shaped detector is offered the YOLO preset on the
Data page, and "Use this preset" shows it everywhere: the preset select, the Resize mode radio on letterbox (a
browser kept showing "stretch" when the widget's state was only deleted) and the table crediting the preset."""

from __future__ import annotations

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
