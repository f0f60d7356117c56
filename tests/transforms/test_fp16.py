"""ortlab.transforms.fp16: float16 conversion through onnxruntime.transformers.float16."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.models import conv_bn_model, external_data_model, matmul_model, onnx_node_case
from ortlab.core.errors import ModelLoadError, QuantizationError
from ortlab.transforms.fp16 import convert_fp16
from ortlab.model.inspect import inspect_model, sha256_file


def float_initializer_types(path) -> dict[int, int]:
    """Count of floating-point initializers by onnx data type (1 = FLOAT, 10 = FLOAT16, …)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
    return dict(Counter(t.data_type for t in graph.initializer if t.data_type in floats))


def io_types(path) -> dict[str, int]:
    g = onnx.load(str(path)).graph
    return {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output]}


def run(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def assert_close(ref, out):
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=1e-2 * float(np.abs(ref).max()))


@pytest.mark.parametrize("builder,shape", [(conv_bn_model, (2, 3, 32, 32)), (matmul_model, (2, 16, 32))])
def test_keep_io_types(tmp_path, builder, shape):
    src = builder(tmp_path / "src.onnx")
    digest = sha256_file(src)
    assert float_initializer_types(src) == {TensorProto.FLOAT: 20}
    warnings = convert_fp16(src, tmp_path / "fp16.onnx", keep_io_types=True)
    assert warnings == []
    assert float_initializer_types(tmp_path / "fp16.onnx") == {TensorProto.FLOAT16: 20}
    assert set(io_types(tmp_path / "fp16.onnx").values()) == {TensorProto.FLOAT}
    onnx.checker.check_model(str(tmp_path / "fp16.onnx"), full_check=True)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    out = run(tmp_path / "fp16.onnx", x)
    assert out.dtype == np.float32
    assert_close(run(src, x), out)
    assert sha256_file(src) == digest


def test_fp16_io_when_not_kept(tmp_path):
    src = matmul_model(tmp_path / "mm.onnx")
    warnings = convert_fp16(src, tmp_path / "fp16.onnx", keep_io_types=False)
    assert warnings == ["Inputs/outputs input, output are now float16: callers must pass and expect float16 arrays."]
    assert io_types(tmp_path / "fp16.onnx") == {"input": TensorProto.FLOAT16, "output": TensorProto.FLOAT16}
    x = np.random.default_rng(0).normal(size=(2, 16, 32)).astype(np.float32)
    out = run(tmp_path / "fp16.onnx", x.astype(np.float16))
    assert out.dtype == np.float16
    assert_close(run(src, x), out)


def test_size_is_about_half(tmp_path):
    src = matmul_model(tmp_path / "mm.onnx")
    convert_fp16(src, tmp_path / "fp16.onnx")
    assert (tmp_path / "fp16.onnx").stat().st_size <= 0.6 * src.stat().st_size
    before, after = inspect_model(src), inspect_model(tmp_path / "fp16.onnx")
    assert after.initializer_bytes == {"float16": before.initializer_bytes["float32"] // 2}
    assert after.param_count == before.param_count


def test_external_data_source(tmp_path):
    src = external_data_model(tmp_path / "ext")
    convert_fp16(src, tmp_path / "out" / "fp16.onnx")
    assert float_initializer_types(tmp_path / "out" / "fp16.onnx") == {TensorProto.FLOAT16: 20}
    assert float_initializer_types(src) == {TensorProto.FLOAT: 20}
    x = np.random.default_rng(0).normal(size=(1, 3, 32, 32)).astype(np.float32)
    assert_close(run(src, x), run(tmp_path / "out" / "fp16.onnx", x))


def test_out_of_range_weights_warn(tmp_path):
    w = np.array([1.0, 1e6, -2e5, 3.0], dtype=np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["input", "w"], ["out"])], "g",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])],
                          initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save_model(m, tmp_path / "m.onnx")
    warnings = convert_fp16(tmp_path / "m.onnx", tmp_path / "h.onnx")
    assert warnings == ["2 weight values exceed the float16 range (±65504) and are clamped; check accuracy."]
    out = run(tmp_path / "h.onnx", np.ones(4, np.float32))
    np.testing.assert_allclose(out, [1.0, 65504.0, -65504.0, 3.0])


def test_errors(tmp_path):
    src = conv_bn_model(tmp_path / "c.onnx")
    with pytest.raises(QuantizationError, match="must go to a new file"):
        convert_fp16(src, src)
    (tmp_path / "t.onnx").write_bytes(src.read_bytes()[:500])
    with pytest.raises(ModelLoadError, match="truncated"):
        convert_fp16(tmp_path / "t.onnx", tmp_path / "o.onnx")
    convert_fp16(src, tmp_path / "h.onnx")
    with pytest.raises(QuantizationError, match="already has float16 weights"):
        convert_fp16(tmp_path / "h.onnx", tmp_path / "hh.onnx")


