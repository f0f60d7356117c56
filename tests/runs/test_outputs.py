"""Results are written safely: OUT never replaces the source or its external data (paths, OUT/model.onnx, hard
and symbolic links), a failed run leaves OUT as it was, external data is named after OUT, and what killed runs
leave behind is cleaned."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ortlab.runs import prepare
from ortlab.cli import main as cli
from ortlab.runs import outputs, service
from ortlab.settings.config import OptLevel, Precision, Recipe
from ortlab.core.errors import OptimizationError
from ortlab.model.inspect import sha256_file
from ortlab.runs.outputs import OutputError
from ortlab.runs.in_process import run_recipe
from ortlab.runs.runspec import RunSpec
from ortlab.runs.workspace import Workspace

from tests.support.models import conv_bn_model, external_data_model, random_image_folder

X = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)


def outputs_of(path) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": X})[0]


def digests(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}


def locations(path) -> set[str]:
    model = onnx.load(str(path), load_external_data=False)
    return {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("out_imgs"), per_class=2, prefix="c", seed=3)


def cli_run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- OUT that names the source -----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--precision", "int8", "--quant-mode", "dynamic"], ["--precision", "fp16"],
                                   ["--precision", "fp32"]])
def test_optimize_into_the_folder_holding_the_source_as_model_onnx_is_refused(tmp_path, capsys, flags):
    src = conv_bn_model(tmp_path / "d" / "model.onnx")
    before = digests(src.parent)
    code, out, err = cli_run(["optimize", src, src.parent, *flags], capsys)
    assert code == 2 and "would overwrite the source model" in err, err
    assert digests(src.parent) == before  # the source is there, unchanged, and nothing was added


def test_links_to_the_source_are_refused(tmp_path, capsys):
    src = conv_bn_model(tmp_path / "src.onnx")
    os.link(src, tmp_path / "hard.onnx")
    os.symlink(src, tmp_path / "soft.onnx")
    (tmp_path / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    for out in (tmp_path / "hard.onnx", tmp_path / "soft.onnx", tmp_path / "linkdir" / "src.onnx",
                tmp_path / "." / "src.onnx"):
        code, _, err = cli_run(["optimize", src, out], capsys)
        assert code == 2 and "would overwrite the source model" in err, (out, err)
    assert sha256_file(src) == sha256_file(tmp_path / "hard.onnx")
    with pytest.raises(OutputError):
        prepare.start_recipe(RunSpec(str(src), Recipe()), tmp_path / "soft.onnx", workspace=Workspace(tmp_path / "w"))


def test_run_out_folder_holding_the_source_is_refused(tmp_path, capsys):
    src = conv_bn_model(tmp_path / "d" / "model.onnx")
    recipe = tmp_path / "r.json"
    recipe.write_text(Recipe(precision=Precision.FP16).to_json())
    before = digests(src.parent)
    code, _, err = cli_run(["run", recipe, src, "--out", src.parent], capsys)
    assert code == 2 and "would overwrite the source model" in err
    assert digests(src.parent) == before


def test_a_folder_whose_data_file_name_the_source_uses_is_refused(tmp_path, capsys):
    """The source a.onnx keeps its weights in model.onnx.data: a result into that folder would write
    model.onnx.data too, so it is refused, and the source still computes what it did."""
    src = external_data_model(tmp_path / "d", name="a.onnx", location="model.onnx.data")
    expected = outputs_of(src)
    code, _, err = cli_run(["optimize", src, src.parent, "--precision", "fp16"], capsys)
    assert code == 2 and "external data 'model.onnx.data'" in err, err
    code, _, err = cli_run(["optimize", src, src.parent / "model.onnx", "--precision", "fp16"], capsys)
    assert code == 2 and "external data" in err
    np.testing.assert_array_equal(outputs_of(src), expected)


# -- external data named after OUT -------------------------------------------------------------------------


@pytest.mark.slow
def test_external_data_is_named_after_out_and_two_results_share_a_folder(tmp_path, capsys):
    src = external_data_model(tmp_path / "src", location="model.onnx.data")
    expected = outputs_of(src)
    src_files = digests(src.parent)
    out = tmp_path / "out"
    for name in ("a.onnx", "b.onnx"):
        code, _, err = cli_run(["optimize", src, out / name, "--opt-level", "basic"], capsys)
        assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data"]
    assert locations(out / "a.onnx") == {"a.onnx.data"} and locations(out / "b.onnx") == {"b.onnx.data"}
    for name in ("a.onnx", "b.onnx"):  # the second run did not change the first result
        np.testing.assert_allclose(outputs_of(out / name), expected, rtol=1e-4, atol=1e-4)
    assert digests(src.parent) == src_files

    # a result next to the source: its own data file, the source's untouched
    code, _, err = cli_run(["optimize", src, src.parent / "fp32.onnx"], capsys)
    assert code == 0, err
    assert locations(src.parent / "fp32.onnx") == {"fp32.onnx.data"}
    assert {k: v for k, v in digests(src.parent).items() if k in src_files} == src_files
    np.testing.assert_array_equal(outputs_of(src), expected)


def test_folder_result_with_external_data_has_model_onnx_data(tmp_path):
    src = external_data_model(tmp_path / "src")
    art = run_recipe(src, Recipe(opt_level=OptLevel.BASIC), tmp_path / "run", verify_samples=0)
    assert locations(art.model_path) == {"model.onnx.data"}
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["artifact.json", "model.onnx",
                                                                      "model.onnx.data", "recipe.json"]
    np.testing.assert_allclose(outputs_of(art.model_path), outputs_of(src), rtol=1e-4, atol=1e-4)


# -- failures leave OUT as it was ---------------------------------------------------------------------------


def test_a_failed_run_keeps_the_existing_result_and_leaves_nothing(tmp_path, monkeypatch):
    src = conv_bn_model(tmp_path / "src.onnx")
    out = tmp_path / "out"
    run_recipe(src, Recipe(), out, verify_samples=0)
    before = digests(out)

    import ortlab.runs.pipeline

    def broken(*args, **kwargs):
        raise OptimizationError("simulated", step="optimize")

    monkeypatch.setattr(ortlab.runs.pipeline, "optimize_model", broken)
    with pytest.raises(OptimizationError, match="simulated"):
        run_recipe(src, Recipe(precision=Precision.FP16), out, verify_samples=0)
    assert digests(out) == before and sorted(p.name for p in out.iterdir()) == sorted(before)
    with pytest.raises(OptimizationError):  # a folder the failed run made is gone again
        run_recipe(src, Recipe(), tmp_path / "new" / "run", verify_samples=0)
    assert not (tmp_path / "new" / "run").exists()


# -- leftovers ------------------------------------------------------------------------------------------------


def dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_clean_stale_removes_only_old_leftovers_of_gone_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ws = Workspace(tmp_path / "ws")
    gone, alive = dead_pid(), os.getpid()
    run = ws.new_artifact_dir()
    kept_run = ws.new_artifact_dir()
    (kept_run / "artifact.json").write_text("{}")
    live_run = ws.new_artifact_dir()
    (live_run / outputs.OWNER_FILE).write_text(str(alive))
    made = {
        "old_gone": [tmp_path / "tmp" / f"ortlab-run-{gone}-x", run / f".ortlab-work-{gone}-y",
                     ws.models_dir / f".import-{gone}-z", tmp_path / "out" / f".ortlab-run-{gone}-w"],
        "old_alive": [tmp_path / "tmp" / f"ortlab-run-{alive}-x", live_run / f".ortlab-work-{alive}-y"],
        "new_gone": [tmp_path / "tmp" / f"ortlab-run-{gone}-new"],
        "other": [tmp_path / "tmp" / "someone-else", tmp_path / "out" / "keep.onnx"],
    }
    for group, paths in made.items():
        for p in paths:
            p.mkdir(parents=True)
            if group != "new_gone":
                os.utime(p, (time.time() - 3600, time.time() - 3600))
    for folder in (run, kept_run, live_run):
        os.utime(folder, (time.time() - 3600, time.time() - 3600))
    removed = set(outputs.clean_stale(ws, [tmp_path / "out"]))
    assert set(made["old_gone"]) <= removed and run in removed
    for p in made["old_alive"] + made["new_gone"] + made["other"] + [kept_run, live_run]:
        assert p.exists(), p
    assert not run.exists()


def test_service_run_leaves_no_scratch_folders(tmp_path, monkeypatch, image_dir):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    src = conv_bn_model(tmp_path / "src.onnx")
    ws = Workspace(tmp_path / "ws")
    spec = RunSpec(str(src), Recipe(precision=Precision.INT8, allow_random_data=True), verify_samples=0)
    art = prepare.start_recipe(spec, workspace=ws).follow()
    assert [p.name for p in scratch.iterdir() if "ortlab" in p.name] == []  # (onnxruntime writes its own .ses)
    assert sorted(p.name for p in art.dir.iterdir()) == ["artifact.json", "model.onnx", "model.qdq.onnx",
                                                         "recipe.json"]  # int8 static keeps its QDQ graph


# -- imports: stored once, any name length -------------------------------------------------------------------


def test_same_model_imported_again_is_stored_once(tmp_path):
    from ortlab.model.importing import import_model

    data = conv_bn_model(tmp_path / "src.onnx").read_bytes()
    models = tmp_path / "models"
    first = import_model(data, models, filename="resnet.onnx")
    again = import_model(data, models, filename="resnet.onnx")
    renamed = import_model(data, models, filename="copy of resnet.onnx")
    from_path = import_model(tmp_path / "src.onnx", models)
    assert first == again == renamed == from_path
    assert [p.relative_to(models) for p in models.rglob("*") if p.is_file()] == [first.relative_to(models)]


def test_a_400_character_file_name_imports(tmp_path):
    from ortlab.model.importing import MAX_STORED_NAME, import_model

    data = conv_bn_model(tmp_path / "src.onnx").read_bytes()
    path = import_model(data, tmp_path / "models", filename="m" * 400 + ".onnx")
    assert path.is_file() and path.suffix == ".onnx" and len(path.name) <= MAX_STORED_NAME


# -- private files ----------------------------------------------------------------------------------------------


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}


def test_everything_ortlab_writes_is_private(tmp_path, capsys):
    import stat

    old = os.umask(0o022)  # as a shell would have it
    try:
        src = conv_bn_model(tmp_path / "src.onnx")
        ws = Workspace(tmp_path / "ws")
        prepare.start_recipe(RunSpec(str(src), Recipe()), workspace=ws).follow()  # the child sets 0o077
        found = modes(ws.root)
        assert {k: v for k, v in found.items() if (ws.root / k).is_dir() and v != 0o700} == {}
        assert {k: v for k, v in found.items() if (ws.root / k).is_file() and v != 0o600} == {}
        assert any(k.endswith("model.onnx") for k in found) and "history.sqlite" in found

        os.umask(0o022)
        code, _, err = cli_run(["optimize", src, tmp_path / "cli" / "out.onnx"], capsys)  # main sets 0o077
        assert code == 0, err
        assert stat.S_IMODE((tmp_path / "cli" / "out.onnx").stat().st_mode) == 0o600
        assert os.umask(0o022) == 0o077
    finally:
        os.umask(old)


def test_kill_9_leftovers_are_cleaned_at_the_next_start(tmp_path, monkeypatch):
    """A child killed while it calibrates leaves its scratch folder (quantization copies) in the temp folder and
    the OUT folder's work folder; the next start removes both, and keeps a result that is there."""
    import signal

    from ortlab.data import samples
    from ortlab.settings.config import QuantConfig

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the child's temp folder
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this process's (gettempdir() caches the first answer)
    big = samples.get_sample("efficientnet_lite0").model_path
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"an earlier result")
    endless = Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(calibration_samples=10_000))
    handle = prepare.start_recipe(RunSpec(str(big), endless), out, workspace=Workspace(tmp_path / "ws"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (handle.pid and list(out.glob(".ortlab-work-*"))
                                               and list(scratch.glob("ortlab-run-*/*"))):
        time.sleep(0.05)
    pid = handle.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert handle.wait(30) and handle.state == service.FAILED, (handle.state, handle.error)
    left = list(scratch.glob(f"ortlab-run-{pid}-*")) + list(out.glob(f".ortlab-work-{pid}-*"))
    assert len(left) == 2, left
    young = outputs.clean_stale(None, [out, scratch])
    assert young == [], young  # too young: its owner might be starting
    removed = outputs.clean_stale(None, [out, scratch], older_than_s=0)
    assert sorted(removed) == sorted(left), (removed, left)
    assert sorted(p.name for p in out.iterdir()) == ["model.onnx"] and (out / "model.onnx").read_bytes() == \
        b"an earlier result"
    assert [p.name for p in scratch.iterdir() if "ortlab" in p.name] == []
