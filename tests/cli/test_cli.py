"""The ortlab command line: recipe flag round trip, commands on real models, one-line errors."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from ortlab.cli import common as cli_common, main as cli, optimize as cli_optimize
from ortlab.cli.main import NO_CALIBRATION_DATA_CLI
from ortlab.settings.config import (CalibrationMethod, Layout, OptLevel, Precision, PreprocessConfig, QuantConfig,
                           QuantFormat, QuantMode, QuantType, Recipe, Target, recipe_cli_line)
from ortlab.model.inspect import sha256_file

from tests.support.cli_flags import preprocess_of
from tests.support.models import conv_bn_model, random_image_folder

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_models" / "digits_cnn"
needs_sample = pytest.mark.skipif(not (SAMPLE / "manifest.json").is_file(), reason="digits_cnn sample not present")

ROUND_TRIP = [
    Recipe(),
    Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=OptLevel.ALL, keep_io_types=False),
    Recipe(precision=Precision.INT8),
    Recipe(precision=Precision.INT8, opt_level=OptLevel.BASIC, allow_random_data=True,
           quant=QuantConfig(quant_format=QuantFormat.QOPERATOR, activation_type=QuantType.UINT8,
                             weight_type=QuantType.UINT8, per_channel=False, reduce_range=True,
                             calibration_method=CalibrationMethod.PERCENTILE, percentile=99.99, num_bins=4096,
                             symmetric_activation=True, symmetric_weight=False, preprocess=False,
                             calibration_samples=37, seed=11)),
    Recipe(precision=Precision.INT8,
           quant=QuantConfig(calibration_method=CalibrationMethod.ENTROPY, num_bins=1024, num_quantized_bins=64,
                             op_types=("Conv", "MatMul"), op_types_to_exclude=("Gemm",),
                             nodes_to_exclude=("block0/Conv", "head/Gemm"))),
    Recipe(precision=Precision.INT8, quant=QuantConfig(moving_average=True, averaging_constant=0.05)),
    Recipe(precision=Precision.INT8, target=Target.CPU,
           quant=QuantConfig(mode=QuantMode.DYNAMIC, op_types=("MatMul",), per_channel=False)),
    Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_method=CalibrationMethod.DISTRIBUTION,
                                                       num_bins=512)),
]


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("cli") / "conv.onnx")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("imgs"), per_class=2, prefix="class", seed=1)


# -- recipe flags ------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ROUND_TRIP, ids=lambda r: r.label())
def test_recipe_cli_line_round_trip(recipe):
    argv = shlex.split(recipe_cli_line(recipe, model="in.onnx", out="out.onnx", calibration="calib dir"))
    assert argv[:2] == ["ortlab", "optimize"]
    ns = cli.build_parser().parse_args(argv[1:])
    assert cli_optimize.recipe_from_args(ns) == recipe
    assert (ns.model, ns.out) == ("in.onnx", "out.onnx")
    if recipe.precision == Precision.INT8 and recipe.quant.mode == QuantMode.STATIC:
        assert ns.calibration == "calib dir"


def test_help_texts_come_from_the_config_fields(capsys):
    code, out, _ = run(["optimize", "--help"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    help_of = lambda cls, name: next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)
    for text in (help_of(QuantConfig, "percentile"), help_of(Recipe, "opt_level"),
                 help_of(PreprocessConfig, "resize_mode")):
        assert " ".join(text.split()) in flat


# -- errors: one line on stderr, exit 2 for usage, 1 for failed work -------------------------------------


def error_cases(src, tmp):
    junk = tmp / "junk.onnx"
    junk.write_bytes(b"definitely not protobuf")
    bad_recipe = tmp / "bad.json"
    bad_recipe.write_text("{not json")
    return [
        (["inspect", tmp / "missing.onnx"], 2, f"Model not found: {tmp / 'missing.onnx'}"),
        (["inspect", junk], 1, "This file is not an ONNX model"),
        (["optimize", junk, tmp / "o.onnx"], 1, "not an ONNX model"),
        (["optimize", src, tmp / "o.onnx", "--precision", "int8", "--target", "gpu"], 2,
         "int8 on GPU needs TensorRT to run the QDQ graph, and TensorRT is not available here. Choose fp16 for GPU"),
        (["optimize", src, tmp / "o.onnx", "--precision", "int8", "--quant-mode", "dynamic", "--target", "gpu"], 2,
         "Choose fp16 for GPU, or target cpu"),
        (["optimize", src, tmp / "o.onnx", "--precision", "int8"], 2, NO_CALIBRATION_DATA_CLI),
        (["optimize", src, tmp / "o.onnx", "--precision", "fp16", "--quant-mode", "dynamic"], 2,
         "--quant-mode only applies with --precision int8."),
        (["optimize", src, src], 2, "would overwrite the source model"),
        (["optimize", src, tmp / "o.onnx", "--precision", "int9"], 2, "argument --precision: invalid choice: 'int9'"),
        (["optimize", src, tmp / "o.onnx", "--precision", "int8", "--calibration", tmp / "nodata"], 2,
         f"Data not found: {tmp / 'nodata'}"),
        (["bench", src, "--batch-sizes", "1", "0"], 2, "Batch sizes (batch_sizes) must each be at least 1; got 0."),
        (["bench", src, "--runs", "5", "--duration", "1"], 2, "--runs only applies with --duration 0.0."),
        (["compare", src, src], 2, "compare needs evaluation data: give --data with a folder of images"),
        (["run", bad_recipe, src], 2, "The recipe is not valid JSON"),
        (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
        ([], 2, "the following arguments are required: COMMAND"),
    ]


def test_error_table(src, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv, code, message in error_cases(src, tmp_path):
        got, out, err = run(argv, capsys)
        assert (got, out) == (code, ""), argv
        assert err.startswith("ortlab: error: ") and message in err, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "o.onnx").exists()


# -- commands ---------------------------------------------------------------------------------------------


def test_inspect_human_and_json(src, capsys):
    code, out, _ = run(["inspect", src], capsys)
    assert code == 0 and "BatchNormalization×3" in out and "input     input  float32  [N, 3, 32, 32]" in out
    code, out, _ = run(["inspect", src, "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["op_counts"]["Conv"] == 3 and info["inputs"][0]["shape"] == ["N", 3, 32, 32]


@pytest.mark.slow
def test_optimize_to_file_and_to_folder(src, image_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    digest = sha256_file(src)
    out = tmp_path / "res" / "fp32.onnx"
    code, text, err = run(["optimize", src, out, "--calibration", image_dir], capsys)
    assert code == 0 and f"wrote {out}" in text
    # the only things on stderr: the preprocessing it used and where each value came from, and that the result's
    # folder is new (a typo in OUT does not go unnoticed)
    assert err == ("ortlab: preprocessing: size 32×32 (detected from a fixed input shape); resize stretch (default); "
                   "layout NCHW (detected from the model input); channels 3 (detected from the model input); channel "
                   "order RGB (default); scale 0-1 (default); mean 0, 0, 0 (default); std 1, 1, 1 (default); dtype "
                   f"float32 (detected from the model input)\nortlab: the folder {out.parent} does not exist: it is "
                   "created for the result\n")
    assert "logits: max|Δ| " in text and "top-1 agreement 100.00%" in text
    assert sorted(p.name for p in out.parent.iterdir()) == ["fp32.onnx"]  # no temp folder left
    nodes = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "BatchNormalization" not in nodes and "FusedConv" in nodes

    folder = tmp_path / "res" / "int8"
    code, text, _ = run(["optimize", src, folder, "--precision", "int8", "--calibration", image_dir,
                         "--calibration-samples", "10", "--verify-samples", "5", "--json"], capsys)
    assert code == 0
    art = json.loads(text)
    assert sorted(p.name for p in folder.iterdir()) == ["artifact.json", "model.onnx", "model.qdq.onnx",
                                                        "recipe.json"]  # the QDQ graph, for ortlab analyze
    assert art["recipe"]["quant"]["calibration_samples"] == 10 and art["evaluation"]["n_samples"] == 5
    assert art["sha256"] == sha256_file(folder / "model.onnx")
    assert sha256_file(src) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]  # nothing in the current directory


def test_optimize_static_with_random_data_is_flagged(src, tmp_path, capsys):
    code, text, _ = run(["optimize", src, tmp_path / "r.onnx", "--precision", "int8", "--allow-random-data",
                         "--calibration-samples", "4", "--verify-samples", "2"], capsys)
    assert code == 0 and "RANDOM DATA was used" in text


@pytest.mark.slow
def test_bench_json_and_table(src, tmp_path, capsys):
    copy = tmp_path / "copy" / "conv.onnx"
    copy.parent.mkdir()
    copy.write_bytes(src.read_bytes())
    code, out, _ = run(["bench", src, copy, "--batch-sizes", "1", "4", "--runs", "5", "--warmup", "1",
                        "--threads", "1", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    res = doc["results"]
    assert [(r["variant"].split("/")[0], r["batch_size"], r["n"]) for r in res] == [
        (src.parent.name, 1, 5), (src.parent.name, 4, 5), ("copy", 1, 5), ("copy", 4, 5)]
    assert all(r["p50"] <= r["p99"] and r["providers"] == ["CPUExecutionProvider"] for r in res)
    assert doc["config"]["intra_op_threads"] == 1 and doc["baseline_rss_mb"] is None
    code, out, _ = run(["bench", src, "--runs", "3", "--memory"], capsys)
    assert code == 0 and "p50 ms" in out and "peak MB" in out and "no model peaks at" in out


@needs_sample
@pytest.mark.slow
def test_sample_optimize_compare_and_samples(tmp_path, capsys):
    code, out, _ = run(["samples", "--json"], capsys)
    assert code == 0 and "digits_cnn" in [s["name"] for s in json.loads(out)]
    model = SAMPLE / "model.onnx"
    out_model = tmp_path / "q.onnx"
    code, out, _ = run(["optimize", model, out_model, "--precision", "int8", "--calibration-samples", "30",
                        "--calibration", SAMPLE / "calibration", "--eval", SAMPLE / "evaluation",
                        "--verify-samples", "60", "--json"], capsys)
    assert code == 0
    ev = json.loads(out)["evaluation"]
    assert ev["n_samples"] == 60 and ev["top1_accuracy_cand"] >= 0.95 and ev["top1_agreement"] >= 0.95
    code, out, _ = run(["compare", model, out_model, "--data", SAMPLE / "evaluation", "--n", "50", "--json"], capsys)
    rep = json.loads(out)
    assert code == 0 and rep["n_samples"] == 50 and rep["top1_accuracy_ref"] >= 0.95
    code, out, _ = run(["compare", model, out_model, "--data", SAMPLE / "evaluation", "--n", "20"], capsys)
    assert code == 0 and "top-1 agreement" in out and "SQNR dB" in out


@needs_sample
def test_preprocess_defaults_from_sample_manifest_then_flags(tmp_path):
    from ortlab.data.samples import get_sample

    sample = get_sample("digits_cnn")
    parser = cli.build_parser()
    ns = parser.parse_args(["compare", "a", "b", "--data", "d"])
    assert cli_common.find_sample(SAMPLE / "model.onnx") == sample
    copy = tmp_path / "m.onnx"
    copy.write_bytes((SAMPLE / "model.onnx").read_bytes())
    assert cli_common.find_sample(copy) == sample  # same bytes elsewhere
    assert preprocess_of(ns, copy, sample) == sample.preprocess
    ns = parser.parse_args(["compare", "a", "b", "--data", "d", "--mean", "0.5", "--std", "0.25",
                            "--size", "32", "32"])
    pre = preprocess_of(ns, copy, sample)
    assert pre.mean == (0.5,) and pre.std == (0.25,) and pre.channels == 1


def test_preprocess_detected_for_other_models(src):
    ns = cli.build_parser().parse_args(["compare", "a", "b", "--data", "d", "--layout", "NCHW", "--scale", "0-255"])
    assert cli_common.find_sample(src) is None
    pre = preprocess_of(ns, src)
    assert pre.size == (32, 32) and pre.channels == 3 and pre.layout == Layout.NCHW and pre.scale.value == "0-255"


def test_compare_on_image_folder(src, image_dir, tmp_path, capsys):
    out_model = tmp_path / "o.onnx"
    assert run(["optimize", src, out_model, "--opt-level", "basic"], capsys)[0] == 0
    code, out, _ = run(["compare", src, out_model, "--data", image_dir, "--json"], capsys)
    rep = json.loads(out)
    assert code == 0 and rep["n_samples"] == 20 and rep["top1_agreement"] == 1.0


@pytest.mark.slow
def test_run_recipe_file_into_workspace_history(src, image_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=10), name="static10")
    rfile = tmp_path / "recipe.json"
    rfile.write_text(recipe.to_json())
    code, out, _ = run(["run", rfile, src, "--data", image_dir, "--verify-samples", "4"], capsys)
    assert code == 0 and "history    run 1" in out
    from ortlab.runs.workspace import Workspace

    rows = Workspace().history().list()
    assert len(rows) == 1 and rows[0].recipe == recipe and rows[0].run_id == 1
    assert rows[0].model_path.is_file() and rows[0].kind == "int8-static"
    code, out, _ = run(["run", rfile, src, "--data", image_dir, "--out", tmp_path / "explicit", "--json"], capsys)
    assert code == 0 and json.loads(out)["run_id"] == 2  # every CLI run is recorded, wherever it writes
    assert (tmp_path / "explicit" / "model.onnx").is_file() and len(Workspace().history().list()) == 2
    assert json.loads((tmp_path / "explicit" / "artifact.json").read_text())["run_id"] == 2


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ortlab", "inspect", str(tmp_path / "nope.onnx")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"ortlab: error: Model not found: {tmp_path / 'nope.onnx'}\n"
    proc = subprocess.run([sys.executable, "-m", "ortlab", "--version"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.startswith("ortlab ")
