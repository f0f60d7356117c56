"""Checks on the bundled sample models in sample_models/ (built by scripts/build_samples.py).

Only onnx, onnxruntime, numpy and Pillow are used here: no torch / scikit-learn / scikit-image.
The preprocessing below is a self-contained copy of the manifest spec, independent of the engine.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models"
NAMES = ["digits_cnn", "digits_attention", "efficientnet_lite0"]
MANIFEST_KEYS = {"name", "title", "description", "license", "attribution", "model", "task", "labels",
                 "preprocess", "calibration_dir", "evaluation_dir", "evaluation_labeled", "reference",
                 "data_notes"}
PREPROCESS_KEYS = {"size", "resize_mode", "layout", "channels", "channel_order", "scale", "mean", "std",
                   "dtype"}
N_LABELS = {"digits_cnn": 10, "digits_attention": 10, "efficientnet_lite0": 1000}
MIN_IMAGES = {  # (calibration, evaluation)
    "digits_cnn": (100, 360),
    "digits_attention": (100, 360),
    "efficientnet_lite0": (64, 64),
}
IMAGE_EXT = {".png", ".jpg", ".jpeg"}


def manifest(name: str) -> dict:
    return json.loads((SAMPLES / name / "manifest.json").read_text(encoding="utf-8"))


def resolve(name: str, rel: str) -> Path:
    return (SAMPLES / name / rel).resolve()


def images(folder: Path, labeled: bool) -> list[tuple[Path, str | None]]:
    if labeled:
        return [(p, d.name) for d in sorted(x for x in folder.iterdir() if x.is_dir())
                for p in sorted(d.iterdir()) if p.suffix.lower() in IMAGE_EXT]
    return [(p, None) for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_EXT]


def preprocess(path: Path, pp: dict) -> np.ndarray:
    """PIL open -> convert -> resize (stretch / center_crop 256/224) -> float32 -> scale -> mean/std
    -> HWC to CHW -> batch of one."""
    img = Image.open(path).convert("L" if pp["channels"] == 1 else "RGB")
    h, w = pp["size"]
    if pp["resize_mode"] == "stretch":
        img = img.resize((w, h), Image.Resampling.BILINEAR)
    elif pp["resize_mode"] == "center_crop":
        iw, ih = img.size
        s = round(min(h, w) * 256 / 224) / min(iw, ih)
        nw, nh = max(w, round(iw * s)), max(h, round(ih * s))
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)
        left, top = (nw - w) // 2, (nh - h) // 2
        img = img.crop((left, top, left + w, top + h))
    else:
        raise AssertionError(f"resize mode not covered here: {pp['resize_mode']}")
    x: np.ndarray = np.asarray(img, dtype=np.float32)
    if x.ndim == 2:
        x = x[:, :, None]
    if pp["scale"] == "0-1":
        x = x / np.float32(255)
    x = (x - np.asarray(pp["mean"], np.float32)) / np.asarray(pp["std"], np.float32)
    if pp["layout"] == "NCHW":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x[None], dtype=np.float32)


def ops(name: str) -> Counter:
    m = onnx.load(str(SAMPLES / name / manifest(name)["model"]), load_external_data=False)
    return Counter(n.op_type for n in m.graph.node if n.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("name", NAMES)
def test_manifest_schema_and_paths(name):
    m = manifest(name)
    assert set(m) >= MANIFEST_KEYS, MANIFEST_KEYS - set(m)
    assert m["name"] == name
    assert m["task"] == "classification"
    pp = m["preprocess"]
    assert set(pp) >= PREPROCESS_KEYS, PREPROCESS_KEYS - set(pp)
    assert pp["resize_mode"] in {"stretch", "center_crop", "letterbox"}
    assert pp["scale"] in {"0-1", "0-255"}
    assert pp["channels"] in (1, 3)
    assert len(pp["mean"]) == len(pp["std"]) == pp["channels"]
    assert pp["layout"] == "NCHW" and pp["dtype"] == "float32"
    for key in ("model", "labels"):
        assert (SAMPLES / name / m[key]).is_file(), m[key]
    for key in ("calibration_dir", "evaluation_dir"):
        assert resolve(name, m[key]).is_dir(), m[key]
        assert SAMPLES in resolve(name, m[key]).parents  # never points outside sample_models/
    ref = m["reference"]
    assert {"metric", "value", "n_samples", "measured_with"} <= set(ref)
    assert m["license"] and m["attribution"] and m["data_notes"]


@pytest.mark.parametrize("name", NAMES)
def test_model_passes_full_check_and_is_one_file(name):
    path = SAMPLES / name / manifest(name)["model"]
    onnx.checker.check_model(str(path), full_check=True)
    m = onnx.load(str(path), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)
    opset = {o.domain: o.version for o in m.opset_import}
    version = opset.get("", opset.get("ai.onnx"))
    assert version is not None and version >= 13


@pytest.mark.parametrize("name", NAMES)
def test_dynamic_batch_axis(name):
    m = onnx.load(str(SAMPLES / name / manifest(name)["model"]), load_external_data=False)
    d0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    assert d0.dim_param and not d0.HasField("dim_value")


def test_digits_cnn_ops():
    c = ops("digits_cnn")
    for op in ("Conv", "BatchNormalization", "Relu", "Add"):
        assert c[op] >= 1, (op, c)
    assert c["Gemm"] + c["MatMul"] >= 1, c


def test_digits_attention_ops():
    c = ops("digits_attention")
    for op in ("MatMul", "Softmax", "LayerNormalization"):
        assert c[op] >= 1, (op, c)


def test_efficientnet_ops():
    c = ops("efficientnet_lite0")
    assert c["BatchNormalization"] >= 1 and c["Conv"] >= 1, c


@pytest.mark.parametrize("name", NAMES)
def test_labels(name):
    m = manifest(name)
    lines = (SAMPLES / name / m["labels"]).read_text(encoding="utf-8").splitlines()
    assert len(lines) == N_LABELS[name]
    assert len(set(lines)) == len(lines) and all(line.strip() == line and line for line in lines)
    if name.startswith("digits"):
        assert lines == [str(i) for i in range(10)]


@pytest.mark.parametrize("name", NAMES)
def test_image_counts_and_label_folders(name):
    m = manifest(name)
    labels = set((SAMPLES / name / m["labels"]).read_text(encoding="utf-8").splitlines())
    cal_min, ev_min = MIN_IMAGES[name]
    ev = images(resolve(name, m["evaluation_dir"]), m["evaluation_labeled"])
    cal = images(resolve(name, m["calibration_dir"]), m["evaluation_labeled"])
    assert len(ev) >= ev_min and len(cal) >= cal_min
    assert m["reference"]["n_samples"] == len(ev)
    if m["evaluation_labeled"]:
        assert {lbl for _, lbl in ev} <= labels
    # evaluation and calibration never share a file
    assert not {p.name for p, _ in ev} & {p.name for p, _ in cal}


@pytest.mark.parametrize("name", NAMES)
def test_images_open_with_expected_mode(name):
    m = manifest(name)
    pp = m["preprocess"]
    for p, _ in images(resolve(name, m["evaluation_dir"]), m["evaluation_labeled"])[:20]:
        with Image.open(p) as im:
            assert im.mode == ("L" if pp["channels"] == 1 else "RGB"), (p, im.mode)


def test_total_size_under_40_mb():
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 40 * 1024 * 1024, total


def _accuracy(name: str) -> tuple[float, int]:
    m = manifest(name)
    labels = (SAMPLES / name / m["labels"]).read_text(encoding="utf-8").splitlines()
    items = images(resolve(name, m["evaluation_dir"]), True)
    sess = ort.InferenceSession(str(SAMPLES / name / m["model"]), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0].name
    x = np.concatenate([preprocess(p, m["preprocess"]) for p, _ in items])
    logits = np.concatenate([sess.run(None, {inp: x[i:i + 64]})[0] for i in range(0, len(x), 64)])
    truth = np.array([labels.index(lbl) for _, lbl in items])
    return float((logits.argmax(1) == truth).mean()), len(items)


def test_digits_cnn_fp32_accuracy_reproduces_manifest():
    ref = manifest("digits_cnn")["reference"]
    acc, n = _accuracy("digits_cnn")
    assert n == ref["n_samples"]
    assert abs(acc - ref["value"]) < 1e-9, (acc, ref["value"])
    assert acc >= 0.98


def test_digits_attention_fp32_accuracy_reproduces_manifest():
    ref = manifest("digits_attention")["reference"]
    acc, n = _accuracy("digits_attention")
    assert abs(acc - ref["value"]) < 1e-9, (acc, ref["value"])
    assert acc >= 0.95


def test_efficientnet_runs_on_a_batch_and_agrees_with_recorded_predictions():
    m = manifest("efficientnet_lite0")
    labels = (SAMPLES / "efficientnet_lite0" / m["labels"]).read_text(encoding="utf-8").splitlines()
    ev = images(resolve("efficientnet_lite0", m["evaluation_dir"]), False)
    sess = ort.InferenceSession(str(SAMPLES / "efficientnet_lite0" / m["model"]),
                                providers=["CPUExecutionProvider"])
    x = np.concatenate([preprocess(p, m["preprocess"]) for p, _ in ev])
    assert x.shape[1:] == (3, 224, 224)
    logits = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: x[i:i + 16]})[0]
                             for i in range(0, len(x), 16)])
    assert logits.shape == (len(ev), 1000)
    pred = Counter(labels[i] for i in logits.argmax(1))
    recorded = Counter(m["reference"]["fp32_top1_predictions"])
    # identical on the build machine; allow one near-tie flip on a CPU with other kernels
    assert sum((pred & recorded).values()) >= len(ev) - 1, (pred, recorded)


def test_text_photos_are_real_crops_of_text_split_without_overlap():
    """``text_photos``: data for text detectors (no model, so not a sample): 16 + 16 real crops of scikit-image's
    page and text images, each listed with its box, none in both splits, none blank."""
    folder = SAMPLES / "text_photos"
    listed = json.loads((folder / "images.json").read_text(encoding="utf-8"))
    assert set(listed["sources"]) == {"page", "text"} and all(listed["sources"].values())
    files = {split: sorted(p.name for p in (folder / split).iterdir() if p.suffix.lower() in IMAGE_EXT)
             for split in ("calibration", "evaluation")}
    assert len(files["calibration"]) == len(files["evaluation"]) == 16
    assert not set(files["calibration"]) & set(files["evaluation"])
    assert sorted(r["file"] for r in listed["images"]) == sorted(f"{s}/{n}" for s, names in files.items() for n in names)
    assert Counter(r["source"] for r in listed["images"]) == {"page": 16, "text": 16}
    for r in listed["images"]:
        img = np.asarray(Image.open(folder / r["file"]).convert("L"), dtype=np.float32)
        assert img.shape == (320, 320) and img.std() > 20, (r["file"], img.std())  # ink on paper, not a blank crop
    assert not (folder / "manifest.json").exists()
