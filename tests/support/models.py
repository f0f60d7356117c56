"""Tiny real ONNX models with fixed-seed weights, shared by the tests.

Every builder writes the model to the given path (or folder) and returns the path of the .onnx file.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def _save(model: onnx.ModelProto, path, **kwargs) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(path), **kwargs)
    return path


def conv_bn_graph(opset: int = OPSET, batch: str | int = "N", seed: int = 0, blocks: int = 3) -> onnx.ModelProto:
    """Conv+BatchNormalization+Relu blocks with a residual Add, GlobalAveragePool, Flatten and Gemm.

    Input "input" [batch, 3, 32, 32] float32, output "logits" [batch, 10] float32.
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    channels = 8
    prev, prev_c = "input", 3
    for b in range(blocks):
        w = rng.normal(0, 0.3, size=(channels, prev_c, 3, 3)).astype(np.float32)
        bias = rng.normal(0, 0.1, size=(channels,)).astype(np.float32)
        scale = rng.uniform(0.5, 1.5, size=(channels,)).astype(np.float32)
        shift = rng.normal(0, 0.1, size=(channels,)).astype(np.float32)
        mean = rng.normal(0, 0.1, size=(channels,)).astype(np.float32)
        var = rng.uniform(0.5, 1.5, size=(channels,)).astype(np.float32)
        p = f"block{b}"
        inits += [_init(f"{p}.conv.weight", w), _init(f"{p}.conv.bias", bias),
                  _init(f"{p}.bn.scale", scale), _init(f"{p}.bn.bias", shift),
                  _init(f"{p}.bn.mean", mean), _init(f"{p}.bn.var", var)]
        nodes += [
            helper.make_node("Conv", [prev, f"{p}.conv.weight", f"{p}.conv.bias"], [f"{p}.conv_out"],
                             name=f"{p}/Conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
            helper.make_node("BatchNormalization", [f"{p}.conv_out", f"{p}.bn.scale", f"{p}.bn.bias",
                                                    f"{p}.bn.mean", f"{p}.bn.var"], [f"{p}.bn_out"],
                             name=f"{p}/BatchNormalization", epsilon=1e-5),
            helper.make_node("Relu", [f"{p}.bn_out"], [f"{p}.relu_out"], name=f"{p}/Relu"),
        ]
        if b > 0:  # residual connection around every block after the first
            nodes.append(helper.make_node("Add", [f"{p}.relu_out", prev], [f"{p}.out"], name=f"{p}/Add"))
            prev = f"{p}.out"
        else:
            prev = f"{p}.relu_out"
        prev_c = channels
    fc_w = rng.normal(0, 0.3, size=(10, channels)).astype(np.float32)
    fc_b = rng.normal(0, 0.1, size=(10,)).astype(np.float32)
    inits += [_init("fc.weight", fc_w), _init("fc.bias", fc_b)]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["gap_out"], name="head/GlobalAveragePool"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="head/Flatten", axis=1),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"], name="head/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "conv_bn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ortlab-tests",
                              producer_version="1.0")
    model.ir_version = 8
    return model


def conv_bn_model(path, opset: int = OPSET, batch: str | int = "N", seed: int = 0, blocks: int = 3) -> Path:
    """Save :func:`conv_bn_graph` (3 Conv+BN+Relu blocks, 2 residual Adds, GAP, Flatten, Gemm) to ``path``."""
    return _save(conv_bn_graph(opset, batch, seed, blocks), path)


