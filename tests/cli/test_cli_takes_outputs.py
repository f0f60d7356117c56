"""Every command takes what ortlab made (issue 27): a sample's name or a folder that ``ortlab optimize`` wrote
wherever a model is asked for; compare and analyze use a sample's evaluation images when no ``--data`` is given
(and say so); data paths resolve from the current folder, a sample's name means its images, a near miss gets
"did you mean"; a file or folder here named like a sample is used, with a note that it shadows the sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ortlab.api import DataRef
from ortlab.cli import common as cli_common, main as cli
from tests.cli.test_cli import REPO, SAMPLE, needs_sample, run

pytestmark = needs_sample

EVAL_LINE = ("ortlab: evaluation data: the digits_cnn sample's 360 held-out images (give --data to use others)")
INT8_DYNAMIC = ["--precision", "int8", "--quant-mode", "dynamic", "--verify-samples", "8"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder holding ``out_dir/`` and ``out.onnx``, both written by ``ortlab optimize digits_cnn``."""
    folder = tmp_path_factory.mktemp("made")
    with pytest.MonkeyPatch.context() as env:  # the per-test private workspace is not set up yet
        env.setenv("ORTLAB_HOME", str(folder / "home"))
        for out in ("out_dir", "out.onnx"):
            assert cli.main(["optimize", "digits_cnn", str(folder / out), *INT8_DYNAMIC]) == 0
    assert (folder / "out_dir" / "artifact.json").is_file() and (folder / "out.onnx").is_file()
    return folder


