"""Score-aware ranges: a detector's class-score logits get an int8 grid over the scores a detector is read at,
checked on the scales ONNX Runtime writes, against the calibrated ranges read here."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnxruntime.quantization.calibrate import load_tensors_data

from ortlab.model.patterns import detect_patterns
from ortlab.settings.config import QuantConfig
from ortlab.transforms.quantize import calibrate_model, quantize_calibrated_result
from ortlab.transforms.score_range import score_logits
from tests.support.models import RandomFeeds

DETECTOR = "tests/fixtures/yolov8_detector.onnx"
HIGH = math.log(0.99 / 0.01)  # +4.60


def _grid(path, tensor: str) -> tuple[float, float, float]:
    """(lowest, highest, step) of the int8 grid the QuantizeLinear of ``tensor`` writes."""
    g = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    q = next(n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    scale, zp = float(inits[q.input[1]]), int(inits[q.input[2]])
    return (0 - zp) * scale, (255 - zp) * scale, scale


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scores")
    cache = tmp / "calibration.json"
    q = QuantConfig(bias_correction=False, weight_rounding=False)
    shape = tuple(d.dim_value for d in onnx.load(DETECTOR).graph.input[0].type.tensor_type.shape.dim)
    calibrate_model(DETECTOR, q, RandomFeeds("images", shape, 8, uniform=True), cache)
    out = {}
    for on in (True, False):
        path = tmp / f"q_{on}.onnx"
        out[on] = path, quantize_calibrated_result(DETECTOR, path, QuantConfig(bias_correction=False,
                                                   weight_rounding=False, score_range=on), cache).notes
    return cache, out


def test_the_score_logits_are_the_class_branch_outputs():
    model = onnx.load(DETECTOR)
    logits = score_logits(model, detect_patterns(model))
    assert len(logits) == 3 and all("cv3" in t for t in logits), logits  # one per scale, the class branch's last


def test_each_score_logit_grid_spans_the_scores_read_and_the_calibrated_one_does_not(runs):
    cache, out = runs
    ranges = load_tensors_data(cache)
    (on_path, on_notes), (off_path, off_notes) = out[True], out[False]
    short = 0
    for tensor in score_logits(onnx.load(DETECTOR)):
        lows, highs = ranges[tensor].range_value
        low, high = float(np.min(lows)), float(np.max(highs))
        short += high < HIGH
        lo, hi, step = _grid(on_path, tensor)
        assert abs(hi - max(high, HIGH)) <= step  # a score of 0.99 is on the grid
        assert abs(lo - min(low, 0.0)) <= step  # the calibrated low end is kept
        lo_off, hi_off, step_off = _grid(off_path, tensor)
        assert abs(hi_off - max(high, 0.0)) <= step_off and abs(lo_off - min(low, 0.0)) <= step_off
    assert short >= 1  # the fixture's calibration leaves some output short of a 0.99 score
    assert any(n.startswith(f"Score-aware ranges: the class-score logits of {short} detection output(s) quantized up "
                            "to a score of 0.99 (logit 4.6)") for n in on_notes), on_notes
    assert not any("Score-aware" in n for n in off_notes)


def test_the_cli_flag_turns_it_off_and_the_recipe_says_so(tmp_path, capsys, monkeypatch):
    from ortlab.cli import main as cli

    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    code = cli.main(["optimize", DETECTOR, str(tmp_path / "off"), "--precision", "int8", "--allow-random-data",
                     "--no-timing", "--json", "--no-score-range", "--verify-samples", "4", "--calibration-samples", "4"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    result = json.loads(printed.out)
    assert result["recipe"]["quant"]["score_range"] is False and not [n for n in result["notes"] if "Score-aware" in n]
