"""The issue-8 walk through the CLI: every third-party-like fixture (tests/fixtures) × every recipe (fp32 extended,
fp16, int8 dynamic, int8 static calibrated on real data of its kind) → compare → bench.

Each run either succeeds, shows the input shapes it used and gets a verdict that an independent check agrees with
(the test feeds the evaluation data itself, runs both models in ONNX Runtime and applies the default policy's
rules with numpy), or ends in one clear sentence. The known-broken conversions (fp16 and static int8 of the dense-map
detector whose logits pass large offsets) must say "broken"; static int8 of the YOLO head that concatenates pixel boxes
with scores was broken too until range-split kept those Concats in float (on by default); now the head's known-pattern
scope keeps them (and the rest of its post-processing) in float, and must say why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tests.support.reference import matches, nms, nn_agreement, photo_parts
from PIL import Image

from ortlab.cli import main as cli

pytestmark = pytest.mark.slow  # every fixture × every recipe through the CLI

FIXTURES = Path(__file__).parents[1] / "fixtures"
N_IMAGES = 8  # per part: calibration and evaluation photos (the detectors run at 256² and 640²); all are verified
SEQ = 16
RECIPES = {
    "fp32": ["--precision", "fp32", "--opt-level", "extended"],
    "fp16": ["--precision", "fp16"],
    "dynamic": ["--precision", "int8", "--quant-mode", "dynamic"],
    "static": ["--precision", "int8", "--quant-mode", "static"],
}
# the input shapes each fixture is fed at (one sample): from --shape, the data, or the model
SHAPES = {
    "text_encoder": {"input_ids": [1, SEQ], "attention_mask": [1, SEQ]},
    "db_detector": {"x": [1, 3, 256, 256]},
    "yolo_detector": {"images": [1, 3, 640, 640]},
    "vad_rnn": {"input": [1, 256], "state": [2, 1, 32], "sr": []},
    "fp16_net": {"x": [1, 3, 32, 32]},
}
FP16_FAILS = {
    "fp16": "ortlab: error: convert: The model already has float16 weights and no float32 ones; convert the original "
            "float32 model instead.",
    "dynamic": "ortlab: error: quantize: int8 quantization needs a float32 model, and this one computes in float16 (its "
               "weights are float16): quantize the float32 original instead.",
    "static": "ortlab: error: calibrate: int8 quantization needs a float32 model, and this one computes in float16 "
              "(its weights are float16): quantize the float32 original instead.",
}
KNOWN_BROKEN = {("db_detector", "fp16"), ("db_detector", "static")}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, dict]:
    """Each fixture's data flags (calibration and a disjoint evaluation part) and shape flags."""
    root = tmp_path_factory.mktemp("walk_data")
    parts = photo_parts(root, N_IMAGES)
    images = {"cal": parts["calibration"], "eval": parts["evaluation"], "images": parts["evaluation"], "extra": []}
    text = {"cal": FIXTURES / "text_calibration.txt", "eval": FIXTURES / "text_evaluation.txt",
            "extra": ["--tokenizer", str(FIXTURES / "text_tokenizer.json"), "--seq-len", str(SEQ)]}
    vad = {"cal": FIXTURES / "vad_calibration.npz", "eval": FIXTURES / "vad_evaluation.npz", "extra": []}
    return {
        "text_encoder": {**text, "shape": ["--shape", f"input_ids=1,{SEQ}", "--shape", f"attention_mask=1,{SEQ}"]},
        "db_detector": {**images, "shape": ["--shape", "x=1,3,256,256"]},
        "yolo_detector": {**images, "shape": []},
        "vad_rnn": {**vad, "shape": []},
        "fp16_net": {**images, "shape": []},
    }


_RESULTS: dict[tuple[str, str], tuple[int, dict | None, str, Path]] = {}


