"""What a model's outputs mean (its task) and the metrics that mean something for it, sample by sample.

:func:`infer_roles` gives every output a role from its dtype, its per-sample shape (a batch of one), its name
and whether the data is labeled; a task given by the user overrides the inference where the shape allows it:

* integer/bool outputs → compared exactly (never "accuracy");
* float outputs named like a recurrent state (``stateN``, ``h_n``, ``hn``) → generic, whatever their shape;
* [1, C] float, C ≥ 2 → classification when the data is labeled, the row is a probability vector (non-negative,
  summing to 1) or the name says so (logit, class, prob, score, …); otherwise, unlabeled, it is an embedding (a
  sentence or image embedding: nearest-neighbour agreement and cosine, never "top-1") when the name says so or
  C ≥ 16, else generic (a few values: a regression, MTCNN's box offsets [1, 4] and landmarks [1, 10]);
  [1, 1] → generic; a [1, C, 1, 1, …] output is read as the [1, C] it holds, its trailing axes of size 1
  dropped (a classifier converted from Caffe: squeezenet1.0's [1, 1000, 1, 1]);
* [1, T, C] float whose rows are probabilities (non-negative, summing to 1: an OCR recognizer's CTC softmax) →
  sequence (greedy CTC decoding: changed strings and character error rate); so is a time-major [T, 1, C] float
  (the batch of one on axis 1, as PyTorch's CTC recognizers return their logits) whose blank, class 0, scores best
  at 10 % of the positions or more;
* [1, A, B] float → dense_map when every value is in [0, 1] and the name is not a box's or an embedding's
  (per-element scores or gains: a split detector head's per-anchor class scores, PicoDet's [1, 7600, 10], whose
  box regression for the same anchors is then compared as a tensor; a denoiser's spectral mask, NSNet2's
  [1, T, 161]); boxes when the name says so (box, det, yolo) or one side is 5…400 and the other ≥ 1000 (YOLO's
  [1, 84, 8400] / [1, 25200, 85], pixel coordinates); dense_map when the name says map/mask/seg/heat; else
  embedding ([N, T, D] token embeddings);
* other 4-D and more float → dense_map (spatial dims); anything else → generic.

The model's task is the role of its first float output (generic when it has none).

Per-token outputs [1, T, D] of a model fed an attention mask [1, T] are judged on the real tokens only (mask 1):
padding is not part of the text (:func:`token_rows`).

Size: one accumulator per task (classes, embeddings, CTC strings, detections, dense maps), all fed by the
same sample loop; splitting them would scatter the task rules above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ortlab.checks.eval_report import (
    BoxesMetrics, ClassificationMetrics, DenseMapMetrics, EmbeddingMetrics, ExactMetrics, SequenceMetrics, Task,
    TaskMetrics,
)

EXACT = "exact"  # the role of integer outputs
_EMBED = ("embed", "hidden", "pool", "feature", "sentence", "vector", "encod", "token", "last_hidden")
_MAPS = ("map", "mask", "seg", "heat")
_BOXES = ("box", "det", "yolo", "anchor")
_CLASSES = ("logit", "class", "prob", "score", "cls", "label", "pred", "softmax")
# an RNN's returned state (stateN, new_state, h_n, hn, cn, present.*): neither an embedding nor a class score
_STATE = re.compile(r"(?<!hidden_)state|(^|[^a-z])(h_?n|c_?n|hidden_?out|present)([^a-z]|$)")


def _has(name: str, words: tuple[str, ...]) -> bool:
    low = name.lower()
    return any(w in low for w in words)


def _fits(task: Task, arr: np.ndarray) -> bool:
    vec = per_sample_vector(arr)
    return {Task.CLASSIFICATION: vec is not None and vec.shape[-1] >= 2, Task.EMBEDDING: arr.ndim in (2, 3),
            Task.DENSE_MAP: arr.ndim >= 3, Task.BOXES: arr.ndim == 3 and min(arr.shape[1:]) >= 5,
            Task.SEQUENCE: arr.ndim == 3 and arr.shape[-1] >= 2, Task.GENERIC: True}.get(task, False)


MIN_EMBEDDING_DIM = 16  # an unnamed [1, C] float vector with fewer values is a regression, not an embedding


def _probability_rows(arr: np.ndarray) -> bool:
    """Whether every row (last axis) of the first sample is a probability vector (non-negative, sums to 1)."""
    rows = np.asarray(arr[0], dtype=np.float64)
    return bool(rows.size) and bool(rows.min() >= 0) and bool(np.allclose(rows.sum(axis=-1), 1.0, atol=1e-3))


MIN_CTC_BLANKS = 0.1  # a time-major CTC output's blank (class 0) scores best at this share of positions or more


def _time_major_ctc(arr: np.ndarray) -> bool:
    """Whether a float output is time-major per-position class scores, [T, 1, C] (a batch of one on axis 1) with
    T ≥ 4, C ≥ 2 and the CTC blank (class 0) the best at :data:`MIN_CTC_BLANKS` of the positions or more (a
    time-major hidden state [S, 1, E] has no such class)."""
    if arr.ndim != 3 or arr.shape[1] != 1 or arr.shape[0] < 4 or arr.shape[2] < 2:
        return False
    best = np.argmax(np.nan_to_num(np.asarray(arr[:, 0], dtype=np.float64), nan=-np.inf), axis=-1)
    return float(np.mean(best == 0)) >= MIN_CTC_BLANKS


def _batch_first(arr: np.ndarray) -> np.ndarray:
    """A time-major [T, 1, C] output as [1, T, C] (a batch-first one as it is)."""
    return arr.swapaxes(0, 1) if arr.ndim == 3 and arr.shape[1] == 1 and arr.shape[0] > 1 else arr


def per_sample_vector(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` as [N, C] when it is one: [N, C] itself, or [N, C, 1, 1, …] whose trailing axes all have size 1 (a
    classifier converted from Caffe, ``squeezenet1.0``'s [1, 1000, 1, 1]); None for any other shape."""
    if arr.ndim == 2:
        return arr
    if arr.ndim >= 4 and all(d == 1 for d in arr.shape[2:]):
        return arr.reshape(arr.shape[:2])
    return None


