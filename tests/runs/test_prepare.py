"""ortlab.runs.prepare: a run's decisions are made once, before its child starts; the child trusts them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ortlab.runs import prepare
from ortlab import api
from ortlab.cli import main as cli
from ortlab.core.errors import ModelLoadError, OrtlabError, RecipeError
from ortlab.model import inspect as inspect_module
from ortlab.runs import recipe_child
from ortlab.runs.prepare import NO_CALIBRATION_DATA, lacks_calibration_data, prepare_run
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe

SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn"
STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.STATIC, calibration_samples=8))


@pytest.fixture()
def inspections(monkeypatch) -> list[str]:
    """Every call of ``inspect_model`` in this process, wherever a module (or the front door's models service) bound
    the name, and every read the front door sends to a child."""
    original = inspect_module.inspect_model
    calls: list[str] = []

    def counting(path, *args, **kwargs):
        calls.append(str(path))
        return original(path, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("ortlab") and getattr(module, "inspect_model", None) is original:
            monkeypatch.setattr(module, "inspect_model", counting)
    monkeypatch.setattr(api.models, "inspect_model", counting)
    in_child = api.models.inspect_in_child

    def counting_in_child(path, *args, **kwargs):  # the CLI's read: in a child of its own
        calls.append(str(path))
        return in_child(path, *args, **kwargs)

    monkeypatch.setattr(api.models, "inspect_in_child", counting_in_child)
    return calls


def test_one_cli_run_reads_the_model_once(inspections, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(tmp_path / "out"), "--precision", "int8",
                     "--calibration-samples", "8", "--verify-samples", "8"])
    assert code == 0, capsys.readouterr().err
    assert inspections == [str(SAMPLE / "model.onnx")]  # the one read (in a child); the recipe's child reads it zero times


def test_the_child_trusts_a_prepared_spec(inspections, tmp_path):
    spec = RunSpec(str(SAMPLE / "model.onnx"), STATIC, calibration=DataRef(path=str(SAMPLE / "calibration")),
                   evaluation=DataRef(path=str(SAMPLE / "evaluation"), count=8), verify_samples=8)
    prepared = prepare_run(spec)
    assert len(inspections) == 1 and prepared.sample == "digits_cnn" and prepared.model_info is not None
    assert prepare_run(prepared) is prepared  # preparing twice decides nothing again
    again = RunSpec.from_json(prepared.to_json())  # as the child receives it
    assert again == prepared
    artifact = recipe_child.run_recipe_spec(again, tmp_path / "run")
    assert len(inspections) == 1  # the run itself read nothing again
    assert artifact.source_sha256 == prepared.model_info["sha256"] and artifact.verdict is not None
    with pytest.raises(OrtlabError, match="This run was not prepared"):  # the child decides nothing for a bare spec
        recipe_child.run_recipe_spec(spec, tmp_path / "bare")
    assert not (tmp_path / "bare").exists() and len(inspections) == 1


def test_only_static_int8_without_data_and_without_random_data_lacks_calibration_data():
    assert lacks_calibration_data(STATIC, has_data=False)
    assert not lacks_calibration_data(STATIC, has_data=True)
    assert not lacks_calibration_data(Recipe(precision=Precision.INT8, allow_random_data=True,
                                             quant=QuantConfig(mode=QuantMode.STATIC)), has_data=False)
    assert not lacks_calibration_data(Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)),
                                      has_data=False)
    assert not lacks_calibration_data(Recipe(precision=Precision.FP16), has_data=False)


def test_a_run_that_cannot_start_is_refused_before_its_child(tmp_path):
    no_data = RunSpec(str(SAMPLE / "model.onnx"), STATIC)
    with pytest.raises(RecipeError) as err:
        prepare.start_recipe(no_data, tmp_path / "out")
    assert err.value.message == NO_CALIBRATION_DATA and not (tmp_path / "out").exists()
    with pytest.raises(ModelLoadError, match="not found"):
        prepare_run(RunSpec(str(tmp_path / "missing.onnx"), Recipe()))


@pytest.mark.parametrize("mode", [QuantMode.DYNAMIC, QuantMode.STATIC])
def test_an_int8_or_fp16_recipe_refuses_a_model_already_quantized(tmp_path, mode):
    from ortlab.runs.in_process import run_recipe
    from ortlab.runs.in_process import prepare_recipe_run
    from tests.support.models import conv_bn_model

    src = conv_bn_model(tmp_path / "conv.onnx")
    int8 = run_recipe(src, Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(mode=mode)),
                      tmp_path / "int8").model_path
    for precision in (Precision.INT8, Precision.FP16):
        again = Recipe(precision=precision, allow_random_data=True)
        with pytest.raises(RecipeError, match=r"This model is already quantized \((DynamicQuantizeMatMul|QLinearConv) "
                                              f"×\\d+.*\\): {precision.value} starts from a float32 model"):
            prepare_recipe_run(int8, again)
        with pytest.raises(RecipeError, match="already quantized"):
            prepare_run(RunSpec(str(int8), again))
    prepare_recipe_run(int8, Recipe(precision=Precision.FP32))  # graph optimization only: allowed
    prepare_recipe_run(src, Recipe(precision=Precision.INT8, allow_random_data=True))  # its float source: allowed


def _linear_classifier(path: Path) -> Path:
    """A scikit-learn-style pipeline (ai.onnx.ml only): LinearClassifier → Normalizer, as ORT's logreg_iris."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                              classlabels_ints=[0, 1, 2], coefficients=[0.1 * i for i in range(12)],
                              intercepts=[0.0, 0.1, 0.2], multi_class=0, post_transform="NONE"),
             helper.make_node("Normalizer", ["scores"], ["probabilities"], domain="ai.onnx.ml", norm="L1")]
    graph = helper.make_graph(nodes, "logreg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
                               helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1),
                                                    helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


@pytest.mark.parametrize("flags", [["--precision", "int8", "--allow-random-data"],
                                   ["--precision", "int8", "--quant-mode", "dynamic"], ["--precision", "fp16"]])
def test_an_int8_or_fp16_recipe_refuses_a_classical_ml_pipeline_in_one_line(tmp_path, capsys, flags):
    """ORT's logreg_iris.onnx (LinearClassifier, Normalizer, ZipMap) ended in 'Failed to find proper ai.onnx
    domain', a float16 ONNX check failure and an ORT load error, each as if the recipe had a chance."""
    src = _linear_classifier(tmp_path / "logreg.onnx")
    code = cli.main(["optimize", str(src), str(tmp_path / "out.onnx"), *flags, "--no-timing"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert err.startswith("ortlab: error: This model is a classical machine-learning pipeline (LinearClassifier, "
                          "Normalizer: ai.onnx.ml operators") and "An fp32 recipe optimizes its graph" in err
    assert not (tmp_path / "out.onnx").exists()
    assert cli.main(["optimize", str(src), str(tmp_path / "fp32.onnx"), "--precision", "fp32", "--no-timing"]) == 0


def test_tune_on_a_classical_ml_pipeline_says_why_no_trial_finished(tmp_path, capsys):
    import numpy as np

    src = _linear_classifier(tmp_path / "logreg.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32))
    code = cli.main(["tune", str(src), "--data", str(tmp_path / "x.npy"), "--max-trials", "3", "--budget", "60",
                     "--out", str(tmp_path / "t")])
    out = capsys.readouterr().out
    assert code != 0 and "  verdict    no trial finished" in out and "every finished trial is broken" not in out
    assert "This model is a classical machine-learning pipeline" in out
