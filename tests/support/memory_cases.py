"""Files that expand to gigabytes, built cheaply (a few MB on disk, a few seconds at most), for the limits
tests and ``bench/bench_memory_cases.py``."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from PIL import Image

GIB = 2**30


class _Replay:
    """A stand-in for zipfile's deflate compressor that returns precomputed output, so a member of gigabytes of
    zeros is written without compressing (or holding) gigabytes; zipfile still computes the real CRC."""

    def __init__(self, pieces: list[bytes], end: bytes) -> None:
        self._pieces = iter(pieces)
        self._end = end

    def compress(self, data) -> bytes:
        return next(self._pieces)

    def flush(self) -> bytes:
        return self._end


def zero_npz(path, nbytes: int = 3_100_000_000, chunk: int = 64 << 20) -> Path:
    """An .npz whose one float32 array ``x`` is ``nbytes`` (rounded down to ``chunk``) of deflated zeros: a real,
    valid file of about nbytes/1000 bytes."""
    n_chunks = max(1, nbytes // chunk)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (n_chunks * chunk // 4,)})
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    first = c.compress(header.getvalue()) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(chunk)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)  # the same bytes for every chunk after a full flush
    end = c.flush()
    info = zipfile.ZipInfo("x.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as zf, zf.open(info, "w", force_zip64=True) as fh:
        fh._compressor = _Replay([first] + [block] * n_chunks, end)  # type: ignore[attr-defined]
        fh.write(header.getvalue())
        view = memoryview(zeros)
        for _ in range(n_chunks):
            fh.write(view)
    return Path(path)


def huge_png(side: int = 13000) -> bytes:
    """A real ``side`` × ``side`` 1-bit PNG (a few kB): 169 megapixels at 13000, ≈500 MB once decoded as RGB."""
    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, "PNG", optimize=True)
    return buf.getvalue()


def huge_png_zip(path, count: int = 12, side: int = 13000) -> Path:
    png = huge_png(side)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(count):
            zf.writestr(f"big/{i:02d}.png", png)
    return Path(path)


def declared_zip(path, members: int = 250, member_bytes: int = 15 * 2**20, compressed: int = 80 * 2**10) -> Path:
    """A zip whose central directory declares ``members`` members of ``member_bytes`` each, compressed to
    ``compressed`` bytes (ratio below 200, so only the total can refuse it); the bytes really stored are tiny.
    The 250 × 15 MiB default totals 3.93 GB: under the old 4 GB cap, over the 2 GiB one."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(members):
            zf.writestr(f"m{i:03d}.bin", b"x")
    data = bytearray(Path(path).read_bytes())
    pos = data.index(b"PK\x01\x02")
    while pos != -1:
        data[pos + 20:pos + 24] = struct.pack("<I", compressed)
        data[pos + 24:pos + 28] = struct.pack("<I", member_bytes)
        pos = data.find(b"PK\x01\x02", pos + 4)
    Path(path).write_bytes(bytes(data))
    return Path(path)


def big_input_model(path, shape=(1, 3, 4000, 4000)) -> Path:
    """An 89-byte Relu whose input is 192 MB per sample at the default shape."""
    shape = list(shape)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return Path(path)


def external_data_zip(path, nbytes: int = 300 * 10**6) -> Path:
    """A zip (stored) of a model whose one float32 initializer of ``nbytes`` lives in ``weights.bin``."""
    n = nbytes // 4
    folder = Path(path).parent / (Path(path).stem + "_src")
    folder.mkdir(parents=True, exist_ok=True)
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(n * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    rng = np.random.default_rng(0)
    with open(folder / "weights.bin", "wb") as fh:
        left = n
        while left:
            k = min(left, 8 << 20)
            fh.write(rng.standard_normal(k, dtype=np.float32).tobytes())
            left -= k
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.write(folder / "model.onnx", "model.onnx")
        zf.write(folder / "weights.bin", "weights.bin")
    (folder / "weights.bin").unlink()
    (folder / "model.onnx").unlink()
    folder.rmdir()
    return Path(path)


def single_file_model(path, nbytes: int = 300 * 10**6) -> Path:
    """A plain .onnx whose one float32 initializer of ``nbytes`` is stored inside the file."""
    n = nbytes // 4
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n])
    w.raw_data = np.random.default_rng(0).standard_normal(n, dtype=np.float32).tobytes()
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    Path(path).write_bytes(model.SerializeToString())
    return Path(path)
