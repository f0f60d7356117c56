"""A model exported with a fixed batch above 1 is calibrated, corrected and judged one sample at a time: each sample
fills the batch as copies of itself and each output is read from its first copy, so the run says what the same model
with an open batch says, sample for sample."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ortlab.checks.evaluate import OutputComparison
from ortlab.core.errors import DataError
from ortlab.data.feeds import batch_inputs, sample_copies
from ortlab.data.loaders import load_image_folder, load_tensor_file
from ortlab.model.inspect import inspect_model
from ortlab.runs.in_process import run_recipe
from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe
from tests.support.models import conv_bn_model, random_image_folder

# without weight rounding: GPTQ holds back a quarter of the feeds, and five feeds of four hold back other samples than
# twenty feeds of one, so its integers (not the judging) differ a little (45.42 against 45.36 dB)
STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=20, weight_rounding=False))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return conv_bn_model(root / "open.onnx", batch="N"), conv_bn_model(root / "four.onnx", batch=4)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return load_image_folder(random_image_folder(tmp_path_factory.mktemp("images"), per_class=3))


def _dims(path) -> list[int | str]:
    return [d.dim_value or d.dim_param for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("recipe", [STATIC, Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)),
                                    Recipe(precision=Precision.FP16)], ids=["static", "dynamic", "fp16"])
def test_a_fixed_batch_of_four_is_judged_as_the_same_model_with_an_open_batch(models, images, tmp_path, recipe):
    open_batch, four = models
    a = run_recipe(open_batch, recipe, tmp_path / "open", images, verify_samples=30)
    b = run_recipe(four, recipe, tmp_path / "four", images, verify_samples=30)
    assert _dims(b.model_path) == [4, 3, 32, 32]  # the result keeps the model's interface
    ea, eb = a.evaluation, b.evaluation
    assert eb.n_samples == ea.n_samples == 30  # each sample counted once, not four times
    assert eb.task.classification.n_samples == ea.task.classification.n_samples == 30
    assert eb.task.classification.confident_flips() == ea.task.classification.confident_flips()
    assert eb.outputs[0].sqnr_db == pytest.approx(ea.outputs[0].sqnr_db, abs=1e-3)
    assert b.verdict.level == a.verdict.level
    assert any("fixed batch of 4: each sample is fed as 4 copies" in n for n in b.notes)
    assert not any("fixed batch" in n for n in a.notes)
    # computed here with ONNX Runtime alone: the batch-4 result on one image repeated 4 times gives 4 equal rows,
    # each the open-batch result on that image
    x = np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)
    rows = ort.InferenceSession(str(b.model_path)).run(None, {"input": np.repeat(x, 4, axis=0)})[0]
    one = ort.InferenceSession(str(a.model_path)).run(None, {"input": x})[0]
    assert rows.shape == (4, 10) and np.allclose(rows, rows[:1], atol=1e-6)
    assert np.allclose(rows[:1], one, atol=1e-4)


def test_tensor_data_fills_a_fixed_batch_and_several_samples_are_refused(models, tmp_path):
    _, four = models
    data = np.random.default_rng(0).random((5, 3, 32, 32), dtype=np.float32)
    np.savez(tmp_path / "d.npz", input=data)
    ds = load_tensor_file(tmp_path / "d.npz")
    inputs = inspect_model(four).inputs
    assert sample_copies(ds, None, inputs) == 4
    feed = batch_inputs(ds, [2], None, inputs)["input"]
    assert feed.shape == (4, 3, 32, 32) and all(np.array_equal(row, data[2]) for row in feed)
    with pytest.raises(DataError, match="fixed batch size of 4 .*cannot feed 2 samples at once"):
        batch_inputs(ds, [0, 1], None, inputs)


def test_the_comparison_reads_each_output_once_from_its_first_copy():
    rng = np.random.default_rng(0)
    ref = [rng.normal(size=(1, 10)).astype(np.float32) for _ in range(12)]
    cand = [r + rng.normal(0, 0.3, size=r.shape).astype(np.float32) for r in ref]
    once, tiled = OutputComparison(["logits"], False), OutputComparison(["logits"], False, copies=3)
    for r, c in zip(ref, cand):
        once.add([r], [c])
        tiled.add([np.repeat(r, 3, axis=0)], [np.repeat(c, 3, axis=0)])
    a, b = once.report(), tiled.report()
    assert b.n_samples == a.n_samples == 12
    assert b.task.classification.n_samples == 12
    assert b.task.classification.flip_margins == a.task.classification.flip_margins
    assert b.outputs[0].sqnr_db == pytest.approx(a.outputs[0].sqnr_db)
