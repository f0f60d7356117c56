"""Third-party-like models (tests/fixtures, built by scripts/build_fixtures.py) through the CLI: each recipe either
succeeds with its coverage and notes, or fails with one clear sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ortlab.cli import main as cli
from ortlab.runs.runspec import RunSpec
from ortlab.runtime import providers
from ortlab.model.inspect import inspect_model
from ortlab.transforms.optimize import hardware_specific_domains
from tests.support.models import onnx_node_case

FIXTURES = Path(__file__).parents[1] / "fixtures"
TEXT, DB, YOLO, VAD, FP16 = (FIXTURES / f"{n}.onnx" for n in
                             ("text_encoder", "db_detector", "yolo_detector", "vad_rnn", "fp16_net"))
FP32 = ["--precision", "fp32"]
FP16_RECIPE = ["--precision", "fp16"]
DYNAMIC = ["--precision", "int8", "--quant-mode", "dynamic"]
STATIC = ["--precision", "int8", "--allow-random-data", "--calibration-samples", "2", "--verify-samples", "2"]


def optimize(model: Path, out: Path, recipe: list[str], capsys) -> tuple[int, dict, str]:
    """``ortlab optimize --json``: (exit status, the artifact as plain data or {} when it failed, stderr)."""
    code = cli.main(["optimize", str(model), str(out), *recipe, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else {}), captured.err.strip()


def test_fixtures_are_small_and_valid():
    for path in (TEXT, DB, YOLO, VAD, FP16):
        assert path.stat().st_size < 5 * 2**20
        onnx.checker.check_model(str(path), full_check=True)


# -- inspect -----------------------------------------------------------------------------------------------------


def test_inspect_counts_constant_node_weights_and_subgraphs():
    db = inspect_model(DB)
    assert db.constant_params == db.param_count == 8517 and db.constant_bytes == 4 * 8517
    assert any("held in Constant nodes" in w for w in db.warnings)
    vad = inspect_model(VAD)
    assert vad.param_count == vad.constant_params > 40_000
    assert vad.subgraph_node_count > 0 and vad.node_count > len(onnx.load(str(VAD)).graph.node)
    # the Gemm and Max/CumSum nodes inside the If branches are counted
    assert vad.op_counts[("", "Gemm")] == 5 and vad.op_counts[("", "Max")] == 1 and vad.op_counts[("", "CumSum")] == 1
    assert any(f"{vad.subgraph_node_count} of its {vad.node_count} nodes are in subgraphs" in w for w in vad.warnings)
    text = inspect_model(TEXT)
    assert text.constant_params == 0 and text.param_count > 100_000


def test_inspect_cli_says_constant_and_subgraph_counts(capsys):
    assert cli.main(["inspect", str(VAD)]) == 0
    out = capsys.readouterr().out
    assert "in Constant nodes)" in out and "in subgraphs)" in out


@pytest.mark.parametrize("past_checker", [False, True])
def test_ir_version_newer_than_the_runtime_names_both_versions(tmp_path, capsys, past_checker):
    """Also past what onnx's checker knows: its "Your model ir_version 15 is higher than the checker's (14)" told
    neither what reads it nor what to do."""
    newest = providers.max_ir_version()
    m = onnx.load(str(FP16))
    m.ir_version = max(newest, onnx.IR_VERSION) + 1 if past_checker else newest + 1
    path = tmp_path / "new_ir.onnx"
    onnx.save(m, str(path))
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"This model has IR version {m.ir_version}; ONNX Runtime {ort.__version__} reads up to {newest}" in err
    assert err.count("\n") == 0 and "onnxruntime_src" not in err


def test_explain_ort_error_keeps_the_reason_without_cpp_locations():
    text = ("[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 onnxruntime::Model"
            "::Model(onnx::ModelProto&&, const onnxruntime::PathString&) Unsupported model IR version: 14, max "
            "supported IR version: 13")
    assert providers.explain_ort_error(text).startswith("This model has IR version 14; ONNX Runtime")
    run = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Status Message: "
           "/onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:91 onnxruntime::ReshapeHelper::"
           "ReshapeHelper(const onnxruntime::TensorShape&, bool) The input tensor cannot be reshaped.")
    assert providers.explain_ort_error(run) == ("Non-zero status code returned while running Reshape node. Status "
                                                "Message: The input tensor cannot be reshaped.")


def test_an_opset_older_than_onnx_runtime_runs_is_said_with_the_way_out(tmp_path, capsys):
    """AveragePool-1 (opset 6, as the onnx package's pytorch-converted models have it): ORT's kernels start at 7."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 7, 7])
    g = helper.make_graph([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2])], "old", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 3
    onnx.save(m, str(tmp_path / "old.onnx"))
    code, _, err = optimize(tmp_path / "old.onnx", tmp_path / "out.onnx", ["--precision", "fp32"], capsys)
    assert code == 1 and err.count("\n") == 0, err
    assert "no kernel for AveragePool version 1 (its kernels start at version 7)" in err
    assert "convert_version(model, 13)" in err and "Version mismatch" not in err
    # said before any work (an int8 run calibrated and quantized, then failed at "verify:"), and by inspect
    code, _, err = optimize(tmp_path / "old.onnx", tmp_path / "q.onnx", ["--precision", "int8", "--allow-random-data"],
                            capsys)
    assert code == 1 and err.startswith("ortlab: error: ONNX Runtime could not load the model: ONNX Runtime has no "
                                        "kernel for AveragePool version 1"), err
    assert cli.main(["inspect", str(tmp_path / "old.onnx")]) == 1
    assert "no kernel for AveragePool version 1" in capsys.readouterr().err