@pytest.fixture(scope="module")
def walk(data, tmp_path_factory):
    """``walk(fixture, recipe)`` → (exit status, artifact JSON or None, stderr, result path); each run once."""
    out = tmp_path_factory.mktemp("walk_out")

    def run(fixture: str, recipe: str, capsys) -> tuple[int, dict | None, str, Path]:
        if (fixture, recipe) not in _RESULTS:
            dst = out / f"{fixture}_{recipe}.onnx"
            d = data[fixture]
            code = cli.main(["optimize", str(FIXTURES / f"{fixture}.onnx"), str(dst), *RECIPES[recipe],
                             "--calibration", str(d["cal"]), "--eval", str(d["eval"]), "--verify-samples", "32",
                             *d["extra"], *d["shape"], "--json"])
            captured = capsys.readouterr()
            lines = captured.err.strip().splitlines()
            # image runs first state their preprocessing (and its sources) on stderr; the rest is the run's own
            stated = [ln for ln in lines if ln.startswith("ortlab: preprocessing: ")]
            assert len(stated) == (1 if fixture in ("db_detector", "yolo_detector", "fp16_net") else 0), lines
            assert not stated or lines[0] == stated[0]
            _RESULTS[fixture, recipe] = (code, json.loads(captured.out) if code == 0 else None,
                                         "\n".join(ln for ln in lines if ln not in stated), dst)
        return _RESULTS[fixture, recipe]

    return run


# -- the independent check: our own feeds, both models in ORT, the policy's rules in numpy ------------------------


