"""ortlab.transforms.optimize: ORT graph optimization levels on real models."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.models import conv_bn_model, external_data_model, matmul_model
from ortlab.runtime import providers as P
from ortlab.settings.config import OptLevel, Target
from ortlab.core.errors import ModelLoadError, OptimizationError
from ortlab.model.inspect import inspect_model, sha256_file
from ortlab.transforms.optimize import ALL_LEVEL_WARNING, NO_GPU_WARNING, optimize_model

CONV_BEFORE = {("", "Conv"): 3, ("", "BatchNormalization"): 3, ("", "Relu"): 3, ("", "Add"): 2,
               ("", "GlobalAveragePool"): 1, ("", "Flatten"): 1, ("", "Gemm"): 1}
HEAD = {("", "Add"): 2, ("", "GlobalAveragePool"): 1, ("", "Flatten"): 1, ("", "Gemm"): 1}
CONV_EXPECTED = {
    OptLevel.DISABLED: CONV_BEFORE,
    OptLevel.BASIC: {("", "Conv"): 3, ("", "Relu"): 3, **HEAD},  # BatchNormalization folded into Conv
    OptLevel.EXTENDED: {("com.microsoft", "FusedConv"): 3, **HEAD},  # Conv+Relu fused
    OptLevel.ALL: {("com.microsoft.nchwc", "Conv"): 3, ("com.microsoft.nchwc", "ReorderOutput"): 3, **HEAD},
}


def nchwc_layout(counts: dict) -> dict:
    """``counts`` of a level-all graph as the vector width fixes them: which head ops join the NCHWc layout and how
    many ReorderOutputs are inserted depend on the CPU (AVX2: the GlobalAveragePool too, one reorder; AVX-512: three
    reorders), so a head op moved into the nchwc domain counts as its ai.onnx form and the reorders as present."""
    out: Counter = Counter()
    for (domain, op), n in counts.items():
        if (domain, op) == ("com.microsoft.nchwc", "ReorderOutput"):
            out[(domain, op)] = 3 if n >= 1 else 0
        elif domain == "com.microsoft.nchwc" and op != "Conv":
            out[("", op)] += n
        else:
            out[(domain, op)] += n
    return dict(out)


def ops(path) -> dict:
    return dict(Counter((n.domain, n.op_type) for n in onnx.load(str(path), load_external_data=False).graph.node))


def run(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("conv") / "conv.onnx")


@pytest.mark.parametrize("level", list(OptLevel))
def test_conv_bn_levels(conv, tmp_path, level):
    digest = sha256_file(conv)
    res = optimize_model(conv, tmp_path / "out.onnx", level)
    assert res.path == tmp_path / "out.onnx" and res.level == level and res.target == Target.CPU
    assert res.providers == [P.CPU] and res.seconds > 0
    assert (nchwc_layout(ops(res.path)) if level == OptLevel.ALL else ops(res.path)) == CONV_EXPECTED[level]
    onnx.checker.check_model(str(res.path), full_check=True)
    x = np.random.default_rng(1).normal(size=(2, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(run(res.path, x), run(conv, x), atol=1e-4, rtol=1e-4)
    assert sha256_file(conv) == digest
    if level == OptLevel.ALL:
        assert res.warnings == [ALL_LEVEL_WARNING]
        assert "hardware" in res.warnings[0] and "'extended'" in res.warnings[0]
    else:
        assert res.warnings == []


def test_matmul_extended_fusions(tmp_path):
    src = matmul_model(tmp_path / "mm.onnx")
    res = optimize_model(src, tmp_path / "mm_ext.onnx", OptLevel.EXTENDED)
    counts = ops(res.path)
    assert counts == {("", "MatMul"): 7, ("", "Add"): 3, ("", "Softmax"): 1,
                      ("com.microsoft", "FusedMatMul"): 1,             # Transpose+MatMul+Mul(scale)
                      ("com.microsoft", "SkipLayerNormalization"): 2,  # bias Add + residual Add + LayerNorm
                      ("com.microsoft", "BiasGelu"): 1}                # bias Add + Erf-form Gelu
    x = np.random.default_rng(2).normal(size=(3, 16, 32)).astype(np.float32)
    np.testing.assert_allclose(run(res.path, x), run(src, x), atol=1e-4, rtol=1e-4)
    assert ops(optimize_model(src, tmp_path / "mm_basic.onnx", OptLevel.BASIC).path) == ops(src)


def test_gpu_target_without_gpu_warns(conv, tmp_path):
    res = optimize_model(conv, tmp_path / "gpu.onnx", OptLevel.EXTENDED, Target.GPU)
    if P.CUDA in P.working_providers():
        assert res.providers[0] == P.CUDA and NO_GPU_WARNING not in res.warnings
    else:
        assert res.providers == [P.CPU]
        assert res.warnings == [NO_GPU_WARNING]
        assert "GPU-specific fusions could not be applied" in res.warnings[0]
    assert P.TRT not in res.providers


def test_external_data_source_stays_loadable(tmp_path):
    src = external_data_model(tmp_path / "ext")
    before = sha256_file(tmp_path / "ext" / "weights.bin")
    res = optimize_model(src, tmp_path / "out" / "opt.onnx", OptLevel.EXTENDED)
    info = inspect_model(res.path)
    assert info.op_counts[("com.microsoft", "FusedConv")] == 3
    assert info.has_external_data and (tmp_path / "out" / "opt.onnx.data").is_file()
    x = np.random.default_rng(3).normal(size=(1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(run(res.path, x), run(src, x), atol=1e-4, rtol=1e-4)
    assert sha256_file(tmp_path / "ext" / "weights.bin") == before


def test_refuses_to_overwrite_source_and_bad_input(conv, tmp_path):
    with pytest.raises(OptimizationError, match="must go to a new file"):
        optimize_model(conv, conv, OptLevel.BASIC)
    (tmp_path / "bad.onnx").write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        optimize_model(tmp_path / "bad.onnx", tmp_path / "o.onnx", OptLevel.BASIC)
    with pytest.raises(ValueError):
        optimize_model(conv, tmp_path / "o.onnx", "fastest")  # type: ignore[arg-type]  # not a level, on purpose


def test_runtime_check_tolerates_int8_rounding_only_for_quantized_sources(tmp_path):
    """The check that ORT's own output runs like its input (used when the ONNX checker rejects it) allows the int8
    parity tolerance for a quantized source — fused int8 kernels re-round activations — and fp32's otherwise."""
    from ortlab.settings.config import QuantConfig, QuantMode
    from ortlab.transforms.optimize import _outputs_match, _runtime_tolerance
    from ortlab.transforms.optimize import TOLERANCE
    from ortlab.settings.config import Precision
    from ortlab.transforms.quantize import quantize_dynamic_model

    src = matmul_model(tmp_path / "m.onnx")
    quantize_dynamic_model(src, tmp_path / "q.onnx", QuantConfig(mode=QuantMode.DYNAMIC))
    assert _runtime_tolerance(src) == TOLERANCE[Precision.FP32] == 1e-3
    assert _runtime_tolerance(tmp_path / "q.onnx") == TOLERANCE[Precision.INT8] == 0.1
    ref = np.array([2.0, -4.0])
    off = ref + np.array([0.13, 0.0])  # what dynamic int8 of a MiniLM-sized encoder moved by under fusion
    assert not _outputs_match(ref, off)[0] and _outputs_match(ref, off, 0.1)[0]
    assert not _outputs_match(ref, ref + 1.0, 0.1)[0]