def _guess(name: str, arr: np.ndarray, labeled: bool) -> tuple[Task, str]:
    shape = list(arr.shape)
    if arr.ndim >= 2 and _STATE.search(name.lower()):
        return Task.GENERIC, f"'{name}' {shape} is named like a recurrent state (compared as a tensor)"
    if _time_major_ctc(arr):
        return Task.SEQUENCE, (f"'{name}' {shape} is time-major ([T, N, C], as PyTorch's CTC recognizers return) "
                               "with the blank, class 0, the best at many positions: per-position class scores, "
                               "decoded as CTC text")
    if arr.ndim == 2:
        return _guess_vector(name, arr, labeled)
    if arr.ndim == 3:
        return _guess_rows(name, arr)
    if arr.ndim >= 4 and (vec := per_sample_vector(arr)) is not None:
        role, reason = _guess_vector(name, vec, labeled)
        return role, f"{reason}; the output is {shape}, read without its trailing axes of size 1"
    if arr.ndim >= 4:
        return Task.DENSE_MAP, f"'{name}' {shape} has spatial dims (heat map / segmentation)"
    return Task.GENERIC, f"'{name}' {shape} has no known meaning"


def _guess_vector(name: str, arr: np.ndarray, labeled: bool) -> tuple[Task, str]:
    """The role of a [1, C] float output."""
    shape = list(arr.shape)
    if arr.shape[1] < 2:
        return Task.GENERIC, f"'{name}' {shape} has one value per sample"
    if labeled:
        return Task.CLASSIFICATION, f"'{name}' {shape} is one score per class and the data is labeled"
    if _has(name, _EMBED):
        return Task.EMBEDDING, f"'{name}' {shape} is named like an embedding"
    if _probability_rows(arr):
        return Task.CLASSIFICATION, f"'{name}' {shape} is a probability vector (one score per class)"
    if _has(name, _CLASSES):
        return Task.CLASSIFICATION, f"'{name}' {shape} is named like class scores"
    if arr.shape[1] < MIN_EMBEDDING_DIM:
        return Task.GENERIC, (f"'{name}' {shape} is {arr.shape[1]} float values per sample, too few for an "
                              "embedding and not a probability vector: a regression such as box offsets or "
                              "landmarks (compared as a tensor; give the task as classification if it holds "
                              "class scores)")
    return Task.EMBEDDING, (f"'{name}' {shape} is a float vector that is not a probability vector, with no "
                            "labels: an embedding (give the task as classification if it holds class scores)")


def _guess_rows(name: str, arr: np.ndarray) -> tuple[Task, str]:
    """The role of a [1, A, B] float output."""
    shape = list(arr.shape)
    small, big = sorted(arr.shape[1:])
    if _probability_rows(arr):
        # an OCR recognizer's [N, T, classes] softmax (CTC): per-position class probabilities, not boxes
        return Task.SEQUENCE, (f"'{name}' {shape} holds per-position class probabilities (rows sum to 1): "
                               "decoded as CTC text")
    if _unit_values(name, arr):
        return Task.DENSE_MAP, (f"'{name}' {shape} has every value in [0, 1]: per-element scores or gains (a "
                                "score map, a mask), judged by threshold crossings, not as boxes (pixel "
                                "coordinates) nor embeddings")
    if (_has(name, _BOXES) and small >= 5) or (5 <= small <= 400 and big >= 1000 and not _has(name, _EMBED)):
        negative = _negative_sizes(arr)
        if negative > MAX_NEGATIVE_SIZES:
            return Task.GENERIC, (f"'{name}' {shape} has the shape of YOLO-style boxes, but {negative:.0%} of its "
                                  "box widths and heights are negative: not boxes (compared as a tensor)")
        return Task.BOXES, f"'{name}' {shape} looks like YOLO-style boxes (anchors × 4+classes)"
    if _has(name, _MAPS):
        return Task.DENSE_MAP, f"'{name}' {shape} is named like a map"
    return Task.EMBEDDING, f"'{name}' {shape} looks like per-token embeddings [N, T, D]"