def _feeds(fixture: str, evaluation: Path) -> list[dict[str, np.ndarray]]:
    """Our own feeds of the evaluation data at ``evaluation`` (a photo folder, a .txt with tokenizer.json or
    text_tokenizer.json beside it, an .npz)."""
    if fixture == "text_encoder":
        from tokenizers import Tokenizer

        tok_path = next(p for p in (evaluation.parent / "tokenizer.json", FIXTURES / "text_tokenizer.json")
                        if p.is_file())
        tok = Tokenizer.from_file(str(tok_path))
        tok.enable_truncation(max_length=SEQ)
        tok.enable_padding(length=SEQ, pad_id=0, pad_token="[PAD]")
        lines = [ln.strip() for ln in evaluation.read_text().splitlines() if ln.strip()]
        return [{"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64)}
                for e in tok.encode_batch(lines)]
    if fixture == "vad_rnn":
        arrays = np.load(evaluation)
        return [{"input": arrays["input"][i:i + 1], "state": arrays["state"][i][:, None, :],
                 "sr": np.array(arrays["sr"][i])} for i in range(len(arrays["input"]))]
    name, shape = next(iter(SHAPES[fixture].items()))
    h, w = shape[2:]
    dtype = np.float16 if fixture == "fp16_net" else np.float32
    feeds = []
    for path in sorted(p for p in evaluation.rglob("*") if p.suffix.lower() in (".jpg", ".png")):
        x = np.asarray(Image.open(path).convert("RGB").resize((w, h), Image.Resampling.BILINEAR), np.float32) / 255.0
        feeds.append({name: x.transpose(2, 0, 1)[None].astype(dtype)})
    return feeds


def independent_check(fixture: str, src: Path, dst: Path, evaluation: Path) -> tuple[str, dict[str, float]]:
    """(the default policy's level, {output: SQNR dB}) from outputs this test computes itself on the evaluation
    data at ``evaluation`` ("unknown" when a detector finds nothing in either model and nothing is worse)."""
    a, b = ort.InferenceSession(str(src)), ort.InferenceSession(str(dst))
    names = [o.name for o in a.get_outputs()]
    ref: dict[str, list[np.ndarray]] = {n: [] for n in names}
    cand: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feed in _feeds(fixture, evaluation):
        real = feed["attention_mask"][0] == 1 if "attention_mask" in feed else None
        for n, r, c in zip(names, a.run(None, feed), b.run(None, feed)):
            if real is not None and r.ndim == 3:  # per-token outputs are judged on the real tokens, not padding
                r, c = r[:, real], c[:, real]
            ref[n].append(r.astype(np.float64))
            cand[n].append(c.astype(np.float64))
    broken: list[str] = []
    degraded: list[str] = []
    unjudged: list[str] = []
    sqnr: dict[str, float] = {}
    for n in names:
        r, c = np.concatenate([x.ravel() for x in ref[n]]), np.concatenate([x.ravel() for x in cand[n]])
        noise = float(np.sum((r - c) ** 2))
        sqnr[n] = math.inf if noise == 0 else 10 * math.log10(float(np.sum(r ** 2)) / noise)
        cosine = float(r @ c / math.sqrt(float(r @ r) * float(c @ c)))
        if sqnr[n] < 10 or cosine < 0.9 or np.count_nonzero(np.isfinite(r) & ~np.isfinite(c)):
            broken.append(n)
    if fixture == "db_detector":  # dense map: elements across the 0.3 threshold
        r, c = np.concatenate([x.ravel() for x in ref["maps"]]), np.concatenate([x.ravel() for x in cand["maps"]])
        crossing = float(np.mean((r > 0.3) != (c > 0.3)))
        (broken if crossing > 0.05 else degraded if crossing > 0.01 else []).append("maps")
    if fixture == "yolo_detector":  # boxes: decoded (obj × class > 0.3, per-class NMS 0.45), matched by class, IoU ≥ 0.5
        matched = n_ref = n_cand = 0
        for r, c in zip(ref["output0"], cand["output0"]):
            rd, cd = _yolo_detections(r[0]), _yolo_detections(c[0])
            matched += matches(rd, cd)
            n_ref, n_cand = n_ref + len(rd[1]), n_cand + len(cd[1])
        if n_ref + n_cand:
            f1 = 2 * matched / (n_ref + n_cand)
            (broken if f1 < 0.8 else degraded if f1 < 0.95 else []).append("output0")
        else:  # neither model detects anything on these photos: nothing to compare, the SQNR sees background
            unjudged.append("output0")
    if fixture == "text_encoder":  # embeddings: nearest neighbour kept (mean over tokens), each sample's cosine
        for n in names:
            pool = (lambda x: x[0].mean(axis=0)) if ref[n][0].ndim == 3 else (lambda x: x[0])
            # a switch between neighbours within 0.01 cosine in the float model is a near-tie, not a change
            kept = nn_agreement(np.stack([pool(x) for x in ref[n]]), np.stack([pool(x) for x in cand[n]]))
            (broken if kept < 0.7 else degraded if kept < 0.9 else []).append(n)
            cos = [float(x.ravel() @ y.ravel() / (np.linalg.norm(x) * np.linalg.norm(y)))
                   for x, y in zip(ref[n], cand[n])]
            if min(cos) < 0.9:
                degraded.append(n)
    if fixture == "fp16_net":  # classification: confident top-1 flips (softmax margin >= 0.1)
        flips = 0
        for r, c in zip(ref["logits"], cand["logits"]):
            p = np.sort(np.exp(r[0] - r[0].max()) / np.exp(r[0] - r[0].max()).sum())[::-1]
            flips += int(np.argmax(r[0]) != np.argmax(c[0]) and p[0] - p[1] >= 0.1)
        share = flips / len(ref["logits"])
        (broken if share > 0.05 else degraded if share > 0.01 else []).append("logits")
    level = "broken" if broken else "degraded" if degraded else "unknown" if unjudged else "ok"
    return level, sqnr


_LEVELS: dict[tuple[str, str], tuple[str, dict[str, float]]] = {}


def checked(fixture: str, recipe: str, walk, data, capsys) -> tuple[str, dict[str, float]]:
    """:func:`independent_check` of one run's result, computed once."""
    if (fixture, recipe) not in _LEVELS:
        _LEVELS[fixture, recipe] = independent_check(fixture, FIXTURES / f"{fixture}.onnx",
                                                     walk(fixture, recipe, capsys)[3], Path(data[fixture]["eval"]))
    return _LEVELS[fixture, recipe]


# -- the matrix -----------------------------------------------------------------------------------------------------


def _yolo_detections(a: np.ndarray, threshold: float = 0.3, overlap: float = 0.45):
    """[anchors, 4 box + objectness + classes] → boxes (x1 y1 x2 y2), scores, classes after per-class NMS."""
    score_all = a[:, 5:] * a[:, 4:5]
    return nms(a[:, :4], score_all.max(1), score_all.argmax(1), threshold, overlap)


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("fixture", list(SHAPES))
def test_optimize_gives_shapes_and_a_verdict_an_independent_check_agrees_with(fixture, recipe, walk, data, capsys):
    code, art, err, dst = walk(fixture, recipe, capsys)
    if fixture == "fp16_net" and recipe != "fp32":
        assert code == 1 and err == FP16_FAILS[recipe]  # one sentence, no traceback, no ORT text
        assert not dst.exists()
        return
    assert code == 0, err
    assert art["input_shapes"] == SHAPES[fixture]
    level, sqnr = checked(fixture, recipe, walk, data, capsys)
    nothing = art["coverage"] is not None and not art["coverage"]["quantized"]
    if nothing:  # an int8 run that quantized nothing is at best degraded, and says so first
        level = "broken" if level == "broken" else "degraded"
        assert art["verdict"]["reasons"][0].startswith("nothing was quantized")
    assert art["verdict"]["level"] == level, art["verdict"]
    reported = {o["name"]: o["sqnr_db"] for o in art["evaluation"]["outputs"]}
    for name, db in sqnr.items():
        got = math.inf if reported[name] == "inf" else float(reported[name])
        assert got == db if math.isinf(db) else abs(got - db) < 0.5, (name, got, db)
    assert art["evaluation"]["calibration_overlap"] == 0  # evaluated on the part calibration never saw
    if (fixture, recipe) in KNOWN_BROKEN:
        assert level == "broken"
    if (fixture, recipe) == ("yolo_detector", "static"):  # the head's known-pattern scope kept the pixels-with-scores
        assert level != "broken"                            # Concats in float (range-split did without it)
        (head,) = [n for n in art["notes"] if n.startswith("YOLO-style detection head:")]
        assert all(f"/Concat_{i}," in head for i in (1, 3, 5)) and head.endswith("/Concat_6."), art["notes"]
        assert not any("(range-split)" in n for n in art["notes"])


def test_coverage_says_what_stayed_float_and_why(walk, capsys):
    _, art, _, _ = walk("vad_rnn", "static", capsys)
    cov = art["coverage"]
    assert cov["quantized"]["Gemm"] == 1 and cov["candidates"]["Gemm"] == 5
    assert ("4 weighted node(s) stayed float: 4 Gemm node(s) are inside If/Loop/Scan bodies, which ONNX Runtime's "
            "static quantizer does not enter (its dynamic quantizer does) (/enc8/0/Gemm, /enc8/2/Gemm, /enc16/0/Gemm, "
            "/enc16/2/Gemm).") in art["warnings"]
    _, art, _, _ = walk("vad_rnn", "dynamic", capsys)
    assert art["coverage"]["quantized"] == {"MatMul": 5} and art["coverage"]["in_subgraphs"] == 4
    for fixture in ("db_detector", "yolo_detector"):  # Conv models: dynamic (MatMul/Gemm) has nothing to do
        _, art, _, _ = walk(fixture, "dynamic", capsys)  # degraded, even where the data cannot judge the outputs
        assert art["verdict"]["level"] == "degraded" and art["coverage"]["quantized"] == {}
        warning = next(w for w in art["warnings"] if w.startswith("Nothing was quantized"))
        assert "its weighted nodes are" in warning and "Conv" in warning


@pytest.mark.parametrize("fixture", [f for f in SHAPES if f != "fp16_net"])
def test_compare_agrees_with_the_run_and_shows_the_shapes(fixture, walk, data, capsys):
    flags = ["--data", str(data[fixture]["eval"]), *data[fixture]["extra"], *data[fixture]["shape"]]
    for recipe in RECIPES:
        code, art, _, dst = walk(fixture, recipe, capsys)
        assert code == 0
        assert cli.main(["compare", str(FIXTURES / f"{fixture}.onnx"), str(dst), *flags, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["input_shapes"] == SHAPES[fixture] and doc["n_samples"] == art["evaluation"]["n_samples"]
        # compare judges the two files (no coverage: a result that quantized nothing is just its outputs)
        assert doc["verdict"]["level"] == checked(fixture, recipe, walk, data, capsys)[0], (recipe, doc["verdict"])
    code = cli.main(["compare", str(FIXTURES / f"{fixture}.onnx"), str(walk(fixture, "fp32", capsys)[3]), *flags])
    out = capsys.readouterr().out
    shown = ", ".join(f"{k} [{', '.join(map(str, v))}]" for k, v in SHAPES[fixture].items())
    level = checked(fixture, "fp32", walk, data, capsys)[0]  # ok, or unknown where the data cannot judge
    assert code == 0 and out.startswith(f"verdict    {level.upper()}") and f"inputs: {shown}" in out


@pytest.mark.parametrize("fixture", list(SHAPES))
def test_bench_times_every_result_at_the_shapes_shown(fixture, walk, data, capsys):
    paths = [FIXTURES / f"{fixture}.onnx"] + [walk(fixture, r, capsys)[3] for r in RECIPES
                                              if walk(fixture, r, capsys)[0] == 0]
    bench = ["bench", *map(str, paths), "--runs", "3", "--warmup", "1", *data[fixture]["shape"], "--json"]
    if fixture == "vad_rnn":  # random data cannot stand in for the int64 sample rate: it must be given
        assert cli.main(bench) == 1
        assert capsys.readouterr().err.strip() == (
            "ortlab: error: Model input 'sr' is an int64 scalar: a control value (such as a sample rate, a flag or a "
            "count) that decides what the model computes, so ortlab does not make one up at random. Give the value "
            "to time it with: --input-value sr=VALUE (the Benchmark page takes it from the data on the Data page).")
        bench.append("--input-value=sr=16000")
    code = cli.main(bench)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    results = json.loads(captured.out)["results"]
    assert len(results) == len(paths) and all(r["n"] == 3 for r in results)
    for r in results:
        assert r["input_shapes"] == SHAPES[fixture]


def test_inspect_reads_what_ort_wrote_although_the_checker_rejects_it(walk, capsys):
    _, art, _, dst = walk("text_encoder", "fp32", capsys)
    assert any("ONNX checker rejects" in n for n in art["notes"])
    assert cli.main(["inspect", str(dst)]) == 0
    out = capsys.readouterr().out
    assert ("warning   The ONNX checker rejects this model (No Op registered for LayerNormalization with "
            "domain_version of 12") in out and "ONNX Runtime loads it, so it is used as it is." in out


def test_analyze_and_tune_take_the_same_shape_flag(data, tmp_path, capsys):
    d = data["db_detector"]
    run = tmp_path / "run"
    assert cli.main(["optimize", str(FIXTURES / "db_detector.onnx"), str(run), *RECIPES["static"], "--calibration",
                     str(d["cal"]), "--eval", str(d["eval"]), "--shape", "x=1,3,96,128", "--json"]) == 0
    capsys.readouterr()
    analyze = ["analyze", str(FIXTURES / "db_detector.onnx"), str(run), "--data", str(d["eval"]), "--n", "2"]
    assert cli.main([*analyze, "--shape", "x=1,3,96,128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["input_shapes"] == {"x": [1, 3, 96, 128]} and doc["n_samples"] == 2 and doc["nodes"]
    assert cli.main([*analyze, "--shape", "x=1,3,64,64"]) == 0
    assert "inputs: x [1, 3, 64, 64]" in capsys.readouterr().out
    assert cli.main([*analyze, "--shape", "images=1,3,64,64"]) == 2  # a bad --shape is bad usage, whatever is wrong with it
    assert capsys.readouterr().err.strip() == ("ortlab: error: --shape names 'images', which the model does not take; "
                                               "its inputs are x.")
    out = tmp_path / "tuned"
    assert cli.main(["tune", str(FIXTURES / "db_detector.onnx"), "--data", str(d["cal"]), "--eval", str(d["eval"]),
                     "--shape", "x=1,3,96,128", "--max-trials", "1", "--exclusion-steps", "0", "--bench-seconds",
                     "0.2", "--verify-samples", "4", "--out", str(out), "--json"]) in (0, 4)  # 4: none meets the bar
    doc = json.loads(capsys.readouterr().out)
    (artifact,) = out.glob("trials/*/artifact.json")
    assert json.loads(artifact.read_text())["input_shapes"] == {"x": [1, 3, 96, 128]}
    (trial,) = doc["trials"]  # timed interleaved with the source at the same --shape (it would not run without it)
    assert trial["status"] == "done" and trial["speed"][0]["rounds"] >= 10