def test_a_model_onnx_runtime_cannot_run_is_refused_before_any_work(tmp_path, capsys):
    """A batch-first GRU (layout=1), valid ONNX that ORT's CPU kernel refuses: int8 calibrated with it and failed
    there with "The model fails on random data of its input shapes: it may need real inputs … or other shapes", a
    wrong remedy. The run now loads the source first and says ORT's reason, for every precision."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 1, 6])
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
               for n, s in (("W", (1, 18, 4)), ("R", (1, 18, 6)))]
    g = helper.make_graph([helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=6, layout=1)], "gru", [x], [y],
                          weights)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(tmp_path / "gru.onnx"))
    for recipe in (["--precision", "int8", "--allow-random-data"], ["--precision", "fp16"]):
        code, _, err = optimize(tmp_path / "gru.onnx", tmp_path / f"{recipe[1]}.onnx", recipe, capsys)
        assert code == 1 and err.count("\n") == 0, err
        assert err.startswith("ortlab: error: ONNX Runtime could not load the model: "), err
        assert "layout" in err and err.endswith("ortlab's recipes start from a model ONNX Runtime runs as it is."), err
        assert "random data" not in err and not (tmp_path / f"{recipe[1]}.onnx").exists()


def test_a_model_the_checker_rejects_and_onnx_runtime_runs_goes_through_every_recipe(tmp_path, capsys):
    """ONNX's own MeanVarianceNormalization test model: the ONNX checker rejects its function body (a Constant
    inside it), ORT runs it, and inspect says so and takes it. The optimize step then re-checked it and stopped
    ("optimize: invalid model: …"), for fp32 and for int8 alike; as at upload, ORT is now the judge there: it loads
    the model, and the optimized result must match its input."""
    src = onnx_node_case("test_mvn", tmp_path / "mvn.onnx")
    for recipe in (["--precision", "fp32"], ["--precision", "int8", "--allow-random-data"]):
        code, art, err = optimize(src, tmp_path / f"{recipe[1]}.onnx", recipe, capsys)
        assert code == 0, err
        assert any(w.startswith("The ONNX checker rejects this model") for w in art["warnings"]), art["warnings"]
        assert any(n.startswith("The ONNX checker rejects the graph ONNX Runtime wrote") and "match the source's" in n
                   for n in art["notes"]), art["notes"]


def test_a_model_with_no_inputs_is_not_calibrated(tmp_path, capsys):
    """ONNX's Constant test model takes no inputs: static int8 failed at calibrate with ORT's "No data is
    collected.", said as "The model fails on random data of its input shapes"."""
    src = onnx_node_case("test_constant", tmp_path / "constant.onnx")
    code, _, err = optimize(src, tmp_path / "static.onnx", ["--precision", "int8", "--allow-random-data"], capsys)
    assert code == 2 and err == ("ortlab: error: This model takes no inputs: it computes its outputs from its own "
                                 "constants, so static int8 has nothing to calibrate. Dynamic int8 (--quant-mode "
                                 "dynamic) quantizes its weights alone; fp16 converts it."), err
    code, art, err = optimize(src, tmp_path / "fp16.onnx", ["--precision", "fp16", "--allow-random-data"], capsys)
    assert code == 0 and art["verdict"]["level"] == "degraded", err