def _unit_values(name: str, arr: np.ndarray) -> bool:
    """Whether a float [1, A, B] output's first sample lies in [0, 1] (sigmoid scores) and its name is not a box's
    or an embedding's."""
    if arr.dtype.kind != "f" or arr.ndim != 3:  # a scalar output (a sequence's length) has no first sample
        return False
    first = np.asarray(arr[0])
    return (min(arr.shape[1:]) >= 2 and bool(first.size)
            and not _has(name, _BOXES + _EMBED) and bool(np.isfinite(first).all())
            and float(first.min()) >= 0.0 and float(first.max()) <= 1.0)


def _anchors(arr: np.ndarray) -> int:
    return max(arr.shape[1:])


def _split_head(names: Sequence[str], outputs: Sequence[np.ndarray]) -> tuple[set[str], set[str]]:
    """(class scores, box regressions) of a split detector head (PicoDet, PP-YOLOE, RT-DETR): the outputs with
    values in [0, 1] beside another float output for the same anchors, and those other outputs."""
    unit = {n for n, a in zip(names, outputs) if _unit_values(n, a)}
    rest = {n: _anchors(a) for n, a in zip(names, outputs) if a.dtype.kind == "f" and a.ndim == 3 and n not in unit}
    scores = {n for n, a in zip(names, outputs) if n in unit and _anchors(a) in rest.values()}
    anchors = {_anchors(a) for n, a in zip(names, outputs) if n in scores}
    return scores, {n for n, k in rest.items() if k in anchors}


def _auto_role(name: str, arr: np.ndarray, labeled: bool, scores: set[str], regressions: set[str]) -> tuple[Task, str]:
    """The role inferred for a float output, a split detector head's outputs (:func:`_split_head`) first."""
    if name in scores:
        return Task.DENSE_MAP, (f"'{name}' {list(arr.shape)} holds per-anchor class scores (every value in [0, 1], "
                                "its boxes in another output for the same anchors): judged as a score map")
    role, reason = _guess(name, arr, labeled)
    if role == Task.EMBEDDING and name in regressions:  # its rows are box offsets, not token embeddings
        return Task.GENERIC, (f"'{name}' {list(arr.shape)} is the box regression beside a split detector head's "
                              "class scores (compared as a tensor)")
    return role, reason


MAX_NEGATIVE_SIZES = 0.01  # a boxes output's widths and heights are sizes: more negative ones than this, not boxes


def _negative_sizes(arr: np.ndarray) -> float:
    """The share of negative widths and heights (channels 2 and 3 of each anchor) in the first sample of an output
    shaped like YOLO-style boxes; a distribution-focal head's logits ([N, anchors, 4 × bins]) has most of them
    negative."""
    rows, _ = _anchor_rows(arr)
    sizes = rows[:, 2:BOX_CHANNELS]
    return float(np.mean(sizes < 0)) if sizes.size else 0.0


def infer_roles(names: list[str], outputs: list[np.ndarray], labeled: bool,
                override: Task = Task.AUTO) -> tuple[Task, bool, str, dict[str, Any]]:
    """(task, inferred, why, role of each output: a Task or :data:`EXACT`) from the first sample's outputs."""
    roles: dict[str, Any] = {}
    task: Task | None = None
    why = ""
    scores, regressions = _split_head(names, outputs) if override == Task.AUTO else (set(), set())
    for name, arr in zip(names, outputs):
        if arr.dtype.kind != "f":
            roles[name] = EXACT
            continue
        role: Task
        if override != Task.AUTO:
            role = override if _fits(override, arr) else Task.GENERIC
            reason = f"given as {override.value}" + ("" if role == override else
                                                     f" ('{name}' {list(arr.shape)} does not fit it: generic)")
        else:
            role, reason = _auto_role(name, arr, labeled, scores, regressions)
        roles[name] = role
        if task is None:
            task, why = role, reason
    if task is None:
        task, why = Task.GENERIC, "every output is an integer tensor: compared exactly"
    if override != Task.AUTO:
        task = override
    # one classifier output gets the classification metrics; further ones are compared as generic outputs
    seen = False
    for name, role in roles.items():
        if role == Task.CLASSIFICATION:
            if seen:
                roles[name] = Task.GENERIC
            seen = True
    return task, override == Task.AUTO, why, roles


BOX_CHANNELS = 4  # a YOLO-style output's first channels: box centre x/y, width, height (input pixels)


def channel_groups(role: Any, shape: tuple[int, ...] | list[int], values: np.ndarray | None = None,
                   ) -> tuple[int, int, dict[str, slice]] | None:
    """How a YOLO-style boxes output ([N, 4+classes, anchors] or [N, anchors, 4+classes]) splits into channel groups
    of very different ranges: (channel axis, channel count, {"boxes": the 4 box channels, "scores": the rest}); with
    the output's ``values`` (a sample), channels after the scores that are not scores (:func:`score_channels`: mask
    coefficients, keypoints) are a group of their own, "others". None for every other role or shape."""
    if role != Task.BOXES or len(shape) != 3 or min(shape[1:]) <= BOX_CHANNELS:
        return None
    axis = 1 if shape[1] < shape[2] else 2  # as _Boxes reads it: the shorter side holds the channels
    n = int(shape[axis])
    scores = n - BOX_CHANNELS if values is None else score_channels(values)
    groups = {"boxes": slice(0, BOX_CHANNELS), "scores": slice(BOX_CHANNELS, BOX_CHANNELS + scores)}
    if BOX_CHANNELS + scores < n:
        groups["others"] = slice(BOX_CHANNELS + scores, n)
    return axis, n, groups


