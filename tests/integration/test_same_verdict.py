"""One verdict everywhere: `optimize`, `compare` and `run` print the same verdict level for the same recipe and
data, on the bundled digits sample (int8 static, its own evaluation images) and the YOLOv8-style fixture (fp16,
photos as tensors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ortlab.cli import main as cli
from tests.cli.test_deciding_cli import _photos
from tests.checks.test_task_fit import YOLOV8

pytestmark = pytest.mark.slow  # three CLI commands on each model

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "sample_models" / "digits_cnn"


def _level(text: str) -> str:
    first = text.splitlines()[0]
    assert first.startswith("verdict    "), first
    return first.split()[1]


def _three(tmp_path: Path, capsys, model: Path, recipe: list[str], data: list[str], compare_data: str) -> list[str]:
    out = tmp_path / "out"
    assert cli.main(["optimize", str(model), str(out), *recipe, *data, "--verify-samples", "1000"]) == 0
    optimized = _level(capsys.readouterr().out)
    assert cli.main(["compare", str(model), str(out / "model.onnx"), "--data", compare_data]) == 0
    compared = _level(capsys.readouterr().out)
    assert cli.main(["run", str(out / "recipe.json"), str(model), *data, "--verify-samples", "1000",
                     "--out", str(tmp_path / "again")]) == 0
    ran = _level(capsys.readouterr().out)
    return [optimized, compared, ran]


@pytest.mark.skipif(not (DIGITS / "evaluation").is_dir(), reason="the digits sample's images are not bundled")
def test_the_digits_sample_gets_one_verdict_in_every_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    levels = _three(tmp_path, capsys, DIGITS / "model.onnx", ["--precision", "int8"],
                    ["--calibration", str(DIGITS / "calibration"), "--eval", str(DIGITS / "evaluation")],
                    str(DIGITS / "evaluation"))
    assert len(set(levels)) == 1, levels


def test_the_detector_fixture_gets_one_verdict_in_every_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    data = _photos(tmp_path, 2)
    levels = _three(tmp_path, capsys, YOLOV8, ["--precision", "fp16"], ["--eval", str(data)], str(data))
    assert len(set(levels)) == 1 and levels[0] == "OK", levels
