"""run_recipe end to end on tiny real models (and the bundled digits sample when it is there)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import onnx
import pytest

from ortlab.data.loaders import load_image_folder
from ortlab.settings.config import OptLevel, Precision, QuantConfig, QuantMode, Recipe, Target
from ortlab.core.errors import Cancelled, ModelLoadError, OptimizationError, RecipeError
from ortlab.runs.history import History
from ortlab.model.inspect import sha256_file
from ortlab.runs.artifact import load_artifact
from ortlab.runs.in_process import run_recipe
from ortlab.runs.prepare import NO_CALIBRATION_DATA
from ortlab.core.progress import CancelToken
from tests.support.reporting import CollectingReporter

from tests.support.models import conv_bn_model, matmul_model, random_image_folder

REPO = Path(__file__).resolve().parents[2]
SAMPLE_MANIFEST = REPO / "sample_models" / "digits_cnn" / "manifest.json"

STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=20))
DYNAMIC = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC))


def ops(path) -> Counter:
    return Counter((n.domain, n.op_type) for n in onnx.load(str(path)).graph.node)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("src") / "conv.onnx")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """40 random 32×32 RGB PNGs in 10 class folders."""
    return load_image_folder(random_image_folder(tmp_path_factory.mktemp("images"), per_class=4))


@pytest.fixture(scope="module")
def source_hash(src):
    return sha256_file(src)


@pytest.fixture(autouse=True)
def source_untouched(src, source_hash):
    yield
    assert sha256_file(src) == source_hash, "the source model was modified"


def test_fp32_fuses_and_writes_the_artifact_folder(src, images, tmp_path):
    rep = CollectingReporter()
    art = run_recipe(src, Recipe(), tmp_path / "out", images, reporter=rep, verify_samples=10)
    assert rep.stages() == ["validate", "optimize", "verify"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["artifact.json", "model.onnx", "recipe.json"]
    before, after = ops(src), ops(art.model_path)
    assert before[("", "BatchNormalization")] == 3 and after[("", "BatchNormalization")] == 0
    assert after[("com.microsoft", "FusedConv")] == 3
    assert art.sha256 == sha256_file(art.model_path) and art.source_sha256 == sha256_file(src)
    assert art.size_bytes == art.model_path.stat().st_size and art.source_size_bytes == src.stat().st_size
    assert art.providers == ["CPUExecutionProvider"] and art.random_data is False
    assert set(art.timings) == {"validate", "optimize", "verify"} and all(v >= 0 for v in art.timings.values())
    ev = art.evaluation
    assert ev.n_samples == 10 and ev.top1_agreement == 1.0
    assert ev.outputs[0].max_abs < 1e-4
    assert Recipe.from_json((tmp_path / "out" / "recipe.json").read_text()) == Recipe()
    assert load_artifact(tmp_path / "out").to_dict() == art.to_dict()
    assert json.loads((tmp_path / "out" / "artifact.json").read_text())["schema_version"] == 2
    assert json.loads((tmp_path / "out" / "artifact.json").read_text())["sha256"] == art.sha256


def test_fp16_converts_weights(src, images, tmp_path):
    rep = CollectingReporter()
    art = run_recipe(src, Recipe(precision=Precision.FP16, opt_level=OptLevel.BASIC), tmp_path, images,
                     reporter=rep, verify_samples=10)
    assert rep.stages() == ["validate", "convert", "optimize", "verify"]
    model = onnx.load(str(art.model_path))
    f16 = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert len(f16) >= 6  # conv weights and biases at least
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # keep_io_types
    assert any("fp16 on CPU" in n for n in art.notes) and not any("fp16 on CPU" in w for w in art.warnings)
    assert art.evaluation.outputs[0].cosine > 0.999


def test_int8_static_quantizes_and_verifies(src, images, tmp_path):
    rep = CollectingReporter()
    art = run_recipe(src, STATIC, tmp_path, images, reporter=rep, verify_samples=10)
    assert rep.stages() == ["validate", "preprocess", "calibrate", "quantize", "weight_rounding", "bias_correction",
                            "optimize", "verify"]
    calib = [e for e in rep.events if e.stage == "calibrate"]
    assert calib[-1].done == calib[-1].total == 20
    after = ops(art.model_path)
    assert after[("", "QuantizeLinear")] > 0 and after[("", "DequantizeLinear")] > 0
    assert after[("", "BatchNormalization")] == 0
    assert {"validate", "preprocess", "calibrate", "quantize", "optimize", "verify"} <= set(art.timings)
    assert art.evaluation.outputs[0].cosine > 0.9


def test_int8_static_is_deterministic(src, images, tmp_path):
    a = run_recipe(src, STATIC, tmp_path / "a", images, verify_samples=2)
    b = run_recipe(src, STATIC, tmp_path / "b", images, verify_samples=2)
    assert a.sha256 == b.sha256
    assert (tmp_path / "a" / "model.onnx").read_bytes() == (tmp_path / "b" / "model.onnx").read_bytes()


def test_int8_static_at_disabled_keeps_the_quantized_model(src, images, tmp_path):
    rep = CollectingReporter()
    recipe = Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED, quant=QuantConfig(calibration_samples=10))
    art = run_recipe(src, recipe, tmp_path, images, reporter=rep, verify_samples=2)
    assert "optimize" not in rep.stages()
    assert ops(art.model_path)[("", "QuantizeLinear")] > 0


def test_int8_dynamic_on_matmul_model(tmp_path):
    path = matmul_model(tmp_path / "mm.onnx")
    digest = sha256_file(path)
    rep = CollectingReporter()
    art = run_recipe(path, Recipe(precision=Precision.INT8, allow_random_data=True,
                                  quant=QuantConfig(mode=QuantMode.DYNAMIC)), tmp_path / "out", reporter=rep,
                     verify_samples=4)
    assert rep.stages() == ["validate", "quantize", "optimize", "verify"]
    after = ops(art.model_path)
    assert after[("", "MatMul")] < ops(path)[("", "MatMul")]
    # the 6 MatMuls with weights become integer MatMuls (fused forms at level extended)
    integer = ("DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulInteger")
    assert sum(n for (dom, op), n in after.items() if op in integer) == 6
    assert art.random_data is True and art.evaluation.random_data is True
    assert sha256_file(path) == digest


def test_static_without_data_is_refused_before_any_work(src, tmp_path):
    rep = CollectingReporter()
    with pytest.raises(RecipeError) as err:
        run_recipe(src, STATIC, tmp_path / "out", reporter=rep)
    assert err.value.message == NO_CALIBRATION_DATA and err.value.step == "validate"
    assert str(err.value).startswith("validate: Static quantization needs calibration data: ")
    assert not (tmp_path / "out").exists()
    assert rep.stages() == []  # refused when the run is prepared, before its first stage


def test_static_with_random_data_is_flagged(src, tmp_path):
    recipe = Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(calibration_samples=8))
    art = run_recipe(src, recipe, tmp_path, verify_samples=4)
    assert art.random_data is True
    assert any("Random calibration data" in w for w in art.warnings)
    assert any("random data" in w.lower() and "meaningless" in w for w in art.warnings)
    assert art.evaluation.random_data is True


def test_invalid_recipe_fails_in_validate(src, images, tmp_path):
    rep = CollectingReporter()
    with pytest.raises(RecipeError, match="Choose fp16 for GPU") as err:
        run_recipe(src, Recipe(precision=Precision.INT8, target=Target.GPU), tmp_path / "out", images, reporter=rep)
    assert err.value.step == "validate"
    assert not (tmp_path / "out").exists() and rep.events == []  # refused before the first stage


def test_bad_model_files(tmp_path):
    with pytest.raises(ModelLoadError, match="Model file not found") as err:
        run_recipe(tmp_path / "nope.onnx", Recipe(), tmp_path / "out")
    assert err.value.step == "validate"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"hello")
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        run_recipe(junk, Recipe(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cancel_during_calibration_leaves_no_model(src, images, tmp_path):
    token = CancelToken()

    def reporter(event):
        if event.stage == "calibrate" and event.done == 3:
            token.cancel()

    with pytest.raises(Cancelled) as err:
        run_recipe(src, STATIC, tmp_path, images, reporter=reporter, cancel=token)
    assert err.value.step == "calibrate"
    assert list(tmp_path.iterdir()) == []  # no model, no work folder left behind


def test_cancel_during_verification_leaves_no_model(src, images, tmp_path):
    token = CancelToken()

    def reporter(event):
        if event.stage == "verify" and event.done == 2 and event.total == 10:
            token.cancel()

    with pytest.raises(Cancelled) as err:
        run_recipe(src, Recipe(), tmp_path, images, reporter=reporter, cancel=token, verify_samples=10)
    assert err.value.step == "verify" and list(tmp_path.iterdir()) == []


def test_a_stop_inside_a_stage_propagates_with_the_stage_named(src, tmp_path, monkeypatch):
    """``Cancelled`` raised deep inside a stage (a SIGTERM mid-call) passes every ``except Exception`` on the way:
    the run ends cancelled at that stage, not as a failure of it, and leaves nothing behind."""
    from ortlab.transforms import quantize

    def stopped(*a, **k):
        raise Cancelled()

    monkeypatch.setattr(quantize, "quantize_dynamic", stopped)
    with pytest.raises(Cancelled) as err:
        run_recipe(matmul_model(tmp_path / "mm.onnx"), DYNAMIC, tmp_path / "out")
    assert err.value.step == "quantize" and not (tmp_path / "out").exists()


def test_cancel_before_start(src, tmp_path):
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        run_recipe(src, Recipe(), tmp_path / "out", cancel=token)
    assert not (tmp_path / "out").exists()


def test_without_data_verification_is_skipped(src, tmp_path):
    art = run_recipe(src, Recipe(opt_level=OptLevel.BASIC), tmp_path)
    assert art.evaluation is None and art.random_data is False
    assert art.notes == ["Verification skipped: no evaluation data was given."]
    assert art.providers == ["CPUExecutionProvider"]


def test_untyped_step_failure_becomes_a_typed_error(src, tmp_path, monkeypatch):
    import ortlab.runs.pipeline

    def boom(*a, **k):
        raise ValueError("kaboom\nsecond line")

    monkeypatch.setattr(ortlab.runs.pipeline, "optimize_model", boom)
    with pytest.raises(OptimizationError) as err:
        run_recipe(src, Recipe(), tmp_path)
    assert str(err.value) == "optimize: kaboom second line"  # one line, the later lines of the reason kept
    assert list(tmp_path.iterdir()) == []


def test_artifact_goes_into_history(src, tmp_path):
    art = run_recipe(src, Recipe(), tmp_path / "a")
    h = History(tmp_path / "h.sqlite")
    run_id = h.add(art)
    row = h.get(run_id)
    assert row.sha256 == art.sha256 and row.model_path == art.model_path and row.run_id == run_id
    assert row.recipe == Recipe() and row.kind == "fp32"
    assert row.to_dict() == replace(art, run_id=run_id).to_dict()


@pytest.mark.skipif(not SAMPLE_MANIFEST.is_file(), reason="digits_cnn sample not present")
def test_digits_sample_int8_static_keeps_accuracy(tmp_path):
    from ortlab.data.samples import get_sample

    sample = get_sample("digits_cnn")
    digest = sha256_file(sample.model_path)
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=50))
    art = run_recipe(sample.model_path, recipe, tmp_path, sample.calibration_data(), sample.preprocess,
                     verify_samples=100, verify_dataset=sample.evaluation_data())
    ev = art.evaluation
    assert ev.n_samples == 100
    assert ev.top1_accuracy_ref is not None and ev.top1_accuracy_ref >= 0.95
    assert ev.top1_accuracy_cand is not None and ev.top1_accuracy_cand >= ev.top1_accuracy_ref - 0.03
    assert ev.top1_agreement is not None and ev.top1_agreement >= 0.95
    assert ops(art.model_path)[("", "QuantizeLinear")] > 0
    assert art.size_bytes < art.source_size_bytes
    assert sha256_file(sample.model_path) == digest


def test_data_that_does_not_fit_is_refused_in_validate(src, images, tmp_path):
    from ortlab.settings.config import PreprocessConfig
    from ortlab.core.errors import DataError

    gray = PreprocessConfig(size=(32, 32), channels=1, mean=(0.0,), std=(1.0,))
    with pytest.raises(DataError) as err:
        run_recipe(src, STATIC, tmp_path / "out", images, gray)
    assert err.value.step == "validate" and "channel" in str(err.value).lower()
    assert not (tmp_path / "out").exists()


def test_size_counts_external_data_of_the_result(tmp_path):
    from tests.support.models import external_data_model

    src = external_data_model(tmp_path / "src")
    art = run_recipe(src, Recipe(), tmp_path / "out")
    files = [p for p in art.model_path.parent.iterdir() if p.name.startswith(art.model_path.name)]
    assert len(files) == 2  # the model and the weights ORT wrote beside it
    assert art.size_bytes == sum(p.stat().st_size for p in files)
    assert art.source_size_bytes == sum(p.stat().st_size for p in (tmp_path / "src").iterdir())
