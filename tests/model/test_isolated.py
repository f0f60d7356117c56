"""Uploads and imports are read in a one-shot child process (ortlab.model.isolated): the calling process (the app's
server) never parses the model, holds at most a chunk of the upload besides the upload itself, and gets the
same typed results and the same one-line errors as an in-process read."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ortlab.model import importing, isolated, inspect as model
from ortlab.core.errors import ModelLoadError
from ortlab.data.samples import default_sample

from tests.support.models import conv_bn_model, external_data_model, matmul_model

REPO = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and RLIMIT_AS are Linux's")


def test_model_info_round_trips_through_json(tmp_path):
    for path in (default_sample().model_path, matmul_model(tmp_path / "mm.onnx"),
                 external_data_model(tmp_path / "ext")):
        info = model.inspect_model(path)
        assert model.ModelInfo.from_dict(info.to_dict()) == info


def test_an_upload_is_imported_and_inspected_in_a_child(tmp_path, no_parsing_here):
    raw = conv_bn_model(tmp_path / "src" / "m.onnx").read_bytes()
    calls = no_parsing_here()
    dropped = []
    up = io.BytesIO(raw)
    path, info = isolated.import_upload(up, tmp_path / "store", "mine.onnx", on_saved=lambda: dropped.append(True))
    assert not calls
    assert dropped == [True]
    assert path.read_bytes() == raw and path.name == "mine.onnx" and path.parent.parent == tmp_path / "store"
    assert [p.name for p in (tmp_path / "store").iterdir()] == [path.parent.name]  # no temp file left
    assert info.path == str(path) and info.node_count > 0 and info.sha256 == model.sha256_file(path)


def test_an_upload_whose_name_has_a_nul_is_stored_under_a_clean_name(tmp_path):
    raw = conv_bn_model(tmp_path / "m.onnx").read_bytes()
    path, info = isolated.import_upload(io.BytesIO(raw), tmp_path / "store", "../x\x00y\u202e.onnx")
    assert path.name == "x_y_.onnx" and path.read_bytes() == raw and info.node_count > 0


def test_a_local_import_keeps_its_external_data_and_is_read_in_a_child(tmp_path, no_parsing_here):
    src = external_data_model(tmp_path / "ext")
    calls = no_parsing_here()
    path, info = isolated.import_model(src, tmp_path / "store")
    assert not calls
    assert info.has_external_data and (path.parent / "weights.bin").is_file()


@pytest.mark.parametrize("payload,sentence", [
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "not an ONNX model"),
    (b"", "empty"),
])
def test_a_bad_upload_fails_in_the_child_with_the_in_process_sentence(tmp_path, payload, sentence):
    with pytest.raises(ModelLoadError) as here:
        importing.import_upload(io.BytesIO(payload), tmp_path / "a", "bad.onnx")
    with pytest.raises(ModelLoadError) as there:
        isolated.import_upload(io.BytesIO(payload), tmp_path / "b", "bad.onnx")
    assert sentence in there.value.message and there.value.message == here.value.message
    assert not list((tmp_path / "b").rglob("*.onnx"))


def _newer_ir_than_runtime_reads(path: Path) -> Path:
    """The conv_bn test model saved with IR version 14 (onnx's checker takes it; ONNX Runtime 1.31 reads up to 13)."""
    import onnx

    m = onnx.load(str(conv_bn_model(path)))
    m.ir_version = 14
    onnx.save(m, str(path))
    return path


def test_an_upload_refused_for_its_ir_version_leaves_nothing_in_the_models_folder(tmp_path):
    from ortlab.runtime import providers

    if not providers.ir_version_problem(14):
        pytest.skip("this ONNX Runtime reads IR version 14")
    store = tmp_path / "store"
    raw = _newer_ir_than_runtime_reads(tmp_path / "ir14.onnx").read_bytes()
    with pytest.raises(ModelLoadError) as err:
        isolated.import_upload(io.BytesIO(raw), store, "ir14.onnx")
    assert err.value.message.startswith("This model has IR version 14;") and "\n" not in err.value.message
    assert not [p for p in store.rglob("*")], list(store.rglob("*"))  # no model, no folder, no temp file
    with pytest.raises(ModelLoadError, match="IR version 14"):  # a local import too
        isolated.import_model(tmp_path / "ir14.onnx", store)
    assert not [p for p in store.rglob("*")]
    path, info = isolated.import_upload(io.BytesIO(conv_bn_model(tmp_path / "ok.onnx").read_bytes()), store, "ok.onnx")
    assert info.path == str(path) and path.is_file() and info.node_count > 0  # an accepted one is inspected once


@linux_only
def test_a_child_over_its_memory_limit_says_so_in_one_sentence(tmp_path):
    with pytest.raises(ModelLoadError, match=r"needed more than 0.05 GB of memory .*ORTLAB_RUN_MEMORY_GB"):
        isolated.inspect_model(default_sample().model_path, memory_gb=0.05)


def test_large_workspace_models_are_read_in_a_child_small_ones_here(tmp_path, monkeypatch, no_parsing_here):
    a = conv_bn_model(tmp_path / "a.onnx")
    b = conv_bn_model(tmp_path / "b.onnx", blocks=2)
    expected = (model.inspect_model(b), isolated.graph_diff(a, b), isolated.graph_description(a, b))
    assert isolated.in_server(a, b)
    size = a.stat().st_size + b.stat().st_size
    monkeypatch.setenv("ORTLAB_LIMIT_SERVER_MODEL_MAX_BYTES", str(size - 1))
    assert not isolated.in_server(a, b) and isolated.in_server(a)
    monkeypatch.setenv("ORTLAB_LIMIT_SERVER_MODEL_MAX_BYTES", str(min(a.stat().st_size, b.stat().st_size) - 1))
    calls = no_parsing_here()
    assert (isolated.model_info(b), isolated.graph_diff(a, b), isolated.graph_description(a, b)) == expected
    assert not calls


@linux_only
@pytest.mark.slow
def test_the_server_side_of_a_200_mb_upload_holds_only_the_upload(tmp_path):
    """A fresh interpreter holds a 200 MB upload (as Streamlit does) and imports it as the Model page does:
    its peak resident memory may grow by at most a tenth of the upload beyond that. Parsing and checking it
    in-process took about four times the upload."""
    size = 200 * 10**6
    src = tmp_path / "big.onnx"
    subprocess.run([sys.executable, "-c", "import sys; from tests.support.memory_cases import single_file_model; "
                    f"single_file_model(sys.argv[1], {size})", str(src)], check=True, cwd=REPO, timeout=300)
    script = textwrap.dedent("""
        import io, json, sys
        from ortlab.model import isolated

        def hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

        raw = open(sys.argv[1], "rb").read()  # the upload, as Streamlit holds it
        held = hwm()
        up = io.BytesIO(raw)
        del raw
        path, info = isolated.import_upload(up, sys.argv[2], "big.onnx", on_saved=up.close)
        print(json.dumps({"held": held, "peak": hwm(), "params": info.param_count}))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(src), str(tmp_path / "store")], capture_output=True,
                         text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["params"] == size // 4
    assert r["peak"] - r["held"] < size // 10, r


def test_structure_reads_drop_only_the_values_of_big_weights(tmp_path):
    """inspect_model and the graph diff read a model without the values of weights over 1 MiB: shapes that
    need a small initializer's values (Reshape's shape) are still inferred, and the counts come from dims."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((1024, 1024), np.float32), "w")  # 4 MiB
    shape = numpy_helper.from_array(np.array([4, 512], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1024])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["a", "b"])], initializer=[w, shape])
    path = tmp_path / "m.onnx"
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    info = model.inspect_model(path)
    assert info.outputs[0].shape == (4, 512)
    assert info.param_count == 1024 * 1024 + 2 and info.initializer_bytes == {"float32": 4 * 2**20, "int64": 16}
    light = model.load_model(path, weights=False)
    big, small = light.graph.initializer
    assert list(big.dims) == [1024, 1024] and not big.raw_data and not big.float_data
    assert numpy_helper.to_array(small).tolist() == [4, 512]
    assert len(model.load_model(path).graph.initializer[0].raw_data) == 4 * 2**20  # the default keeps them


