"""Reference computations the tests check ortlab against, written independently of the engine: YOLO-style
detections after per-class NMS, matched by class and IoU; and the photo subsets several tests calibrate on."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

PHOTOS = Path(__file__).resolve().parents[2] / "sample_models" / "efficientnet_lite0"


def photo_parts(root: Path, n: int = 8, every: int = 8) -> dict[str, Path]:
    """``root/calibration`` and ``root/evaluation``, each with ``n`` of the sample's photos (every ``every``-th)."""
    parts = {}
    for part in ("calibration", "evaluation"):
        folder = root / part
        folder.mkdir(parents=True)
        for src in sorted((PHOTOS / part).glob("*.jpg"))[::every][:n]:
            shutil.copy(src, folder / src.name)
        parts[part] = folder
    return parts


def iou(a, b) -> float:
    """Intersection over union of two boxes (x1, y1, x2, y2)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def nms(xywh: np.ndarray, score: np.ndarray, cls: np.ndarray, threshold: float, overlap: float):
    """Boxes (x1 y1 x2 y2), scores and classes of the rows above ``threshold`` after per-class NMS at ``overlap``;
    ``xywh``: centre x, centre y, width, height per row."""
    keep = score > threshold
    cx, cy, w, h = (xywh[keep, i] for i in range(4))
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    score, cls = score[keep], cls[keep]
    kept: list[int] = []
    for k in set(cls.tolist()):
        idx = sorted(np.flatnonzero(cls == k), key=lambda i: -score[i])
        while idx:
            i = idx.pop(0)
            kept.append(int(i))
            idx = [j for j in idx if iou(boxes[i], boxes[j]) <= overlap]
    return boxes[kept], score[kept], cls[kept]


def matches(ref, cand, min_iou: float = 0.5) -> int:
    """Candidate detections (highest score first) matched one to one to a reference detection of the same class
    with IoU ≥ ``min_iou``."""
    rb, _, rc = ref
    cb, cs, cc = cand
    used: set[int] = set()
    n = 0
    for i in np.argsort(-cs, kind="stable"):
        best, best_j = 0.0, None
        for j in range(len(rb)):
            if j not in used and rc[j] == cc[i]:
                o = iou(cb[i], rb[j])
                if o > best:
                    best, best_j = o, j
        if best_j is not None and best >= min_iou:
            used.add(best_j)
            n += 1
    return n


def nn_agreement(ref: np.ndarray, cand: np.ndarray, near_tie: float = 0.01) -> float:
    """The share of rows whose nearest other row (cosine) stays the same from ``ref`` to ``cand``, where a change to
    a row the reference finds within ``near_tie`` of its own nearest is a near-tie and counts as kept."""
    def sims(m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, np.float64)
        m = m / np.linalg.norm(m, axis=1, keepdims=True)
        s = m @ m.T
        np.fill_diagonal(s, -np.inf)
        return s

    rs, cs = sims(ref), sims(cand)
    kept = 0
    for i in range(len(rs)):
        a, b = int(np.argmax(rs[i])), int(np.argmax(cs[i]))
        kept += a == b or rs[i, a] - rs[i, b] < near_tie
    return kept / len(rs)