def output_channel_groups(names: Sequence[str], arrays: Sequence[np.ndarray],
                          ) -> dict[str, tuple[int, dict[str, slice]]]:
    """The outputs (from one sample's values) that split into channel groups of very different ranges, as
    name → (channel axis, {"boxes": …, "scores": …}): the groups analyze and the verdict score apart."""
    _, _, _, roles = infer_roles(list(names), list(arrays), labeled=False)
    found = {n: channel_groups(roles.get(n), np.shape(a), np.asarray(a)) for n, a in zip(names, arrays)}
    return {n: (g[0], g[2]) for n, g in found.items() if g is not None}


def _softmax(row: np.ndarray) -> np.ndarray:
    if row.min() >= 0 and abs(row.sum() - 1.0) < 1e-3:
        return row  # already probabilities
    z = np.exp(row - row.max())
    return z / z.sum()


def _scale(ref: np.ndarray, threshold: float) -> tuple[str, float]:
    """("probability", t) when the reference lies in [0, 1], else ("logit", logit(t))."""
    finite = ref[np.isfinite(ref)]
    if finite.size == 0 or (finite.min() >= 0 and finite.max() <= 1):
        return "probability", threshold
    t = min(max(threshold, 1e-6), 1 - 1e-6)
    return "logit", math.log(t / (1 - t))


class _Classes:
    def __init__(self, name: str, margin: float):
        self.name, self.margin = name, margin
        self.ref_top: list[list[int]] = []
        self.cand_top: list[list[int]] = []
        self.flip_margins: list[float] = []
        self.flip_samples: list[int] = []
        self.margins: list[float] = []
        self.margin_errors: list[float] = []
        self.n_classes = 0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64)[0]
        c = np.asarray(cand, dtype=np.float64)[0]
        self.n_classes = r.size
        rt, ct = top5_indices(r), top5_indices(np.nan_to_num(c, nan=-np.inf))
        self.ref_top.append(rt)
        self.cand_top.append(ct)
        p = np.sort(_softmax(r))[::-1]
        margin = float(p[0] - p[1]) if p.size > 1 else 1.0
        self.margins.append(margin)
        self.margin_errors.append(_margin_error(r, c, rt))
        if rt[0] != ct[0]:
            self.flip_margins.append(margin)
            self.flip_samples.append(len(self.ref_top) - 1)

    def result(self) -> ClassificationMetrics:
        n = len(self.ref_top)
        agree = sum(a[0] == b[0] for a, b in zip(self.ref_top, self.cand_top)) / max(1, n)
        top5 = (sum(a[0] in b for a, b in zip(self.ref_top, self.cand_top)) / max(1, n)
                if self.n_classes > 5 else None)
        return ClassificationMetrics(self.name, self.n_classes, n, agree, self.flip_margins, self.margin, top5,
                                     self.margins, self.flip_samples, self.margin_errors)


def _margin_error(r: np.ndarray, c: np.ndarray, top: list[int]) -> float:
    """(candidate's − reference's gap between the reference's top-1 and top-2 class)², in logits (log
    probabilities when the output holds probabilities): how far the decision moved, whether or not it flipped."""
    if len(top) < 2:
        return 0.0
    if r.min() >= 0 and abs(r.sum() - 1.0) < 1e-3:
        r, c = np.log(np.clip(r, 1e-12, None)), np.log(np.clip(np.nan_to_num(c, nan=0.0), 1e-12, None))
    i, j = top[0], top[1]
    moved = float((c[i] - c[j]) - (r[i] - r[j]))
    return moved * moved if math.isfinite(moved) else math.inf


class _Dense:
    def __init__(self, name: str, threshold: float):
        self.name, self.threshold = name, threshold
        self.scale: str | None = None
        self.cut = threshold
        self.crossing = self.positive = self.total = 0
        self.per_sample: list[tuple[int, int]] = []  # (crossing, elements) of each sample

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64)
        c = np.nan_to_num(np.asarray(cand, dtype=np.float64), nan=-np.inf)
        if self.scale is None:
            self.scale, self.cut = _scale(r, self.threshold)
        rp, cp = r > self.cut, c > self.cut
        crossing = int(np.count_nonzero(rp != cp))
        self.crossing += crossing
        self.positive += int(np.count_nonzero(rp))
        self.total += r.size
        self.per_sample.append((crossing, int(r.size)))

    def result(self) -> DenseMapMetrics:
        t = max(1, self.total)
        return DenseMapMetrics(self.name, self.threshold, self.scale or "probability", self.crossing / t,
                               self.positive / t, sample_crossing=[c for c, _ in self.per_sample],
                               sample_elements=[e for _, e in self.per_sample])


