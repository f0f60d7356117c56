"""What a model's outputs mean (its task) and the metrics that mean something for it, sample by sample.

:func:`infer_roles` gives every output a role from its dtype, its per-sample shape (a batch of one), its name
and whether the data is labeled; a task given by the user overrides the inference where the shape allows it:

* integer/bool outputs → compared exactly (never "accuracy");
* float outputs named like a recurrent state (``stateN``, ``h_n``, ``hn``) → generic, whatever their shape;
* [1, C] float, C ≥ 2 → classification, unless the name says embedding (embed, hidden, pool, feature, …) and
  the data has no labels; [1, 1] → generic;
* [1, T, C] float whose rows are probabilities (non-negative, summing to 1: an OCR recognizer's softmax) → generic;
* [1, A, B] float → boxes when the name says so (box, det, yolo) or one side is 5…400 and the other ≥ 1000
  (YOLO's [1, 84, 8400] / [1, 25200, 85]); dense_map when the name says map/mask/seg/heat; else embedding
  ([N, T, D] token embeddings);
* 4-D and more float → dense_map (spatial dims); anything else → generic.

The model's task is the role of its first float output (generic when it has none).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ortlab.checks.eval_report import (
    BoxesMetrics, ClassificationMetrics, DenseMapMetrics, EmbeddingMetrics, ExactMetrics, Task, TaskMetrics,
)

EXACT = "exact"  # the role of integer outputs
_EMBED = ("embed", "hidden", "pool", "feature", "sentence", "vector", "encod", "token", "last_hidden")
_MAPS = ("map", "mask", "seg", "heat")
_BOXES = ("box", "det", "yolo", "anchor")
# an RNN's returned state (stateN, new_state, h_n, hn, cn, present.*): neither an embedding nor a class score
_STATE = re.compile(r"(?<!hidden_)state|(^|[^a-z])(h_?n|c_?n|hidden_?out|present)([^a-z]|$)")


def _has(name: str, words: tuple[str, ...]) -> bool:
    low = name.lower()
    return any(w in low for w in words)


def _fits(task: Task, arr: np.ndarray) -> bool:
    return {Task.CLASSIFICATION: arr.ndim == 2 and arr.shape[-1] >= 2, Task.EMBEDDING: arr.ndim in (2, 3),
            Task.DENSE_MAP: arr.ndim >= 3, Task.BOXES: arr.ndim == 3 and min(arr.shape[1:]) >= 5,
            Task.GENERIC: True}.get(task, False)


def _guess(name: str, arr: np.ndarray, labeled: bool) -> tuple[Task, str]:
    shape = list(arr.shape)
    if arr.ndim >= 2 and _STATE.search(name.lower()):
        return Task.GENERIC, f"'{name}' {shape} is named like a recurrent state (compared as a tensor)"
    if arr.ndim == 2:
        if arr.shape[1] < 2:
            return Task.GENERIC, f"'{name}' {shape} has one value per sample"
        if _has(name, _EMBED) and not labeled:
            return Task.EMBEDDING, f"'{name}' {shape} is named like an embedding"
        return Task.CLASSIFICATION, f"'{name}' {shape} is one score per class" + (" and the data is labeled"
                                                                                    if labeled else "")
    if arr.ndim == 3:
        small, big = sorted(arr.shape[1:])
        rows = np.asarray(arr[0], dtype=np.float64)
        if rows.size and rows.min() >= 0 and np.allclose(rows.sum(axis=-1), 1.0, atol=1e-3):
            # an OCR recognizer's [N, T, classes] softmax (CTC): per-position class probabilities, not boxes
            return Task.GENERIC, f"'{name}' {shape} holds per-position class probabilities (rows sum to 1)"
        if (_has(name, _BOXES) and small >= 5) or (5 <= small <= 400 and big >= 1000 and not _has(name, _EMBED)):
            return Task.BOXES, f"'{name}' {shape} looks like YOLO-style boxes (anchors × 4+classes)"
        if _has(name, _MAPS):
            return Task.DENSE_MAP, f"'{name}' {shape} is named like a map"
        return Task.EMBEDDING, f"'{name}' {shape} looks like per-token embeddings [N, T, D]"
    if arr.ndim >= 4:
        return Task.DENSE_MAP, f"'{name}' {shape} has spatial dims (heat map / segmentation)"
    return Task.GENERIC, f"'{name}' {shape} has no known meaning"


def infer_roles(names: list[str], outputs: list[np.ndarray], labeled: bool,
                override: Task = Task.AUTO) -> tuple[Task, bool, str, dict[str, Any]]:
    """(task, inferred, why, role of each output: a Task or :data:`EXACT`) from the first sample's outputs."""
    roles: dict[str, Any] = {}
    task: Task | None = None
    why = ""
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
            role, reason = _guess(name, arr, labeled)
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


