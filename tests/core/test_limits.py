"""Every input that can expand is checked against ortlab.core.limits before it is expanded, with a message naming the
limit, the value and what to do; runs' children have a memory limit; profiles stay small and in the workspace."""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile

import numpy as np
import pytest

from ortlab.runs import prepare
from ortlab.timing import bench
from ortlab.data.dataset import random_dataset
from ortlab.data.feeds import batch_inputs
from ortlab.data.loaders import load_image_files, load_image_folder, load_image_zip, load_tensor_file
from ortlab.core import limits, zipsafe
from ortlab.runs import service, bench_service
from ortlab.runtime import child
from ortlab.settings.config import BenchConfig, Recipe
from ortlab.core.errors import BenchmarkError, DataError, ModelLoadError
from ortlab.runs.history import BenchVariant
from ortlab.model.importing import import_model, import_upload
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace

from tests.support.memory_cases import big_input_model, declared_zip, huge_png, huge_png_zip, zero_npz
from tests.support.models import conv_bn_model

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and VmHWM are Linux's")


def vm_hwm_mb() -> float:
    return bench.maxrss_mb()


@pytest.fixture
def no_np_load(monkeypatch):
    """np.load must never be reached for a refused file."""
    def refuse(*a, **k):
        raise AssertionError("np.load was called")
    monkeypatch.setattr(np, "load", refuse)


# -- the limits module ---------------------------------------------------------------------------------------


def test_every_limit_has_a_reason_and_an_environment_override(monkeypatch):
    import ast

    tree = ast.parse(open(limits.__file__).read())
    body = tree.body
    names = [n.targets[0].id for n in body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
             and n.targets[0].id.isupper() and n.targets[0].id != "ENV_PREFIX"]
    assert {"TENSOR_FILE_MAX_BYTES", "IMAGE_MAX_PIXELS", "ZIP_MAX_TOTAL_BYTES", "GENERATED_INPUT_MAX_BYTES",
            "PROFILE_MAX_BYTES"} <= set(names)
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in names:
            doc = body[i + 1]
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str) \
                and len(doc.value.value) > 40
    monkeypatch.setenv("ORTLAB_LIMIT_IMAGE_MAX_PIXELS", "1000")
    assert limits.limit("IMAGE_MAX_PIXELS") == 1000
    monkeypatch.setenv("ORTLAB_LIMIT_IMAGE_MAX_PIXELS", "nonsense")
    assert limits.limit("IMAGE_MAX_PIXELS") == limits.IMAGE_MAX_PIXELS


# -- .npy / .npz -------------------------------------------------------------------------------------------


def test_a_3_mb_npz_of_deflated_zeros_is_refused_from_its_headers(tmp_path, no_np_load, monkeypatch):
    path = zero_npz(tmp_path / "zeros.npz")  # 3 MB on disk, 3.1 GB once loaded
    assert path.stat().st_size < 4_000_000
    before = vm_hwm_mb()
    with pytest.raises(DataError, match=r"zeros.npz holds 3.09 GB of arrays once loaded; at most 536.87 MB are "
                                        r"accepted \(tensor file limit, ORTLAB_LIMIT_TENSOR_FILE_MAX_BYTES\)"):
        load_tensor_file(path)
    monkeypatch.setenv("ORTLAB_LIMIT_TENSOR_FILE_MAX_BYTES", str(10**10))  # then the ratio refuses it
    with pytest.raises(DataError, match=r"zeros.npz: array 'x.npy' expands 10\d\d× its compressed size \(at most "
                                        r"1000× is accepted, tensor ratio limit, ORTLAB_LIMIT_TENSOR_FILE_MAX_RATIO\)"):
        load_tensor_file(path.read_bytes(), "zeros.npz")
    assert vm_hwm_mb() - before < 100


