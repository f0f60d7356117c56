"""$ORTLAB_THREADS caps the intra-op threads of every ONNX Runtime session ortlab opens (a Ray task sets it to the
CPUs its node gave the task): ortlab's own sessions, ONNX Runtime's calibrator's, and the machine a timing
records."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

from ortlab.runtime.machine import this_machine
from ortlab.runtime.providers import create_session, session_options
from ortlab.runtime.threads import THREADS_ENV, thread_limit
from ortlab.settings.config import BenchConfig
from ortlab.transforms.quantize import _limit_calibrator_threads

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


@pytest.mark.parametrize("value, expected", [("1", 1), (" 3 ", 3), ("", 0), ("0", 0), ("-2", 0), ("two", 0)])
def test_the_setting_is_a_positive_count_or_nothing(monkeypatch, value, expected):
    monkeypatch.setenv(THREADS_ENV, value)
    assert thread_limit() == expected


def test_sessions_use_the_cap_unless_the_timing_names_a_count(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert session_options().intra_op_num_threads == 0  # ONNX Runtime's default: one per core
    monkeypatch.setenv(THREADS_ENV, "1")
    sess, _ = create_session(DIGITS)
    assert sess.get_session_options().intra_op_num_threads == 1
    assert session_options(BenchConfig(intra_op_threads=2)).intra_op_num_threads == 2
    assert this_machine().threads == 1 and this_machine(2).threads == 2
    assert "1 thread" in this_machine().summary()


def test_ort_calibrators_session_is_made_again_with_the_cap(monkeypatch, tmp_path):
    calibrator = create_calibrator(DIGITS, augmented_model_path=str(tmp_path / "augmented.onnx"),
                                   calibrate_method=CalibrationMethod.MinMax)
    assert calibrator.infer_session.get_session_options().intra_op_num_threads == 0
    _limit_calibrator_threads(calibrator)  # no cap: the calibrator's own session stays
    assert calibrator.infer_session.get_session_options().intra_op_num_threads == 0
    monkeypatch.setenv(THREADS_ENV, "1")
    _limit_calibrator_threads(calibrator)
    opts = calibrator.infer_session.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert opts.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert len(calibrator.infer_session.get_outputs()) > len(ort.InferenceSession(str(DIGITS)).get_outputs())
