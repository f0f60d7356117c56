"""Preprocessing stated, never assumed: the sources of every value, named presets, and a model with open
height/width fed images without a size is asked for one instead of running at 224."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from ortlab.cli import main as cli
from ortlab.data.preprocess import IMAGENET_MEAN, IMAGENET_STD, PRESETS, explain_preprocess
from ortlab.data.samples import get_sample
from ortlab.model.inspect import TensorInfo, inspect_model
from ortlab.settings.config import ChannelOrder, PixelScale, ResizeMode

ROOT = Path(__file__).resolve().parents[2]
DB = ROOT / "tests" / "fixtures" / "db_detector.onnx"  # x [batch, 3, height, width]
YOLOV8 = ROOT / "tests" / "fixtures" / "yolov8_detector.onnx"  # images [1, 3, 640, 640]
PHOTOS = ROOT / "sample_models" / "efficientnet_lite0" / "evaluation"


@pytest.fixture()
def images(tmp_path) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for f in sorted(PHOTOS.glob("*.jpg"))[:2]:
        shutil.copy(f, folder / f.name)
    return folder


def test_open_height_and_width_with_images_and_no_size_is_asked_not_guessed(tmp_path, images, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    for argv in (["compare", str(DB), str(DB), "--data", str(images)],
                 ["optimize", str(DB), str(tmp_path / "o"), "--precision", "fp16", "--eval", str(images)]):
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.strip() == ("ortlab: error: Model input 'x' [batch, 3, height, width] leaves its height and width "
                               "open, and ortlab never guesses them: give the size its images must have, --size H W "
                               "(e.g. --size 640 640), or --shape x=1,3,H,W.")
    assert not (tmp_path / "o").exists()
    # a channels-last input (MTCNN's P-Net: [N, M1, M2, 3]) is asked for its shape in its own layout
    nhwc = tmp_path / "nhwc.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["img"], ["out"])], "pnet",
                              [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", "M1", "M2", 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", "M1", "M2", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(nhwc))
    assert cli.main(["compare", str(nhwc), str(nhwc), "--data", str(images)]) == 2
    assert capsys.readouterr().err.strip().endswith("--shape img=1,H,W,3.")
    # with a size it runs, and says the size is yours
    code = cli.main(["compare", str(DB), str(DB), "--data", str(images), "--size", "64", "96"])
    captured = capsys.readouterr()
    assert code == 0 and captured.out.startswith("verdict    ")
    assert captured.err.splitlines()[0].startswith("ortlab: preprocessing: size 64×96 (you (flags)); resize stretch "
                                                   "(default); layout NCHW (detected from the model input)")


def test_every_run_states_its_preprocessing_and_sources_first(tmp_path, images, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    code = cli.main(["optimize", str(YOLOV8), str(tmp_path / "o"), "--precision", "fp16", "--eval", str(images),
                     "--mean", "0.1", "0.2", "0.3"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0
    assert err[0] == ("ortlab: preprocessing: size 640×640 (detected from a fixed input shape); resize stretch "
                      "(default); layout NCHW (detected from the model input); channels 3 (detected from the model "
                      "input); channel order RGB (default); scale 0-1 (default); mean 0.1, 0.2, 0.3 (you (flags)); "
                      "std 1, 1, 1 (default); dtype float32 (detected from the model input)")


def test_a_preset_is_a_visible_choice_with_its_source(tmp_path, images, capsys):
    dyn = [TensorInfo("x", "float32", ("batch", 3, "height", "width"))]
    assert explain_preprocess(dyn).open_size  # nobody said a size: the run must ask
    r = explain_preprocess(dyn, preset="paddle_rec", overrides={"size": (48, 320)})
    assert r is not None and not r.open_size
    c = r.config
    assert (c.channel_order, c.scale, c.mean, c.std) == (ChannelOrder.BGR, PixelScale.UNIT, (0.5,) * 3, (0.5,) * 3)
    assert r.sources["mean"] == "preset paddle_rec" and r.sources["size"] == "you (flags)"
    det = explain_preprocess(dyn, preset="paddle_det").config
    assert det.channel_order == ChannelOrder.BGR and det.mean == IMAGENET_MEAN and det.std == IMAGENET_STD
    fixed = [TensorInfo("images", "float32", (1, 3, 640, 640))]
    yolo = explain_preprocess(fixed, preset="yolo")
    assert yolo.config.resize_mode == ResizeMode.LETTERBOX and yolo.config.size == (640, 640)
    assert yolo.sources["size"] == "detected from a fixed input shape" and yolo.sources["resize_mode"] == "preset yolo"
    # never applied unless chosen
    plain = explain_preprocess(fixed)
    assert plain.config.resize_mode == ResizeMode.STRETCH and "preset" not in " ".join(plain.sources.values())
    assert set(PRESETS) == {"yolo", "imagenet", "paddle_det", "paddle_rec", "paddle_cls"}
    cls = explain_preprocess(fixed, preset="paddle_cls").config
    assert (cls.channel_order, cls.mean, cls.resize_mode) == (ChannelOrder.BGR, IMAGENET_MEAN, ResizeMode.CENTER_CROP)
    # through the CLI: the preset and its values are stated
    code = cli.main(["compare", str(DB), str(DB), "--data", str(images), "--preset", "paddle_det", "--size", "64",
                     "64"])
    err = capsys.readouterr().err
    assert code == 0 and "channel order BGR (preset paddle_det)" in err and "mean 0.485, 0.456, 0.406 (preset " \
                                                                           "paddle_det)" in err


def test_values_that_differ_from_a_samples_manifest_are_named_with_a_warning(tmp_path, images, capsys, monkeypatch):
    sample = get_sample("efficientnet_lite0")
    model = ROOT / "sample_models" / "efficientnet_lite0" / "model.onnx"
    info = inspect_model(model)
    assert explain_preprocess(info, sample).manifest_changes() == []
    assert explain_preprocess(info, sample).manifest_warning("efficientnet_lite0") == ""
    assert explain_preprocess(info, preset="imagenet").manifest_changes() == []  # no manifest: nothing to differ from
    r = explain_preprocess(info, sample, preset="imagenet", overrides={"size": (256, 256)})
    assert r.manifest_changes() == [
        "size 224×224 → 256×256 (you (flags))", "scale 0-255 → 0-1 (preset imagenet)",
        "mean 127, 127, 127 → 0.485, 0.456, 0.406 (preset imagenet)",
        "std 128, 128, 128 → 0.229, 0.224, 0.225 (preset imagenet)"]
    assert r.manifest_warning("efficientnet_lite0").startswith(
        "This is the bundled sample efficientnet_lite0, whose manifest gives the preprocessing its model was made with, "
        "and these values differ from it: size 224×224 → 256×256 (you (flags)); scale 0-255 → 0-1")
    # through the CLI: warned with --preset on the sample, not without
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    for extra, warned in (([], False), (["--preset", "imagenet"], True)):
        code = cli.main(["compare", str(model), str(model), "--data", str(images), *extra])
        err = capsys.readouterr().err
        assert code == 0, err
        assert ("ortlab: warning: This is the bundled sample efficientnet_lite0" in err) is warned, err
        assert ("mean 127, 127, 127 → 0.485, 0.456, 0.406 (preset imagenet)" in err) is warned


@pytest.mark.parametrize(("inputs", "outputs", "expected"), [
    ([("images", "float32", (1, 3, 640, 640))], [("output0", "float32", (1, 84, 8400))], "yolo"),
    ([("images", "float32", (1, 3, 320, 320))], [("output0", "float32", (1, 2100, 8))], "yolo"),
    # a classifier, an open size, a non-square input, an OCR recognizer's [N, T, classes]: no preset offered
    ([("input", "float32", (1, 3, 224, 224))], [("logits", "float32", (1, 1000))], None),
    # open height and width: offered when the anchors are the stride 8/16/32 grids of one size (issue 38: 2100)
    ([("images", "float32", ("batch", 3, "height", "width"))], [("output0", "float32", (1, 22, 2100))], "yolo"),
    ([("images", "float32", (1, 3, "h", "w"))], [("output0", "float32", (1, 84, 8400))], "yolo"),
    ([("images", "float32", (1, 3, "h", "w"))], [("output0", "float32", (1, 84, 8000))], None),
    ([("x", "float32", (1, 3, 48, 320))], [("out", "float32", (1, 40, 6625))], None),
    ([("images", "float32", (1, 3, 640, 640))], [("emb", "float32", (1, 512))], None),
])
def test_the_yolo_preset_is_offered_from_the_model_shapes(inputs, outputs, expected):
    from ortlab.data.preprocess import suggest_preset

    got = suggest_preset([TensorInfo(*t) for t in inputs], [TensorInfo(*t) for t in outputs])
    assert (got[0] if got else None) == expected, got
    if got:
        assert "YOLO" in got[1] and str(inputs[0][2][2]) in got[1]  # why: the shapes it read


def test_rows_of_one_anchor_per_cell_also_name_yoloxs_preprocessing():
    """ddddocr 1.6's common_det.onnx (YOLOX: [1, 3, 416, 416] → [1, 3549, 6], fed 0–255 BGR by ddddocr) was offered
    only the Ultralytics preset, whose 0–1 RGB pixels it does not take; channels first (v8) or three anchors a cell
    (v5) are Ultralytics' alone."""
    from ortlab.data.preprocess import YOLOX_CAVEAT, suggest_preset

    def why(h: int, out: tuple) -> str:
        got = suggest_preset([TensorInfo("images", "float32", (1, 3, h, h))], [TensorInfo("output", "float32", out)])
        assert got is not None and got[0] == "yolo"
        return got[1]

    assert why(416, (1, 3549, 6)).endswith(YOLOX_CAVEAT) and "--scale 0-255 --channel-order BGR" in YOLOX_CAVEAT
    assert YOLOX_CAVEAT not in why(640, (1, 84, 8400)) and YOLOX_CAVEAT not in why(416, (1, 10647, 85))