def test_a_source_that_fails_on_made_up_inputs_names_the_setting_remedy(tmp_path, capsys):
    """ONNX's Dropout test model takes its ratio as a float input: random data gave a ratio outside [0, 1), and the
    run stopped with ORT's words alone. The sentence now says the inputs were made up and how to give a setting's
    value; given, the run goes through."""
    src = onnx_node_case("test_dropout_default_mask_ratio", tmp_path / "dropout.onnx")
    code, _, err = optimize(src, tmp_path / "a.onnx", ["--precision", "fp16", "--allow-random-data"], capsys)
    assert code == 1 and "The reference model failed to run on sample 1: " in err and "ratio must be in the range" in err
    assert err.endswith("Its inputs were made up at random: give real data, or the value an input that holds a "
                        "setting takes (--input-value NAME=VALUE)."), err
    code, art, err = optimize(src, tmp_path / "b.onnx", ["--precision", "fp16", "--allow-random-data", "--input-value",
                                                          "r=0.5"], capsys)
    assert code == 0 and art["verdict"]["level"] == "degraded", err


def _custom_op_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("FancyOp", ["x"], ["y"], domain="my.custom", name="fancy")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.custom", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_unknown_custom_domain_op_is_named_at_upload(tmp_path, capsys):
    path = _custom_op_model(tmp_path / "custom.onnx")
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "ONNX Runtime has no kernel for FancyOp (domain 'my.custom'): no custom-op library is registered" in err
    assert "--custom-op-library" in err


def test_custom_op_library_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(providers.CUSTOM_OPS_ENV, raising=False)
    assert cli.main(["--custom-op-library", str(tmp_path / "missing.so"), "inspect", str(FP16)]) == 2
    assert "Custom-op library not found" in capsys.readouterr().err
    not_a_library = tmp_path / "lib.so"
    not_a_library.write_bytes(b"not a shared object")
    assert cli.main(["--custom-op-library", str(not_a_library), "inspect", str(FP16)]) == 1
    assert "cannot load custom-op library" in capsys.readouterr().err
    assert providers.CUSTOM_OPS_ENV not in __import__("os").environ  # the CLI gives the environment back


def test_sessions_register_the_custom_op_libraries(monkeypatch):
    registered: list[str] = []
    monkeypatch.setenv(providers.CUSTOM_OPS_ENV, "/opt/a.so")
    monkeypatch.setattr(ort.SessionOptions, "register_custom_ops_library",
                        lambda self, path: registered.append(path), raising=False)
    providers.session_options()
    assert registered == ["/opt/a.so"]


# -- optimize: fp32, fp16, int8 dynamic and static ---------------------------------------------------------------


@pytest.mark.slow
def test_text_encoder(tmp_path, capsys):
    code, art, err = optimize(TEXT, tmp_path / "fp32.onnx", FP32, capsys)
    assert code == 0, err
    note = next(n for n in art["notes"] if "ONNX checker rejects" in n)
    assert "LayerNormalization" in note and "outputs match the source's on a random input" in note
    assert not any("checker" in w for w in art["warnings"])
    code, art, err = optimize(TEXT, tmp_path / "fp16.onnx", FP16_RECIPE, capsys)
    assert code == 0, err
    code, art, err = optimize(TEXT, tmp_path / "dyn.onnx", DYNAMIC, capsys)
    assert code == 0, err
    cov = art["coverage"]
    assert cov["quantized"]["MatMul"] >= 12 and cov["candidates"]["MatMul"] == 16
    assert not any("pre-processing" in w for w in art["warnings"])
    code, art, err = optimize(TEXT, tmp_path / "static.onnx",
                              [*STATIC, "--shape", "input_ids=1,16", "--shape", "attention_mask=1,16"], capsys)
    assert code == 0, err
    assert art["coverage"]["quantized"]["MatMul"] == 12  # the 4 attention MatMuls: the known-pattern scope
    (attention,) = [n for n in art["notes"] if n.startswith("Transformer attention:")]
    assert all(f" /layers.{i}/MatMul{s}," in attention for i in (0, 1) for s in ("", "_1")), attention