class _ConstantIds:
    """Calibration of the text encoder on one sentence of token 5: ranges that fit real sentences poorly, the
    kind of int8 model whose one-step rounding flips grow through the layers (like all-MiniLM-L6-v2's)."""

    def __init__(self):
        self.feeds = [{"input_ids": np.full((1, 16), 5, np.int64), "attention_mask": np.ones((1, 16), np.int64)}]

    def get_next(self):
        return self.feeds.pop() if self.feeds else None


@pytest.fixture(scope="module")
def encoder_int8(tmp_path_factory):
    """The text-encoder fixture at opset 13 (float) and its static QDQ int8 model (u8 activations, s8 weights),
    LayerNorms, Softmax and the attention-score MatMuls kept in float as ortlab's known-pattern scope keeps them
    (so ORT fuses each LayerNorm into a SimplifiedLayerNormalization the ONNX checker rejects)."""
    from pathlib import Path
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    work = tmp_path_factory.mktemp("encoder_int8")
    fixture = Path(__file__).parents[1] / "fixtures" / "text_encoder.onnx"
    float_model = work / "float.onnx"
    onnx.save(onnx.version_converter.convert_version(onnx.load(str(fixture)), 13), str(float_model))
    qdq = work / "qdq.onnx"
    kept = [n.name for n in onnx.load(str(float_model)).graph.node
            if "/ln" in n.name or n.op_type == "Softmax" or n.name in ("/layers.0/MatMul", "/layers.1/MatMul")]
    with P.quiet_native_stderr():
        quantize_static(str(float_model), str(qdq), _ConstantIds(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=kept)
    return float_model, qdq


def _outputs(path, feed):
    sess = ort.InferenceSession(str(path), P.session_options(opt_level=OptLevel.DISABLED),
                                providers=[P.CPU])
    return sess.run(None, feed)


def test_a_fused_int8_encoder_passes_within_the_noise_its_quantization_makes(tmp_path, encoder_int8):
    """ORT's 'extended' graph of a static int8 text encoder (fused QLinear kernels, a LayerNorm fusion the ONNX
    checker rejects at opset 13) differs from the QDQ graph by more than the int8 tolerance on the random feed
    (on this AVX2 machine: 0.109 of the scale of 'pooled'), yet less than the QDQ graph differs from the float
    model: it is saved, with a note that says so."""
    from ortlab.transforms.optimize import TOLERANCE, _outputs_match, _random_feed
    from ortlab.settings.config import Precision

    float_model, qdq = encoder_int8
    result = optimize_model(qdq, tmp_path / "ext.onnx", OptLevel.EXTENDED, float_source=float_model)
    sess = ort.InferenceSession(str(qdq), providers=[P.CPU])
    feed = _random_feed(sess)
    beyond = [not _outputs_match(a, b, TOLERANCE[Precision.INT8])[0]
              for a, b in zip(_outputs(qdq, feed), _outputs(result.path, feed))]
    if not any(beyond):  # other CPUs' int8 kernels may round closer to the QDQ graph
        pytest.skip("on this CPU the fused graph stays within the int8 tolerance, so the fallback is not reached")
    (note,) = [n for n in result.notes if "ONNX checker rejects" in n]
    assert "its outputs differ only by int8 rounding from the source's on a random input" in note
    assert "between the unfused int8 graph and the float model" in note
    with pytest.raises(OptimizationError, match="differs from the source's on a random input"):
        optimize_model(qdq, tmp_path / "alone.onnx", OptLevel.EXTENDED)  # without the float model: as before


def test_a_wrong_fused_int8_encoder_is_still_caught(tmp_path, encoder_int8):
    """The same optimized graph with the first feed-forward MatMul's int8 weights negated (a graph that computes
    something else) differs from the QDQ graph far beyond the quantization noise, and verification says so, on
    every CPU: where the fused kernels round like the QDQ graph (VNNI), the good graph passes within the int8
    tolerance; where they do not (AVX2 only), it passes as int8 rounding."""
    from onnx import numpy_helper
    from ortlab.settings.config import Precision
    from ortlab.transforms.optimize import TOLERANCE, _outputs_match, _random_feed, verify_with_runtime

    float_model, qdq = encoder_int8
    good = optimize_model(qdq, tmp_path / "ext.onnx", OptLevel.EXTENDED, float_source=float_model).path
    feed = _random_feed(ort.InferenceSession(str(qdq), providers=[P.CPU]))
    beyond = any(not _outputs_match(a, b, TOLERANCE[Precision.INT8])[0]
                 for a, b in zip(_outputs(qdq, feed), _outputs(good, feed)))
    model = onnx.load(str(good))
    inits = {t.name: t for t in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "QLinearMatMul" and n.name == "/layers.0/ff1/MatMul")
    weight = inits[node.input[3]]
    flipped = np.clip(-numpy_helper.to_array(weight).astype(np.int16), -127, 127).astype(np.int8)
    weight.CopyFrom(numpy_helper.from_array(flipped, weight.name))
    wrong = tmp_path / "wrong.onnx"
    onnx.save(model, str(wrong))
    said = verify_with_runtime(qdq, good, float_model)
    assert ("within int8 rounding" in said) is beyond and said.startswith("max |Δ| "), said
    with pytest.raises(OptimizationError, match="more than int8 rounding explains"):
        verify_with_runtime(qdq, wrong, float_model)


def _ir3_with_equal_weights(path: Path) -> Path:
    """An IR version 3 model (its initializers are graph inputs too, as that version requires) with two equal
    weights: the shapes of two ConstantOfShape nodes, as ONNX's light model zoo copies hold their weights."""
    fill = lambda v: helper.make_tensor("value", TensorProto.FLOAT, [1], [v])
    nodes = [helper.make_node("ConstantOfShape", ["s1"], ["b1"], value=fill(0.5)),
             helper.make_node("ConstantOfShape", ["s2"], ["b2"], value=fill(0.25)),
             helper.make_node("Add", ["x", "b1"], ["y1"]), helper.make_node("Add", ["y1", "b2"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
              helper.make_tensor_value_info("s1", TensorProto.INT64, [1]),
              helper.make_tensor_value_info("s2", TensorProto.INT64, [1])]
    weights = [numpy_helper.from_array(np.array([4], np.int64), n) for n in ("s1", "s2")]
    graph = helper.make_graph(nodes, "ir3", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("level", [OptLevel.BASIC, OptLevel.EXTENDED])
def test_an_ir3_models_weights_listed_as_inputs_are_optimized_as_constants(tmp_path, level):
    """ONNX Runtime shares equal initializers at 'basic'; when they are graph inputs too (IR version 3) it wrote a
    model that asked for one of them as an input ("Required inputs (['s1']) are missing"), and ortlab's own check
    failed the run. The model is optimized with its weights as constants only, and says so."""
    src = _ir3_with_equal_weights(tmp_path / "ir3.onnx")
    before = src.read_bytes()
    res = optimize_model(src, tmp_path / "out.onnx", level)
    assert src.read_bytes() == before  # the source is never changed
    out = onnx.load(str(tmp_path / "out.onnx"))
    assert [i.name for i in out.graph.input] == ["x"]
    assert any(n.startswith("2 weights were also listed as graph inputs") for n in res.notes), res.notes
    x = np.arange(4, dtype=np.float32)[None]
    sess = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x + 0.75)