P2O = "p2o.DynamicDimension.0"


@pytest.mark.parametrize(("producer", "inputs", "outputs", "expected"), [
    # PaddleOCR's detector, recognizer, PaddleClas's classifier, as Paddle2ONNX writes them
    ("", ("x", "float32", ("DynamicDimension.0", 3, "DynamicDimension.1", "DynamicDimension.2")),
     ("fetch_name_0", "float32", ("ConvTranspose_459_o0__d0", 1, "d2", "d3")), "paddle_det"),
    ("", ("x", "float32", (P2O, 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2")),
     ("sigmoid_0.tmp_0", "float32", (P2O, 1, "a", "b")), "paddle_det"),
    ("", ("x", "float32", ("DynamicDimension.0", 3, 48, "DynamicDimension.1")),
     ("fetch_name_0", "float32", ("DynamicDimension.0", "T", 18710)), "paddle_rec"),
    ("", ("x", "float32", ("DynamicDimension.0", 3, 224, 224)), ("fetch_name_0", "float32", ("DynamicDimension.0", 4)),
     "paddle_cls"),
    ("PaddlePaddle", ("x", "float32", (-1, 3, 224, 224)), ("save_infer_model/scale_0.tmp_1", "float32", (-1, 1000)),
     "paddle_cls"),
    # the same shapes from another exporter: no convention can be read off them
    ("pytorch", ("x", "float32", ("batch", 3, "height", "width")), ("maps", "float32", ("batch", 1, "h", "w")), None),
    ("pytorch", ("x", "float32", (1, 3, 48, "w")), ("logits", "float32", (1, "T", 97)), None),
    ("pytorch", ("x", "float32", (1, 3, 224, 224)), ("logits", "float32", (1, 1000)), None),
    # PaddleOCR's text-line direction classifier (rapidocr's ch_ppocr_mobile_v2.0_cls): open size, two scores
    ("PaddlePaddle", ("x", "float32", (-1, 3, None, None)), ("save_infer_model/scale_0.tmp_1", "float32", (-1, 2)),
     "paddle_rec"),
    # a Paddle export of another kind (a small fixed crop classifier, four scores of an open size): none offered
    ("PaddlePaddle", ("x", "float32", (-1, 3, 48, 192)), ("save_infer_model/scale_0.tmp_1", "float32", (-1, 2)), None),
    ("PaddlePaddle", ("x", "float32", (-1, 3, None, None)), ("save_infer_model/scale_0.tmp_1", "float32", (-1, 4)),
     None),
])
def test_a_paddle_exports_convention_is_offered_from_its_names_and_shapes(producer, inputs, outputs, expected):
    from types import SimpleNamespace

    from ortlab.data.preprocess import suggest_preset

    model = SimpleNamespace(inputs=[TensorInfo(*inputs)], outputs=[TensorInfo(*outputs)], producer=producer)
    got = suggest_preset(model)
    assert (got[0] if got else None) == expected, got
    if got:
        assert "PaddlePaddle export" in got[1]


def test_a_yolo_export_with_open_anchors_is_offered_the_preset_without_a_size():
    from types import SimpleNamespace

    from ortlab.data.preprocess import suggest_preset

    long_dim = "(floor(floor(floor(height/2 - 1/2)/2)/2) + 1)*(floor(floor(floor(width/2 - 1/2)/2)/2) + 1)"
    model = SimpleNamespace(inputs=[TensorInfo("images", "float32", ("batch", 3, "height", "width"))],
                            outputs=[TensorInfo("output0", "float32", ("batch", 22, long_dim))])
    got = suggest_preset(model)
    assert got is not None and got[0] == "yolo" and "[batch, 22, ?]" in got[1] and "anchors are" not in got[1]
    assert explain_preprocess(model, preset="yolo").open_size  # the preset cannot tell the size: still asked for
    # an OCR recognizer's [N, T, classes] has its open dim in the middle: not a detector
    rec = SimpleNamespace(inputs=[TensorInfo("x", "float32", ("b", 3, "h", "w"))],
                          outputs=[TensorInfo("y", "float32", ("b", "T", 97))])
    assert suggest_preset(rec) is None


def test_the_cli_offers_the_preset_a_model_points_to_unless_a_convention_was_given(tmp_path, images, capsys,
                                                                                      monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    model = onnx.load(str(DB))
    model.graph.node[-1].output[0] = model.graph.output[0].name = "fetch_name_0"  # as Paddle2ONNX names it
    paddle = tmp_path / "det.onnx"
    onnx.save(model, str(paddle))
    for extra, offered in (([], True), (["--mean", "0.5", "0.5", "0.5"], False), (["--preset", "paddle_det"], False)):
        code = cli.main(["compare", str(paddle), str(paddle), "--data", str(images), "--size", "64", "64", *extra])
        err = capsys.readouterr().err
        assert code == 0, err
        assert ("ortlab: hint: the model is a PaddlePaddle export (output 'fetch_name_0')" in err) is offered, err
        assert ("--preset paddle_det gives that preprocessing" in err) is offered
    code = cli.main(["compare", str(DB), str(DB), "--data", str(images), "--size", "64", "64"])
    assert code == 0 and "hint:" not in capsys.readouterr().err  # the same model from another exporter


def test_the_yolo_preset_on_an_open_input_sets_the_size_its_anchors_fit():
    """Issue 38 (5): [batch, 3, height, width] → [1, 22, 2100]: choosing the preset sets 320×320 (21·320²/1024 =
    2100 anchors), credited to the preset, and the size is no longer asked for."""
    from types import SimpleNamespace

    from ortlab.data.preprocess import yolo_size

    assert [yolo_size(a) for a in (8400, 2100, 525, 8000, 0)] == [640, 320, 160, None, None]
    model = SimpleNamespace(inputs=[TensorInfo("images", "float32", ("batch", 3, "height", "width"))],
                            outputs=[TensorInfo("output0", "float32", (1, 22, 2100))])
    assert explain_preprocess(model).open_size  # not chosen: still asked for
    r = explain_preprocess(model, preset="yolo")
    assert r is not None and not r.open_size and r.config.size == (320, 320)
    assert r.sources["size"] == "preset yolo: the 2100 anchors of 'output0'"
    assert r.config.resize_mode == ResizeMode.LETTERBOX
    # a size given by the person still wins over the preset's
    mine = explain_preprocess(model, preset="yolo", overrides={"size": (256, 256)})
    assert mine.config.size == (256, 256) and mine.sources["size"] == "you (flags)"


def test_an_open_size_error_names_the_preset_that_sets_it(tmp_path, images, capsys, monkeypatch):
    """[batch, 3, height, width] → [1, 22, 2100]: the size is asked for, and --preset yolo is named as the one
    choice that sets it (320×320); a model whose outputs say nothing of its size gets the plain request."""
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, 22, 2100])
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["output0"], name="anchors")], "yolo",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                             ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 22, 2100])], [shape])
    model = tmp_path / "yolo.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    for path, named in ((model, True), (DB, False)):
        code = cli.main(["compare", str(path), str(path), "--data", str(images)])
        err = capsys.readouterr().err
        assert code == 2 and "leaves its height and width open" in err, err
        assert ("Or give --preset yolo, which sets 320×320" in err) is named, err