def test_float_meets_float16_in_a_subgraph_is_explained_in_one_line():
    import numpy as np
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    from ortlab.transforms.fp16 import mixed_types_message

    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="/then/Relu")], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [1])])
    else_g = h.make_graph([h.make_node("Constant", [], ["e"], value=nh.from_array(np.ones(1, np.float32)))], "else",
                          [], [h.make_tensor_value_info("e", T.FLOAT, [1])])
    graph = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="/If")], "g",
                         [h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [1])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1])])
    model = h.make_model(graph)
    # the error ONNX's type inference gave on silero_vad_op18_ifless after ORT's converter
    error = ("[TypeInferenceError] Inferred elem type differs from existing elem type: (1) vs (10) "
             "in node /then/Relu")
    text = mixed_types_message(model, error)
    assert text is not None and "\n" not in text
    assert "(at node '/then/Relu' (Relu) in If '/If' then_branch)" in text
    assert "known limit of that converter on models with If/Loop/Scan subgraphs" in text
    assert "Keep this model in fp32" in text
    assert mixed_types_message(model, "[TypeInferenceError] (1) vs (1)") is None
    assert mixed_types_message(model, "[ShapeInferenceError] (1) vs (10)") is None


def test_a_bitcast_keeps_its_float32_width(tmp_path):
    """ONNX's BitCast test models: the converter turned a BitCast's float32 side into float16, and the result
    failed the ONNX check ("BitCast requires input and output types to have the same bit-width") or met a float32
    value ("type 1 vs 10"). BitCast now stays float32 (its bits are the data), so the model converts, and the
    verdict judges what float16 rounding upstream does to those bits."""
    for name in ("test_bitcast_2d_float32_to_int32", "test_bitcast_int32_to_float32"):
        src = onnx_node_case(name, tmp_path / f"{name}.onnx")
        dst = tmp_path / f"{name}.fp16.onnx"
        convert_fp16(src, dst)
        g = onnx.shape_inference.infer_shapes(onnx.load(str(dst)), strict_mode=True).graph
        types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
        (bitcast,) = [n for n in g.node if n.op_type == "BitCast"]
        assert TensorProto.FLOAT16 not in {types[bitcast.input[0]], types[bitcast.output[0]]}
        sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
        assert sess.get_outputs()[0].type == ort.InferenceSession(
            str(src), providers=["CPUExecutionProvider"]).get_outputs()[0].type


def test_an_op_without_a_float16_kernel_stays_float32(tmp_path):
    """ONNX's EyeLike test model: converted, its EyeLike-22 took float16, which ONNX Runtime has no kernel for, and
    the run failed at optimize ("Could not find an implementation for EyeLike(22)"). Such an op now stays float32,
    said in a warning, and the result loads."""
    src = onnx_node_case("test_eyelike_populate_off_main_diagonal", tmp_path / "eyelike.onnx")
    dst = tmp_path / "eyelike.fp16.onnx"
    warnings = convert_fp16(src, dst)
    assert "EyeLike stays float32: ONNX Runtime has no float16 kernel for it here." in warnings
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).integers(-5, 5, [4, 5]).astype(np.int32)  # the test's input: int32 [4, 5]
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    np.testing.assert_array_equal(sess.run(None, {name: x})[0], ref.run(None, {name: x})[0])
    assert convert_fp16(matmul_model(tmp_path / "mm.onnx"), tmp_path / "mm.fp16.onnx") == []


@pytest.mark.parametrize("name", ["test_swish_expanded", "test_leakyrelu_default_expanded"])
def test_float_constants_written_as_plain_attributes_are_converted(tmp_path, name):
    """ONNX's expanded function models (and onnxscript's exports) write scalars as Constant value_float: the
    converter left them float32 and failed ("a float32 value meeting a float16 one (type 1 vs 10)"). They are held
    as value tensors first, which it converts; the result computes what the source does, to float16 precision."""
    src = onnx_node_case(name, tmp_path / "src.onnx")
    dst = tmp_path / "fp16.onnx"
    convert_fp16(src, dst)
    constants = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "Constant"]
    assert constants and all(a.name == "value" for n in constants for a in n.attribute)
    run = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (src, dst)]
    x = np.random.default_rng(0).standard_normal(run[0].get_inputs()[0].shape).astype(np.float32)
    feed = {run[0].get_inputs()[0].name: x}
    np.testing.assert_allclose(run[1].run(None, feed)[0], run[0].run(None, feed)[0], rtol=2e-3, atol=2e-3)
