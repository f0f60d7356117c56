"""The Ray tasks a cluster tune runs on a node, run here as plain functions: the timing task feeds the control
inputs ``--input-value`` gives (a VAD's ``sr``) instead of refusing the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from ortlab.core.errors import BenchmarkError
from ortlab.runs.trial_on_node import time_pair_on_node
from ortlab.settings.config import BenchConfig

VAD = Path(__file__).parents[1] / "fixtures" / "vad_rnn.onnx"


def test_the_timing_task_on_a_node_feeds_the_control_values_it_is_given():
    blob = VAD.read_bytes()
    cfg = BenchConfig(runs=20, warmup=1)  # a run count, not a duration: 10 rounds of 2 runs on a machine of any load
    with pytest.raises(BenchmarkError, match="--input-value sr=VALUE"):
        time_pair_on_node(VAD.name, blob, blob, cfg, 1, {})  # sr is a control value: never made up
    speed, summaries, machine = time_pair_on_node(VAD.name, blob, blob, cfg, 1, {}, {"sr": 16000.0})
    assert speed.rounds >= 10 and speed.low <= speed.high
    assert summaries is not None and machine.summary()