def test_a_preset_that_sets_the_height_asks_for_the_width_alone(tmp_path, images, capsys, monkeypatch):
    """A Paddle text-line direction classifier, [-1, 3, ?, ?] → [-1, 2]: without a preset the size is asked for and
    paddle_rec is named with the height it sets; with it, only the width is asked for, with the widths its models
    take."""
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    scores = helper.make_tensor("scores", TensorProto.INT64, [2], [1, 2])
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["scores"], ["save_infer_model/scale_0.tmp_1"], name="cls")], "cls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, None, None])],
        [helper.make_tensor_value_info("save_infer_model/scale_0.tmp_1", TensorProto.FLOAT, [-1, 2])], [scores])
    model = tmp_path / "cls.onnx"
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8, producer_name="PaddlePaddle")
    onnx.save(m, str(model))
    assert cli.main(["compare", str(model), str(model), "--data", str(images)]) == 2
    err = capsys.readouterr().err
    assert "leaves its height and width open" in err and "Or give --preset paddle_rec with --size 48 W" in err, err
    assert "text-line direction classifier" in err, err
    assert cli.main(["compare", str(model), str(model), "--data", str(images), "--preset", "paddle_rec"]) == 2
    err = capsys.readouterr().err
    assert "leaves its width open" in err and "preset paddle_rec sets the height, 48" in err, err
    assert "--size 48 W (PaddleOCR's recognizers take 320, its text-line direction classifier 192)" in err, err
    assert "--shape x=1,3,48,W" in err, err



def test_a_model_that_fixes_its_height_is_asked_for_its_width_alone():
    """ddddocr's common.onnx: [1, 1, 64, image_width] (the height fixed, the width open)."""
    r = explain_preprocess([TensorInfo("input1", "float32", (1, 1, 64, "image_width"))])
    assert r is not None and r.open_size
    assert r.open_size_message() == ("Model input 'input1' [1, 1, 64, image_width] leaves its width open, and ortlab "
                                     "never guesses it: its height is 64; give the width too, --size 64 W, or "
                                     "--shape input1=1,1,64,W.")
    both = explain_preprocess([TensorInfo("x", "float32", (1, 3, "h", "w"))])
    assert "leaves its height and width open" in both.open_size_message()
