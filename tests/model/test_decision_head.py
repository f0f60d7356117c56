"""A YOLO-style detector's class-score branch, checked by running the model: changing the weights of any Conv the
walk names moves the class scores and never the boxes; changing any other Conv moves the boxes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.model.decision_head import LOGITS_HEAD, SCORE_BRANCH, decision_head, logits_head, score_branch

FIXTURES = "tests/fixtures"


def decision_head_file(path: str):
    """The decision head as tune reads it: the graph only, external weights not read."""
    return decision_head(onnx.load(path, load_external_data=False))
CLASSES = 3


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(0)

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(self, name: str, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, act: bool = True) -> str:
        w = self.const(f"{name}.w", (self.rng.normal(0, 0.5, (cout, cin, k, k)) / k).astype(np.float32))
        b = self.const(f"{name}.b", self.rng.normal(0, 0.1, cout).astype(np.float32))
        out = f"{name}/out"
        self.nodes.append(helper.make_node("Conv", [x, w, b], [out], name=f"{name}/Conv", pads=[k // 2] * 4,
                                           strides=[stride, stride]))
        if not act:
            return out
        self.nodes.append(helper.make_node("Sigmoid", [out], [f"{name}/sig"], name=f"{name}/act/Sigmoid"))
        self.nodes.append(helper.make_node("Mul", [out, f"{name}/sig"], [f"{name}/act"], name=f"{name}/act/Mul"))
        return f"{name}/act"

    def op(self, op: str, ins: list[str], out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out


def _detector(shared: bool = False) -> onnx.ModelProto:
    """Two scales of a YOLOv8-like head: per scale a box branch (cv2: Conv, Conv → 4 channels) and a class branch
    (cv3: Conv, Conv → 3 classes) joined on the channel axis, reshaped, joined across scales, split [4, 3], the
    boxes decoded (× stride + offset), the scores through a Sigmoid, both joined. ``shared``: the first class Conv
    of scale 0 also feeds the box branch (so it, and what feeds it, is not the score branch's alone)."""
    g = _Builder()
    p0 = g.conv("neck0", "images", 3, 8, stride=2)
    p1 = g.conv("neck1", p0, 8, 8, stride=2)
    joined = []
    for i, p in enumerate((p0, p1)):
        box = g.conv(f"cv2.{i}.0", p, 8, 8)
        cls = g.conv(f"cv3.{i}.0", p, 8, 8)
        if shared and i == 0:
            box = g.op("Add", [box, cls], "cv2.0.mix")
        box = g.conv(f"cv2.{i}.1", box, 8, 4, k=1, act=False)
        cls = g.conv(f"cv3.{i}.1", cls, 8, CLASSES, k=1, act=False)
        cat = g.op("Concat", [box, cls], f"head/Concat_{i}", axis=1)
        shape = g.const(f"shape{i}", np.array([1, 4 + CLASSES, -1], dtype=np.int64))
        joined.append(g.op("Reshape", [cat, shape], f"head/Reshape_{i}"))
    allx = g.op("Concat", joined, "head/Concat_all", axis=2)
    sizes = g.const("split", np.array([4, CLASSES], dtype=np.int64))
    g.nodes.append(helper.make_node("Split", [allx, sizes], ["head/box", "head/cls"], name="head/Split", axis=1))
    stride = g.op("Mul", ["head/box", g.const("stride", np.array(8.0, dtype=np.float32))], "head/Mul")
    decoded = g.op("Add", [stride, g.const("offset", np.array(4.0, dtype=np.float32))], "head/Add")
    scores = g.op("Sigmoid", ["head/cls"], "head/Sigmoid")
    g.op("Concat", [decoded, scores], "output0", axis=1)
    graph = helper.make_graph(g.nodes, "det", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + CLASSES, 320])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"images": x})[0]


