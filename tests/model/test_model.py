"""ortlab.model.inspect: loading, validation errors, inspection, external data and safe import."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from tests.support.models import conv_bn_graph, conv_bn_model, external_data_model, matmul_model
from ortlab.model import importing, inspect as M
from ortlab.core.errors import ExternalDataError, ModelLoadError

NOT_ONNX = ("This file is not an ONNX model (could not parse it as ONNX protobuf). "
            "Upload a .onnx file exported from your framework.")


@pytest.fixture(autouse=True)
def _no_files_in_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield
    assert list(cwd.iterdir()) == []


@pytest.fixture
def conv(tmp_path) -> Path:
    return conv_bn_model(tmp_path / "conv.onnx")


def test_inspect_conv_bn_model(conv):
    info = M.inspect_model(conv)
    assert info.node_count == 14
    assert info.op_counts == {("", "Conv"): 3, ("", "BatchNormalization"): 3, ("", "Relu"): 3, ("", "Add"): 2,
                              ("", "GlobalAveragePool"): 1, ("", "Flatten"): 1, ("", "Gemm"): 1}
    expected_params = sum(int(np.prod(t.dims)) for t in conv_bn_graph().graph.initializer)
    assert info.param_count == expected_params == 1578
    assert info.initializer_bytes == {"float32": 1578 * 4}
    assert info.inputs == (M.TensorInfo("input", "float32", ("N", 3, 32, 32)),)
    assert info.outputs == (M.TensorInfo("logits", "float32", ("N", 10)),)
    assert info.opsets == {"": 17} and info.ir_version == 8
    assert (info.producer, info.producer_version, info.graph_name) == ("ortlab-tests", "1.0", "conv_bn")
    assert info.file_bytes == info.total_bytes == conv.stat().st_size
    assert info.sha256 == hashlib.sha256(conv.read_bytes()).hexdigest() == M.sha256_file(conv)
    assert not info.has_external_data and info.warnings == ()


def test_inspect_static_batch_and_output_shape_from_inference(tmp_path):
    m = conv_bn_graph(batch=1)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, None]))
    onnx.save_model(m, tmp_path / "m.onnx")
    info = M.inspect_model(tmp_path / "m.onnx")
    assert info.inputs[0].shape == (1, 3, 32, 32)
    assert info.outputs[0].shape == (1, 10)


def test_to_dict_is_json_safe_with_op_keys(tmp_path):
    m = conv_bn_graph()
    m.graph.node[0].CopyFrom(helper.make_node("FusedConv", list(m.graph.node[0].input), list(m.graph.node[0].output),
                                              name="fc", domain="com.microsoft", activation="Relu"))
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save_model(m, tmp_path / "m.onnx")
    d = json.loads(json.dumps(M.inspect_model(tmp_path / "m.onnx").to_dict()))
    assert d["op_counts"]["com.microsoft::FusedConv"] == 1 and d["op_counts"]["Conv"] == 2
    assert d["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["N", 3, 32, 32]}]
    assert any("contrib ops (com.microsoft)" in w for w in d["warnings"])


def test_matmul_model_counts(tmp_path):
    info = M.inspect_model(matmul_model(tmp_path / "mm.onnx"))
    assert info.op_counts[("", "MatMul")] == 8 and info.op_counts[("", "LayerNormalization")] == 2
    assert info.op_counts[("", "Softmax")] == 1
    assert info.inputs[0].shape == ("N", 16, 32)


def test_op_key():
    assert M.op_key("", "Conv") == "Conv"
    assert M.op_key("com.microsoft", "FusedConv") == "com.microsoft::FusedConv"


# -- external data ------------------------------------------------------------------------------------

def test_external_data_model_loads_and_inspects(tmp_path):
    path = external_data_model(tmp_path / "ext")
    weights = tmp_path / "ext" / "weights.bin"
    info = M.inspect_model(path)
    assert info.has_external_data
    assert info.total_bytes == path.stat().st_size + weights.stat().st_size
    assert info.initializer_bytes == {"float32": 1578 * 4}
    model = M.load_model(path)
    assert all(t.data_location == TensorProto.DEFAULT and t.raw_data for t in model.graph.initializer)


def _set_location(path: Path, location: str) -> None:
    m = onnx.load_model(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(m, str(path))


def test_external_data_outside_folder_is_refused(tmp_path):
    path = external_data_model(tmp_path / "ext")
    (tmp_path / "secret.bin").write_bytes((tmp_path / "ext" / "weights.bin").read_bytes())
    _set_location(path, "../secret.bin")
    with pytest.raises(ExternalDataError) as err:
        M.load_model(path)
    assert "'../secret.bin'" in str(err.value) and "outside the model's folder" in str(err.value)
    with pytest.raises(ExternalDataError, match="outside the model's folder"):
        M.inspect_model(path)


def test_external_data_absolute_location_is_refused(tmp_path):
    path = external_data_model(tmp_path / "ext")
    _set_location(path, str((tmp_path / "ext" / "weights.bin").resolve()))
    with pytest.raises(ExternalDataError, match="outside the model's folder"):
        M.load_model(path)


def test_external_data_symlink_escaping_folder_is_refused(tmp_path):
    path = external_data_model(tmp_path / "ext")
    real = tmp_path / "elsewhere.bin"
    os.replace(tmp_path / "ext" / "weights.bin", real)
    os.symlink(real, tmp_path / "ext" / "weights.bin")
    with pytest.raises(ExternalDataError, match="resolves outside the model's folder"):
        M.load_model(path)


def test_external_data_missing_file_is_named(tmp_path):
    path = external_data_model(tmp_path / "ext")
    (tmp_path / "ext" / "weights.bin").unlink()
    with pytest.raises(ExternalDataError, match=r"External data file 'weights.bin' is missing"):
        M.load_model(path)


def test_external_data_truncated_file(tmp_path):
    path = external_data_model(tmp_path / "ext")
    w = tmp_path / "ext" / "weights.bin"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(ExternalDataError, match="has 100 bytes but the model needs 6,312"):
        M.load_model(path)


def test_bytes_with_external_data_need_a_folder(tmp_path):
    path = external_data_model(tmp_path / "ext")
    with pytest.raises(ExternalDataError, match="Upload a .zip"):
        M.load_model(path.read_bytes())
    model = M.load_model(path.read_bytes(), base_dir=tmp_path / "ext")
    assert len(model.graph.initializer) == 20


# -- bad files ----------------------------------------------------------------------------------------

def test_png_and_text_are_not_onnx(tmp_path):
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (255, 0, 0)).save(png, format="PNG")
    (tmp_path / "x.onnx").write_bytes(png.getvalue())
    with pytest.raises(ModelLoadError) as err:
        M.load_model(tmp_path / "x.onnx")
    assert str(err.value) == NOT_ONNX
    with pytest.raises(ModelLoadError) as err:
        M.load_model(b"name,value\nfoo,1\nthis is a csv file, not a model\n")
    assert str(err.value) == NOT_ONNX


def test_truncated_model(conv):
    data = conv.read_bytes()
    with pytest.raises(ModelLoadError) as err:
        M.load_model(data[: len(data) // 2])
    assert str(err.value).startswith("The file is truncated") and "Upload the complete file again." in str(err.value)


def test_empty_file(tmp_path):
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"^The file is empty \(0 bytes\)"):
        M.load_model(tmp_path / "e.onnx")


def test_protobuf_without_graph():
    data = onnx.ModelProto(ir_version=8, producer_name="x").SerializeToString()
    with pytest.raises(ModelLoadError, match="parses as protobuf but is not an ONNX model"):
        M.load_model(data)


def test_huge_claimed_field_size_is_reported_as_truncated():
    # ir_version=8, then field 7 (graph) claiming 2**60 bytes
    data = b"\x08\x08" + b"\x3a" + bytes([0x80] * 8 + [0x10]) + b"\x00" * 16
    with pytest.raises(ModelLoadError, match="truncated: a part of the model claims 1,152,921,504,606,846,976 bytes"):
        M.load_model(data)


def test_invalid_graph_reports_checker_message(tmp_path):
    m = conv_bn_graph()
    m.graph.node[1].input[0] = "does_not_exist"
    onnx.save_model(m, tmp_path / "bad.onnx")
    with pytest.raises(ModelLoadError) as err:
        M.load_model(tmp_path / "bad.onnx")
    msg = str(err.value)
    assert msg.startswith("invalid model: ") and "does_not_exist" in msg and "\n" not in msg
    assert M.load_model(tmp_path / "bad.onnx", check=False).graph.node[1].input[0] == "does_not_exist"


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        M.load_model(tmp_path / "nope.onnx")


# -- import -------------------------------------------------------------------------------------------

def test_import_bytes_is_content_addressed(conv, tmp_path):
    store = tmp_path / "store"
    data = conv.read_bytes()
    p1 = importing.import_model(data, store, filename="My Model.onnx")
    p2 = importing.import_model(data, store, filename="My Model.onnx")
    assert p1 == p2 == store / hashlib.sha256(data).hexdigest()[:16] / "My_Model.onnx"
    assert p1.read_bytes() == data
    assert sorted(p.name for p in store.iterdir()) == [p1.parent.name]  # no temp folders left


def test_import_path_copies_external_data_and_keeps_source(tmp_path):
    src = external_data_model(tmp_path / "ext")
    before = M.sha256_file(src), M.sha256_file(tmp_path / "ext" / "weights.bin")
    stored = importing.import_model(src, tmp_path / "store")
    assert stored.name == "model.onnx" and (stored.parent / "weights.bin").is_file()
    assert M.inspect_model(stored).has_external_data
    assert (M.sha256_file(src), M.sha256_file(tmp_path / "ext" / "weights.bin")) == before


def test_import_rejects_bad_bytes(tmp_path):
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        importing.import_model(b"hello", tmp_path / "store")
    ext = external_data_model(tmp_path / "ext")
    with pytest.raises(ExternalDataError, match="Upload a .zip"):
        importing.import_model(ext.read_bytes(), tmp_path / "store")
    assert [p for p in (tmp_path / "store").iterdir()] == []


def _zip(entries: dict[str, bytes], **kw) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=kw.get("compression", zipfile.ZIP_STORED)) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_import_zip_with_external_data(tmp_path):
    src = external_data_model(tmp_path / "ext")
    data = _zip({"resnet/model.onnx": src.read_bytes(),
                 "resnet/weights.bin": (tmp_path / "ext" / "weights.bin").read_bytes(),
                 "__MACOSX/resnet/._model.onnx": b"junk", "README.txt": b"hi"})
    stored = importing.import_model(data, tmp_path / "store")
    assert stored.name == "model.onnx"
    assert sorted(p.name for p in stored.parent.iterdir()) == ["model.onnx", "weights.bin"]
    info = M.inspect_model(stored)
    assert info.has_external_data and info.param_count == 1578


def test_zip_slip_absolute_and_symlink_members_are_refused(conv, tmp_path):
    good = conv.read_bytes()
    with pytest.raises(ModelLoadError, match=r"leaves its folder \('../evil.onnx'\)"):
        importing.import_model(_zip({"../evil.onnx": good}), tmp_path / "store")
    with pytest.raises(ModelLoadError, match="absolute path"):
        importing.import_model(_zip({"/etc/model.onnx": good}), tmp_path / "store")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model.onnx", good)
        link = zipfile.ZipInfo("weights.bin")
        link.external_attr = (0o120777 << 16)
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(ModelLoadError, match="symbolic link"):
        importing.import_model(buf.getvalue(), tmp_path / "store")
    assert not (tmp_path / "evil.onnx").exists()
    assert [p for p in (tmp_path / "store").iterdir()] == []


def test_zip_with_two_models_asks_to_pick_one(conv, tmp_path):
    mm = matmul_model(tmp_path / "mm.onnx")
    data = _zip({"a.onnx": conv.read_bytes(), "b/b.onnx": mm.read_bytes()})
    with pytest.raises(ModelLoadError) as err:
        importing.import_model(data, tmp_path / "store")
    assert "2 .onnx files (a.onnx, b/b.onnx)" in str(err.value) and "pick one" in str(err.value)
    stored = importing.import_model(data, tmp_path / "store", member="b/b.onnx")
    assert M.sha256_file(stored) == M.sha256_file(mm)
    with pytest.raises(ModelLoadError, match="no .onnx member 'c.onnx'"):
        importing.import_model(data, tmp_path / "store", member="c.onnx")


def test_zip_without_model_and_corrupt_zip(tmp_path):
    with pytest.raises(ModelLoadError, match="contains no .onnx file"):
        importing.import_model(_zip({"x.txt": b"x"}), tmp_path / "store")
    with pytest.raises(ModelLoadError, match="looks like a zip but cannot be read"):
        importing.import_model(b"PK\x03\x04" + b"\x00" * 20, tmp_path / "store")


def test_zip_bombs_are_refused(conv, tmp_path, monkeypatch):
    bomb = _zip({"model.onnx": conv.read_bytes(), "weights.bin": b"\0" * (20 * 2**20)},
                compression=zipfile.ZIP_DEFLATED)
    assert len(bomb) < 100_000
    with pytest.raises(ModelLoadError, match=r"expands \d+× its compressed size.*zip bomb"):
        importing.import_model(bomb, tmp_path / "store")
    monkeypatch.setattr("ortlab.core.zipsafe.MAX_TOTAL_BYTES", 1000)
    with pytest.raises(ModelLoadError, match="expands to more than"):
        importing.import_model(_zip({"model.onnx": conv.read_bytes()}), tmp_path / "store")
