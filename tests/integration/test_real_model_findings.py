"""What the real silero-vad 6.2.3 model (PyPI) showed, reproduced with small models built here with onnx.helper:
a weight kept in a Constant of the main graph and used through Unsqueeze in both branches of an If (the file grows
when ORT folds it once per branch; dynamic quantization cannot quantize weights computed by other nodes), an int64
scalar control input, an RNN state output, and data split for calibration and evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.cli import main as cli
from ortlab.data.dataset import split_dataset
from ortlab.data.feeds import control_values
from ortlab.data.loaders import load_tensor_file
from ortlab.core.errors import DataError
from ortlab.data.inputs import infer_specs, random_array
from ortlab.model.inspect import TensorInfo
from ortlab.checks.task_metrics import infer_roles
from ortlab.checks.eval_report import Task


def if_shared_weight(path: Path) -> Path:
    """x [1, 1, 128], flag (bool) → If: y = x @ Unsqueeze(W) × s in each branch; W [128, 128] a Constant of the main
    graph, as silero-vad keeps its LSTM weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(128, 128)).astype(np.float32), "W")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")

    def branch(name: str, scale: float) -> onnx.GraphProto:
        nodes = [helper.make_node("Unsqueeze", ["W", "axes"], [f"{name}_w3"]),
                 helper.make_node("MatMul", ["x", f"{name}_w3"], [f"{name}_y"], name=f"{name}_matmul"),
                 helper.make_node("Mul", [f"{name}_y", f"{name}_s"], [f"{name}_out"])]
        s = numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s")
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                                                 None)], [s])

    nodes = [helper.make_node("Constant", [], ["W"], value=w),
             helper.make_node("If", ["flag"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 128]),
                                       helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 128])], [axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    return path


def _optimize(argv, capsys) -> dict:
    assert cli.main(["optimize", *map(str, argv), "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_larger_optimized_file_says_why(tmp_path, capsys):
    src = if_shared_weight(tmp_path / "if.onnx")
    art = _optimize([src, tmp_path / "basic.onnx", "--precision", "fp32", "--opt-level", "basic"], capsys)
    assert art["size_bytes"] > 1.9 * art["source_size_bytes"]
    warning = next(w for w in art["warnings"] if w.startswith("The optimized file is"))
    assert "constant folding stored 2 precomputed tensor(s)" in warning
    assert "2 of them copies of the same data folded once per If/Loop/Scan branch that uses it" in warning
    assert "--opt-level disabled keeps the file at its input's size" in warning
    art = _optimize([src, tmp_path / "same.onnx", "--precision", "fp32", "--opt-level", "disabled"], capsys)
    assert not any(w.startswith("The optimized file is") for w in art["warnings"])


def test_nothing_quantized_says_why_and_is_not_ok(tmp_path, capsys):
    src = if_shared_weight(tmp_path / "if.onnx")
    art = _optimize([src, tmp_path / "q.onnx", "--precision", "int8", "--quant-mode", "dynamic"], capsys)
    assert art["coverage"]["quantized"] == {} and art["coverage"]["candidates"] == {"MatMul": 2}
    warning = next(w for w in art["warnings"] if w.startswith("Nothing was quantized"))
    assert ("ONNX Runtime quantized none of its 2 MatMul nodes: 2 MatMul node(s) take their weights from Unsqueeze "
            "nodes rather than stored tensors, and ONNX Runtime quantizes stored weights only (else_matmul, "
            "then_matmul); fold the constants first") in warning
    assert art["verdict"]["reasons"][0].startswith("nothing was quantized")
    assert art["verdict"]["level"] == "degraded"  # no data, yet certainly not an int8 model: never ok
    # with data the outputs are identical, and still the verdict is not ok
    np.savez(tmp_path / "d.npz", x=np.random.default_rng(1).normal(size=(6, 1, 128)).astype(np.float32),
             flag=np.array([True, False] * 3))
    art = _optimize([src, tmp_path / "q2.onnx", "--precision", "int8", "--quant-mode", "dynamic", "--data",
                     tmp_path / "d.npz"], capsys)
    assert art["verdict"]["level"] == "degraded"
    assert [o["sqnr_db"] for o in art["evaluation"]["outputs"]] == ["inf"]


def test_random_data_never_makes_up_a_control_input():
    info = [TensorInfo("input", "float32", ("batch", 256)), TensorInfo("sr", "int64", ())]
    sr = infer_specs(info, overrides={"input": [1, 256]})[1]
    assert sr.role == "other" and sr.batch_axis is None
    with pytest.raises(DataError) as exc:
        random_array(sr, np.random.default_rng(0), 1)
    assert str(exc.value).startswith("Model input 'sr' is an int64 scalar: a control value")
    assert "an .npz with one array per input, 'sr' among them" in str(exc.value)
    ids = infer_specs([TensorInfo("input_ids", "int64", ("batch", 8))])[0]
    assert random_array(ids, np.random.default_rng(0), 2).shape == (2, 8)  # token ids are not control inputs


def _refused_on_random_data(graph: onnx.GraphProto, tmp_path: Path, capsys) -> str:
    """``ortlab optimize`` int8 of ``graph`` (opset 13) on random data: it must refuse with a message and write
    nothing; its stderr."""
    model, out = tmp_path / f"{graph.name}.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), model)
    code = cli.main(["optimize", str(model), str(out), "--precision", "int8", "--allow-random-data", "--no-timing"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    assert not out.exists()
    return err


def test_a_string_input_is_refused_with_what_to_do(tmp_path, capsys):
    """Found on onnx's own test models (StringNormalizer): random data for a string input ended in "Cannot make data
    for input 'x' of type string." with nothing to do about it."""
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "strings", [x], [y])
    err = _refused_on_random_data(graph, tmp_path, capsys)
    assert ("Model input 'x' takes string values, which ortlab can neither make up nor read from data files" in err
            and "Export the model's numeric part" in err), err


def test_a_model_that_fails_on_random_data_is_told_so_not_about_preprocessing(tmp_path, capsys):
    """Found on onnx's own test models (PRelu with an old broadcast): ONNX Runtime's failure on random calibration
    data ended with "Check that the preprocessing … matches", for a model that has no image input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    target = numpy_helper.from_array(np.array([3, 3], np.int64), "target")  # 4 values cannot become 3×3
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                               helper.make_node("Reshape", ["h", "target"], ["y"])], "bad_reshape", [x], [y],
                              [w, target])
    err = _refused_on_random_data(graph, tmp_path, capsys)
    assert "The model fails on random data of its input shapes" in err and "preprocessing" not in err, err


def test_control_values_come_from_the_data(tmp_path):
    np.savez(tmp_path / "d.npz", input=np.zeros((3, 256), np.float32), sr=np.array([8000, 16000, 16000]))
    info = [TensorInfo("input", "float32", ("batch", 256)), TensorInfo("sr", "int64", ())]
    ds = load_tensor_file(tmp_path / "d.npz")
    assert control_values(ds, info) == {"sr": 8000}
    assert control_values(ds.subset([1, 2]), info) == {"sr": 16000}


def test_an_rnn_state_output_is_compared_as_a_tensor_not_an_embedding():
    outs = [np.zeros((1, 1), np.float32), np.zeros((2, 1, 128), np.float32), np.zeros((1, 7, 64), np.float32)]
    task, _, _, roles = infer_roles(["output", "stateN", "last_hidden_state"], outs, labeled=False)
    assert roles == {"output": Task.GENERIC, "stateN": Task.GENERIC, "last_hidden_state": Task.EMBEDDING}


def test_uploaded_data_is_split_into_disjoint_parts(tmp_path):
    labels = np.array([0] * 6 + [1] * 3)
    np.savez(tmp_path / "d.npz", x=np.arange(9, dtype=np.float32)[:, None], labels=labels)
    ds = load_tensor_file(tmp_path / "d.npz")
    cal, ev = split_dataset(ds)
    assert [s.index for s in ev.samples] == [2, 5, 8]  # every third of each class
    assert [s.index for s in cal.samples] == [0, 1, 3, 4, 6, 7]
    tiny = ds.subset([0, 1])
    assert split_dataset(tiny) == (tiny, tiny)  # too small to hold any out: said by the verdict instead


def test_the_hint_works_fold_then_quantize_the_branches(tmp_path, capsys):
    src = if_shared_weight(tmp_path / "if.onnx")
    _optimize([src, tmp_path / "folded.onnx", "--precision", "fp32", "--opt-level", "basic"], capsys)
    np.savez(tmp_path / "d.npz", x=np.random.default_rng(1).normal(size=(6, 1, 128)).astype(np.float32),
             flag=np.array([True, False] * 3))
    # ORT's quantizer puts the DynamicQuantizeLinear of x (read inside both branches) after the If: sorted back
    dynamic = [tmp_path / "folded.onnx", tmp_path / "q.onnx", "--precision", "int8", "--quant-mode", "dynamic",
               "--data", tmp_path / "d.npz"]
    art = _optimize([*dynamic, "--no-per-channel"], capsys)
    assert art["coverage"]["quantized"] == {"MatMul": 2} and art["coverage"]["in_subgraphs"] == 2
    onnx.checker.check_model(str(tmp_path / "q.onnx"), full_check=True)
    assert art["verdict"]["level"] in ("ok", "degraded")  # degraded only for the calibration overlap caveat
    assert all(float(o["sqnr_db"]) > 30 for o in art["evaluation"]["outputs"])
    # per channel, ONNX Runtime 1.31 writes MatMulInteger with a 3-D weight that its own fused kernel refuses at
    # run time ("b zero point is not valid"); whatever this runtime does, the run succeeds or ends in one line
    # without C++ signatures
    code = cli.main(["optimize", *map(str, dynamic), "--per-channel"])
    err = capsys.readouterr().err.strip()
    assert code == 0 or (err.count("\n") == 0 and "onnxruntime::" not in err and err.startswith("ortlab: error:"))


def test_per_position_class_probabilities_are_not_boxes():
    """PP-OCRv4's recognizer outputs softmax [N, 40, 6625]: its shape looks like YOLO's, its rows are probabilities
    per position, which CTC decodes into text (judged as strings, not boxes)."""
    logits = np.random.default_rng(0).normal(size=(1, 40, 6625))
    probs = (np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)).astype(np.float32)
    _, _, _, roles = infer_roles(["softmax_11.tmp_0"], [probs], labeled=False)
    assert roles == {"softmax_11.tmp_0": Task.SEQUENCE}
    yolo = np.random.default_rng(1).random((1, 8400, 85)).astype(np.float32)
    yolo[..., :4] *= 640  # box centres and sizes in input pixels, scores in [0, 1]
    _, _, _, roles = infer_roles(["output0"], [yolo], labeled=False)
    assert roles == {"output0": Task.BOXES}


def test_a_run_shows_only_the_inspection_warnings_that_hold_for_it():
    from ortlab.model.inspect import inspect_model, run_warnings

    info = inspect_model(Path(__file__).parents[1] / "fixtures" / "db_detector.onnx")
    int8_advice = [w for w in info.warnings if "int8" in w]
    assert len(int8_advice) == 2 and any(w.startswith("Input dimensions without") for w in info.warnings) is False
    assert not [w for w in run_warnings(info.warnings, int8=False) if "int8" in w]
    # the old-opset advice is left to the quantize step, which says once what it converted
    assert [w for w in run_warnings(info.warnings, int8=True) if "int8" in w] == [
        w for w in int8_advice if "older than 13" not in w]
    silero_like = ("Input dimensions without a number or a name (input) are taken from the data, else …",)
    assert run_warnings(silero_like, int8=True) == []