def matmul_graph(seed: int = 0, hidden: int = 32, seq: int = 16) -> onnx.ModelProto:
    """A small transformer-like block: self-attention (MatMul/Add/Softmax), residual Add + LayerNormalization,
    an MLP (MatMul+Add, Gelu written as Erf math, MatMul+Add) and a final residual + LayerNormalization.

    Input "input" [N, 16, 32] float32, output "output" [N, 16, 32] float32.
    """
    rng = np.random.default_rng(seed)
    h, ff = hidden, hidden * 2
    w = lambda *s: np.asarray(rng.normal(0, 0.2, size=s), dtype=np.float32)
    inits = [
        _init("wq", w(h, h)), _init("bq", w(h)), _init("wk", w(h, h)), _init("bk", w(h)),
        _init("wv", w(h, h)), _init("bv", w(h)), _init("wo", w(h, h)), _init("bo", w(h)),
        _init("scale", np.array(1.0 / np.sqrt(h), dtype=np.float32)),
        _init("ln1.gamma", rng.uniform(0.5, 1.5, size=h).astype(np.float32)), _init("ln1.beta", w(h)),
        _init("w1", w(h, ff)), _init("b1", w(ff)), _init("w2", w(ff, h)), _init("b2", w(h)),
        _init("ln2.gamma", rng.uniform(0.5, 1.5, size=h).astype(np.float32)), _init("ln2.beta", w(h)),
        _init("sqrt2", np.array(np.sqrt(2.0), dtype=np.float32)),
        _init("one", np.array(1.0, dtype=np.float32)), _init("half", np.array(0.5, dtype=np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("MatMul", ["input", "wq"], ["q0"], name="attn/q/MatMul"), n("Add", ["q0", "bq"], ["q"], name="attn/q/Add"),
        n("MatMul", ["input", "wk"], ["k0"], name="attn/k/MatMul"), n("Add", ["k0", "bk"], ["k"], name="attn/k/Add"),
        n("MatMul", ["input", "wv"], ["v0"], name="attn/v/MatMul"), n("Add", ["v0", "bv"], ["v"], name="attn/v/Add"),
        n("Transpose", ["k"], ["kt"], name="attn/Transpose", perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["scores0"], name="attn/scores/MatMul"),
        n("Mul", ["scores0", "scale"], ["scores"], name="attn/scale/Mul"),
        n("Softmax", ["scores"], ["probs"], name="attn/Softmax", axis=-1),
        n("MatMul", ["probs", "v"], ["ctx"], name="attn/ctx/MatMul"),
        n("MatMul", ["ctx", "wo"], ["o0"], name="attn/o/MatMul"), n("Add", ["o0", "bo"], ["o"], name="attn/o/Add"),
        n("Add", ["o", "input"], ["res1"], name="attn/residual/Add"),
        n("LayerNormalization", ["res1", "ln1.gamma", "ln1.beta"], ["ln1"], name="ln1/LayerNormalization",
          axis=-1, epsilon=1e-5),
        n("MatMul", ["ln1", "w1"], ["f0"], name="mlp/fc1/MatMul"), n("Add", ["f0", "b1"], ["f1"], name="mlp/fc1/Add"),
        n("Div", ["f1", "sqrt2"], ["g0"], name="mlp/gelu/Div"), n("Erf", ["g0"], ["g1"], name="mlp/gelu/Erf"),
        n("Add", ["g1", "one"], ["g2"], name="mlp/gelu/Add"), n("Mul", ["f1", "g2"], ["g3"], name="mlp/gelu/Mul"),
        n("Mul", ["g3", "half"], ["g4"], name="mlp/gelu/Mul_1"),
        n("MatMul", ["g4", "w2"], ["f2"], name="mlp/fc2/MatMul"), n("Add", ["f2", "b2"], ["f3"], name="mlp/fc2/Add"),
        n("Add", ["f3", "ln1"], ["res2"], name="mlp/residual/Add"),
        n("LayerNormalization", ["res2", "ln2.gamma", "ln2.beta"], ["output"], name="ln2/LayerNormalization",
          axis=-1, epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes, "matmul_block",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", seq, h])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", seq, h])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortlab-tests",
                              producer_version="1.0")
    model.ir_version = 8
    return model


def matmul_model(path, seed: int = 0) -> Path:
    """Save :func:`matmul_graph` (MatMul, Add, Softmax, LayerNormalization, Erf-Gelu; input [N,16,32]) to ``path``."""
    return _save(matmul_graph(seed), path)


def external_data_model(directory, name: str = "model.onnx", location: str = "weights.bin") -> Path:
    """Save the Conv+BN model with all initializers in one external file ``location`` next to it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = conv_bn_graph()
    path = directory / name
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def big_chain_graph(n_nodes: int = 2000, width: int = 8, seed: int = 0) -> onnx.ModelProto:
    """About ``n_nodes`` nodes: repeated MatMul → Add → Relu chains with a residual Add every block.

    Input "input" [N, width], output "output" [N, width].
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    prev = "input"
    i = 0
    while len(nodes) + 4 <= n_nodes:
        inits += [_init(f"w{i}", rng.normal(0, 0.2, size=(width, width)).astype(np.float32)),
                  _init(f"b{i}", rng.normal(0, 0.1, size=(width,)).astype(np.float32))]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"l{i}/MatMul"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"l{i}/Add"),
            helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"l{i}/Relu"),
            helper.make_node("Add", [f"relu{i}", prev], [f"res{i}"], name=f"l{i}/Residual"),
        ]
        prev = f"res{i}"
        i += 1
    while len(nodes) < n_nodes:
        nodes.append(helper.make_node("Identity", [prev], [f"id{len(nodes)}"], name=f"tail/Identity{len(nodes)}"))
        prev = nodes[-1].output[0]
    nodes.append(helper.make_node("Identity", [prev], ["output"], name="final/Identity"))
    graph = helper.make_graph(
        nodes, "big_chain",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortlab-tests")
    model.ir_version = 8
    return model


def big_chain_model(path, n_nodes: int = 2000) -> Path:
    """Save :func:`big_chain_graph` (≈ n_nodes + 1 nodes) to ``path``."""
    return _save(big_chain_graph(n_nodes), path)


def random_image_folder(root, per_class: int, classes: int = 10, prefix: str = "", seed: int = 0) -> Path:
    """``classes`` folders named ``{prefix}{c}`` of ``per_class`` random 32×32 RGB PNGs; returns ``root``."""
    from PIL import Image

    root = Path(root)
    rng = np.random.default_rng(seed)
    for c in range(classes):
        (root / f"{prefix}{c}").mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / f"{prefix}{c}" / f"{i}.png")
    return root



