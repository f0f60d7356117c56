"""Model files of other formats, told apart by their first bytes, so a refusal can say what the file is and what
to give instead of "not ONNX"."""

from __future__ import annotations

_EXPORT = "export the model to ONNX from its framework and give the .onnx"


def other_format(head: bytes) -> str | None:
    """What the file starting with ``head`` (its first 16 bytes or more) is and what to do, when it is a known
    non-ONNX model format; else None."""
    if head[4:8] == b"ORTM":  # FlatBuffers file identifier of ONNX Runtime's format
        return ("This is an ONNX Runtime format (.ort) file, which ONNX Runtime makes from a .onnx for mobile "
                "deployment; it cannot be quantized or optimized again. Give the .onnx it was converted from.")
    if head[4:8] == b"TFL3":
        return "This is a TensorFlow Lite (.tflite) model, not ONNX: convert it with tf2onnx (--tflite) and give the .onnx."
    if head[:8] == b"\x89HDF\r\n\x1a\n":
        return f"This is an HDF5 file (a Keras .h5 model?), not ONNX: {_EXPORT} (tf2onnx for Keras)."
    if head[:4] == b"GGUF":
        return "This is a GGUF file (llama.cpp's format), not ONNX: ortlab needs a .onnx model."
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return f"This is a Python pickle (a PyTorch .pt/.pth checkpoint?), not ONNX: {_EXPORT} (torch.onnx.export)."
    if head[:4] == b"PK\x03\x04":
        return (f"This is a zip archive (a PyTorch .pt/.pth checkpoint is one), not a .onnx file: {_EXPORT} "
                "(torch.onnx.export); a .onnx with its weight files is imported as a .zip on the Model page.")
    if head[8:10] == b'{"':  # an 8-byte header length, then the JSON header
        return f"This is a safetensors file (weights only, no graph), not ONNX: {_EXPORT}."
    return None
