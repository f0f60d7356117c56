"""Bias correction's per-node outcomes kept in a memo (ortlab.transforms.bias_memo): a second step on the same model
and samples measures nothing and writes the same model; a node whose output is computed otherwise (a node kept in
float upstream, other samples) is measured again, the nodes it does not reach are not; a kept outcome that does not
fit the node is measured again; a run in a workspace keeps them beside the GPTQ roundings and says what it reused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ortlab.data.loaders import load_image_folder
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.in_process import run_recipe
from ortlab.runs.rounding_cache import RoundingCache
from ortlab.settings.config import Precision, QuantConfig, Recipe
from ortlab.transforms import bias_correction as bc
from ortlab.transforms.bias_memo import NodeBias
from tests.support.memo import DictMemo
from tests.support.models import conv_bn_model, random_image_folder

STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=12, weight_rounding=False))
REUSED_WORDS = "reused from an earlier run"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("src") / "conv.onnx")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("images"), per_class=2)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.normal(0.5, 0.5, (1, 3, 32, 32)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def pair(src, tmp_path_factory):
    """The float model and its static QDQ int8 (MinMax ranges from 24 samples)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(_feeds(24, seed=1))

        def get_next(self):
            return next(self.items, None)

    tmp = tmp_path_factory.mktemp("pair")
    quantize_static(str(src), str(tmp / "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(str(src)), onnx.load(str(tmp / "qdq.onnx"))


def _biases(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT32}


def test_a_second_step_reuses_every_node_without_running_the_models_and_writes_the_same_biases(pair, monkeypatch):
    fp32, qdq = pair
    feeds, memo = _feeds(24, seed=2), DictMemo()
    first, r1 = bc.correct_model(fp32, qdq, feeds, memo=memo)
    assert r1.targets == 4 and len(memo.kept) == 4 and memo.found == 0 and r1.reused == 0
    assert r1.corrected, "the fixture's int8 has biases worth correcting"
    monkeypatch.setattr(bc, "_measure", lambda *a, **k: pytest.fail("a kept node was measured again"))
    monkeypatch.setattr(bc, "_channel_means", lambda *a, **k: pytest.fail("the float model ran for kept nodes"))
    second, r2 = bc.correct_model(fp32, qdq, feeds, memo=memo)
    assert r2.reused == 4 and memo.found == 4
    assert r2.corrected == r1.corrected and r2.kept == r1.kept
    assert {k: v.tolist() for k, v in _biases(second).items()} == {k: v.tolist() for k, v in _biases(first).items()}
    assert "(4 node(s) reused from an earlier run" in r2.notes[0]
    assert REUSED_WORDS not in r1.notes[0]


def test_other_samples_miss_the_memo(pair):
    fp32, qdq = pair
    memo = DictMemo()
    bc.correct_model(fp32, qdq, _feeds(24, seed=2), memo=memo)
    _, result = bc.correct_model(fp32, qdq, _feeds(24, seed=3), memo=memo)
    assert result.reused == 0 and memo.found == 0 and len(memo.kept) == 8


def test_a_change_upstream_measures_the_nodes_below_it_again_and_only_those(pair):
    fp32, qdq = pair
    feeds, memo = _feeds(24, seed=2), DictMemo()
    bc.correct_model(fp32, qdq, feeds, memo=memo)
    changed = onnx.ModelProto()
    changed.CopyFrom(qdq)
    targets, _ = bc.find_targets(fp32, changed)
    assert [t.name for t in targets] == ["block0/Conv", "block1/Conv", "block2/Conv", "head/Gemm"]
    weight = next(t for t in changed.graph.initializer  # block1's int8 weight: one value moves by one step
                  if t.data_type == onnx.TensorProto.INT8 and t.name.startswith("block1.conv.weight"))
    w = onnx.numpy_helper.to_array(weight).copy()
    w.flat[0] = w.flat[0] - 1 if w.flat[0] > -127 else w.flat[0] + 1
    weight.CopyFrom(onnx.numpy_helper.from_array(w, weight.name))
    _, result = bc.correct_model(fp32, changed, feeds, memo=memo)
    assert result.reused == 1 and memo.found == 1  # block0 only: block1 and everything after it read the change
    _, plain = bc.correct_model(fp32, changed, feeds)
    assert plain.corrected == result.corrected


def test_a_kept_outcome_that_does_not_fit_the_node_is_measured_again(pair):
    fp32, qdq = pair
    feeds, memo = _feeds(24, seed=2), DictMemo()
    plain, _ = bc.correct_model(fp32, qdq, feeds)
    bc.correct_model(fp32, qdq, feeds, memo=memo)
    for key in memo.kept:  # every kept outcome replaced by a shift of another length
        memo.kept[key] = NodeBias(np.zeros(3, np.int64), True, 1.0, 0.5)
    out, result = bc.correct_model(fp32, qdq, feeds, memo=memo)
    assert result.reused == 0
    assert {k: v.tolist() for k, v in _biases(out).items()} == {k: v.tolist() for k, v in _biases(plain).items()}


def test_a_run_in_a_workspace_keeps_its_corrections_and_the_next_reuses_them(src, image_dir, tmp_path):
    kept = CalibrationCache.in_workspace(tmp_path / "ws")
    first = run_recipe(src, STATIC, tmp_path / "a", load_image_folder(image_dir), verify_samples=0,
                       calibrations=kept)
    cache = RoundingCache.beside(kept.folder)
    files = sorted(cache.folder.glob("*.npz"))
    assert len(files) == 4 and all(cache.get_bias(f.stem) is not None for f in files)  # three Convs and the Gemm
    second = run_recipe(src, STATIC, tmp_path / "b", load_image_folder(image_dir), verify_samples=0,
                        calibrations=kept)
    [note] = [n for n in second.notes if n.startswith("Bias correction")]
    assert "(4 node(s) reused from an earlier run" in note
    assert second.sha256 == first.sha256
    assert sorted(cache.folder.glob("*.npz")) == files
