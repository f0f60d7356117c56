"""The CLI's messages in the user's words, each with the fix in it (issue 27, point 4)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli.test_cli import run
from tests.support.models import conv_bn_model, matmul_model, random_image_folder


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("messages") / "conv.onnx")


def test_int8_static_without_data_names_the_flags_that_fix_it(src, tmp_path, capsys):
    code, _, err = run(["optimize", src, tmp_path / "o.onnx", "--precision", "int8"], capsys)
    assert code == 2
    assert err.startswith("ortlab: error: int8 static quantization needs calibration data: ")
    for flag in ("--calibration DIR", "--quant-mode dynamic", "--allow-random-data"):
        assert flag in err
    assert "validate:" not in err and not (tmp_path / "o.onnx").exists()


def test_an_empty_model_file_is_asked_for_in_cli_words(tmp_path, capsys):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    code, _, err = run(["inspect", empty], capsys)
    assert code == 1 and "Give a .onnx file exported from your framework." in err and "Upload" not in err


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("images"), per_class=1, classes=4)


def test_an_existing_out_is_replaced_with_a_word_and_the_qdq_file_beside_it_is_listed(src, images, tmp_path,
                                                                                       capsys):
    out = tmp_path / "o.onnx"
    argv = ["optimize", src, out, "--precision", "int8", "--calibration", images, "--verify-samples", "2"]
    code, first, err = run(argv, capsys)
    assert code == 0, err
    assert "Replaced" not in err
    assert f"  files      {out}, {tmp_path / 'o.qdq.onnx'} (the QDQ graph, for ortlab analyze)" in first
    code, _, err = run(argv, capsys)
    assert code == 0 and f"ortlab: Replaced the earlier result at {out}\n" in err


def test_the_time_limit_note_says_the_samples_really_used_beside_the_caps(src, images, tmp_path, capsys):
    code, out, err = run(["optimize", src, tmp_path / "o.onnx", "--precision", "int8", "--calibration", images,
                          "--verify-samples", "3"], capsys)
    assert code == 0, err
    (note,) = [line for line in out.splitlines() if "Time limit" in line]
    assert "2 s per sample for up to 100 calibration + 3 verification samples" in note
    assert note.endswith("; this run used 4 calibration + 3 verification samples.")


def test_a_missing_shape_is_bad_usage_exit_2(tmp_path, capsys):
    from tests.data.test_inputs import dynamic_hw_model

    code, _, err = run(["bench", dynamic_hw_model(tmp_path / "hw.onnx"), "--runs", "2", "--warmup", "0"], capsys)
    assert code == 2 and "--shape images=1,3,H,W" in err


def test_help_lists_every_exit_status_the_cli_returns(capsys):
    from ortlab.cli import tune

    code, out, _ = run(["--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    for status in ("0 ok", "1 the work failed", "2 bad usage", "3 the verdict", f"{tune.EXIT_NO_RECOMMENDATION} tune",
                   "130 interrupted"):
        assert status in text, status


def test_a_tune_budget_too_short_for_any_trial_says_so_and_suggests_one(src, images, tmp_path, capsys):
    code, out, err = run(["tune", src, "--data", images, "--eval", images, "--budget", "0.5", "--out",
                          tmp_path / "t"], capsys)
    assert code == 1, err
    assert "No trial finished: 1 started and was stopped when the time budget of 0.5 s ran out, " in out
    assert "; give 120 s or more." in out and "(0 started)" not in out and "is not counted" not in out
    assert ("  budget     0.5 s was too short for a usable trial: give --budget 120 or more (or --budget 120cpu: CPU "
            "seconds, which other processes on a busy machine do not use up)") in out
    assert "every finished trial is broken" not in out


def test_budget_hint_grows_with_the_budget_given():
    from ortlab.runs.tune import budget_hint_s

    assert budget_hint_s(5) == 120 and budget_hint_s(60) == 240 and budget_hint_s(100) == 420


def test_optimize_without_data_suggests_eval_in_the_note_that_verification_was_skipped(src, tmp_path, capsys):
    code, out, err = run(["optimize", src, tmp_path / "o.onnx"], capsys)
    assert code == 0, err
    assert ("  note       Verification skipped: no evaluation data was given. Give --eval DIR (or --calibration DIR, "
            "which verification also uses) to check the result against the source.") in out


def test_bias_correction_on_an_encoder_without_conv_or_gemm_says_it_found_nothing(tmp_path, capsys):
    encoder = matmul_model(tmp_path / "encoder.onnx")
    data = tmp_path / "tokens.npy"
    np.save(data, np.random.default_rng(0).normal(size=(24, 16, 32)).astype(np.float32))
    code, out, err = run(["optimize", encoder, tmp_path / "o.onnx", "--precision", "int8", "--calibration", data,
                          "--verify-samples", "4"], capsys)
    assert code == 0, err
    assert ("  note       Bias correction (Nagel et al. 2019) found nothing to correct: the quantized model has no "
            "Conv or Gemm with a bias; the biases are as quantized.") in out
    assert "0 of 0 node(s)" not in out


def test_a_truncated_model_file_is_asked_for_again_in_cli_words(src, tmp_path, capsys):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(src.read_bytes()[:3000])
    code, _, err = run(["inspect", cut], capsys)
    assert code == 1 and err.endswith("Export or copy the complete file again.\n") and "pload" not in err, err


@pytest.fixture
def no_work(monkeypatch):
    """The model is never read nor a run started: an OUT refused is refused before any work."""
    from ortlab import api

    def refuse(*a, **k):
        raise AssertionError("work started before OUT was checked")

    monkeypatch.setattr(api.models, "inspect_model", refuse)
    monkeypatch.setattr(api.recipes, "start_recipe", refuse)


def one_line_usage_error(code: int, err: str) -> str:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "unexpected" not in err and "Errno" not in err, err
    return err.strip()


@pytest.mark.parametrize("name, says", [
    ("x" * 300 + ".onnx", "the name is too long for this file system (305 bytes; at most 255). Give a shorter name."),
    ("x" * 248 + ".onnx", "(262 bytes with the '.qdq.onnx.data' the run adds to it; at most 255)"),
    ("d" * 300 + "/o.onnx", "the folder name '" + "d" * 60 + "..."),
])
def test_an_out_name_too_long_is_named_before_any_work(src, tmp_path, capsys, no_work, name, says):
    """It was "unexpected OSError: [Errno 36] File name too long" once the data had been loaded."""
    code, _, err = run(["optimize", src, tmp_path / name, "--precision", "fp32"], capsys)
    line = one_line_usage_error(code, err)
    assert line.startswith("ortlab: error: OUT ") and says in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["optimize", "{src}", "/proc/o.onnx"],
    ["optimize", "{src}", "/proc/sys/out"],
    ["run", "{recipe}", "{src}", "--out", "/proc/run"],
    ["tune", "{src}", "--out", "/proc/tune"],
])
def test_an_out_under_proc_is_named_as_the_kernels_file_system(src, tmp_path, capsys, no_work, argv):
    """It was "The workspace disk is full (0 B free at /proc's volume …)"."""
    from pathlib import Path

    if not Path("/proc/self/mounts").is_file():
        pytest.skip("no /proc here")
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"precision": "fp32"}')
    code, _, err = run([a.format(src=src, recipe=recipe) for a in argv], capsys)
    line = one_line_usage_error(code, err)
    assert "is on /proc, the kernel's proc file system, which holds no files. Give an OUT on a disk" in line
    assert "disk is full" not in line


def test_an_out_in_a_folder_that_refuses_files_is_named_before_any_work(src, tmp_path, capsys, no_work,
                                                                         monkeypatch):
    """Root may write any folder, so the refusals are those of the file system (as a read-only mount answers):
    the folder that receives the result is tried with a file before any work. tests/cli/test_cli_unprivileged.py
    meets a folder the user may not write for real."""
    import errno
    import tempfile

    def refused(code):
        def mkstemp(*a, **k):
            raise OSError(code, __import__("os").strerror(code))
        return mkstemp

    monkeypatch.setattr(tempfile, "mkstemp", refused(errno.EROFS))
    code, _, err = run(["optimize", src, tmp_path / "o.onnx"], capsys)
    assert one_line_usage_error(code, err) == (
        f"ortlab: error: OUT {tmp_path / 'o.onnx'} cannot be written: {tmp_path} is on a read-only file system. "
        "Give an OUT in a folder you can write to.")
    monkeypatch.setattr(tempfile, "mkstemp", refused(errno.EACCES))
    code, _, err = run(["optimize", src, tmp_path], capsys)
    assert "may not create files in " + str(tmp_path) in one_line_usage_error(code, err)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing either


def test_a_tune_pick_on_the_edge_says_how_many_samples_would_settle_it(tmp_path, capsys):
    """A classifier's pick on 4 photos: its claim has no bar of its own (the verdict judges flips among all samples),
    so tune said only "on the edge"; the verdict's own interval and the count that would settle it are shown."""
    import shutil
    from pathlib import Path

    sample = Path(__file__).parents[2] / "sample_models" / "efficientnet_lite0"
    for part, count in (("calibration", 5), ("evaluation", 4)):
        (tmp_path / part).mkdir()
        for p in sorted((sample / part).glob("*.jpg"))[:count]:
            shutil.copy(p, tmp_path / part / p.name)
    code, out, err = run(["tune", "efficientnet_lite0", "--data", tmp_path / "calibration", "--eval",
                          tmp_path / "evaluation", "--max-trials", "1",
                          "--out", tmp_path / "t"], capsys)
    assert code == 0, out + err
    assert "  verdict    ok, on the edge" in out
    edge = next(ln for ln in out.splitlines() if ln.startswith("  edge       "))
    assert "(Wilson, 4 samples)" in edge and "would settle it" in edge and "give more evaluation data" in edge