NMS_IOU = 0.45  # YOLO's usual non-maximum suppression overlap
MATCH_IOU = 0.5  # a candidate detection matches a reference one of the same class at this IoU or more
SCORE_BAND = 1.5  # a score is near the threshold when its reference logit lies within this of logit(threshold)
MAX_CANDIDATES = 3000  # anchors above the threshold kept for NMS (best first), as YOLO's own NMS caps them
MAX_DETECTIONS = 300  # detections kept per image after NMS
# detections are compared at a second score threshold too: an int8 YOLOv8n whose stride-8 score logits were
# quantized up to 0 capped those scores at 0.5, which the F1 at 0.3 (0.96) never showed and at 0.5 was 0.78
HIGH_THRESHOLD = 0.5


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _anchor_rows(arr: np.ndarray) -> tuple[np.ndarray, bool]:
    """A boxes output's first sample as [anchors, channels], and whether it came as anchor rows (YOLOv5's
    [N, anchors, 5+classes], with objectness) rather than channel rows (YOLOv8's [N, 4+classes, anchors])."""
    a = np.asarray(arr, dtype=np.float64)[0]
    if a.shape[0] < a.shape[1]:
        return a.T, False
    return a, True


def score_channels(arr: np.ndarray) -> int:
    """How many channels after a YOLO-style output's 4 box channels hold scores (objectness, class scores): the
    leading run whose values all lie in [0, 1] when a channel after it does not (a segmentation model's mask
    coefficients and a pose model's keypoints follow the class scores, unbounded), else all of them (scores as
    logits, or no extra channels)."""
    a, _ = _anchor_rows(arr)
    rest = np.where(np.isfinite(a[:, BOX_CHANNELS:]), a[:, BOX_CHANNELS:], 0.5)
    inside = (rest.min(axis=0) >= 0) & (rest.max(axis=0) <= 1)
    n = int(np.argmin(inside)) if not inside.all() else inside.size
    return n if 0 < n < inside.size else inside.size


