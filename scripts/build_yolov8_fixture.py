"""Build ``tests/fixtures/yolov8_detector.onnx``: a small YOLOv8-style detector with realistic output ranges.

YOLOv8's head ends in one Concat that joins the decoded boxes (centre x/y, width, height in input pixels,
0..640) with the class scores (sigmoid, 0..1): ``output0 [1, 4 + classes, 8400]``. One int8 scale for that
Concat (640/255 ≈ 2.5) rounds every score to 0 — the defect range-split finds in the calibration ranges.

Built with ``onnx.helper`` and numpy only (no torch), deterministic (numpy seed 0), opset 13, IR version 8:
a stride-2 Conv/Relu backbone to strides 8/16/32, per level a box Conv (4 distances, Sigmoid × 8 grid cells)
and a class Conv, the levels concatenated along anchors, YOLOv8's ``dist2bbox`` decode (anchor points and
strides are initializers), then ``Concat(boxes × strides, Sigmoid(class logits))``. The class Conv's weights
and bias are scaled so that on the repository's photos (``sample_models/efficientnet_lite0``) the scores spread
over 0..1 with about 1% of the anchors above 0.3, like a detector before NMS (the numbers this script prints).

``--open-input`` builds ``tests/fixtures/yolov8_open_input.onnx`` instead: the same network for a 320×320 input
(2100 anchors) whose input declares ``[batch, 3, height, width]``, as an export with fixed anchor tables and open
axes does: the YOLO preset must find its size from the output's anchors.

    python scripts/build_yolov8_fixture.py [--check] [--open-input]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "yolov8_detector.onnx"
OPEN_OUT = ROOT / "tests" / "fixtures" / "yolov8_open_input.onnx"
OPEN_SIZE = 320
PHOTOS = ROOT / "sample_models" / "efficientnet_lite0" / "calibration"
SIZE = 640
CLASSES = 8
STRIDES = (8, 16, 32)
CLS_GAIN = 12.0  # class-logit spread (× a unit-variance projection of the features)
CLS_BIAS = -11.7  # class-logit offset: most anchors score near 0, about 1% above 0.3 on photos
IR_VERSION = 8
OPSET = 13


def _conv(nodes, inits, rng, name, x, cin, cout, k, stride, relu=True, gain=None, bias=0.0):
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(gain or np.sqrt(2.0 / (cin * k * k)))
    b = np.full(cout, bias, np.float32) + rng.standard_normal(cout).astype(np.float32) * np.float32(0.1)
    inits += [numpy_helper.from_array(w, f"{name}.weight"), numpy_helper.from_array(b, f"{name}.bias")]
    y = f"{name}/Conv_output_0"
    nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [y], name=f"{name}/Conv",
                                  kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
    if not relu:
        return y
    nodes.append(helper.make_node("Relu", [y], [f"{name}/act/Relu_output_0"], name=f"{name}/act/Relu"))
    return f"{name}/act/Relu_output_0"


def build(size: int = SIZE, open_input: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = _conv(nodes, inits, rng, "/model.0", "images", 3, 8, 3, 2)
    x = _conv(nodes, inits, rng, "/model.1", x, 8, 16, 3, 2)
    p3 = _conv(nodes, inits, rng, "/model.2", x, 16, 16, 3, 2)
    p4 = _conv(nodes, inits, rng, "/model.3", p3, 16, 16, 3, 2)
    p5 = _conv(nodes, inits, rng, "/model.4", p4, 16, 16, 3, 2)
    boxes, scores = [], []
    for i, feat in enumerate((p3, p4, p5)):
        head = f"/model.22/cv2.{i}"
        b = _conv(nodes, inits, rng, head, feat, 16, 4, 1, 1, relu=False, gain=0.5)
        c = _conv(nodes, inits, rng, f"/model.22/cv3.{i}", feat, 16, CLASSES, 1, 1, relu=False,
                  gain=CLS_GAIN / np.sqrt(16.0), bias=CLS_BIAS)
        for src, ch, acc in ((b, 4, boxes), (c, CLASSES, scores)):
            shape = f"{src}_shape"
            inits.append(numpy_helper.from_array(np.array([1, ch, -1], np.int64), shape))
            nodes.append(helper.make_node("Reshape", [src, shape], [f"{src}_flat"], name=f"{src}_Reshape"))
            acc.append(f"{src}_flat")
    nodes.append(helper.make_node("Concat", boxes, ["/model.22/box"], name="/model.22/Concat_3", axis=2))
    nodes.append(helper.make_node("Concat", scores, ["/model.22/cls"], name="/model.22/Concat_4", axis=2))
    # distances (left, top, right, bottom) in grid cells: Sigmoid × 8
    nodes.append(helper.make_node("Sigmoid", ["/model.22/box"], ["/model.22/dfl"], name="/model.22/dfl/Sigmoid"))
    inits.append(numpy_helper.from_array(np.array(8.0, np.float32), "/model.22/dfl_gain"))
    nodes.append(helper.make_node("Mul", ["/model.22/dfl", "/model.22/dfl_gain"], ["/model.22/dist"],
                                  name="/model.22/dfl/Mul"))
    inits.append(numpy_helper.from_array(np.array([2, 2], np.int64), "/model.22/split"))
    nodes.append(helper.make_node("Split", ["/model.22/dist", "/model.22/split"], ["/model.22/lt", "/model.22/rb"],
                                  name="/model.22/Split", axis=1))
    anchors, strides = [], []
    for s in STRIDES:
        n = size // s
        gy, gx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        anchors.append(np.stack([gx.ravel(), gy.ravel()]))
        strides.append(np.full(n * n, s))
    inits.append(numpy_helper.from_array(np.concatenate(anchors, 1)[None].astype(np.float32), "/model.22/anchors"))
    inits.append(numpy_helper.from_array(np.concatenate(strides)[None, None].astype(np.float32), "/model.22/strides"))
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "/model.22/half"))
    nodes += [
        helper.make_node("Sub", ["/model.22/anchors", "/model.22/lt"], ["/model.22/x1y1"], name="/model.22/Sub"),
        helper.make_node("Add", ["/model.22/anchors", "/model.22/rb"], ["/model.22/x2y2"], name="/model.22/Add"),
        helper.make_node("Add", ["/model.22/x1y1", "/model.22/x2y2"], ["/model.22/sum"], name="/model.22/Add_1"),
        helper.make_node("Mul", ["/model.22/sum", "/model.22/half"], ["/model.22/cxy"], name="/model.22/Mul"),
        helper.make_node("Sub", ["/model.22/x2y2", "/model.22/x1y1"], ["/model.22/wh"], name="/model.22/Sub_1"),
        helper.make_node("Concat", ["/model.22/cxy", "/model.22/wh"], ["/model.22/dbox_cells"],
                         name="/model.22/Concat_2", axis=1),
        helper.make_node("Mul", ["/model.22/dbox_cells", "/model.22/strides"], ["/model.22/dbox"],
                         name="/model.22/Mul_2"),
        helper.make_node("Sigmoid", ["/model.22/cls"], ["/model.22/scores"], name="/model.22/Sigmoid"),
        helper.make_node("Concat", ["/model.22/dbox", "/model.22/scores"], ["output0"], name="/model.22/Concat_5",
                         axis=1),
    ]
    anchors_n = sum((size // s) ** 2 for s in STRIDES)
    dims: list[int | str] = ["batch", 3, "height", "width"] if open_input else [1, 3, size, size]
    graph = helper.make_graph(
        nodes, "yolov8_like",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + CLASSES, anchors_n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    model.producer_name, model.producer_version = "ortlab-fixtures", "1"
    onnx.checker.check_model(model, full_check=True)
    return model


def check(model: onnx.ModelProto, size: int = SIZE) -> None:
    """Print the output ranges and the share of anchors above 0.3 on the calibration photos."""
    import onnxruntime as ort
    from PIL import Image

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in sorted(PHOTOS.glob("*.jpg"))[::8]:
        img = np.asarray(Image.open(f).convert("RGB").resize((size, size)), np.float32) / 255
        out = sess.run(None, {"images": img.transpose(2, 0, 1)[None]})[0][0]
        sc = out[4:].max(axis=0)
        print(f"{f.name:32s} boxes {out[:4].min():7.1f}..{out[:4].max():6.1f}  scores {sc.min():.3f}..{sc.max():.3f}"
              f"  above 0.3: {np.mean(sc > 0.3):.2%}")


if __name__ == "__main__":
    is_open = "--open-input" in sys.argv[1:]
    size, out = (OPEN_SIZE, OPEN_OUT) if is_open else (SIZE, OUT)
    m = build(size, open_input=is_open)
    onnx.save_model(m, str(out))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    if "--check" in sys.argv[1:]:
        check(m, size)