def _crashing_model(path: Path) -> Path:
    """A LayerNormalization whose axis is 2³¹ (a fuzzed test model): ONNX 1.23's shape inference, which the full
    checker runs, dies of SIGSEGV on it. Written without being checked: this process must not read it."""
    from onnx import TensorProto, helper

    spec = [2, 3, 4, 5]
    node = helper.make_node("LayerNormalization", ["X", "W", "B"], ["Y", "Mean", "InvStdDev"], axis=2**31)
    graph = helper.make_graph([node], "fuzzed", [helper.make_tensor_value_info(n, TensorProto.FLOAT, spec)
                                                 for n in ("X", "W", "B")],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                               for n, shape in (("Y", spec), ("Mean", [1, 1, 1, 1]), ("InvStdDev", [1, 1, 1, 1]))])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(made.SerializeToString())
    return path


def test_a_model_that_crashes_the_checker_is_refused_in_a_sentence_by_the_app_and_the_cli(tmp_path, capsys):
    """The crash is the child's: the app's import and every CLI command that reads the model say what happened,
    and the process that asked goes on (before, ``ortlab inspect`` read it in its own process: status -11, no
    word)."""
    from ortlab.cli.main import main as cli_main

    src = _crashing_model(tmp_path / "fuzzed.onnx")
    crashed = subprocess.run([sys.executable, "-c", "import onnx, sys; onnx.checker.check_model(sys.argv[1], "
                              "full_check=True)", str(src)], capture_output=True)
    if crashed.returncode >= 0:
        pytest.skip("this ONNX checks the model without crashing")
    with pytest.raises(ModelLoadError, match=r"crashed the process that read it \(SIGSEGV\).*export the model again"):
        isolated.import_model(src, tmp_path / "store", "mine.onnx")
    assert not list((tmp_path / "store").glob("*.onnx"))  # nothing entered the store
    for command in (["inspect", str(src)], ["optimize", str(src), str(tmp_path / "out.onnx"), "--precision", "int8"]):
        assert cli_main(command) == 1
        err = capsys.readouterr().err
        assert err.startswith("ortlab: error: Reading the model crashed") and err.count("\n") == 1, err
    assert src.is_file() and not (tmp_path / "out.onnx").exists()
