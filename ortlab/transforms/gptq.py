"""GPTQ on rows of weights (numpy only): Frantar, Ashkboos, Hoefler, Alistarh, "GPTQ: Accurate Post-Training
Quantization for Generative Pre-trained Transformers", ICLR 2023, after Optimal Brain Quantization (Frantar &
Alistarh, "Optimal Brain Compression", NeurIPS 2022).

With ``H = Σ x xᵀ`` of a layer's inputs, each output channel's weights are rounded one input column at a time, and
the columns ``F`` not yet rounded move by ``-(w_i - q_i) / [H_F⁻¹]_ii · [H_F⁻¹]_{i,F}``, so that the layer's output
on those inputs changes least. Columns go in decreasing ``H_ii`` (the paper's "act order"); the inverses come from
one Cholesky factor of ``H⁻¹`` (dampened by 1% of the mean diagonal), and a block's errors reach later columns in
one product (the paper's lazy batch). :mod:`ortlab.transforms.weight_rounding` applies it to an ONNX QDQ model.
"""

from __future__ import annotations

import numpy as np

DAMPING = 0.01  # of H's mean diagonal, added to its diagonal (the paper's value)


def quantize_rows(rows: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Nearest rounding of ``rows`` ([out, k], float) to integers in [lo, hi] with per-row scale and zero point."""
    return np.clip(np.rint(rows / scale[:, None]) + zero_point[:, None], lo, hi)


def dequantize_rows(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """The float values of integer rows ``q`` ([out, k])."""
    return (q - zero_point[:, None]) * scale[:, None]


def gptq_rows(rows: np.ndarray, hessian: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int,
              damping: float = DAMPING, act_order: bool = True, block: int = 128) -> np.ndarray:
    """GPTQ's integers for ``rows`` ([out, k]) given ``hessian`` = Σ x xᵀ ([k, k]) of the layer's inputs: each
    column rounded in turn (in decreasing ``H_ii`` with ``act_order``), its rounding error spread over the columns
    not yet rounded through the upper Cholesky factor of the dampened ``H⁻¹``. Columns whose input was always zero
    are rounded to nearest and spread nothing. Raises ``np.linalg.LinAlgError`` if ``H`` is not positive definite
    after damping."""
    w = np.array(rows, np.float64)
    h = np.array(hessian, np.float64)
    k = h.shape[0]
    dead = np.diag(h) <= 0
    h[dead, :] = 0
    h[:, dead] = 0
    h[dead, dead] = 1
    order = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    w, h = w[:, order], h[np.ix_(order, order)]
    h[np.diag_indices(k)] += damping * float(np.mean(np.diag(h)))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: H⁻¹ = uᵀu, row i holds [H_F⁻¹]_{i,F} / sqrt([H_F⁻¹]_ii)
    s = np.asarray(scale, np.float64)
    z = np.asarray(zero_point, np.float64)
    q = np.empty_like(w)
    for b0 in range(0, k, block):  # the paper's lazy batch: a block's errors reach later columns in one product
        b1 = min(b0 + block, k)
        err = np.empty((w.shape[0], b1 - b0))
        for i in range(b0, b1):
            q[:, i] = np.clip(np.rint(w[:, i] / s) + z, lo, hi)
            err[:, i - b0] = (w[:, i] - (q[:, i] - z) * s) / u[i, i]
            w[:, i + 1:b1] -= np.outer(err[:, i - b0], u[i, i + 1:b1])
        w[:, b1:] -= err @ u[b0:b1, b1:]
    return q[:, np.argsort(order)]


def output_error(rows: np.ndarray, q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray,
                 hessian: np.ndarray) -> float:
    """``Σ (W - Ŵ) H (W - Ŵ)ᵀ`` over the rows: the squared error the integers ``q`` add to the layer's output on
    the inputs ``hessian`` sums."""
    d = np.asarray(rows, np.float64) - dequantize_rows(np.asarray(q, np.float64), np.asarray(scale, np.float64),
                                                      np.asarray(zero_point, np.float64))
    return float(np.sum((d @ hessian) * d))
