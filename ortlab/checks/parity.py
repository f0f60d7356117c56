"""Optimization-level parity: does ORT's graph optimization change what a model computes?

:func:`check_parity` runs the model the optimize stage read with every optimization *disabled* and the saved,
optimized model (``basic``/``extended``/``all``) on the same evaluation samples, and compares their outputs.
A mismatch is flagged when the largest absolute difference exceeds a tolerance relative to the output's scale
(the largest |value| of the unoptimized output): fused int8 kernels round differently from the QDQ graph run
in float, and fp16 fusions accumulate differently, so the tolerance depends on the recipe's precision.

:func:`optimization_parity` is what a run records in its evaluation (``EvalReport.parity``, judged with the
verdict): the check at the recipe's level and, when 'extended' or 'all' failed, the same graph re-optimized at
'basic' and checked again, so the verdict can name the level that is safe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ortlab.checks.eval_report import OptimizationParity
from ortlab.settings.config import OptLevel, PreprocessConfig, Recipe
from ortlab.transforms.optimize import TOLERANCE, optimize_model
from ortlab.data.feeds import batch_inputs
from ortlab.checks.evaluate import feed_for, session_inputs
from ortlab.runtime.providers import ORT_ERRORS, create_session, session_options

PARITY_SAMPLES = 8
SAFE_MODEL = "parity_basic.onnx"  # the model re-optimized at 'basic', in the run's work folder


@dataclass
class ParityResult:
    """Outputs of the optimized model vs the same graph with optimizations disabled."""

    ok: bool
    n_samples: int
    max_abs: float  # largest |difference| over all outputs and samples
    scale: float  # largest |value| of the unoptimized outputs
    relative: float  # max_abs / scale
    tolerance: float
    output: str = ""  # the output with the largest relative difference
    message: str = ""
    worst_abs: float = 0.0  # the largest |difference| of ``output``


def check_parity(unoptimized, optimized, dataset, preprocess: PreprocessConfig | None, recipe: Recipe,
                 n: int = PARITY_SAMPLES, tolerance: float | None = None, specs=None,
                 batched: bool = True) -> ParityResult:
    """Compare ``optimized`` (run at ``recipe.opt_level``) with ``unoptimized`` run with optimizations disabled,
    on up to ``n`` samples of ``dataset`` (batched). ``ok`` is False when the relative difference exceeds
    ``tolerance`` (default: :data:`TOLERANCE` of the recipe's precision). ``specs``: the inputs' shapes
    (:func:`ortlab.data.inputs.infer_specs`; inferred when None). The samples go in one batch when the inputs'
    batch axis is open (``batched``), one at a time when it is not, or when the graph fails on a batch."""

    tol = float(tolerance if tolerance is not None else TOLERANCE[recipe.precision])
    base, _ = create_session(unoptimized, recipe.target, session_options(opt_level=OptLevel.DISABLED))
    opt, _ = create_session(optimized, recipe.target, session_options(opt_level=recipe.opt_level))
    base_in, opt_in = session_inputs(base), session_inputs(opt)
    names = [o.name for o in base.get_outputs()]
    opt_names = [o.name for o in opt.get_outputs()]
    if set(names) != set(opt_names):
        opt_names = opt_names[:len(names)]
    else:
        opt_names = names
    count = min(n, len(dataset))
    worst = (0.0, 0.0, 0.0, "")  # relative, max_abs, scale, output
    max_abs = scale = 0.0
    step = count if batched and _batchable(base_in) else 1
    pairs = []
    for start in range(0, count, step):
        feed = batch_inputs(dataset, list(range(start, min(count, start + step))), preprocess, base_in, specs)
        try:
            pairs.append((base.run(names, feed), opt.run(opt_names, feed_for(opt_in, feed))))
        except ORT_ERRORS:
            if step == 1:
                raise
            # an open batch axis the graph does not honour (a Reshape to [1, …]): one sample at a time
            return check_parity(unoptimized, optimized, dataset, preprocess, recipe, n, tolerance, specs,
                                batched=False)
    for a, b in pairs:
        for name, x, y in zip(names, a, b):
            x = np.asarray(x, dtype=np.float64)
            y = np.asarray(y, dtype=np.float64)
            if x.shape != y.shape or x.size == 0 or x.dtype.kind not in "fc":
                continue
            d, s = _difference(x, y)
            max_abs, scale = max(max_abs, d), max(scale, s)
            rel = d / s if s > 0 else (0.0 if d == 0 else float("inf"))
            if rel > worst[0]:
                worst = (rel, d, s, name)
    rel, d, s, name = worst
    ok = rel <= tol
    level = OptLevel(recipe.opt_level).value
    message = "" if ok else (
        f"Graph optimization changed the results: output '{name}' of the '{level}' model differs from the same "
        f"graph with optimizations disabled by up to {d:.3g} ({rel:.1%} of its scale {s:.3g}, tolerance "
        f"{tol:.1%}) on {count} samples. Try a lower optimization level and compare.")
    return ParityResult(ok, count, max_abs, scale, rel, tol, name, message, d)


def _difference(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The largest |x − y| where both are finite (inf when one is NaN or infinite where the other is not, or they
    are infinite of opposite signs), and the scale of ``x`` (its largest finite |value|). A NaN or inf both graphs
    compute alike is no difference: the model's own, not the optimization's."""
    fx, fy = np.isfinite(x), np.isfinite(y)
    alike = (np.isnan(x) & np.isnan(y)) | (~fx & (x == y))
    if np.any((fx != fy) | (~fx & ~fy & ~alike)):
        d = math.inf
    else:
        both = fx & fy
        d = float(np.max(np.abs(x[both] - y[both]))) if both.any() else 0.0
    return d, float(np.max(np.abs(x[fx]))) if fx.any() else 0.0


def _batchable(inputs) -> bool:
    return all(len(t.shape) and not isinstance(tuple(t.shape)[0], int) for t in inputs)


def optimization_parity(unoptimized, optimized, dataset, preprocess: PreprocessConfig | None, recipe: Recipe,
                        work_dir: Path, specs=None) -> OptimizationParity:
    """:func:`check_parity` at ``recipe.opt_level`` as the evaluation records it; when it fails at 'extended' or
    'all', ``unoptimized`` is optimized at 'basic' into ``work_dir`` and checked again: ``safe_level`` is 'basic'
    when that is within tolerance, else 'disabled'."""
    first = check_parity(unoptimized, optimized, dataset, preprocess, recipe, specs=specs)
    level = OptLevel(recipe.opt_level)
    safe = ""
    if not first.ok:
        safe = OptLevel.DISABLED.value
        if level in (OptLevel.EXTENDED, OptLevel.ALL):
            basic = Path(work_dir) / SAFE_MODEL
            optimize_model(unoptimized, basic, OptLevel.BASIC, recipe.target)
            again = check_parity(unoptimized, basic, dataset, preprocess, replace(recipe, opt_level=OptLevel.BASIC),
                                 specs=specs)
            if again.ok:
                safe = OptLevel.BASIC.value
    return OptimizationParity(level.value, first.ok, first.output, first.worst_abs, first.relative, first.tolerance,
                              first.n_samples, safe)
