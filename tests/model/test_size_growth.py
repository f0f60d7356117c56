"""A result larger than its source says why: the weights it stores that the source computes at run time."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortlab.cli import main as cli
from ortlab.model.size_growth import growth_note


def computed_kernel_model(path):
    """A Conv whose 64×1×1×256 kernel is the outer product of two small vectors, computed at run time (as
    onnx-asr's resamplers build their sinc kernels): 1.3 kB of constants, a 64 kB weight once folded."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(64, 1, 1, 1)).astype(np.float32), "rows"),
             numpy_helper.from_array(rng.normal(size=(1, 1, 1, 256)).astype(np.float32), "cols")]
    nodes = [helper.make_node("Mul", ["rows", "cols"], ["kernel"], "/kernel/Mul"),
             helper.make_node("Conv", ["x", "kernel"], ["y"], "/conv", strides=[1, 64])]
    graph = helper.make_graph(nodes, "resampler", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 1, 61])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def test_a_folded_kernel_is_named_with_its_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    src = computed_kernel_model(tmp_path / "resampler.onnx")
    code = cli.main(["optimize", str(src), str(tmp_path / "out.onnx"), "--precision", "fp32", "--opt-level", "basic",
                     "--allow-random-data", "--verify-samples", "4"])
    err = capsys.readouterr()
    assert code == 0, err.err
    result = tmp_path / "out.onnx"
    ratio = result.stat().st_size / src.stat().st_size
    assert ratio > 10  # the 64 kB kernel, stored
    assert (f"The result is {ratio:.1f}× the source's size" in err.out
            and "it stores 'kernel' [64, 1, 1, 256] (65.5" in err.out
            and "which the source computes at run time from smaller constants" in err.out), err.out


def test_added_nodes_are_counted_and_a_smaller_result_says_nothing(tmp_path):
    src = computed_kernel_model(tmp_path / "a.onnx")
    model = onnx.load(str(src))
    model.graph.node.insert(0, helper.make_node("Identity", ["x"], ["x1"]))
    model.graph.node[-1].input[0] = "x1"
    onnx.save(model, str(tmp_path / "b.onnx"))
    size_a, size_b = src.stat().st_size, (tmp_path / "b.onnx").stat().st_size
    assert growth_note(tmp_path / "b.onnx", src, size_b, size_a) is None
    note = growth_note(src, tmp_path / "b.onnx", size_a, size_b)
    assert note is not None and note.startswith("The result is ") and note.endswith(
        "it adds 1 node (1 Identity) around what it changed.")
