"""Does tune's pick hold on data it never saw? Default (trial 1) vs the pick, measured on held-back samples.

For each case the evaluation images are split in two, interleaved file by file (class sub-folders kept): tune sees
one half as its evaluation data (it chooses on two thirds of it and states its pick's measure on the last third),
the other half is never shown to it. Then the default (trial 1, ortlab's own recipe) and the pick are each compared
with the fp32 source on the unseen half by the same evaluation the verdict uses, and their task measure is printed
with its 95% interval (:func:`ortlab.runs.tune_recommend.interval`), the paired difference pick − default on the same
unseen samples, the evidence (reference detections, confident samples …), and tune's own held-out claim beside it.
Timings are tune's own (interleaved with the fp32 source, batch 1).

    ORT_DISABLE_TELEMETRY=1 python bench/bench_tune_unseen.py [--cases digits_cnn yolov8] [--budget 300]
        [--max-trials 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from ortlab.checks.evaluate import evaluate  # noqa: E402
from ortlab.data.loaders import load_image_folder  # noqa: E402
from ortlab.data.preprocess import explain_preprocess, resolve_preprocess  # noqa: E402
from ortlab.data.samples import get_sample  # noqa: E402
from ortlab.model.inspect import inspect_model  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402
from ortlab.runs.tune import Tuner, TuneSettings  # noqa: E402
from ortlab.runs.tune_evidence import evidence_of  # noqa: E402
from ortlab.runs.tune_recommend import interval, paired_difference  # noqa: E402
from ortlab.runs.workspace import Workspace  # noqa: E402
from ortlab.settings.config import PreprocessConfig  # noqa: E402

PHOTOS = REPO / "sample_models" / "efficientnet_lite0"
CASES = {
    # name: (model, calibration folder, evaluation folder, sample name or None, preprocess preset or None)
    "digits_cnn": (REPO / "sample_models" / "digits_cnn" / "model.onnx", REPO / "sample_models" / "digits_cnn" /
                   "calibration", REPO / "sample_models" / "digits_cnn" / "evaluation", "digits_cnn", None),
    "yolov8": (REPO / "tests" / "fixtures" / "yolov8_detector.onnx", PHOTOS / "calibration", PHOTOS / "evaluation",
               None, "yolo"),
}


def split_folder(src: Path, a: Path, b: Path) -> None:
    """Every other file (sorted, per sub-folder) into ``a``, the rest into ``b``."""
    for folder in [src, *sorted(p for p in src.rglob("*") if p.is_dir())]:
        files = sorted(p for p in folder.iterdir() if p.is_file())
        for i, f in enumerate(files):
            dst = (a if i % 2 == 0 else b) / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)


def preprocess_of(model: Path, preset: str | None) -> PreprocessConfig | None:
    """The CLI's ``--preset`` preprocessing (None: the sample's manifest or the model input decide)."""
    if preset is None:
        return None
    resolved = explain_preprocess(inspect_model(model).inputs, None, preset=preset)
    return resolved.config if resolved is not None else None


def run_case(name: str, budget: float, max_trials: int, work: Path) -> None:
    model, cal, ev, sample, preset = CASES[name]
    seen, unseen = work / name / "seen", work / name / "unseen"
    split_folder(ev, seen, unseen)
    labels = get_sample(sample).labels if sample else None
    unseen_ds = load_image_folder(unseen, labels)
    pre = preprocess_of(model, preset)
    settings = TuneSettings(budget_s=budget, max_trials=max_trials, bench_s=1.0)
    start = time.monotonic()
    tuner = Tuner(model, DataRef(path=str(cal)), DataRef(path=str(seen)), settings=settings, preprocess=pre,
                  sample=sample, workspace=Workspace(work / name / "ws"), out_dir=work / name / "out")
    r = tuner.run()
    wall = time.monotonic() - start
    default = next((t for t in r.trials if t.index == 1), None)
    print(f"\n== {name}: {len(r.trials)} trials in {wall:.0f} s; tune saw {len(load_image_folder(seen, labels))} "
          f"evaluation samples, {len(unseen_ds)} unseen")
    print(f"   tune: {r.sentence}")
    if r.best is None or default is None or not r.best.model_path or not default.model_path:
        print("   no pick or no default: nothing to compare")
        return
    if pre is None:
        pre = resolve_preprocess(inspect_model(model).inputs, get_sample(sample) if sample else None, unseen_ds)
    evs = {}
    for label, t in (("default", default), ("pick", r.best)):
        report = evaluate(model, t.model_path, unseen_ds, pre)
        evs[label] = evidence_of(report)
        e = evs[label]
        got = interval(e) if e is not None else None
        claim = (f"{e.measure} {got.value:.3f} (95% {got.low:.3f}–{got.high:.3f}), {e.text()}" if e and got else
                 "no per-sample measure")
        print(f"   {label:<8} #{t.index} {t.label:<40} {t.speed_text():<28} unseen: {claim}")
    if evs["default"] is not None and evs["pick"] is not None and r.best is not default:
        d = paired_difference(evs["pick"], evs["default"])
        print(f"   pick − default on the unseen samples: {d.text(signed=True) if d else '-'}")
    if r.claim is not None:
        print(f"   tune's held-out claim: {r.claim:.3f} ({r.claim_low:.3f}–{r.claim_high:.3f}) on {r.claim_evidence}: "
              f"{r.claim_word}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--max-trials", type=int, default=8)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ortlab-tune-unseen-") as tmp:
        for name in ns.cases:
            run_case(name, ns.budget, ns.max_trials, Path(tmp))


if __name__ == "__main__":
    main()
