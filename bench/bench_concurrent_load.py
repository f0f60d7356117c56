"""Does a long calibration in one session slow down another session's model load?

Before the run service, a calibration ran inside the Streamlit server: it held a process-wide lock and
redirected fd 2 for its whole duration, and another session's model load waited 28 s behind a 600-image
calibration. Now every recipe runs in a child process started by ``ortlab.runs.prepare.start_recipe``.

This script starts int8 static quantization of EfficientNet-Lite0 calibrated on 600 images (the sample's 64
calibration photos, repeated) through the run service, and while it calibrates, loads a model in this
process the way the Model page does (``inspect_model`` + loading the sample's image sets), over and over. It
prints the load time while idle and while the calibration runs (median and max), side by side in one run.
Target: a load under 2 s while the calibration runs.

    python bench/bench_concurrent_load.py [--images 600] [--loads 8]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ortlab.runs import prepare
from ortlab.data import samples
from ortlab.settings.config import Precision, QuantConfig, Recipe
from ortlab.model.inspect import inspect_model
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace


def load_like_the_model_page(name: str) -> float:
    """Seconds to inspect a sample model and load its image sets (what selecting a model costs a session)."""
    start = time.perf_counter()
    s = samples.get_sample(name)
    inspect_model(s.model_path)
    s.calibration_data()
    s.evaluation_data()
    return time.perf_counter() - start


def calibration_folder(tmp: Path, n: int) -> Path:
    """``n`` calibration images: the EfficientNet sample's own photos repeated, in their class folders."""
    src = samples.get_sample("efficientnet_lite0").calibration_dir
    assert src is not None
    photos = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    out = tmp / "calibration"
    for i in range(n):
        photo = photos[i % len(photos)]
        target = out / photo.parent.name / f"{i:04d}{photo.suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(photo, target)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--loads", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        folder = calibration_folder(tmp, args.images)
        model = samples.get_sample("efficientnet_lite0").model_path
        idle = [load_like_the_model_page("digits_cnn") for _ in range(args.loads)]
        recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=args.images))
        spec = RunSpec(str(model), recipe, sample="efficientnet_lite0", calibration=DataRef(path=str(folder)),
                       evaluation=DataRef(sample="efficientnet_lite0", set="evaluation", count=8))
        handle = prepare.start_recipe(spec, workspace=Workspace(tmp / "home"))
        while "calibrate" not in handle.progress and not handle.done:
            handle.drain()
            time.sleep(0.05)
        busy, calibrating_at = [], []
        while len(busy) < args.loads and not handle.done:
            busy.append(load_like_the_model_page("digits_cnn"))
            handle.drain()
            ev = handle.progress.get("calibrate")
            calibrating_at.append(f"{ev.done}/{ev.total}" if ev is not None else "?")
        still_calibrating = not handle.done and handle.progress.get("calibrate") is not None
        handle.cancel()
        handle.wait(30)
    print(f"model load, idle:              median {statistics.median(idle):.3f} s, max {max(idle):.3f} s "
          f"({len(idle)} loads)")
    if busy:
        print(f"model load, during calibration: median {statistics.median(busy):.3f} s, max {max(busy):.3f} s "
              f"({len(busy)} loads, calibration progress {calibrating_at[0]} … {calibrating_at[-1]})")
        print(f"ratio busy/idle (median): {statistics.median(busy) / statistics.median(idle):.2f}x; "
              f"the calibration was {'still running' if still_calibrating else 'finished'} at the last load")
    else:
        print("the calibration ended before any load could be timed: raise --images")


if __name__ == "__main__":
    main()