def test_the_byte_cap_of_a_tensor_file(tmp_path, monkeypatch, no_np_load):
    monkeypatch.setenv("ORTLAB_LIMIT_TENSOR_FILE_MAX_BYTES", str(1_000_000))
    with pytest.raises(DataError, match=r"holds 4.19 MB of arrays once loaded; at most 1.00 MB are accepted "
                                        r"\(tensor file limit, ORTLAB_LIMIT_TENSOR_FILE_MAX_BYTES\)\. Use fewer"):
        load_tensor_file(zero_npz(tmp_path / "z.npz", nbytes=4 << 20, chunk=1 << 20))
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**9,)})
    (tmp_path / "claims.npy").write_bytes(buf.getvalue() + b"\0" * 64)  # a header claiming 4 GB
    with pytest.raises(DataError, match="holds 4.00 GB of arrays"):
        load_tensor_file(tmp_path / "claims.npy")


def test_a_small_zero_npz_is_valid_and_loads_under_the_caps(tmp_path):
    ds = load_tensor_file(zero_npz(tmp_path / "z.npz", nbytes=2 << 20, chunk=1 << 20))
    assert len(ds) == (2 << 20) // 4 and not ds._tensors["x"].any()


def test_object_arrays_are_refused_before_loading(tmp_path, no_np_load):
    arr = np.array([{"a": 1}, None], dtype=object)
    np.save(tmp_path / "o.npy", arr, allow_pickle=True)
    np.savez(tmp_path / "o.npz", x=arr)
    for p in (tmp_path / "o.npy", tmp_path / "o.npz"):
        with pytest.raises(DataError, match=r"holds Python objects \(dtype object\)"):
            load_tensor_file(p)


# -- images ----------------------------------------------------------------------------------------------


def test_a_zip_of_13000x13000_pngs_is_refused_from_the_headers(tmp_path):
    path = huge_png_zip(tmp_path / "big.zip")
    assert path.stat().st_size < 1_000_000
    before = vm_hwm_mb()
    with pytest.raises(DataError, match=r"is 13000×13000 \(169 megapixels, about 507.00 MB decoded\); at most 50 "
                                        r"megapixels are accepted \(image pixel limit, ORTLAB_LIMIT_IMAGE_MAX_PIXELS\)"):
        load_image_zip(path)
    with pytest.raises(DataError, match="megapixels"):
        load_image_files([("a.png", huge_png())])
    assert vm_hwm_mb() - before < 200  # nothing was decoded (the PNG's bits are 21 MB at most)


def test_a_large_image_loaded_earlier_is_checked_again_and_previews_decode_reduced(tmp_path, monkeypatch):
    from PIL import Image

    Image.new("RGB", (3000, 2000), (200, 10, 10)).save(tmp_path / "photo.jpg", quality=80)
    ds = load_image_folder(tmp_path)
    preview = ds.load_preview(0)
    assert max(preview.size) <= limits.PREVIEW_MAX_SIDE
    opened = []
    real_open = Image.open

    def spy(*a, **k):
        img = real_open(*a, **k)
        opened.append(img)
        return img

    monkeypatch.setattr(Image, "open", spy)
    ds.load_preview(0)
    assert opened[-1].size[0] <= 3000 // 8 + 1  # JPEG draft: decoded at 1/8 scale, never 3000×2000
    monkeypatch.setenv("ORTLAB_LIMIT_IMAGE_MAX_PIXELS", "1000000")
    with pytest.raises(DataError, match=r"3000×2000 \(6 megapixels.*at most 1 megapixels"):
        ds.load_image(0)


def test_an_image_zip_is_held_in_memory_so_its_total_is_lower(monkeypatch):
    monkeypatch.setenv("ORTLAB_LIMIT_IMAGE_ZIP_MAX_BYTES", "1000")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.png", b"x" * 600)
        zf.writestr("b.png", b"y" * 600)
    with pytest.raises(DataError, match=r"more than 1.00 kB .*image zip may hold at most 1.00 kB \(image zip limit"):
        load_image_zip(buf.getvalue())


# -- zips --------------------------------------------------------------------------------------------------


