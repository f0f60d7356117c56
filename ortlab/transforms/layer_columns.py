"""A weighted layer's input vectors as columns, the ``X`` of GPTQ's ``H = X Xᵀ``: im2col for a Conv (each batch item's
windows, channel-major, as the weight's rows are laid out), the last axis for Gemm/MatMul; optionally a seeded draw of
some of them, so that a few hundred positions of a large feature map never build the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def layer_columns(x: np.ndarray, op_type: str, conv: Mapping[str, Sequence[int]], most: int | None = None,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """The input vectors of a ``op_type`` layer reading ``x`` as float64 columns ([inputs, positions]); ``conv``: a
    Conv's ``kernel``, ``strides``, ``dilations`` and ``pads``. Where there are more than ``most`` positions, only
    ``rng.choice(positions, most, replace=False)`` of them, in that order (positions counted batch item, row,
    column)."""
    if op_type != "Conv":
        rows = np.asarray(x).reshape(-1, x.shape[-1])
        drawn = _draw(len(rows), most, rng)
        return (rows if drawn is None else rows[drawn]).astype(np.float64).T
    win = _windows(np.asarray(x), conv)
    n, c, ho, wo, kh, kw = win.shape
    drawn = _draw(n * ho * wo, most, rng)
    if drawn is None:
        return win.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, n * ho * wo).astype(np.float64)
    items, rows, cols = np.unravel_index(drawn, (n, ho, wo))
    return win[items, :, rows, cols].reshape(len(drawn), c * kh * kw).T.astype(np.float64)  # [m, c, kh, kw]


def _draw(count: int, most: int | None, rng: np.random.Generator | None) -> np.ndarray | None:
    if most is None or count <= most:
        return None
    if rng is None:
        raise ValueError("a draw of positions needs a generator")
    return rng.choice(count, most, replace=False)


def _windows(x: np.ndarray, conv: Mapping[str, Sequence[int]]) -> np.ndarray:
    """The Conv's input windows: a view [n, c, ho, wo, kh, kw] of the padded input."""
    kh, kw = conv["kernel"]
    s = conv.get("strides", [1, 1])
    d = conv.get("dilations", [1, 1])
    p = conv.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    win = sliding_window_view(x, ((kh - 1) * d[0] + 1, (kw - 1) * d[1] + 1), axis=(2, 3))
    return win[:, :, ::s[0], ::s[1], ::d[0], ::d[1]]
