"""The CLI guides a newcomer (issue 37's first-hour friction list): progress as one updating line per stage on a
terminal and none when piped or with --quiet; Ctrl-C clean from the first instant; advice for a broken static int8
encoder that works (dynamic int8, tune); only flags the command takes; a new OUT folder said; a JPEG given as the
model named; inspect says which sizes are open and what sets them; analyze's group column only when filled."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from ortlab import api
from ortlab.checks.analyze import NodeAnalysis, NodeError
from ortlab.cli import live as cli_live, main as cli
from ortlab.core.progress import ProgressEvent, null_reporter

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
PHOTO = next((REPO / "sample_models" / "text_photos" / "evaluation").glob("*.jpg"))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "ORTLAB_HOME": str(tmp_path / "home")}


def test_progress_is_one_updating_line_per_stage_on_a_terminal_and_none_when_piped_or_quiet():
    term = _Terminal()
    live = cli_live.reporter(Namespace(verbose=False, quiet=False), term)
    assert isinstance(live, cli_live.LiveLine)
    for i in range(1, 6):
        live(ProgressEvent("calibrate", i, 5, f"image {i}"))
        time.sleep(0.11)  # updates are at most ten a second
    live(ProgressEvent("verify", 0, 24, "starting"))
    live(ProgressEvent("verify", 24, 24, "checked"))
    text = term.getvalue()
    lines = text.split("\n")
    assert len(lines) == 3 and lines[2] == "", lines  # two stages, two lines, each ended
    assert lines[0].count("\r") == 5 and "calibrate 5/5 done image 5" in lines[0].split("\r")[-1]
    assert "verify" not in lines[0] and lines[1].split("\r")[-1].startswith("ortlab: verify 24/24 done checked")
    assert cli_live.reporter(Namespace(verbose=False, quiet=True), _Terminal()) is null_reporter
    assert cli_live.reporter(Namespace(verbose=False, quiet=False), io.StringIO()) is null_reporter  # piped
    assert cli_live.reporter(Namespace(verbose=True, quiet=False), io.StringIO()) is not null_reporter  # -v: a log


def test_the_live_line_ends_before_anything_else_is_printed(monkeypatch, capsys):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    live = cli_live.reporter(Namespace(verbose=False, quiet=False))
    live(ProgressEvent("quantize", 1, 3, ""))
    print("result line")
    sys.stderr.write("ortlab: warning: x\n")
    cli_live.end_live_line()
    assert term.getvalue().endswith("quantize 1/3 …\x1b[K\nortlab: warning: x\n"), repr(term.getvalue())
    assert capsys.readouterr().out == "result line\n"
    monkeypatch.undo()


@pytest.mark.parametrize("command", ["optimize", "run", "compare", "bench", "analyze", "tune"])
def test_every_command_that_shows_progress_takes_quiet(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert "-q, --quiet" in capsys.readouterr().out


def test_a_piped_run_prints_no_progress(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ortlab", "optimize", "digits_cnn", "fp32.onnx", "--precision",
                           "fp32", "--no-timing"], capture_output=True, text=True, cwd=tmp_path, env=_env(tmp_path),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and " … " not in proc.stderr and "done" not in proc.stderr, proc.stderr


def _as_from_a_terminal() -> None:
    """In the child before it runs: Ctrl-C reaches it as it reaches a command typed in a terminal. An ignored or
    blocked SIGINT is inherited through exec, and something in the test process leaves it so (the test saw the command
    run to status 0 only inside the whole suite)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_state(pid: int) -> str:
    """The process's ignored and blocked signal masks, as Linux shows them (for a failure's message)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return ""
    return " ".join(line for line in lines if line.startswith(("SigIgn", "SigBlk")))


def test_ctrl_c_from_the_first_instant_ends_with_one_line_and_status_130(tmp_path):
    """From the instant ortlab's entry point exists (``-X importtime`` says when its import ended; before it the
    interpreter itself is still starting, which no program can answer): the CLI's imports, loading, the run."""
    for delay in (0.0, 0.3, 1.0, 2.5):
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "ortlab", "optimize", "digits_cnn",
                                 "x.onnx", "--precision", "int8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path, env=_env(tmp_path), preexec_fn=_as_from_a_terminal)
        assert proc.stderr is not None
        seen: list[str] = []
        while not (seen and seen[-1].rstrip().endswith("ortlab.cli.entry")):
            line = proc.stderr.readline()
            assert line, ("the entry point was never imported", seen[-5:])
            seen.append(line)
        time.sleep(delay)
        signals = _signal_state(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("import time:"))
        assert proc.returncode == 130 and "Traceback" not in err, (delay, signals, err[-2000:])
        assert err.endswith("ortlab: error: interrupted\n"), (delay, err[-2000:])


