"""A model file of another format is refused in a sentence that names the format and what to give instead."""

from __future__ import annotations

import pickle
import struct
import zipfile

import onnxruntime as ort
import pytest

from ortlab.core.errors import ModelLoadError
from ortlab.model import inspect as M
from tests.support.models import conv_bn_model


def test_an_ort_format_file_asks_for_the_onnx_it_came_from(tmp_path):
    """piper-phonemize ships libtashkeel_model.ort; ONNX Runtime writes such a file from any .onnx."""
    src = conv_bn_model(tmp_path / "conv.onnx")
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "conv.ort")
    so.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    with pytest.raises(ModelLoadError, match=r"^This is an ONNX Runtime format \(\.ort\) file, .* Give the \.onnx it "
                                             r"was converted from\.$"):
        M.load_model(tmp_path / "conv.ort")


def _torch_like_zip(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"weight": [1.0, 2.0]}, protocol=2))
    return path.read_bytes()


@pytest.mark.parametrize(("make", "said"), [
    (lambda p: pickle.dumps({"state_dict": {"w": [0.5]}}, protocol=2), "This is a Python pickle (a PyTorch"),
    (lambda p: pickle.dumps({"w": 1}, protocol=5), "This is a Python pickle (a PyTorch"),
    (_torch_like_zip, "This is a zip archive (a PyTorch .pt/.pth checkpoint is one)"),
    (lambda p: struct.pack("<Q", 9) + b'{"a":{}} ', "This is a safetensors file (weights only, no graph)"),
    (lambda p: struct.pack("<I", 28) + b"TFL3" + bytes(40), "This is a TensorFlow Lite (.tflite) model"),
    (lambda p: b"\x89HDF\r\n\x1a\n" + bytes(40), "This is an HDF5 file (a Keras .h5 model?)"),
    (lambda p: b"GGUF" + struct.pack("<I", 3) + bytes(40), "This is a GGUF file"),
])
def test_other_model_formats_are_named(tmp_path, make, said):
    path = tmp_path / "model.onnx"  # named .onnx, as an upload renamed by hand would be
    path.write_bytes(make(tmp_path / "z.zip"))
    with pytest.raises(ModelLoadError) as err:
        M.load_model(path)
    assert str(err.value).startswith(said) and "not" in str(err.value)
