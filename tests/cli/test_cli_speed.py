"""optimize times its result against its source after the verdict, with the one clock, and names a slower result
slower; --no-timing skips it; the figure is stored with the run (artifact.json and History)."""

from __future__ import annotations

import json

import pytest

from ortlab.runs.workspace import Workspace
from tests.cli.test_cli import run
from tests.support.models import conv_bn_model

# int8 dynamic on Conv makes ConvInteger, which ORT runs far slower than the float Conv it replaces on a CPU
SLOWER = ["--precision", "int8", "--quant-mode", "dynamic", "--op-types", "Conv"]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("speed") / "conv.onnx", blocks=4)


def test_optimize_names_a_slower_result_slower(src, tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("ORTLAB_HOME", str(home))
    out = tmp_path / "dyn"
    code, text, _ = run(["optimize", src, out, *SLOWER, "--timing-s", "2"], capsys)
    assert code == 0
    lines = text.splitlines()
    speed = next(ln for ln in lines if ln.strip().startswith("Speed:"))
    assert lines.index(speed) <= 2  # in the verdict block, before what was written
    assert "Speed: slower than the source:" in speed and "95% " in speed and "rounds at batch 1" in speed
    artifact = json.loads((out / "artifact.json").read_text())
    stored = artifact["speed"]
    assert stored["speed"]["ratio"] > 1 and stored["error"] == "" and stored["machine"]
    again = Workspace(home).history().get(artifact["run_id"])
    assert again.speed is not None and again.speed.slower


def test_no_timing_skips_it(src, tmp_path, capsys):
    out = tmp_path / "dyn"
    code, text, _ = run(["optimize", src, out, *SLOWER, "--no-timing", "--timing-s", "2"], capsys)
    assert code == 0 and "Speed:" not in text
    assert json.loads((out / "artifact.json").read_text())["speed"] is None


def test_timing_seconds_must_be_positive(src, tmp_path, capsys):
    code, _, err = run(["optimize", src, tmp_path / "x.onnx", "--timing-s", "0"], capsys)
    assert code == 2 and "--timing-s must be a positive number of seconds" in err and "Traceback" not in err


def test_a_failed_timing_keeps_the_verdict_and_says_why(src, tmp_path, capsys, monkeypatch):
    from ortlab.core.errors import BenchmarkError
    from ortlab.runs import result_speed

    def broken(*args, **kwargs):
        raise BenchmarkError("candidate: the timing process stopped unexpectedly: exit status -9")

    monkeypatch.setattr(result_speed, "time_pair", broken)  # the timing runs in this (the parent) process
    out = tmp_path / "fp32"
    code, text, _ = run(["optimize", src, out, "--timing-s", "1"], capsys)
    assert code == 0 and text.startswith("verdict ")
    assert ("  Speed: not timed (candidate: the timing process stopped unexpectedly: exit status -9); the verdict "
            "stands.") in text.splitlines()
    artifact = json.loads((out / "artifact.json").read_text())
    assert artifact["verdict"] is not None and artifact["speed"]["speed"] is None and "exit status -9" in \
        artifact["speed"]["error"]


def test_a_control_input_is_timed_at_the_value_the_data_holds(tmp_path, capsys):
    """A VAD's ``sr`` held by its .npz: optimize's speed check fed it from the data (as the benchmark and tune do);
    it was "not timed (… give --input-value sr=VALUE)" though the data had it (silero-vad 6.2's 16k op15 model)."""
    from pathlib import Path

    from ortlab.model.inspect import inspect_model
    from ortlab.runs.result_speed import SpeedCheck, with_data_values
    from ortlab.runs.runspec import DataRef

    fx = Path(__file__).parents[1] / "fixtures"
    ev = DataRef(path=str(fx / "vad_evaluation.npz"))
    assert with_data_values(SpeedCheck(), fx / "vad_rnn.onnx", [ev]).values == (("sr", 16000),)
    info = inspect_model(fx / "vad_rnn.onnx").to_dict()  # the run's own facts: the source is not read again
    assert with_data_values(SpeedCheck(), tmp_path / "gone.onnx", [ev], info).values == (("sr", 16000),)
    given = SpeedCheck(values=(("sr", 8000.0),))  # the person's --input-value wins
    assert with_data_values(given, fx / "vad_rnn.onnx", [None, ev]) == given
    out = tmp_path / "vad"
    code, text, _ = run(["optimize", fx / "vad_rnn.onnx", out, "--precision", "int8", "--quant-mode", "dynamic",
                         "--calibration", fx / "vad_calibration.npz", "--eval", fx / "vad_evaluation.npz",
                         "--timing-s", "1"], capsys)
    assert code == 0
    stored = json.loads((out / "artifact.json").read_text())["speed"]
    assert stored["error"] == "" and stored["speed"]["rounds"] >= 3, stored