@pytest.mark.slow
def test_db_detector_constant_weights(tmp_path, capsys):
    for name, recipe in (("fp32", FP32), ("fp16", FP16_RECIPE)):
        code, _, err = optimize(DB, tmp_path / f"{name}.onnx", recipe, capsys)
        assert code == 0, err
    code, art, err = optimize(DB, tmp_path / "dyn.onnx", DYNAMIC, capsys)
    assert code == 0, err
    assert art["coverage"]["quantized"] == {}
    assert ("Nothing was quantized: the model has no Gemm, MatMul nodes (subgraphs included); its weighted nodes are "
            "6 Conv, 2 ConvTranspose; the result computes like the source model. Use static quantization for Conv "
            "models.") in art["warnings"]
    assert art["verdict"]["level"] == "degraded"  # no evaluation data, yet certainly not an int8 model: said first
    assert art["verdict"]["reasons"][0].startswith("nothing was quantized")
    assert any("weight tensor(s) held in Constant nodes were moved into initializers" in n for n in art["notes"])
    code, art, err = optimize(DB, tmp_path / "static.onnx", [*STATIC, "--shape", "x=1,3,64,96"], capsys)
    assert code == 0, err
    assert art["coverage"]["quantized"]["Conv"] == 6 and art["coverage"]["quantized"]["ConvTranspose"] == 2


@pytest.mark.slow
def test_yolo_detector(tmp_path, capsys):
    code, art, err = optimize(YOLO, tmp_path / "fp16.onnx", FP16_RECIPE, capsys)
    assert code == 0, err
    code, art, err = optimize(YOLO, tmp_path / "static.onnx", STATIC, capsys)
    assert code == 0, err
    assert art["coverage"]["candidates"]["Conv"] == 8
    assert art["coverage"]["quantized"]["Conv"] == 5  # the detector's stem (its first 3 Convs) stays float
    assert any(n.startswith("Detector stem: ") for n in art["notes"])
    code, art, err = optimize(YOLO, tmp_path / "all.onnx", ["--precision", "fp32", "--opt-level", "all"], capsys)
    assert code == 0, err
    wrote_nchwc = bool(hardware_specific_domains(tmp_path / "all.onnx"))
    assert any("wrote hardware-specific ops" in w for w in art["warnings"]) == wrote_nchwc
    assert any("wrote no hardware-specific ops" in n for n in art["notes"]) != wrote_nchwc


def _both_branches(src: Path, out: Path) -> float:
    a, b = ort.InferenceSession(str(src)), ort.InferenceSession(str(out))
    rng = np.random.default_rng(0)
    worst = 0.0
    for sr in (16000, 8000):
        feed = {"input": rng.random((1, 256), dtype=np.float32), "state": np.zeros((2, 1, 32), np.float32),
                "sr": np.array(sr, dtype=np.int64)}
        for x, y in zip(a.run(None, feed), b.run(None, feed)):
            worst = max(worst, float(np.abs(x.astype(np.float32) - y.astype(np.float32)).max()))
    return worst


