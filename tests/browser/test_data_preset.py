"""Issue 28 (7) in a real browser at 1280×720: an uploaded YOLO-shaped detector is offered the YOLO preset on the
Data page, and "Use this preset" shows it everywhere: the preset select, the Resize mode radio on letterbox (a
browser kept showing "stretch" when the widget's state was only deleted) and the table crediting the preset."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_browser import (  # noqa: F401
    go_to, laptop, laptop_shot, upload_detector, upload_model, upload_photos, wait_quiet,
)

pytestmark = pytest.mark.browser


def test_the_yolo_preset_is_offered_and_shown_once_chosen(app, laptop, screenshots):  # noqa: F811
    page = laptop
    upload_detector(page, app["url"])
    go_to(page, "Data", "data")
    upload_photos(page, 4)
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


def _paddle_classifier(path, dims: list, classes: int, output: str, producer: str = ""):
    """A Conv → pool → MatMul → Softmax classifier as Paddle2ONNX writes one: input 'x' of ``dims``, output
    ``output`` [dims[0], ``classes``], the ``producer`` named."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(classes)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, classes)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[4, 4]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["logits"], name="fc"),
             helper.make_node("Softmax", ["logits"], [output], name="softmax")]
    graph = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [dims[0], classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name=producer)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _use_the_offered_preset_and_see_bgr(page) -> None:
    """Clicks "Use this preset" on the Data page; returns once the Channel order radio shows BGR."""
    page.locator(".st-key-data-use_suggested_preset button").click()
    wait_quiet(page)
    page.wait_for_function("""() => { const r = document.querySelector('.st-key-pre-channel_order input:checked');
        return r && r.closest('label').innerText.trim() === 'BGR'; }""", timeout=30_000)


def test_a_paddle_export_is_offered_its_convention(app, laptop, screenshots, tmp_path):  # noqa: F811
    """A Paddle2ONNX classifier uploaded on the Model page: the Data page offers the PaddleClas preset (BGR, ImageNet
    mean/std), read off its output's name, and choosing it sets the channel order to BGR."""
    page = laptop
    # PaddleClas's PP-LCNet orientation models: [DynamicDimension.0, 3, 224, 224] → 'fetch_name_0', 4 classes
    upload_model(page, app["url"], _paddle_classifier(tmp_path / "orientation.onnx", ["DynamicDimension.0", 3, 224, 224],
                                                      4, "fetch_name_0"))
    go_to(page, "Data", "data")
    upload_photos(page, 4)
    offer = page.locator('[data-testid="stAlert"]').filter(has_text="This model's shapes fit the PaddleClas classifier")
    offer.first.wait_for()
    assert "PaddlePaddle export (output 'fetch_name_0')" in offer.first.inner_text()
    laptop_shot(page, screenshots, "data_paddle_offer")
    _use_the_offered_preset_and_see_bgr(page)
    assert not offer.count()
    laptop_shot(page, screenshots, "data_paddle_applied")


def test_a_paddle_text_line_classifier_is_offered_the_recognizer_preset_and_asked_its_width(
        app, laptop, screenshots, tmp_path):  # noqa: F811
    """An open-sized Paddle classifier with two scores (PaddleOCR's 0°/180° text-line classifier): the Data page
    offers the PaddleOCR recognizer / classifier preset, saying the 48×192 its images take; chosen, it sets the
    height 48 and BGR, and the page still asks for the width."""
    page = laptop
    # rapidocr's ch_ppocr_mobile_v2.0_cls: [-1, 3, ?, ?] → 'save_infer_model/scale_0.tmp_1' [-1, 2], producer PaddlePaddle
    upload_model(page, app["url"], _paddle_classifier(tmp_path / "cls.onnx", [-1, 3, None, None], 2,
                                                      "save_infer_model/scale_0.tmp_1", producer="PaddlePaddle"))
    go_to(page, "Data", "data")
    upload_photos(page, 4)
    offer = page.locator('[data-testid="stAlert"]').filter(
        has_text="This model's shapes fit the PaddleOCR recognizer / classifier")
    offer.first.wait_for()
    assert "text-line direction classifier" in offer.first.inner_text() and "192" in offer.first.inner_text()
    note = page.locator('[data-testid="stAlert"]').filter(has_text="Preprocessing was detected from the model input")
    assert "or choose the preset offered there, which sets its height." in note.first.inner_text()
    laptop_shot(page, screenshots, "data_paddle_textline_offer")
    _use_the_offered_preset_and_see_bgr(page)
    assert not offer.count()
    ask = page.locator('[data-testid="stAlert"]').filter(has_text="leaves its width open")
    ask.first.wait_for()
    text = ask.first.inner_text()
    assert "preset paddle_rec sets the height, 48: fill in the width" in text and "classifier 192" in text, text
    laptop_shot(page, screenshots, "data_paddle_textline_applied")
