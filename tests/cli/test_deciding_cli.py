"""The figure that decided the verdict is the first metric the CLI prints (optimize and compare), on the
YOLOv8-style fixture: detections, not SQNR; score and box SQNR are shown apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ortlab.cli import main as cli
from tests.checks.test_task_fit import YOLOV8, _scaled_detector

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = ROOT / "sample_models" / "efficientnet_lite0" / "evaluation"


def _photos(tmp_path: Path, n: int = 3) -> Path:
    files = sorted(PHOTOS.glob("*.jpg"))[::6][:n]
    x = np.concatenate([np.asarray(Image.open(f).convert("RGB").resize((640, 640)), np.float32).transpose(2, 0, 1)[None]
                        / 255 for f in files])
    np.save(tmp_path / "photos.npy", x)
    return tmp_path / "photos.npy"


def _metric_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines()[1:] if ln.strip()]


def test_compare_prints_the_detections_first_for_a_detector(tmp_path, capsys):
    data = _photos(tmp_path)
    cand = _scaled_detector(tmp_path / "cand.onnx", 0.8, 6.0)
    code = cli.main(["compare", str(YOLOV8), str(cand), "--data", str(data)])
    text = capsys.readouterr().out
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("verdict    ") and "detections F1" in lines[0]
    assert lines[1].startswith("  decided by output0: detections F1 vs reference = 0.")
    assert "SQNR" not in lines[1]
    task = [ln for ln in lines if ln.startswith("  output0: detections F1")]
    assert task and "score SQNR" in task[0] and "box SQNR" in task[0]
    code = cli.main(["compare", str(YOLOV8), str(cand), "--data", str(data), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["deciding"] == "output0: detections F1 vs reference"


def test_optimize_prints_the_detections_first_for_a_detector(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    data = _photos(tmp_path, 2)
    code = cli.main(["optimize", str(YOLOV8), str(tmp_path / "out"), "--precision", "fp16", "--eval", str(data)])
    text = capsys.readouterr().out
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("verdict    OK")
    assert lines[1] == "  decided by output0: detections F1 vs reference = 1.00", lines[:3]
    verify = next(ln for ln in lines if ln.startswith("  verify     "))
    assert verify.startswith("  verify     output0: detections F1 1.00 vs reference"), verify