def _moved(model: onnx.ModelProto, conv: onnx.NodeProto, x: np.ndarray, base: np.ndarray) -> tuple[bool, bool]:
    """(boxes moved, scores moved) when ``conv``'s weights are scaled by 1.5."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    init = next(t for t in changed.graph.initializer if t.name == conv.input[1])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.5, init.name))
    out = _run(changed, x)
    return (not np.allclose(out[:, :4], base[:, :4], atol=1e-6),
            not np.allclose(out[:, 4:], base[:, 4:], atol=1e-6))


@pytest.mark.parametrize("shared", [False, True])
def test_the_score_branch_moves_only_the_scores_and_every_other_conv_moves_the_boxes(shared):
    model = _detector(shared)
    branch = set(score_branch(model))
    x = np.random.default_rng(1).normal(size=(1, 3, 32, 32)).astype(np.float32)
    base = _run(model, x)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    for conv in convs:
        boxes, scores = _moved(model, conv, x, base)
        if conv.name in branch:
            assert scores and not boxes, conv.name
        else:
            assert boxes, conv.name  # outside the branch only what reaches the boxes too
    expected = {"cv3.0.1/Conv", "cv3.1.0/Conv", "cv3.1.0/act/Sigmoid", "cv3.1.0/act/Mul", "cv3.1.1/Conv"}
    if not shared:
        expected |= {"cv3.0.0/Conv", "cv3.0.0/act/Sigmoid", "cv3.0.0/act/Mul"}
    assert branch == expected
    assert not any(name.startswith("head/") for name in branch)  # the post-processing is the head pattern's


def test_each_model_gets_its_own_decision_head_and_a_model_without_one_none():
    head = decision_head_file(f"{FIXTURES}/yolov8_detector.onnx")
    assert head is not None and head.what == SCORE_BRANCH
    assert head.nodes == ("/model.22/cv3.0/Conv", "/model.22/cv3.1/Conv", "/model.22/cv3.2/Conv")
    head = decision_head_file("sample_models/efficientnet_lite0/model.onnx")
    assert head is not None and (head.what, head.nodes) == (LOGITS_HEAD, ("node_linear",))
    assert "node_linear" in head.why()
    for name in ("db_detector", "yolo_detector", "text_encoder", "vad_rnn"):  # maps, rows with objectness, rank 3
        assert decision_head_file(f"{FIXTURES}/{name}.onnx") is None, name


def _classifier(tail: list[str], extra_reader: bool = False, classes: int = 10) -> onnx.ModelProto:
    """x [1, 8] → Gemm → ``tail`` ops → y; ``extra_reader``: the Gemm's output is also a second graph output."""
    w = numpy_helper.from_array(np.ones((classes, 8), dtype=np.float32), "w")
    nodes = [helper.make_node("Gemm", ["x", "w"], ["z"], name="fc", transB=1)]
    x = "z"
    for i, op in enumerate(tail):
        node = helper.make_node(op, [x], [f"t{i}"], name=f"{op}_{i}")
        if op == "Softmax":
            node.attribute.append(helper.make_attribute("axis", 1))
        nodes.append(node)
        x = f"t{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, classes]))
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])], outputs,
                              [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_logits_head_is_the_projection_that_writes_the_class_scores_and_what_follows_it():
    assert logits_head(_classifier([])) == ("fc", "out")
    assert logits_head(_classifier(["Softmax"])) == ("fc", "Softmax_0", "out")
    assert logits_head(_classifier(["Relu"])) == ()  # an activation between: not the logits' own projection
    assert logits_head(_classifier([], extra_reader=True)) == ()  # two outputs
    assert logits_head(_classifier([], classes=1)) == ()  # one score: no classes to decide between


def test_without_shapes_on_the_joined_axis_no_branch_is_named():
    model = _detector()
    for t in model.graph.initializer:
        if t.name.startswith("shape"):  # a Reshape to [1, -1, 7·anchors]: the channel axis is not kept
            t.CopyFrom(numpy_helper.from_array(np.array([1, -1], dtype=np.int64), t.name))
    assert score_branch(model) == ()


def test_a_model_whose_weights_live_apart_is_read_without_them(tmp_path):
    path = tmp_path / "det.onnx"
    onnx.save(_detector(), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="det.data",
              size_threshold=0)  # even the split sizes
    head = decision_head_file(str(path))
    assert head is None  # the split sizes were not read: no branch is claimed, and nothing fails
    onnx.save(_detector(), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="det.data")
    head = decision_head_file(str(path))  # the usual threshold keeps small tensors inline: the branch is found
    assert head is not None and head.nodes == score_branch(_detector())


def _map_grid(model: onnx.ModelProto, tensor: str, x: np.ndarray) -> tuple[int, int]:
    """The (height, width) of ``tensor`` as the model computes it, read by running the model with it as an output."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
    s = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run([tensor], {"images": x})[0]
    return int(got.shape[2]), int(got.shape[3])


def test_the_branch_splits_by_scale_most_anchors_first_each_part_sized_by_the_score_map_it_writes():
    model = _detector()
    head = decision_head(model)
    assert head is not None and len(head.scales) == 2
    x = np.zeros((1, 3, 32, 32), dtype=np.float32)
    nodes = {n.name: n for n in model.graph.node}
    for part in head.scales:
        last = nodes[part.nodes[-1]]  # the part's last node writes its score map, read outside the part
        assert part.grid == _map_grid(model, last.output[0], x)
        assert {n.name.split(".")[1] for n in map(nodes.get, part.nodes)} == {part.nodes[0].split(".")[1]}
    assert [p.anchors for p in head.scales] == sorted((p.anchors for p in head.scales), reverse=True)
    assert head.scales[0].grid == (16, 16) and head.scales[1].grid == (8, 8)
    assert sorted(n for p in head.scales for n in p.nodes) == sorted(head.nodes)
    assert head.largest_scale() is head.scales[0]
    assert "16×16 scale" in head.why_scale(head.scales[0]) and "256 of the 320 anchors" in head.why_scale(head.scales[0])
    # open height and width: the scales are told apart only at the shapes the model runs at
    dynamic = onnx.ModelProto()
    dynamic.CopyFrom(model)
    for k, name in ((2, "height"), (3, "width")):
        dynamic.graph.input[0].type.tensor_type.shape.dim[k].dim_param = name
    dynamic.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "anchors"
    open_head = decision_head(dynamic)
    assert open_head is not None and open_head.nodes == head.nodes and open_head.scales == ()
    assert decision_head(dynamic, inputs={"images": [1, 3, 32, 32]}) == head
    wide = decision_head(dynamic, inputs={"images": [1, 3, 64, 32]})
    assert wide is not None and [p.grid for p in wide.scales] == [(32, 16), (16, 8)]
    # the fixture detector's branch is its three score Convs: one part per scale, 80×80 first
    three = decision_head_file(f"{FIXTURES}/yolov8_detector.onnx")
    assert three is not None and [(p.grid, len(p.nodes)) for p in three.scales] == [
        ((80, 80), 1), ((40, 40), 1), ((20, 20), 1)]