def ortlab(args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ortlab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


# -- done when: from any folder ---------------------------------------------------------------------------


def test_compare_a_sample_with_a_file_and_inspect_a_folder_from_another_folder(work):
    proc = ortlab(["compare", "digits_cnn", "out.onnx", "--n", "12"], work)
    assert proc.returncode == 0, proc.stderr
    assert EVAL_LINE in proc.stderr.splitlines()
    assert proc.stdout.startswith("verdict    OK") and "on 12 samples" in proc.stdout

    proc = ortlab(["inspect", "out_dir/"], work)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[0] == "out_dir/model.onnx"


# -- a model argument: sample name, file, or optimize's OUT folder -----------------------------------------


def test_an_output_folder_is_its_model_and_knows_its_sample(work):
    model = cli_common.model_file(str(work / "out_dir"))
    assert model == work / "out_dir" / "model.onnx"
    sample = cli_common.model_sample(model)
    assert sample is not None and sample.name == "digits_cnn"
    assert cli_common.model_sample(work / "out.onnx") is None  # an int8 file: neither the sample nor a folder


def test_bench_times_a_sample_and_an_output_folder(work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    code, out, err = run(["bench", "digits_cnn", "out_dir/", "--runs", "3", "--duration", "0", "--json"], capsys)
    assert code == 0, err
    variants = [r["variant"] for r in json.loads(out)["results"]]
    assert variants == ["digits_cnn/model.onnx", "out_dir/model.onnx"]


def test_analyze_takes_the_sample_and_the_folder_without_data(work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    code, out, err = run(["analyze", "digits_cnn", "out_dir/", "--n", "4", "--top", "2"], capsys)
    assert code == 0, err
    assert EVAL_LINE in err.splitlines()
    assert out.startswith("out_dir/model.onnx vs model.onnx: ") and "on 4 samples" in out


def test_tune_takes_an_output_folder_as_its_model(work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    code, out, err = run(["tune", "out_dir/", "--out", "tuned", "--budget", "0"], capsys)
    assert (code, out) == (2, "")
    assert err == "ortlab: error: --budget must be positive.\n"  # past the model argument, which used to fail


# -- evaluation data: the sample's by default, said so; --data in the user's terms ------------------------


def test_compare_defaults_to_the_sample_of_the_reference_or_of_an_output_folder(work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    for ref in ("digits_cnn", "out_dir/"):
        code, out, err = run(["compare", ref, "out_dir", "--n", "10", "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["n_samples"] == 10
        assert err.splitlines()[0] == EVAL_LINE


def test_data_given_as_a_sample_name_a_local_folder_or_the_readme_path(work, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(work / "out.onnx", "mine.onnx")  # not a sample, not an output folder: only --data says what to use
    local = tmp_path / "held_out"
    for label in ("3", "7"):
        (local / label).mkdir(parents=True)
        for image in sorted((SAMPLE / "evaluation" / label).iterdir())[:3]:
            shutil.copy(image, local / label / image.name)
    for data, n in (("digits_cnn", 360), ("held_out", 6), ("sample_models/digits_cnn/evaluation", 360)):
        code, out, err = run(["compare", "digits_cnn", work / "out.onnx", "--data", data, "--json"], capsys)
        assert code == 0, (data, err)
        assert json.loads(out)["n_samples"] == n, data
        assert "evaluation data:" not in err and "note:" not in err
    code, out, err = run(["compare", "mine.onnx", work / "out.onnx", "--data", "digits_cnn", "--n", "5", "--json"],
                         capsys)
    assert code == 0 and json.loads(out)["n_samples"] == 5, err


def test_a_sample_name_as_data_refers_to_its_set_for_the_run_service():
    assert cli_common.data_ref("digits_cnn", sample_set="calibration") == DataRef(sample="digits_cnn",
                                                                                  set="calibration")
    assert cli_common.data_ref("digits_cnn", count=8) == DataRef(sample="digits_cnn", set="evaluation", count=8)


@pytest.mark.parametrize("command", ["compare", "analyze"])
def test_without_a_sample_or_data_the_message_names_the_flag(command, work, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(work / "out.onnx", "mine.onnx")
    code, out, err = run([command, "mine.onnx", "mine.onnx"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"ortlab: error: {command} needs evaluation data: give --data with {cli_common.DATA_KINDS}, or a "
                   "bundled sample's name (the reference model is not a bundled sample, nor made from one).\n")


@pytest.mark.parametrize("argv, message", [
    (["compare", "digits_cnn", "out.onnx", "--data", "digts_cnn"],
     "Data not found: digts_cnn (no such file or folder here; did you mean the sample digits_cnn"),
    (["inspect", "digits_cn"], "Model not found: digits_cn (no such file or folder here; did you mean the sample "
                               "digits_cnn"),
    (["inspect", "zzz"], "Model not found: zzz (no file, nor a bundled sample: "),
    (["inspect", "empty/"], "Model is a folder with no model.onnx in it (give an .onnx file, or a folder that "
                            "ortlab optimize wrote): empty/"),
])
def test_not_found_messages(argv, message, work, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(work / "out.onnx", "out.onnx")
    (tmp_path / "empty").mkdir()
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"ortlab: error: {message}") and err.count("\n") == 1, err


# -- a folder named like a sample shadows it, and says so -------------------------------------------------


def test_a_folder_named_like_the_sample_shadows_it_with_a_note(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["optimize", "digits_cnn", "digits_cnn", *INT8_DYNAMIC], capsys)
    assert code == 0 and "note:" not in err  # no such folder yet: the sample
    note = (f"ortlab: note: digits_cnn is the folder {tmp_path / 'digits_cnn'} here, which shadows the bundled "
            f"sample digits_cnn (for the sample, give {SAMPLE / 'model.onnx'})")

    code, out, err = run(["compare", "digits_cnn", "digits_cnn/", "--n", "6", "--json"], capsys)
    assert code == 0, err
    assert err.splitlines()[:2] == [note, EVAL_LINE]  # the folder's artifact still names the sample's data
    assert json.loads(out)["n_samples"] == 6

    code, out, err = run(["inspect", "digits_cnn"], capsys)
    assert code == 0 and out.splitlines()[0] == "digits_cnn/model.onnx"
    assert err == note + "\n"

    code, out, err = run(["compare", SAMPLE / "model.onnx", "digits_cnn/", "--data", "digits_cnn"], capsys)
    assert code == 1 and "No images found in folder digits_cnn" in err  # the folder here, not the sample's images
    assert err.splitlines()[0] == (f"ortlab: note: digits_cnn is the folder {tmp_path / 'digits_cnn'} here, which "
                                   f"shadows the bundled sample digits_cnn (for the sample, give "
                                   f"{SAMPLE / 'evaluation'})")