def channel_groups(role: Any, shape: tuple[int, ...] | list[int]) -> tuple[int, int, dict[str, slice]] | None:
    """How a YOLO-style boxes output ([N, 4+classes, anchors] or [N, anchors, 4+classes]) splits into channel groups
    of very different ranges: (channel axis, channel count, {"boxes": the 4 box channels, "scores": the rest}).
    None for every other role or shape."""
    if role != Task.BOXES or len(shape) != 3 or min(shape[1:]) <= BOX_CHANNELS:
        return None
    axis = 1 if shape[1] < shape[2] else 2  # as _Boxes reads it: the shorter side holds the channels
    n = int(shape[axis])
    return axis, n, {"boxes": slice(0, BOX_CHANNELS), "scores": slice(BOX_CHANNELS, n)}


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
        self.n_classes = 0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64)[0]
        c = np.asarray(cand, dtype=np.float64)[0]
        self.n_classes = r.size
        rt, ct = _top5(r), _top5(np.nan_to_num(c, nan=-np.inf))
        self.ref_top.append(rt)
        self.cand_top.append(ct)
        if rt[0] != ct[0]:
            p = np.sort(_softmax(r))[::-1]
            self.flip_margins.append(float(p[0] - p[1]))

    def result(self) -> ClassificationMetrics:
        n = len(self.ref_top)
        agree = sum(a[0] == b[0] for a, b in zip(self.ref_top, self.cand_top)) / max(1, n)
        top5 = (sum(a[0] in b for a, b in zip(self.ref_top, self.cand_top)) / max(1, n)
                if self.n_classes > 5 else None)
        return ClassificationMetrics(self.name, self.n_classes, n, agree, self.flip_margins, self.margin, top5)


class _Dense:
    def __init__(self, name: str, threshold: float):
        self.name, self.threshold = name, threshold
        self.scale: str | None = None
        self.cut = threshold
        self.crossing = self.positive = self.total = 0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64)
        c = np.nan_to_num(np.asarray(cand, dtype=np.float64), nan=-np.inf)
        if self.scale is None:
            self.scale, self.cut = _scale(r, self.threshold)
        rp, cp = r > self.cut, c > self.cut
        self.crossing += int(np.count_nonzero(rp != cp))
        self.positive += int(np.count_nonzero(rp))
        self.total += r.size

    def result(self) -> DenseMapMetrics:
        t = max(1, self.total)
        return DenseMapMetrics(self.name, self.threshold, self.scale or "probability", self.crossing / t,
                               self.positive / t)