def test_250_members_of_15_mib_are_refused_by_the_total_before_anything_is_written(tmp_path):
    path = declared_zip(tmp_path / "wide.zip")
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        declared = sum(i.file_size for i in infos)
        assert all(i.file_size <= zipsafe.MAX_RATIO * i.compress_size for i in infos)  # the ratio lets each pass
    assert 4 * 10**9 > declared > zipsafe.MAX_TOTAL_BYTES == 2 * 2**30  # the old 4 GB cap let it through
    store = tmp_path / "store"
    with pytest.raises(ModelLoadError, match=r"expands to more than 2.15 GB \(the limit for one zip\); its members "
                                             r"declare 3.93 GB\. Refusing it before extracting anything"):
        import_model(path, store)
    assert [p for p in store.rglob("*") if p.is_file()] == []


def test_nesting_depth_is_still_checked():
    with pytest.raises(DataError, match="nested 33 folders deep"):
        zipsafe.member_parts("d/" * 33 + "x.png", DataError)


# -- generated inputs ---------------------------------------------------------------------------------------


def test_random_data_that_would_need_gigabytes_is_refused_before_allocating(tmp_path):
    from ortlab.model.inspect import inspect_model

    info = inspect_model(big_input_model(tmp_path / "big.onnx", shape=("N", 3, 40000, 40000)))
    before = vm_hwm_mb()
    with pytest.raises(DataError, match=r"Random input 'x' \[4, 3, 40000, 40000\] would need 76.80 GB at batch 4; "
                                        r"at most 2.15 GB of generated inputs .*Give a smaller --shape or batch"):
        batch_inputs(random_dataset(8), [0, 1, 2, 3], None, info.inputs)
    assert vm_hwm_mb() - before < 100


def test_benchmark_feeds_are_capped(tmp_path, monkeypatch):
    from types import SimpleNamespace

    arg = SimpleNamespace(name="x", type="tensor(float)", shape=["N", 3, 224, 224])
    monkeypatch.setenv("ORTLAB_LIMIT_GENERATED_INPUT_MAX_BYTES", str(10**6))
    assert bench.make_inputs([arg], 1, dims=None)["x"].shape == (1, 3, 224, 224)  # 602 kB
    with pytest.raises(BenchmarkError, match=r"Benchmark input 'x' \[2, 3, 224, 224\] would need 1.20 MB at batch 2"):
        bench.make_inputs([arg], 2)


# -- memory limits of the children ---------------------------------------------------------------------------


def test_the_default_child_memory_limit(monkeypatch):
    monkeypatch.delenv(child.MEMORY_ENV, raising=False)
    ram = limits.physical_memory_bytes()
    assert ram is not None
    ram_gb = ram / 2**30
    assert child.memory_limit_gb() == round(min(8.0, 0.6 * ram_gb), 1)
    monkeypatch.setenv(child.MEMORY_ENV, "2.5")
    assert child.memory_limit_gb() == 2.5
    monkeypatch.setenv(child.MEMORY_ENV, "0")
    assert child.memory_limit_gb() is None


@linux_only
def test_a_recipe_over_its_memory_limit_fails_clearly_and_the_parent_is_unaffected(tmp_path):
    ws = Workspace(tmp_path / "ws")
    spec = RunSpec(str(big_input_model(tmp_path / "big_input.onnx")), Recipe(allow_random_data=True),
                   calibration=DataRef(random=64), verify_samples=64)
    before = vm_hwm_mb()
    handle = prepare.start_recipe(spec, workspace=ws, memory_gb=1.5)
    assert handle.wait(120) and handle.state == service.FAILED
    assert "This run needed more than 1.5 GB of memory" in str(handle.error)
    assert vm_hwm_mb() - before < 100  # the parent never held the inputs
    assert ws.history().list() == [] and not handle.run_dir.exists()