def _children(pid: int) -> list[int]:
    """The pids of the live processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the run's child")
def test_sigterm_during_a_run_stops_it_and_its_child_with_one_line_and_status_143(tmp_path):
    """A SIGTERM (``timeout``, a CI job's end, ``kill``) used to end the command and leave the run's child process
    running to its end, unseen."""
    proc = subprocess.Popen([sys.executable, "-m", "ortlab", "optimize", "digits_cnn", "x.onnx", "--precision", "int8",
                             "--no-timing", "-v"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=_env(tmp_path))
    assert proc.stderr is not None
    seen: list[str] = []
    while not any(line.startswith("ortlab: calibrate") for line in seen[-1:]):  # the child runs the recipe
        line = proc.stderr.readline()
        assert line, ("the run never started", seen[-5:])
        seen.append(line)
    children = _children(proc.pid)
    assert children, "the run's child process was not found"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err[-2000:]
    assert err.endswith("ortlab: error: stopped by SIGTERM\n"), err[-2000:]
    deadline = time.monotonic() + 15
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, children))
    assert not (tmp_path / "x.onnx").exists()


def test_ctrl_c_between_the_entry_points_import_and_its_run_is_remembered(tmp_path):
    """The instructions between importing the entry point and run()'s handler (a console script's, or
    ``python -m ortlab``'s): a Ctrl-C there ended in a traceback and status -2 (seen once under load)."""
    script = ("import os, signal, sys, time\n"
              "import ortlab.cli.entry as entry\n"
              "os.kill(os.getpid(), signal.SIGINT)\n"
              "time.sleep(0.2)\n"
              "sys.argv = ['ortlab', 'inspect', 'digits_cnn']\n"
              "sys.exit(entry.run())\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env=_env(tmp_path), preexec_fn=_as_from_a_terminal, timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "ortlab: error: interrupted\n", "")


def test_ctrl_c_that_an_import_swallowed_still_ends_the_command_with_130(monkeypatch, capsys):
    """C code that clears a pending error can lose the KeyboardInterrupt a Ctrl-C raised (the command then ran to its
    end with status 0), and ONNX Runtime's pybind11 module turns it into "ImportError: initialization failed" (a
    traceback): each seen about once in 15 runs of the test above. The entry point remembers the signal itself."""
    outer = signal.getsignal(signal.SIGINT)  # before the import, which installs the entry point's own handler
    from ortlab.cli import entry

    ran: list[bool] = []

    def load_swallowing_the_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass  # what an import that clears errors does

        def main() -> int:
            ran.append(True)
            return 0

        return main

    def load_failing_from_the_interrupt():  # ONNX Runtime's pybind11 module, interrupted while it initialises
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    def load_wrapping_the_interrupt():  # a dataclass field's __set_name__, interrupted: Python 3.11's RuntimeError
        class Field:
            def __set_name__(self, owner, name):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)

        try:
            type("Stored", (), {"run_ids": Field()})
        except KeyboardInterrupt as exc:  # what Python 3.12+ lets through: 3.11 wraps it
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'run_ids' in 'Stored'") from exc

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh process has it (a test may not)
    try:
        for load in (load_swallowing_the_interrupt, load_failing_from_the_interrupt, load_wrapping_the_interrupt):
            monkeypatch.setattr(entry, "_load", load)
            assert entry.run() == entry.INTERRUPTED and ran == []
            assert capsys.readouterr().err == "ortlab: error: interrupted\n"
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    finally:
        signal.signal(signal.SIGINT, outer)  # Ctrl-C stops the test run again

    def load_missing():
        raise ImportError("no such module")

    monkeypatch.setattr(entry, "_load", load_missing)
    with pytest.raises(ImportError, match="no such module"):  # an import that fails on its own is not hidden
        entry.run()


def test_a_jpeg_given_as_the_model_is_bad_usage_named_as_a_jpeg(capsys):
    for command in (["inspect", str(PHOTO)], ["optimize", str(PHOTO), "x.onnx"]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert "is a JPEG image, not an ONNX model" in err and err.count("\n") == 1, err


def test_a_new_out_folder_is_said(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["optimize", "digits_cnn", "resluts/fp32.onnx", "--precision", "fp32", "--no-timing"]) == 0
    assert "the folder resluts does not exist: it is created for the result" in capsys.readouterr().err
    assert cli.main(["optimize", "digits_cnn", "resluts/again.onnx", "--precision", "fp32", "--no-timing"]) == 0
    assert "does not exist" not in capsys.readouterr().err


def test_inspect_says_which_sizes_are_open_and_what_sets_them(capsys):
    assert cli.main(["inspect", str(FIXTURES / "db_detector.onnx")]) == 0
    out = capsys.readouterr().out
    assert "  sizes     x: height, width open: give --size H W" in out and "--shape x=1,3,H,W" in out
    assert cli.main(["inspect", str(FIXTURES / "text_encoder.onnx")]) == 0
    assert "input_ids: seq open: give --seq-len N with text data" in capsys.readouterr().out
    from ortlab.cli.inspect import open_sizes_line  # PP-OCR's recognizer, ddddocr's: the height fixed, the width open
    assert open_sizes_line("x", "float32", ["DynamicDimension.0", 3, 48, "DynamicDimension.1"]) == (
        "x: DynamicDimension.1 open: give --size 48 W (the images are resized to it) to optimize, compare, analyze "
        "and tune, or --shape x=1,3,48,W (bench needs --shape)")
    assert cli.main(["inspect", "digits_cnn"]) == 0  # only the batch is open: nothing to say
    assert "  sizes" not in capsys.readouterr().out


def _analysis(groups: dict[str, str], group: str | None) -> NodeAnalysis:
    node = NodeError("conv1", "Conv", "conv1_out", 20.0, 0.99, 0.1, local_sqnr_db=25.0, rank=1, group=group,
                     group_sqnr_db={"scores": 12.0} if group else {})
    return NodeAnalysis("ref.onnx", "cand.onnx", 2, [node], groups=groups)


@pytest.mark.parametrize("group, column", [("scores", True), (None, False)])
def test_analyze_shows_the_worst_group_column_only_when_a_row_has_one(group, column, monkeypatch, capsys):
    monkeypatch.setattr(api.checks, "analyze", lambda *a, **k: _analysis({"output0": "box, scores"}, group))
    assert cli.main(["analyze", "digits_cnn", "digits_cnn", "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert ("worst group dB" in out.splitlines()[3]) is column, out
    assert ("scores 12.0" in out) is column
    assert ("none of these nodes has the layout" in out) is not column


@pytest.mark.slow
def test_a_broken_static_int8_encoder_is_told_what_works_with_flags_optimize_takes(tmp_path, capsys):
    """--min-sqnr-db 35 makes the small fixture's static int8 (29 dB) broken, as a real MiniLM's is at 10 dB."""
    args = ["optimize", str(FIXTURES / "text_encoder.onnx"), str(tmp_path / "static"), "--precision", "int8",
            "--calibration", str(FIXTURES / "text_calibration.txt"), "--eval", str(FIXTURES / "text_evaluation.txt"),
            "--tokenizer", str(FIXTURES / "text_tokenizer.json"), "--seq-len", "16", "--no-timing"]
    assert cli.main([*args, "--min-sqnr-db", "35"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict    BROKEN"), out
    (advice,) = [ln for ln in out.splitlines() if ln.startswith("  try        ")]
    assert "--quant-mode dynamic --op-types MatMul,Gemm" in advice and "ortlab tune" in advice
    # the flags it names work: dynamic int8 passes that same bar
    dynamic = [*args[:2], str(tmp_path / "dynamic"), *args[3:], "--quant-mode", "dynamic", "--op-types", "MatMul,Gemm"]
    assert cli.main([*dynamic, "--min-sqnr-db", "35"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict    OK") and "  try " not in out, out


@pytest.mark.slow
def test_the_speed_step_suggests_input_value_and_takes_it_or_the_datas_value(tmp_path, capsys, monkeypatch):
    """Without data the speed step has no sample rate to feed and names the flag; with --input-value or with data
    that holds sr it is timed (with the data it said "not timed" too, though the data held sr)."""
    monkeypatch.setenv("ORTLAB_SPEED_CHECK_S", "1")
    args = ["optimize", str(FIXTURES / "vad_rnn.onnx"), str(tmp_path / "a.onnx"), "--precision", "fp16"]
    assert cli.main(args) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "Speed:" in ln]
    assert "not timed" in line and "--input-value sr=VALUE" in line, line
    for i, extra in enumerate((["--input-value", "sr=16000"], ["--eval", str(FIXTURES / "vad_evaluation.npz")])):
        assert cli.main([*args[:2], str(tmp_path / f"b{i}.onnx"), *args[3:], *extra]) == 0
        (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "Speed:" in ln]
        assert "not timed" not in line and "×" in line, line
