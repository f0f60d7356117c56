"""What held-back calibration samples say about a changed QDQ model: which samples are held back, the models'
float outputs on them and each output's SQNR against the float model's; and the float/QDQ model pair such a step
reads. Shared by the steps that fit a change on the calibration samples and check it on the others (bias correction,
weight rounding)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from ortlab.core.errors import Cancelled, QuantizationError
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.core.progress import CancelToken
from ortlab.runtime.threads import limit_threads

HELD_BACK_EVERY = 4  # a quarter of the calibration samples is held back to check the changes on
HELD_BACK_SEED = 0

# output name → (channel axis, {group name: channel slice}) for outputs whose channel groups are judged apart
OutputGroups = Callable[[Sequence[str], Sequence[np.ndarray]], Mapping[str, tuple[int, Mapping[str, slice]]]]


def read_pair(fp32_path, qdq_path, dst, step: str, label: str, verb: str) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The float model and the QDQ model a step (``label``, e.g. "Bias correction") changes into ``dst``; refused
    (``QuantizationError`` of ``step``) when ``dst`` is either input or one cannot be loaded ("Cannot load the models
    to ``verb``")."""
    if Path(dst).resolve() in (Path(fp32_path).resolve(), Path(qdq_path).resolve()):
        raise QuantizationError(f"{label} writes a new file; give another output path.", step=step)
    try:
        return onnx.load(str(fp32_path)), onnx.load(str(qdq_path))
    except ONNX_ERRORS + (OSError,) as exc:
        raise QuantizationError(f"Cannot load the models to {verb} ({type(exc).__name__}: {exc}).",
                                step=step) from None


def write_model(model: onnx.ModelProto, dst) -> None:
    """``model`` saved to ``dst``, its folder made where missing."""
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(dst))


def db_text(x: float) -> str:
    """A dB figure as a note shows it (one decimal; "inf" for no noise)."""
    return "inf" if math.isinf(x) and x > 0 else f"{x:.1f}"


def cpu_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A quiet CPU session of ``model`` within the process's thread limit."""
    so = limit_threads(ort.SessionOptions())
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def held_back_indices(n: int) -> tuple[list[int], list[int]]:
    """(fitting, held-back) sample indices of ``n`` calibration samples: a fixed pseudo-random quarter
    (``n // 4`` of them, seeded) is held back. Not every 4th: data in a periodic order (lines turned 180°
    every other one, class folders interleaved) would put a single kind of sample in the held-back part."""
    held = set(np.random.default_rng(HELD_BACK_SEED).permutation(n)[:n // HELD_BACK_EVERY].tolist())
    return [i for i in range(n) if i not in held], sorted(held)


def float_outputs(model: onnx.ModelProto, batches: Sequence[Mapping[str, np.ndarray]],
                  cancel: CancelToken | None, step: str) -> list[dict[str, np.ndarray]]:
    """The model's float graph outputs on each batch."""
    sess = cpu_session(model)
    wanted = {i.name for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs() if o.type == "tensor(float)"]
    out = []
    for feed in batches:
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step=step)
        out.append(dict(zip(names, sess.run(names, {k: v for k, v in feed.items() if k in wanted}), strict=True)))
    return out


def output_parts(ref: Sequence[Mapping[str, np.ndarray]],
                 output_groups: OutputGroups | None) -> dict[str, tuple[str, int, slice | None]]:
    """What the whole step is judged on: label → (output, channel axis, channels), one per output or, where
    ``output_groups`` splits it, per channel group ("output0 scores")."""
    names = list(ref[0]) if ref else []
    first = [ref[0][n][:1] if np.ndim(ref[0][n]) else ref[0][n] for n in names]  # one sample's values
    groups = dict(output_groups(names, first)) if output_groups and names else {}
    parts: dict[str, tuple[str, int, slice | None]] = {}
    for n in names:
        if n in groups:
            axis, split = groups[n]
            parts.update((f"{n} {g}", (n, axis, sl)) for g, sl in split.items())
        else:
            parts[n] = (n, 0, None)
    return parts


def _energies(parts: Mapping[str, tuple[str, int, slice | None]], ref: Sequence[Mapping[str, np.ndarray]],
              cand: Sequence[Mapping[str, np.ndarray]]) -> dict[str, tuple[list[float], list[float]]]:
    """Per output part, each batch's signal energy (of ``ref``) and noise energy (``cand`` - ``ref``)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for label, (name, axis, sl) in parts.items():
        signal, noise = [], []
        for r, c in zip(ref, cand, strict=True):
            x, y = np.asarray(r[name], np.float64), np.asarray(c[name], np.float64)
            if sl is not None:
                idx = np.arange(x.shape[axis])[sl]
                x, y = np.take(x, idx, axis=axis), np.take(y, idx, axis=axis)
            signal.append(float(np.sum(x * x)))
            noise.append(float(np.sum((x - y) ** 2)))
        out[label] = signal, noise
    return out


def sqnr_db(parts: Mapping[str, tuple[str, int, slice | None]], ref: Sequence[Mapping[str, np.ndarray]],
            cand: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """SQNR (dB) of ``cand`` against ``ref`` over every batch, per output part; -inf where ``cand`` is not finite."""
    out: dict[str, float] = {}
    for label, (signals, noises) in _energies(parts, ref, cand).items():
        signal, noise = sum(signals, 0.0), sum(noises, 0.0)
        if not math.isfinite(noise):
            out[label] = -math.inf
        else:
            out[label] = math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-300) / noise)
    return out


def sqnr_change_interval(parts: Mapping[str, tuple[str, int, slice | None]], ref: Sequence[Mapping[str, np.ndarray]],
                         base: Sequence[Mapping[str, np.ndarray]], cand: Sequence[Mapping[str, np.ndarray]],
                         rounds: int = 2000, seed: int = 0) -> dict[str, tuple[float, float]]:
    """The 95% interval of the SQNR change from ``base`` to ``cand`` (dB, > 0: ``cand`` is closer to ``ref``) per
    output part, by a paired bootstrap over the batches (each resample draws the same batches for both models, so
    the reference's signal cancels: the change is 10·log10 of the ratio of their summed noise energies)."""
    nb = {k: np.asarray(noise) for k, (_, noise) in _energies(parts, ref, base).items()}
    nc = {k: np.asarray(noise) for k, (_, noise) in _energies(parts, ref, cand).items()}
    rng = np.random.default_rng(seed)
    n = len(ref)
    draws = rng.integers(0, n, (rounds, n)) if n else np.zeros((0, 0), int)
    out: dict[str, tuple[float, float]] = {}
    for label in parts:
        b, c = nb[label], nc[label]
        if not (np.isfinite(c).all() and np.isfinite(b).all()) or n == 0:
            out[label] = (-math.inf, -math.inf) if not np.isfinite(c).all() else (math.inf, math.inf)
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            change = 10 * np.log10(b[draws].sum(axis=1) / c[draws].sum(axis=1))
        change = np.nan_to_num(change, nan=0.0, posinf=math.inf, neginf=-math.inf)
        out[label] = (float(np.percentile(change, 2.5)), float(np.percentile(change, 97.5)))
    return out