@linux_only
def test_a_benchmark_child_over_its_memory_limit_fails_clearly(tmp_path):
    ws = Workspace(tmp_path / "ws")
    model = big_input_model(tmp_path / "big.onnx", shape=("N", 3, 4000, 4000))
    before = vm_hwm_mb()
    handle = bench_service.start_benchmark([BenchVariant("big", "big", str(model))], BenchConfig(warmup=0, duration_s=0, runs=2,
                                     batch_sizes=(4,)), workspace=ws, memory_gb=1.2)
    assert handle.wait(120) and handle.state == service.FAILED
    assert "Timing big at batch 4 needed more than 1.2 GB of memory" in str(handle.error)
    assert "smaller batch size" in str(handle.error)
    assert vm_hwm_mb() - before < 100
    assert ws.history().list_benchmarks() == []


# -- profiles ----------------------------------------------------------------------------------------------


def test_profiles_stop_after_the_run_cap_and_are_deleted_over_the_size_cap(tmp_path, monkeypatch):
    model = conv_bn_model(tmp_path / "m.onnx", blocks=1)
    monkeypatch.setenv("ORTLAB_LIMIT_PROFILE_MAX_RUNS", "3")
    cfg = BenchConfig(warmup=1, duration_s=0, runs=30, profile=True)
    run = bench.latency_samples(model, cfg, 1, profile_dir=tmp_path / "prof")
    assert len(list(run)) == 30
    assert run.profile_path is not None
    events = json.loads(open(run.profile_path).read())
    assert sum(1 for e in events if e.get("name") == "model_run") == 3
    monkeypatch.setenv("ORTLAB_LIMIT_PROFILE_MAX_BYTES", "100")
    run = bench.latency_samples(model, cfg, 1, profile_dir=tmp_path / "prof2")
    list(run)
    assert run.profile_path is None and run.profile_note is not None and "over the 100 B limit" in run.profile_note
    assert list((tmp_path / "prof2").iterdir()) == []


def test_benchmark_profiles_live_in_the_workspace_and_go_with_the_benchmark(tmp_path):
    ws = Workspace(tmp_path / "ws")
    model = conv_bn_model(tmp_path / "m.onnx", blocks=1)
    handle = bench_service.start_benchmark([BenchVariant("m", "m", str(model))],
                                     BenchConfig(warmup=1, duration_s=0, runs=5, batch_sizes=(1, 2), profile=True), workspace=ws)
    assert handle.wait(120) and handle.state == service.DONE, handle.error
    paths = [s.profile_path for s in handle.result]
    folder = ws.root / "profiles" / handle.id
    assert all(p and os.path.dirname(p) == str(folder) and os.path.isfile(p) for p in paths)
    assert ws.history().delete_benchmark(handle.bench_id)
    assert not folder.exists()


# -- uploads -----------------------------------------------------------------------------------------------


def test_an_upload_is_streamed_to_the_workspace(tmp_path):
    raw = conv_bn_model(tmp_path / "m.onnx").read_bytes()

    class OneShot(io.RawIOBase):  # a stream that can be read once, in chunks, like an upload
        def __init__(self):
            self.buf, self.reads = io.BytesIO(raw), []

        def readable(self):
            return True

        def read(self, n=-1):
            self.reads.append(n)
            return self.buf.read(n)

    up = OneShot()
    path = import_upload(up, tmp_path / "store", "mine.onnx")
    assert path.read_bytes() == raw and path.name == "mine.onnx"
    assert all(n > 0 for n in up.reads)  # never read as a whole
    assert [p.name for p in (tmp_path / "store").iterdir()] == [path.parent.name]  # the temp file is gone


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
def test_a_memory_budget_is_a_share_of_the_process_limit_or_of_the_machine():
    import subprocess

    code = ("from ortlab.core import limits; limits.apply_memory_limit(2.0); "
            "print(limits.memory_budget_bytes(0.25))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    ram = limits.physical_memory_bytes()
    assert int(out) == int(0.25 * min(2 * 2**30, ram or 2**62))
    free = limits.memory_budget_bytes(0.5)  # this process: no limit of its own here, the machine's RAM
    assert ram is None or (free is not None and free <= int(0.5 * ram))