class _Boxes:
    def __init__(self, name: str, threshold: float):
        self.name, self.threshold = name, threshold
        self.scale: str | None = None
        self.cut = threshold
        self.changed = self.union = self.ref_det = self.cand_det = self.n = 0
        self.energy: dict[str, list[float]] = {}  # group → [Σ ref², Σ (ref − cand)²]

    def _scores(self, arr: np.ndarray) -> np.ndarray:
        a = np.asarray(arr, dtype=np.float64)[0]
        if a.shape[0] < a.shape[1]:  # [4+classes, anchors] → [anchors, 4+classes]
            a = a.T
        return a[:, 4:].max(axis=1)

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        rs = self._scores(ref)
        cs = np.nan_to_num(self._scores(cand), nan=-np.inf)
        if self.scale is None:
            self.scale, self.cut = _scale(rs, self.threshold)
        rd, cd = rs > self.cut, cs > self.cut
        self.changed += int(np.count_nonzero(rd != cd))
        self.union += int(np.count_nonzero(rd | cd))
        self.ref_det += int(np.count_nonzero(rd))
        self.cand_det += int(np.count_nonzero(cd))
        self.n += 1
        r, c = np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64)
        found = channel_groups(Task.BOXES, r.shape)
        if found is not None and r.shape == c.shape:
            axis, _, groups = found
            for g, sl in groups.items():
                idx = np.arange(sl.start, sl.stop)
                rg, cg = np.take(r, idx, axis=axis).ravel(), np.take(c, idx, axis=axis).ravel()
                with np.errstate(all="ignore"):
                    d = rg - cg
                    e = self.energy.setdefault(g, [0.0, 0.0])
                    e[0] += float(rg @ rg)
                    e[1] += float(d @ d)

    def result(self) -> BoxesMetrics:
        return BoxesMetrics(self.name, self.threshold, self.scale or "probability",
                            self.changed / self.union if self.union else 0.0, self.ref_det / max(1, self.n),
                            self.cand_det / max(1, self.n), {g: _sqnr(*e) for g, e in self.energy.items()})


def _sqnr(signal: float, noise: float) -> float:
    """10·log10(Σ ref² / Σ (ref − cand)²): +inf when identical, −inf when the reference is all zero, nan on nan."""
    if math.isnan(signal) or math.isnan(noise):
        return math.nan
    if noise == 0:
        return math.inf
    if signal == 0 or math.isinf(noise):
        return -math.inf
    return 10.0 * math.log10(signal / noise)


class _Embeddings:
    def __init__(self, name: str):
        self.name = name
        self.cos: list[float] = []
        self.ref: list[np.ndarray] = []
        self.cand: list[np.ndarray] = []

    @staticmethod
    def _pool(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)[0]
        return a.mean(axis=0) if a.ndim == 2 else a.ravel()

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64).ravel()
        c = np.asarray(cand, dtype=np.float64).ravel()
        with np.errstate(all="ignore"):
            nr, nc = float(np.linalg.norm(r)), float(np.linalg.norm(c))
            cos = 1.0 if nr == nc == 0 else (float(r @ c) / (nr * nc) if nr and nc else 0.0)
        self.cos.append(cos if math.isfinite(cos) else -1.0)
        self.ref.append(self._pool(ref).astype(np.float32))
        self.cand.append(self._pool(cand).astype(np.float32))

    @staticmethod
    def _neighbours(vecs: list[np.ndarray]) -> np.ndarray:
        m = np.nan_to_num(np.stack(vecs).astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        sim = m @ m.T
        np.fill_diagonal(sim, -np.inf)
        return np.argmax(sim, axis=1)

    def result(self) -> EmbeddingMetrics:
        nn = None
        if len(self.ref) >= 3:
            nn = float(np.mean(self._neighbours(self.ref) == self._neighbours(self.cand)))
        return EmbeddingMetrics(self.name, min(self.cos, default=1.0), float(np.mean(self.cos)) if self.cos else 1.0,
                                nn)


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


def _top5(row: np.ndarray) -> list[int]:
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

    @property
    def classes(self) -> _Classes | None:
        return next((p for p in self.parts.values() if isinstance(p, _Classes)), None)

    def add(self, ref_outputs: list[np.ndarray], cand_outputs: list[np.ndarray]) -> None:
        for name, r, c in zip(self.names, ref_outputs, cand_outputs):
            part = self.parts.get(name)
            if part is not None:
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
        return tm