def decode_detections(arr: np.ndarray, threshold: float, probabilities: bool | None = None,
                      n_scores: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sample's YOLO-style output → (boxes [K, 4] x1 y1 x2 y2, scores [K], classes [K]) after the score
    threshold and per-class NMS. Boxes are (cx, cy, w, h) in the first 4 channels; the score is the best class
    score, times the objectness (channel 4) when the anchors are rows and there are at least 2 more channels.
    ``probabilities``: whether the scores are already in [0, 1] (else a sigmoid is applied); ``n_scores``: how many
    channels after the boxes are scores (:func:`score_channels`); None: judged from this sample."""
    a, rows = _anchor_rows(arr)
    n = score_channels(arr) if n_scores is None else n_scores
    raw = np.nan_to_num(a[:, BOX_CHANNELS:BOX_CHANNELS + n], nan=-np.inf)
    if probabilities is None:
        finite = raw[np.isfinite(raw)]
        probabilities = finite.size == 0 or bool(finite.min() >= 0 and finite.max() <= 1)
    p = raw if probabilities else _sigmoid(raw)
    if rows and p.shape[1] >= 2:
        cls_p = p[:, 1:] * p[:, :1]
    else:
        cls_p = p
    classes = np.argmax(cls_p, axis=1)
    scores = cls_p[np.arange(len(cls_p)), classes]
    keep = np.flatnonzero(scores > threshold)
    if keep.size > MAX_CANDIDATES:
        keep = keep[np.argsort(-scores[keep], kind="stable")[:MAX_CANDIDATES]]
    b = np.nan_to_num(a[keep, :BOX_CHANNELS])
    xyxy = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2],
                    axis=1) if keep.size else np.zeros((0, 4))
    s, c = scores[keep], classes[keep]
    chosen: list[int] = []
    for k in np.unique(c):
        idx = np.flatnonzero(c == k)
        idx = idx[np.argsort(-s[idx], kind="stable")]
        while idx.size:
            best, idx = idx[0], idx[1:]
            chosen.append(int(best))
            if idx.size:
                idx = idx[iou(xyxy[best], xyxy[idx]) <= NMS_IOU]
    order = sorted(chosen, key=lambda i: -s[i])[:MAX_DETECTIONS]
    return xyxy[order], s[order], c[order]


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one x1 y1 x2 y2 box with each of ``boxes``."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = lambda x: np.clip(x[..., 2] - x[..., 0], 0, None) * np.clip(x[..., 3] - x[..., 1], 0, None)
    union = area(box) + area(boxes) - inter
    with np.errstate(all="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_detections(ref: tuple[np.ndarray, np.ndarray, np.ndarray], cand: tuple[np.ndarray, np.ndarray, np.ndarray],
                     min_iou: float = MATCH_IOU) -> int:
    """How many candidate detections match a reference detection of the same class with IoU ≥ ``min_iou``
    (greedy, the candidate's best score first, each reference detection used once)."""
    rb, _, rc = ref
    cb, cs, cc = cand
    used = np.zeros(len(rb), dtype=bool)
    matched = 0
    for i in np.argsort(-cs, kind="stable"):
        pool = np.flatnonzero((rc == cc[i]) & ~used)
        if not pool.size:
            continue
        overlaps = iou(cb[i], rb[pool])
        j = int(np.argmax(overlaps))
        if overlaps[j] >= min_iou:
            used[pool[j]] = True
            matched += 1
    return matched


class _Boxes:
    def __init__(self, name: str, threshold: float):
        self.name, self.threshold = name, threshold
        self.scale: str | None = None
        self.probabilities: bool | None = None
        self.scores = self.others = 0  # channels after the boxes that hold scores, and the rest (mask coefficients)
        self.changed = self.union = self.n = 0
        self.matched = self.ref_total = self.cand_total = 0
        self.high_counts = [0, 0, 0]  # matched, reference and candidate detections above ``high``
        # per sample: matched, reference and candidate detections; near-threshold scores' Σ squared logit error, count
        self.per_sample: tuple[list[int], list[int], list[int], list[float], list[int]] = ([], [], [], [], [])
        self.energy = {"boxes": [0.0, 0.0], "scores": [0.0, 0.0]}  # [reference Σx², Σ(ref − cand)²]

    @property
    def high(self) -> float | None:
        """The second threshold the detections are compared above; None when the policy's is that high already."""
        return HIGH_THRESHOLD if self.threshold < HIGH_THRESHOLD else None

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        ra, rows = _anchor_rows(ref)
        ca, _ = _anchor_rows(cand)
        if self.scale is None:
            self.scores = score_channels(ref)
            self.others = ra.shape[1] - BOX_CHANNELS - self.scores
            head = ra[:, BOX_CHANNELS:BOX_CHANNELS + self.scores]
            finite = head[np.isfinite(head)]
            self.probabilities = finite.size == 0 or bool(finite.min() >= 0 and finite.max() <= 1)
            self.scale = "probability" if self.probabilities else "logit"
        rd = decode_detections(ref, self.threshold, self.probabilities, self.scores)
        cd = decode_detections(cand, self.threshold, self.probabilities, self.scores)
        matched = match_detections(rd, cd)
        self.matched += matched
        self.ref_total += len(rd[1])
        self.cand_total += len(cd[1])
        for column, count in zip(self.per_sample[:3], (matched, len(rd[1]), len(cd[1]))):
            column.append(int(count))
        high = self.high
        if high is not None:  # greedy NMS above a higher threshold keeps the same boxes above it
            rh, ch = (tuple(x[d[1] > high] for x in d) for d in (rd, cd))
            for k, count in enumerate((match_detections(rh, ch), len(rh[1]), len(ch[1]))):  # type: ignore[arg-type]
                self.high_counts[k] += int(count)
        error, near = self._near_error(ra, ca)
        self.per_sample[3].append(error)
        self.per_sample[4].append(near)
        # anchors above the threshold (before NMS) in one model and not the other
        r_above = self._above(ra, rows)
        c_above = self._above(ca, rows)
        self.changed += int(np.count_nonzero(r_above != c_above))
        self.union += int(np.count_nonzero(r_above | c_above))
        self.n += 1
        if ra.shape == ca.shape:
            parts = {"boxes": slice(0, BOX_CHANNELS), "scores": slice(BOX_CHANNELS, BOX_CHANNELS + self.scores)}
            with np.errstate(all="ignore"):
                for key, part in parts.items():
                    r, c = ra[:, part].ravel(), ca[:, part].ravel()
                    self.energy[key][0] += float(r @ r)
                    self.energy[key][1] += float((r - c) @ (r - c))

    def _near_error(self, ra: np.ndarray, ca: np.ndarray) -> tuple[float, int]:
        """Σ (candidate − reference)² of the score logits whose reference lies within :data:`SCORE_BAND` of the
        threshold's logit (the scores a small error can push across it), and how many there are."""
        if ra.shape != ca.shape or not self.scores:
            return 0.0, 0
        part = slice(BOX_CHANNELS, BOX_CHANNELS + self.scores)
        r, c = ra[:, part], ca[:, part]
        if self.probabilities:
            r, c = (np.log(np.clip(x, 1e-7, 1 - 1e-7) / (1 - np.clip(x, 1e-7, 1 - 1e-7))) for x in (r, c))
        cut = math.log(self.threshold / (1 - self.threshold)) if 0 < self.threshold < 1 else 0.0
        with np.errstate(all="ignore"):
            near = np.isfinite(r) & np.isfinite(c) & (np.abs(r - cut) <= SCORE_BAND)
            return float(((c - r)[near] ** 2).sum()), int(near.sum())

    def _above(self, a: np.ndarray, rows: bool) -> np.ndarray:
        raw = np.nan_to_num(a[:, BOX_CHANNELS:BOX_CHANNELS + self.scores], nan=-np.inf)
        p = raw if self.probabilities else _sigmoid(raw)
        best = (p[:, 1:] * p[:, :1]).max(axis=1) if rows and p.shape[1] >= 2 else p.max(axis=1)
        return best > self.threshold

    @staticmethod
    def _sqnr(signal: float, noise: float) -> float:
        if noise == 0:
            return math.inf
        if signal == 0 or not math.isfinite(noise):
            return -math.inf if not math.isnan(noise) else math.nan
        return 10.0 * math.log10(signal / noise)

    def result(self) -> BoxesMetrics:
        return BoxesMetrics(self.name, self.threshold, self.scale or "probability",
                            self.changed / self.union if self.union else 0.0, self.ref_total / max(1, self.n),
                            self.cand_total / max(1, self.n), self.matched, self.ref_total, self.cand_total,
                            MATCH_IOU, NMS_IOU, self._sqnr(*self.energy["scores"]), self._sqnr(*self.energy["boxes"]),
                            *self.per_sample[:3], other_channels=self.others,
                            sample_score_error=self.per_sample[3], sample_score_count=self.per_sample[4],
                            high_threshold=self.high, high_matched=self.high_counts[0],
                            high_ref_total=self.high_counts[1], high_cand_total=self.high_counts[2])


def _comparable(ref: Any, cand: Any) -> bool:
    """Both outputs hold values, in the same shape."""
    r, c = np.asarray(ref), np.asarray(cand)
    return r.size > 0 and r.shape == c.shape


def ctc_greedy(probs: np.ndarray, blank: int = 0) -> list[int]:
    """Greedy CTC decoding of one sample's [T, classes] scores: argmax per position, repeats collapsed, blanks
    dropped."""
    best = np.argmax(np.nan_to_num(np.asarray(probs, dtype=np.float64), nan=-np.inf), axis=-1)
    out: list[int] = []
    prev = -1
    for k in best.tolist():
        if k != prev and k != blank:
            out.append(int(k))
        prev = k
    return out


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) between two label sequences."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


class _Sequences:
    def __init__(self, name: str):
        self.name = name
        self.n = self.changed = self.edits = self.chars = 0
        self.changed_samples: list[int] = []

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        for r, c in zip(_batch_first(np.asarray(ref)), _batch_first(np.asarray(cand))):
            rs, cs = ctc_greedy(r), ctc_greedy(c)
            if rs != cs:
                self.changed_samples.append(self.n)
            self.n += 1
            self.changed += int(rs != cs)
            self.edits += edit_distance(rs, cs)
            self.chars += len(rs)

    def result(self) -> SequenceMetrics:
        return SequenceMetrics(self.name, self.n, self.changed, self.edits, self.chars,
                               changed_samples=self.changed_samples)


def token_rows(output: Any, mask: np.ndarray | None) -> np.ndarray | None:
    """A per-token output [batch, seq, hidden] at its real tokens (where the attention ``mask`` [batch, seq] is
    1), as [real tokens, hidden]; None when there is no mask or the output's token dims are not the mask's shape."""
    a = np.asarray(output)
    if mask is None or a.ndim != 3 or a.dtype.kind != "f" or a.shape[:2] != mask.shape:
        return None
    return a[np.asarray(mask) == 1]


NN_NEAR_TIE = 0.01  # cosine: a neighbour this close to the float model's nearest is a tie for retrieval


class _Embeddings:
    def __init__(self, name: str, near_tie: float = NN_NEAR_TIE):
        self.name = name
        self.near_tie = near_tie
        self.tokens = False
        self.real_tokens = self.padding = 0
        self.cos: list[float] = []
        self.ref: list[np.ndarray] = []
        self.cand: list[np.ndarray] = []

    @staticmethod
    def _pool(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)[0]
        return a.mean(axis=0) if a.ndim == 2 else a.ravel()

    @staticmethod
    def _pool_rows(rows: np.ndarray, width: int) -> np.ndarray:
        return rows.mean(axis=0) if len(rows) else np.zeros(width)

    def add(self, ref: np.ndarray, cand: np.ndarray, mask: np.ndarray | None = None) -> None:
        rr, cr = token_rows(ref, mask), token_rows(cand, mask)
        if rr is not None and cr is not None:
            # per-token output with an attention mask: cosine and neighbours over the real tokens only
            self.real_tokens += len(rr)
            self.padding += int(mask.size) - len(rr) if mask is not None else 0
            r, c = rr.astype(np.float64).ravel(), cr.astype(np.float64).ravel()
            ref_vec = self._pool_rows(rr.astype(np.float64), rr.shape[-1])
            cand_vec = self._pool_rows(cr.astype(np.float64), cr.shape[-1])
        else:
            r = np.asarray(ref, dtype=np.float64).ravel()
            c = np.asarray(cand, dtype=np.float64).ravel()
            ref_vec, cand_vec = self._pool(ref), self._pool(cand)
        fr, fc = np.isfinite(r), np.isfinite(c)
        lost = bool(np.any(fr & ~fc))  # NaN/inf where the source has a number: no agreement
        if not lost:  # the source's own NaN/inf are left out, as for the output's SQNR and cosine
            r, c = r[fr & fc], c[fr & fc]
        with np.errstate(all="ignore"):
            nr, nc = float(np.linalg.norm(r)), float(np.linalg.norm(c))
            cos = 1.0 if nr == nc == 0 else (float(r @ c) / (nr * nc) if nr and nc else 0.0)
        self.cos.append(cos if math.isfinite(cos) and not lost else -1.0)
        self.tokens = np.asarray(ref).ndim == 3
        self.ref.append(ref_vec.astype(np.float32))
        self.cand.append(cand_vec.astype(np.float32))

    @staticmethod
    def _similarities(vecs: list[np.ndarray]) -> np.ndarray:
        m = np.nan_to_num(np.stack(vecs).astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        sim = m @ m.T
        np.fill_diagonal(sim, -np.inf)
        return sim

    def result(self) -> EmbeddingMetrics:
        nn, ties, moved = None, 0, []
        if len(self.ref) >= 3 and len({v.shape for v in self.ref}) == 1:  # a variable-size output has no neighbours
            ref_sim = self._similarities(self.ref)
            rows = np.arange(len(self.ref))
            ref_nn, cand_nn = np.argmax(ref_sim, axis=1), np.argmax(self._similarities(self.cand), axis=1)
            # the float model's own similarity to the neighbour the candidate picked, below its nearest's
            gap = ref_sim[rows, ref_nn] - ref_sim[rows, cand_nn]
            changed = ref_nn != cand_nn
            tie = changed & (gap < self.near_tie)
            ties = int(np.count_nonzero(tie))
            moved = [int(i) for i in np.flatnonzero(changed & ~tie)]
            nn = float(1.0 - np.count_nonzero(changed & ~tie) / len(self.ref))
        return EmbeddingMetrics(self.name, min(self.cos, default=1.0), float(np.mean(self.cos)) if self.cos else 1.0,
                                nn, self.tokens, self.real_tokens, self.padding, ties, self.near_tie, moved)


class _Exact:
    def __init__(self, name: str):
        self.name = name
        self.dtype = ""
        self.n = self.diff = 0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r, c = np.asarray(ref), np.asarray(cand)
        self.dtype = str(r.dtype)
        self.n += r.size
        self.diff += int(np.count_nonzero(r.ravel() != c.ravel())) if r.size == c.size else r.size

    def result(self) -> ExactMetrics:
        return ExactMetrics(self.name, self.dtype, self.n, self.diff)


def top5_indices(row: np.ndarray) -> list[int]:
    """The indices of the (up to) five highest scores of ``row``, highest first."""
    k = min(5, row.size)
    idx = np.argpartition(-row, k - 1)[:k]
    return [int(i) for i in idx[np.argsort(-row[idx], kind="stable")]]


class TaskAccumulator:
    """Collects the task metrics sample by sample; :meth:`result` gives the :class:`TaskMetrics`."""

    def __init__(self, names: list[str], first_ref: list[np.ndarray], labeled: bool, task: Task = Task.AUTO,
                 margin: float = 0.1, threshold: float = 0.3):
        self.task, self.inferred, self.why, self.roles = infer_roles(names, [np.asarray(a) for a in first_ref],
                                                                     labeled, task)
        self.names = names
        # outputs read as [N, C] without their trailing axes of size 1
        self.vectors = {n for n, a in zip(names, first_ref) if self.roles.get(n) in (Task.CLASSIFICATION, Task.EMBEDDING)
                        and np.ndim(a) >= 4 and per_sample_vector(np.asarray(a)) is not None}
        self.parts: dict[str, Any] = {}
        for name, role in self.roles.items():
            if role == EXACT:
                self.parts[name] = _Exact(name)
            elif role == Task.CLASSIFICATION:
                self.parts[name] = _Classes(name, margin)
            elif role == Task.DENSE_MAP:
                self.parts[name] = _Dense(name, threshold)
            elif role == Task.BOXES:
                self.parts[name] = _Boxes(name, threshold)
            elif role == Task.EMBEDDING:
                self.parts[name] = _Embeddings(name)
            elif role == Task.SEQUENCE:
                self.parts[name] = _Sequences(name)

    @property
    def classes(self) -> _Classes | None:
        return next((p for p in self.parts.values() if isinstance(p, _Classes)), None)

    def add(self, ref_outputs: list[np.ndarray], cand_outputs: list[np.ndarray],
            mask: np.ndarray | None = None) -> None:
        """One sample's outputs; ``mask``: the feed's attention mask (per-token embeddings are judged on the real
        tokens only)."""
        for name, r, c in zip(self.names, ref_outputs, cand_outputs):
            part = self.parts.get(name)
            if name in self.vectors:
                rv, cv = per_sample_vector(np.asarray(r)), per_sample_vector(np.asarray(c))
                if rv is None or cv is None:
                    continue  # not [N, C, 1, …] in this sample: nothing to add as a vector
                r, c = rv, cv
            if part is not None and not isinstance(part, _Exact) and not _comparable(r, c):
                continue  # an empty output (no detections, a zero-length sequence) has no task figure to add
            if isinstance(part, _Embeddings):
                part.add(r, c, mask)
            elif part is not None:
                part.add(r, c)

    def result(self) -> TaskMetrics:
        tm = TaskMetrics(self.task, self.inferred, self.why)
        for part in self.parts.values():
            res = part.result()
            if isinstance(res, ClassificationMetrics):
                tm.classification = res
            elif isinstance(res, DenseMapMetrics):
                tm.dense_maps.append(res)
            elif isinstance(res, BoxesMetrics):
                tm.boxes.append(res)
            elif isinstance(res, EmbeddingMetrics):
                tm.embeddings.append(res)
            elif isinstance(res, ExactMetrics):
                tm.exact.append(res)
            elif isinstance(res, SequenceMetrics):
                tm.sequences.append(res)
        tm.embeddings.sort(key=lambda e: e.tokens)  # one vector per sample (a sentence embedding) first
        return tm