@pytest.mark.slow
def test_vad_rnn_with_if(tmp_path, capsys):
    code, _, err = optimize(VAD, tmp_path / "fp32.onnx", FP32, capsys)
    assert code == 0, err
    code, art, err = optimize(VAD, tmp_path / "fp16.onnx", FP16_RECIPE, capsys)
    assert code == 0, err
    assert _both_branches(VAD, tmp_path / "fp16.onnx") < 0.01
    code, art, err = optimize(VAD, tmp_path / "dyn.onnx", DYNAMIC, capsys)
    assert code == 0, err
    cov = art["coverage"]
    assert cov["quantized"] == {"MatMul": 5} and cov["candidates"] == {"MatMul": 5} and cov["in_subgraphs"] == 4
    assert _both_branches(VAD, tmp_path / "dyn.onnx") < 0.1
    # random data for the int64 scalar 'sr' would pick an If branch at random: refused, before any work
    shapes = ["--shape", "input=1,256", "--shape", "state=2,1,32"]
    code, art, err = optimize(VAD, tmp_path / "static.onnx", [*STATIC, *shapes], capsys)
    assert code == 1 and err == ("ortlab: error: Model input 'sr' is an int64 scalar: a control value (such "
                                 "as a sample rate, a flag or a count) that decides what the model computes, so "
                                 "ortlab does not make one up at random. Give real data that holds it: an .npz with "
                                 "one array per input, 'sr' among them (one value per sample); or, for random data, "
                                 "the value it takes: --input-value sr=VALUE.")
    # given, every random sample holds it: calibrated and verified on the 16 kHz branch
    code, art, err = optimize(VAD, tmp_path / "static.onnx", [*STATIC, *shapes, "--input-value", "sr=16000"], capsys)
    assert code == 0, err
    assert art["evaluation"]["random_data"] and art["verdict"]["level"] != "ok"
    assert "--input-value sr=16000" in RunSpec.from_dict(art["spec"]).cli_line()


def test_fp16_model(tmp_path, capsys):
    code, _, err = optimize(FP16, tmp_path / "fp32.onnx", FP32, capsys)
    assert code == 0, err
    code, _, err = optimize(FP16, tmp_path / "fp16.onnx", FP16_RECIPE, capsys)
    assert code == 1 and err == ("ortlab: error: convert: The model already has float16 weights and no float32 ones; "
                                 "convert the original float32 model instead.")
    code, _, err = optimize(FP16, tmp_path / "dyn.onnx", DYNAMIC, capsys)
    assert code == 1 and err == ("ortlab: error: quantize: int8 quantization needs a float32 model, and this one "
                                 "computes in float16 (its weights are float16): quantize the float32 original "
                                 "instead.")


def test_the_cli_prints_coverage(tmp_path, capsys):
    assert cli.main(["optimize", str(VAD), str(tmp_path / "q.onnx"), *DYNAMIC]) == 0
    assert "  quantized  MatMul 5/5 (4 in subgraphs)" in capsys.readouterr().out.splitlines()


# -- no native stderr on failures --------------------------------------------------------------------------------


def _reshape_fails_at_run_time(folder: Path) -> tuple[Path, Path, Path]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    shape = onnx.numpy_helper.from_array(np.array([7, 3], dtype=np.int64), "shape")
    bad = helper.make_model(helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g", [x], [y],
                                              [shape]), opset_imports=[helper.make_opsetid("", 17)])
    good = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])
    bad.ir_version = good.ir_version = 8
    onnx.save(bad, str(folder / "bad.onnx"))
    onnx.save(good, str(folder / "good.onnx"))
    np.save(folder / "data.npy", np.random.default_rng(0).random((2, 5), dtype=np.float32))
    return folder / "good.onnx", folder / "bad.onnx", folder / "data.npy"


def test_failing_compare_and_bench_print_one_line_and_no_ort_stderr(tmp_path, capfd):
    good, bad, data = _reshape_fails_at_run_time(tmp_path)
    assert cli.main(["compare", str(good), str(bad), "--data", str(data)]) == 1
    out, err = capfd.readouterr()
    assert err.startswith("ortlab: error: The candidate model failed to run on sample 1: Non-zero status code "
                          "returned while running Reshape node.")
    assert err.count("\n") == 1 and "onnxruntime_src" not in err and "[E:onnxruntime" not in err
    # with its shape given, the benchmark reaches the Reshape that fails at run time (without it, the missing --shape
    # is a usage error, exit 2)
    assert cli.main(["bench", str(bad), "--shape", "x=2,5", "--runs", "2", "--warmup", "1"]) == 1
    out, err = capfd.readouterr()
    assert err.startswith("ortlab: error:") and err.count("\n") == 1 and "[E:onnxruntime" not in err