def constant_weights_model(path, seed: int = 0) -> Path:
    """A Paddle-exported (PP-OCR style) Conv net: its weights are Constant nodes, not initializers, and its
    input's open dims carry the exporter's names (``p2o.DynamicDimension.N``)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
             helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(b, "b")),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    dims: list[str | int | None] = ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"]
    graph = helper.make_graph(nodes, "ppocr_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 8, dims[2], dims[3]])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return _save(model, path)


class RandomFeeds:
    """``n`` seeded feeds of input ``name``, float32 arrays of ``shape`` (standard normal, or uniform in [0, 1) with
    ``uniform``), as an ONNX Runtime calibration reader."""

    def __init__(self, name: str, shape: tuple[int, ...], n: int, seed: int = 1, uniform: bool = False) -> None:
        rng = np.random.default_rng(seed)
        draw = (lambda: rng.random(shape, np.float32)) if uniform else (
            lambda: rng.standard_normal(shape).astype(np.float32))
        self.feeds = iter([{name: draw()} for _ in range(n)])

    def get_next(self):
        return next(self.feeds, None)


def onnx_node_case(name: str, path) -> Path:
    """The model of ONNX's own backend test case ``name`` (``test_mvn`` …), as the onnx package generates it
    (``onnx.backend.test.case.node``: shipped in the wheel, nothing downloaded), saved at ``path``."""
    model = _onnx_node_cases()[name]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


@functools.cache
def _onnx_node_cases() -> dict[str, onnx.ModelProto]:
    # collected once per process: onnx builds its case list while importing the case modules, on the first call only
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own numpy references divide by zero on purpose
        return {c.name: c.model for c in collect_testcases(None) if c.model is not None}
