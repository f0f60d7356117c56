"""The issue-11 tuning targets, measured side by side in one run.

A. EfficientNet-Lite0 (bundled sample):
   1. The default int8 recipe, with ``--trials DIR/trials.json`` (``ortlab tune --out DIR``) the tune's
      recommendation, its most accurate static recipe and its most accurate 16-bit-weight recipe, and any
      ``--recipe`` JSON are built with ``ortlab.runs.in_process.run_recipe`` and timed against fp32 at level all, at batch
      1 and 32, in interleaved rounds (machine load hits them alike): speed ratio vs fp32 (median of the rounds'
      medians).
   2. Accuracy on the held-out evaluation photos (never the calibration ones): logits SQNR, top-1 flips, and
      top-1 flips where fp32's softmax top-1 vs top-2 margin is at least 0.1 — on all 64 photos and on the 32
      that ``ortlab tune`` did not evaluate on (it picks recipes on 32 of them).
   3. Per-node analysis of the default int8 QDQ model on 32 samples: wall time (target under 10 s).
   4. With ``--trials``: trials in the tune's budget, extrapolated to 10 minutes.
B. Transformer encoders with token inputs at sequence length 128: ``tests/fixtures/text_encoder.onnx`` and any
   ``--encoder`` (e.g. a MiniLM-sized one from ``bench/build_text_encoder.py``). Text = 90-word chunks of this
   repository's READMEs, alternate chunks for calibration and evaluation; tokenizer: ``--tokenizer`` (a
   tokenizer.json), else a WordLevel one trained on the calibration chunks (vocabulary 1000, which fits every
   encoder here). A :class:`ortlab.runs.tune.Tuner` search (``--text-budget`` seconds per model, shapes [1, 128]) picks
   the recipe; the recommendation and plain dynamic int8 are then timed against fp32 (level all) at batch 1
   and 8, sequence 128, in interleaved rounds; their verdicts are the tune's (32 evaluation chunks at most).

    python bench/bench_tune_targets.py [--trials DIR/trials.json] [--recipe R.json ...] [--encoder E.onnx ...]
        [--tokenizer tokenizer.json] [--text-budget 180] [--rounds 3] [--skip-image] [--skip-text]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from ortlab.timing import bench  # noqa: E402
from ortlab.data import samples  # noqa: E402
from ortlab.checks.analyze import analyze  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel, Precision, QuantMode, Recipe  # noqa: E402
from ortlab.data.feeds import batch_inputs  # noqa: E402
from ortlab.checks.evaluate import session_inputs  # noqa: E402
from ortlab.runs.in_process import run_recipe  # noqa: E402
from ortlab.runtime.providers import create_session  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402

SEQ = 128
TEXT_SOURCES = ("README.md", "sample_models/README.md", "tests/fixtures/README.md", "docs/ENGINE_API.md")


def accuracy(ref_path, cand_path, ds, pre, margin: float = 0.1) -> dict:
    ref, _ = create_session(ref_path)
    cand, _ = create_session(cand_path)
    feed = batch_inputs(ds, list(range(len(ds))), pre, session_inputs(ref))
    r = ref.run(None, feed)[0].astype(np.float64)
    c = cand.run(None, feed)[0].astype(np.float64)
    p = np.exp(r - r.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top2 = np.sort(p, 1)[:, -2:]
    confident = (top2[:, 1] - top2[:, 0]) >= margin
    flips = r.argmax(1) != c.argmax(1)
    return {"n": len(ds), "sqnr_db": float(10 * np.log10((r ** 2).sum() / ((r - c) ** 2).sum())),
            "flips": int(flips.sum()), "confident": int(confident.sum()),
            "confident_flips": int((flips & confident).sum())}


def interleaved(built: dict[str, str], batches, rounds: int, runs: int, shapes_at=None) -> dict[int, dict[str, float]]:
    """Median over ``rounds`` of each variant's p50 ms at each batch size, the variants timed one after the other
    in every round."""
    out = {}
    for batch in batches:
        cfg = BenchConfig(warmup=3, runs=runs if batch == 1 else max(5, runs // 4), session_opt_level=OptLevel.ALL)
        shapes = shapes_at(batch) if shapes_at else None
        p50: dict[str, list[float]] = {n: [] for n in built}
        for _ in range(rounds):
            for n, path in built.items():
                p50[n].append(bench.summarize(list(bench.latency_samples(path, cfg, batch, variant=n,
                                                                         shapes=shapes))).p50)
        out[batch] = {n: statistics.median(v) for n, v in p50.items()}
    return out


def print_speed(table: dict[int, dict[str, float]], base: str, what: str = "batch") -> None:
    for batch, med in table.items():
        b = med[base]
        print(f"  {what} {batch:>2}: " + ", ".join(f"{n} {m:.2f} ms ({b / m:.2f}×)" for n, m in med.items()))


# -- A. EfficientNet-Lite0 ----------------------------------------------------------------------------------


def image_target(args) -> None:
    from ortlab.core.serial import from_plain

    s = samples.get_sample("efficientnet_lite0")
    cal, ev = s.calibration_data(), s.evaluation_data()
    recipes = {"int8 default": Recipe(precision=Precision.INT8)}
    trials = json.loads(Path(args.trials).read_text()) if args.trials else None
    if trials is not None:
        if trials.get("best"):
            recipes["recommended"] = from_plain(Recipe, trials["best"]["recipe"])
        done = [t for t in trials["trials"] if t["status"] == "done" and isinstance(t["sqnr_db"], float)
                and t["recipe"]["precision"] == "int8" and t["recipe"]["quant"]["mode"] == "static"]
        if done:
            recipes["best static"] = from_plain(Recipe, max(done, key=lambda t: t["sqnr_db"])["recipe"])
        wide = [t for t in done if t["recipe"]["quant"].get("int16_weight_nodes")]
        if wide:
            recipes["best int16 (tune)"] = from_plain(Recipe, max(wide, key=lambda t: t["sqnr_db"])["recipe"])
    for path in args.recipe or []:
        r = Recipe.from_json(Path(path).read_text())
        recipes[r.name or Path(path).stem] = r
    # the evaluation photos ortlab tune judged recipes on (DataRef count = its --verify-samples, 32)
    seen = {x.source for x in DataRef(sample=s.name, set="evaluation", count=32).load().samples}
    unseen = ev.subset([i for i, x in enumerate(ev.samples) if x.source not in seen])
    print(f"\n== A. EfficientNet-Lite0: {len(cal)} calibration photos, {len(ev)} held-out photos "
          f"({len(unseen)} never seen by tune)")
    with tempfile.TemporaryDirectory() as tmp:
        built = {"fp32 all": str(s.model_path)}
        for name, recipe in recipes.items():
            art = run_recipe(s.model_path, recipe, Path(tmp) / re.sub(r"\W+", "_", name), cal, s.preprocess,
                             verify_samples=0, verify_dataset=ev)
            built[name] = str(art.model_path)
            q = recipe.quant
            print(f"  {name}: {recipe.label()}; kept in float: {list(q.nodes_to_exclude)}; "
                  f"16-bit weights: {list(q.int16_weight_nodes)}")
        t = time.perf_counter()
        a = analyze(s.model_path, Path(tmp) / "int8_default", ev, s.preprocess, n=32)
        print(f"  analyze: {len(a.nodes)} nodes, 32 samples, {time.perf_counter() - t:.1f} s wall (target < 10 s)")
        for name in recipes:
            all_ = accuracy(s.model_path, built[name], ev, s.preprocess)
            new = accuracy(s.model_path, built[name], unseen, s.preprocess)
            print(f"  {name:>24}: logits SQNR {all_['sqnr_db']:.1f} dB (unseen {new['sqnr_db']:.1f} dB), "
                  f"top-1 flips {all_['flips']}/{all_['n']}, confident (margin >= 0.1) flips "
                  f"{all_['confident_flips']}/{all_['confident']}")
        print_speed(interleaved(built, (1, 32), args.rounds, args.runs), "fp32 all")
    if trials is not None:
        n, secs = len(trials["trials"]), float(trials["seconds"])
        print(f"  tune: {n} trials in {secs:.0f} s = {600 * n / secs:.0f} in 10 min; recommendation: "
              f"{trials['sentence']}")


# -- B. text encoders ------------------------------------------------------------------------------------------


def text_files(folder: Path, tokenizer: str | None) -> tuple[Path, Path, Path]:
    """calibration.txt / evaluation.txt (alternate 90-word chunks of the READMEs) and the tokenizer to use."""
    words: list[str] = []
    for rel in TEXT_SOURCES:
        for line in (REPO / rel).read_text(encoding="utf-8").splitlines():
            line = re.sub(r"[`*#|>\[\]]", " ", line)
            if len(line.split()) >= 6:
                words += line.split()
    chunks = [" ".join(words[i:i + 90]) for i in range(0, len(words) - 90, 90)]
    cal, ev = folder / "calibration.txt", folder / "evaluation.txt"
    cal.write_text("\n".join(chunks[0::2]) + "\n", encoding="utf-8")
    ev.write_text("\n".join(chunks[1::2]) + "\n", encoding="utf-8")
    if tokenizer:
        return cal, ev, Path(tokenizer)
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(chunks[0::2], trainers.WordLevelTrainer(vocab_size=1000, special_tokens=[
        "[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                               ("[SEP]", 3)])
    path = folder / "wordlevel_tokenizer.json"
    tok.save(str(path))
    return cal, ev, path


def text_target(args) -> None:
    from ortlab.runs.tune import Tuner, TuneSettings
    from ortlab.runs.workspace import Workspace

    models = [str(REPO / "tests" / "fixtures" / "text_encoder.onnx"), *(args.encoder or [])]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for model in models:
            tok_arg = args.tokenizer if model != models[0] else None  # the fixture's vocabulary is 1000
            cal, ev, tok = text_files(folder, tok_arg)
            size = Path(model).stat().st_size
            print(f"\n== B. {Path(model).name} ({size / 1e6:.1f} MB), tokenizer {tok.name}, sequence {SEQ}, "
                  f"{sum(1 for _ in cal.open())} calibration / {sum(1 for _ in ev.open())} evaluation chunks")
            shapes = {"input_ids": [1, SEQ], "attention_mask": [1, SEQ]}
            tuner = Tuner(model, DataRef(path=str(cal), tokenizer=str(tok), seq_len=SEQ),
                          DataRef(path=str(ev), tokenizer=str(tok), seq_len=SEQ, count=32),
                          settings=TuneSettings(budget_s=args.text_budget, exclusion_steps=2, shapes=shapes),
                          workspace=Workspace(folder / "ws"), out_dir=folder / f"tune_{Path(model).stem}")
            result = tuner.run()
            for t in result.trials:
                print(f"  #{t.index:<2} {t.label:<34} {'ok' if t.accepted else 'no'}  SQNR "
                      f"{t.sqnr_db if t.sqnr_db is None else round(t.sqnr_db, 1)} dB  "
                      f"{'' if t.status == 'done' else t.verdict[:120]}")
            print(f"  tune: {len(result.trials)} trials in {result.seconds:.0f} s; {result.sentence}")
            picked = {"fp32 all": model}
            if result.best is not None and result.best.model_path:
                picked[f"tuned ({result.best.label})"] = result.best.model_path
            dyn = next((t for t in result.trials if t.status == "done" and t.recipe.precision == Precision.INT8
                        and t.recipe.quant.mode == QuantMode.DYNAMIC and not t.recipe.quant.per_channel), None)
            if dyn is not None and dyn is not result.best and dyn.model_path:
                picked["int8 dynamic"] = dyn.model_path
            for name, t in (("tuned", result.best), ("int8 dynamic", dyn)):
                if t is not None:
                    print(f"  {name}: verdict {t.verdict}")
            print_speed(interleaved(picked, (1, 8), args.rounds, args.runs,
                                    lambda b: {"input_ids": [b, SEQ], "attention_mask": [b, SEQ]}),
                        "fp32 all", "batch × 128 tokens, batch")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", action="append", help="A recipe JSON to measure too (repeatable).")
    ap.add_argument("--trials", help="trials.json of an `ortlab tune` run on EfficientNet-Lite0.")
    ap.add_argument("--encoder", action="append", help="Another encoder .onnx (input_ids, attention_mask).")
    ap.add_argument("--tokenizer", help="tokenizer.json for the --encoder models.")
    ap.add_argument("--text-budget", type=float, default=180.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--skip-image", action="store_true")
    ap.add_argument("--skip-text", action="store_true")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if not args.skip_image:
        image_target(args)
    if not args.skip_text:
        text_target(args)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
