"""GPTQ weight rounding of a static int8 QDQ model (built on top of ONNX Runtime's quantizer output).

Frantar, Ashkboos, Hoefler, Alistarh, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers", ICLR 2023, after Optimal Brain Quantization (Frantar & Alistarh, "Optimal Brain Compression",
NeurIPS 2022). ONNX Runtime rounds every weight to its nearest int8 value; the errors of one output channel's weights
then add up on correlated inputs. GPTQ keeps each channel's scale and rounds its weights one input column at a time,
moving the error of each rounded weight onto the weights not yet rounded so that the layer's output
``W·x`` changes least on the calibration inputs: with ``H = Σ x xᵀ`` (the inputs the layer's int8 kernel sees, from
the QDQ model), column ``i`` is rounded, and the not yet rounded columns ``F`` move by
``-(w_i - q_i) / [H_F⁻¹]_ii · [H_F⁻¹]_{i,F}``. Columns go in decreasing ``H_ii`` (the paper's "act order"), the
inverses come from one Cholesky factor of ``H⁻¹`` (dampened by 1% of the mean diagonal), as in the paper.

Applied to Conv (any group count; im2col columns), Gemm and MatMul nodes whose weight is
``DequantizeLinear(int8/uint8 initializer, scale per output channel or per tensor)``; only those integers change:
same scales, graph, kernels and speed. Every node is fitted on three quarters of the calibration samples and kept
only where its output error on the held-back quarter, ``Σ (W - Ŵ) H_held (W - Ŵ)ᵀ``, is lower than with nearest
rounding; then the whole step is judged on the model's outputs on the held-back samples (each output, or a
detector's box and score channels apart): if one of them is further from the float model's beyond doubt (the 95%
paired-bootstrap interval of its SQNR change lies below zero), every node keeps ORT's rounding, with a note. Each
node is fitted on the inputs the QDQ model gives it with ORT's rounding upstream (one pass over the samples), not
the paper's layer-by-layer refit; a node's outcome may be reused from a memo (:mod:`.rounding_memo`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from ortlab.core.errors import Cancelled, QuantizationError
from ortlab.core.limits import memory_budget_bytes
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.transforms.gptq import DAMPING, gptq_rows, output_error
from ortlab.transforms.layer_columns import layer_columns
from ortlab.transforms.rounding_memo import NodeRounding, RoundingMemo, StepMemo, samples_digest
from ortlab.transforms.held_back import (
    OutputGroups,
    cpu_session,
    db_text,
    float_outputs,
    held_back_indices,
    output_parts,
    read_pair,
    sqnr_change_interval,
    sqnr_db,
    write_model,
)

STAGE = "weight_rounding"
ROUNDED_OPS = ("Conv", "Gemm", "MatMul")
MIN_SAMPLES = 8  # six to fit on, two to check on
MAX_COLUMNS = 4608  # inputs per output channel (Cin·kh·kw) above which H is too large to keep: nearest rounding
COLUMNS_PER_SAMPLE = 512  # input positions a sample adds to H (a seeded draw where it has more)
COLUMNS_PER_PRODUCT = 2048  # columns (of one or more samples) multiplied together into H
SEED = 0  # of each target's draw of input positions
SETTINGS = {"columns_per_sample": COLUMNS_PER_SAMPLE, "columns_per_product": COLUMNS_PER_PRODUCT, "seed": SEED,
            "damping": DAMPING}  # what a kept node outcome was fitted with (part of its key)
MEMORY_SHARE = 0.25  # the Σ x xᵀ of the nodes fitted in one pass over the samples stay within this share of memory
_FIT, _HELD = 0, 1


@dataclass(frozen=True)
class RoundingTarget:
    """One node whose int8 weight is re-rounded: the ``activation`` tensor its kernel reads, the ``weight``
    initializer (as ORT wrote it) with its per-output-channel ``scale`` and ``zero_point``, the float weight as rows
    (``[out channels, inputs per channel]``; ``transposed`` where the initializer is stored ``[inputs, out]``), how
    many ``groups`` split the channels and the Conv's kernel, strides, dilations and pads."""

    name: str
    op_type: str
    activation: str
    weight: str
    scale: np.ndarray
    zero_point: np.ndarray
    rows: np.ndarray
    transposed: bool = False
    groups: int = 1
    conv: Mapping[str, Sequence[int]] = field(default_factory=dict)

    @property
    def columns(self) -> int:
        """Inputs per output channel within one group (the size of H)."""
        return int(self.rows.shape[1])

    @property
    def memory_bytes(self) -> int:
        """What its fitting and held-back Σ x xᵀ take, with the columns waiting to be added to them."""
        k = self.groups * self.columns
        return 2 * (k * self.columns * 8 + k * (COLUMNS_PER_PRODUCT + COLUMNS_PER_SAMPLE) * 4)

    def as_rows(self, q: np.ndarray) -> np.ndarray:
        """The weight initializer ``q`` as rows ([out, inputs per channel])."""
        return q.T if self.transposed else q.reshape(self.rows.shape)

    def as_stored(self, rows: np.ndarray, like: np.ndarray) -> np.ndarray:
        """Rows back in the initializer's layout and type."""
        out = rows.T if self.transposed else rows.reshape(like.shape)
        return np.ascontiguousarray(out).astype(like.dtype)


@dataclass
class RoundingResult:
    """What :func:`round_weights` did: the nodes ``rounded`` with their held-back output error as a fraction of
    nearest rounding's, the nodes that ``kept`` nearest rounding (GPTQ did not lower their held-back error), the
    weighted nodes ``skipped`` with the reason, the held-back SQNR of each output (group) ``step_sqnr_db`` (nearest,
    GPTQ) and the 95% interval of its change ``step_change_db``, ``dropped`` (why the whole step was undone),
    ``too_few`` samples, the nodes whose outcome was ``reused`` from an earlier fit (a memo), ``seconds``."""

    rounded: dict[str, float] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    step_sqnr_db: dict[str, tuple[float, float]] = field(default_factory=dict)
    step_change_db: dict[str, tuple[float, float]] = field(default_factory=dict)
    dropped: str = ""
    too_few: bool = False
    samples: int = 0
    held_back: int = 0
    reused: int = 0
    seconds: float = 0.0

    @property
    def applied(self) -> list[str]:
        """The nodes whose weights differ in the written model."""
        return [] if self.dropped or self.too_few else list(self.rounded)

    @property
    def notes(self) -> list[str]:
        head = "GPTQ weight rounding (Frantar et al. 2023)"
        targets = len(self.rounded) + len(self.kept)
        if self.too_few:
            return [f"{head} skipped: {self.samples} calibration sample(s) are too few to check it on held-back "
                    f"samples (it needs at least {MIN_SAMPLES}); the weights are rounded to nearest."]
        if not targets:
            why = f"{len(self.skipped)} node(s) cannot be re-rounded" if self.skipped else "no int8 weights"
            return [f"{head} found nothing to round: {why}; the weights are rounded to nearest."]
        ratio = float(np.median(list(self.rounded.values()))) if self.rounded else 1.0
        text = (f"{head}: {len(self.rounded)} of {targets} weighted node(s) re-rounded, fitted on "
                f"{self.samples - self.held_back} calibration samples and checked on {self.held_back} held back "
                f"(their held-back output error: median {ratio:.2f}× nearest rounding's), in {self.seconds:.1f} s")
        if self.reused:
            text += (f" ({self.reused} node(s) reused from an earlier run: the same inputs computed the same way, "
                     "weights and samples)")
        if self.kept:
            text += f"; {len(self.kept)} kept nearest rounding (GPTQ did not lower their held-back error)"
        text += ". Only int8 weight values change: same scales, graph and speed."
        if self.dropped:
            text += f" The step was dropped and the weights are rounded to nearest: {self.dropped}."
        elif self.step_sqnr_db:
            text += " Held-back output SQNR nearest → GPTQ: " + ", ".join(
                f"{k} {db_text(a)} → {db_text(b)} dB" + (f" (change {_interval(self.step_change_db[k])})"
                                                         if k in self.step_change_db else "")
                for k, (a, b) in self.step_sqnr_db.items()) + "."
        if self.skipped:
            reasons = sorted(set(self.skipped.values()))
            text += f" {len(self.skipped)} node(s) left as rounded ({'; '.join(reasons)}); --no-weight-rounding " \
                    "turns the step off."
        return [text]


def _interval(lo_hi: tuple[float, float]) -> str:
    lo, hi = lo_hi
    return f"95% {lo:+.1f} to {hi:+.1f} dB"


# -- finding the targets -------------------------------------------------------------------------------------------


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _dequantized_weight(node: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto],
                        inits: Mapping[str, onnx.TensorProto]) -> tuple[onnx.NodeProto | None, str]:
    """The DequantizeLinear that gives ``node`` its int8 weight, or None with why not."""
    dq = producer.get(node.input[1]) if len(node.input) > 1 else None
    if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
        return None, "weight not int8"
    if inits[dq.input[0]].data_type not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
        return None, "weight not 8-bit"
    return dq, ""


def _rows_layout(node: onnx.NodeProto, weight: np.ndarray) -> tuple[np.ndarray | None, int, str]:
    """(the weight as [out, inputs] rows, the output channels' axis in ``weight``, why not) for ``node``."""
    a = _attrs(node)
    if node.op_type == "Conv":
        if weight.ndim != 4 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            return None, 0, "not a 2-D Conv with explicit pads"
        return weight.reshape(weight.shape[0], -1), 0, ""
    if weight.ndim != 2 or (node.op_type == "Gemm" and a.get("transA", 0)):
        return None, 0, "weight not a 2-D matrix"
    if node.op_type == "Gemm" and a.get("transB", 0):
        return weight, 0, ""
    return weight.T, 1, ""


def _channel_params(dq: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto], axis: int,
                    channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-output-channel (scale, zero point) of the DequantizeLinear, or None when it is per channel on another
    axis."""
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64) if dq.input[1] in inits else None
    if scale is None:
        return None
    zp_name = dq.input[2] if len(dq.input) > 2 else ""
    zp = numpy_helper.to_array(inits[zp_name]).astype(np.float64) if zp_name in inits else np.zeros_like(scale)
    if scale.size == 1:
        return np.full(channels, float(scale.reshape(-1)[0])), np.full(channels, float(zp.reshape(-1)[0]))
    dq_axis = int(_attrs(dq).get("axis", 1))  # type: ignore[call-overload]
    w_rank = len(inits[dq.input[0]].dims)
    if scale.size != channels or dq_axis % w_rank != axis:
        return None
    return scale.reshape(-1), zp.reshape(-1)


def find_targets(fp32: onnx.ModelProto, qdq: onnx.ModelProto) -> tuple[list[RoundingTarget], dict[str, str]]:
    """The nodes of ``qdq`` whose int8 weight can be re-rounded (the float weight read from the same-named node of
    ``fp32``), and the other weighted nodes with why not."""
    g = qdq.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    f_inits = {t.name: t for t in fp32.graph.initializer}
    f_nodes = {n.name: n for n in fp32.graph.node if n.name}
    targets, skipped = [], {}
    for node in g.node:
        if node.op_type not in ROUNDED_OPS or len(node.input) < 2:
            continue
        dq, why = _dequantized_weight(node, producer, inits)
        if dq is None:
            if why != "weight not int8":  # float nodes are not rounded at all
                skipped[node.name] = why
            continue
        source = f_nodes.get(node.name)
        if source is None or len(source.input) < 2 or source.input[1] not in f_inits:
            skipped[node.name] = "no float weight of the same name"
            continue
        if readers.get(dq.input[0], 0) != 1 or readers.get(node.input[1], 0) != 1:
            skipped[node.name] = "weight shared with another node"
            continue
        w = numpy_helper.to_array(f_inits[source.input[1]])
        rows, axis, why = _rows_layout(node, w)
        params = _channel_params(dq, inits, axis, rows.shape[0]) if rows is not None else None
        if rows is None or params is None:
            skipped[node.name] = why or "scale not per output channel"
            continue
        if not (np.all(np.isfinite(params[0])) and np.all(params[0] > 0)):
            skipped[node.name] = "a scale is zero or not finite"
            continue
        a = _attrs(node)
        groups = int(a.get("group", 1)) if node.op_type == "Conv" else 1  # type: ignore[call-overload]
        if tuple(inits[dq.input[0]].dims) != w.shape or rows.shape[0] % groups:
            skipped[node.name] = "weight shape differs from the float model's"
            continue
        if rows.shape[1] > MAX_COLUMNS:
            skipped[node.name] = f"more than {MAX_COLUMNS} inputs per output channel"
            continue
        conv: dict[str, list[int]] = {k: list(a[k]) for k in ("strides", "dilations", "pads")  # type: ignore[call-overload]
                                      if k in a}
        conv["kernel"] = [int(d) for d in w.shape[2:]]
        targets.append(RoundingTarget(node.name, node.op_type, node.input[0], dq.input[0], params[0], params[1],
                                      rows.astype(np.float64), axis == 1, groups, conv))
    return targets, skipped


# -- the layers' inputs --------------------------------------------------------------------------------------------


class _Hessians:
    """Σ x xᵀ per target and group, kept apart for the fitting and the held-back samples. A sample's columns wait
    until :data:`COLUMNS_PER_PRODUCT` of them make one product. In float64: float32 sums moved 0.02% of a YOLOv8n's
    integers against float64 ones, and their order differs between BLAS kernels, so float32 could fit other integers
    on another CPU; a quantized input is an integer grid times its scale, the same on every CPU."""

    def __init__(self, targets: Sequence[RoundingTarget], seed: int = SEED) -> None:
        self.sums = {t.name: np.zeros((2, t.groups, t.columns, t.columns)) for t in targets}
        self.waiting: dict[tuple[str, int], list[np.ndarray]] = {}
        self.groups = {t.name: (t.groups, t.columns) for t in targets}
        # a draw of its own per target: a node's sums do not depend on which other nodes are fitted with it
        self.rngs = {t.name: np.random.default_rng(seed) for t in targets}

    def add(self, part: int, t: RoundingTarget, x: np.ndarray) -> None:
        cols = layer_columns(x, t.op_type, t.conv, COLUMNS_PER_SAMPLE, self.rngs[t.name])
        if cols.shape[0] != t.groups * t.columns:
            raise QuantizationError(f"{t.name}'s input gives {cols.shape[0]} values per position, not "
                                    f"{t.groups * t.columns}; cannot re-round its weights.", step=STAGE)
        waiting = self.waiting.setdefault((t.name, part), [])
        waiting.append(cols)
        if sum(c.shape[1] for c in waiting) >= COLUMNS_PER_PRODUCT:
            self._flush(t.name, part)

    def _flush(self, name: str, part: int) -> None:
        waiting = self.waiting.pop((name, part), [])
        if not waiting:
            return
        cols = np.concatenate(waiting, axis=1)
        groups, k = self.groups[name]
        if groups == 1:
            self.sums[name][part, 0] += cols @ cols.T
        else:
            c = cols.reshape(groups, k, cols.shape[1])
            self.sums[name][part] += np.matmul(c, c.transpose(0, 2, 1))

    def take(self, name: str) -> np.ndarray:
        """The target's sums ([part, group, k, k]), every waiting column counted; forgotten here."""
        for part in (_FIT, _HELD):
            self._flush(name, part)
        return self.sums.pop(name)


def _collect(qdq: onnx.ModelProto, targets: Sequence[RoundingTarget], feeds: Sequence[Mapping[str, np.ndarray]],
             parts: Sequence[int], reporter: Reporter, cancel: CancelToken | None) -> _Hessians:
    probe = onnx.ModelProto()
    probe.CopyFrom(qdq)
    inputs = {i.name for i in probe.graph.input}
    have = {o.name for o in probe.graph.output}
    names = [n for n in dict.fromkeys(t.activation for t in targets) if n not in inputs]  # inputs: from the feed
    for name in names:
        if name not in have:
            probe.graph.output.add().name = name
    sess = cpu_session(probe)
    wanted = {i.name for i in sess.get_inputs()}
    sums = _Hessians(targets)
    for k, (feed, part) in enumerate(zip(feeds, parts, strict=True)):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step=STAGE)
        values = dict(zip(names, sess.run(names, {n: v for n, v in feed.items() if n in wanted}), strict=True))
        values.update((n, v) for n, v in feed.items() if n in inputs)
        for t in targets:
            sums.add(part, t, values[t.activation])
        reporter(ProgressEvent(STAGE, k + 1, len(feeds) + 1, f"weight rounding: inputs of sample {k + 1}"))
    return sums


# -- the step ------------------------------------------------------------------------------------------------------


def _integer_range(q: np.ndarray, symmetric: bool) -> tuple[int, int]:
    """The integer range ORT used for this weight: its own min..max, widened to ±max where symmetric."""
    lo, hi = int(q.min()), int(q.max())
    if symmetric:
        bound = max(hi, -lo)
        info = np.iinfo(q.dtype)
        lo, hi = max(-bound, int(info.min)), min(bound, int(info.max))
    return lo, hi


def _round_target(t: RoundingTarget, q0: np.ndarray, h: np.ndarray) -> tuple[np.ndarray | None, float, str]:
    """GPTQ's integers for ``t`` (shaped as ``q0``, ORT's), or None where they do not lower the held-back error,
    their held-back error as a fraction of nearest rounding's, and why GPTQ could not run ("" where it ran)."""
    if not np.isfinite(h).all():
        return None, 1.0, "inputs not finite on some calibration sample"
    lo, hi = _integer_range(q0, bool(np.all(t.zero_point == 0)) and q0.dtype == np.int8)
    rows0 = t.as_rows(q0).astype(np.float64)
    per = t.rows.shape[0] // t.groups
    new = np.empty(t.rows.shape)
    before = after = 0.0
    for g in range(t.groups):
        sl = slice(g * per, (g + 1) * per)
        w, s, z = t.rows[sl], t.scale[sl], t.zero_point[sl]
        try:
            new[sl] = gptq_rows(w, h[_FIT, g], s, z, lo, hi)
        except np.linalg.LinAlgError:
            return None, 1.0, "inputs too degenerate to invert their Σ x xᵀ"
        before += output_error(w, rows0[sl], s, z, h[_HELD, g])
        after += output_error(w, new[sl], s, z, h[_HELD, g])
    if not after < before:
        return None, after / before if before > 0 else 1.0, ""
    return t.as_stored(new, q0), after / before, ""


def _passes(targets: Sequence[RoundingTarget], budget: int | None) -> list[list[RoundingTarget]]:
    """The targets in graph order, cut into groups whose Σ x xᵀ fit ``budget`` bytes together (one pass over the
    samples each; a later pass sees the earlier passes' new weights upstream)."""
    chunks: list[list[RoundingTarget]] = [[]]
    used = 0
    for t in targets:
        if chunks[-1] and budget is not None and used + t.memory_bytes > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(t)
        used += t.memory_bytes
    return chunks


def round_model(fp32: onnx.ModelProto, qdq: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
                reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                output_groups: OutputGroups | None = None,
                memo: RoundingMemo | None = None) -> tuple[onnx.ModelProto, RoundingResult]:
    """The copy of ``qdq`` with GPTQ's int8 weights (``fp32``: the float model it was quantized from) and what was
    done. ``feeds`` are the calibration samples as model inputs (a seeded quarter is held back to check on).
    ``memo``: where each node's outcome is looked up before it is fitted, and kept after (None: fit every node)."""
    start = time.perf_counter()
    result = RoundingResult(samples=len(feeds))
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    targets, result.skipped = find_targets(fp32, out)
    fit, held = held_back_indices(len(feeds))
    if not targets or len(feeds) < MIN_SAMPLES:
        result.too_few = bool(targets)
        result.seconds = time.perf_counter() - start
        return out, result
    result.held_back = len(held)
    samples, parts = [feeds[i] for i in fit + held], [_FIT] * len(fit) + [_HELD] * len(held)
    kept = StepMemo(memo, samples_digest(samples, parts) if memo is not None else "", SETTINGS)
    inits = {t.name: t for t in out.graph.initializer}
    for chunk in _passes(targets, memory_budget_bytes(MEMORY_SHARE)):
        q0s = {t.name: numpy_helper.to_array(inits[t.weight]) for t in chunk}
        known = {name: node for name, node in kept.look_up(out, chunk).items()  # keyed before this pass changes
                 if node.fits(q0s[name])}                                      # any weight: its own inputs
        fresh = [t for t in chunk if t.name not in known]
        sums = _collect(out, fresh, samples, parts, reporter, cancel) if fresh else None
        for t in chunk:
            if cancel is not None and cancel.cancelled:
                raise Cancelled(step=STAGE)
            q0, node = q0s[t.name], known.get(t.name)
            if node is None:
                assert sums is not None
                node = NodeRounding(*_round_target(t, q0, sums.take(t.name)))
                kept.keep(t.name, node)
            else:
                result.reused += 1
            if node.why:
                result.skipped[t.name] = node.why
            elif node.integers is None:
                result.kept.append(t.name)
            if node.integers is None:
                continue
            inits[t.weight].CopyFrom(numpy_helper.from_array(node.integers, t.weight))
            result.rounded[t.name] = node.ratio
    if result.rounded:
        out = _judge_step(fp32, qdq, out, [dict(feeds[i]) for i in held], output_groups, cancel, result)
    reporter(ProgressEvent(STAGE, len(feeds) + 1, len(feeds) + 1, "weight rounding done"))
    result.seconds = time.perf_counter() - start
    return out, result


def _judge_step(fp32: onnx.ModelProto, qdq: onnx.ModelProto, rounded: onnx.ModelProto,
                held: Sequence[Mapping[str, np.ndarray]], output_groups: OutputGroups | None,
                cancel: CancelToken | None, result: RoundingResult) -> onnx.ModelProto:
    """``rounded``, or ``qdq`` (with ``result.dropped`` saying why) when an output (group) of it is further from the
    float model's on the held-back samples beyond doubt: the 95% interval of its SQNR change lies below zero. An
    interval across zero keeps the per-node decisions: a few anchors or pixels decide a whole output's SQNR on a few
    samples (a YOLOv8n's score SQNR on 25 crops moved by 4 dB between two roundings that differ in 0.1% of the
    integers and score within 0.1 dB on 400 other photos)."""
    ref = float_outputs(fp32, held, cancel, STAGE)
    parts = output_parts(ref, output_groups)
    base = float_outputs(qdq, held, cancel, STAGE)
    cand = float_outputs(rounded, held, cancel, STAGE)
    before, after = sqnr_db(parts, ref, base), sqnr_db(parts, ref, cand)
    result.step_sqnr_db = {k: (before[k], after[k]) for k in parts}
    result.step_change_db = sqnr_change_interval(parts, ref, base, cand)
    worse = [k for k in parts if result.step_change_db[k][1] < 0]
    if not worse:
        return rounded
    result.dropped = "it lowered the held-back SQNR of " + ", ".join(
        f"{k} ({db_text(before[k])} → {db_text(after[k])} dB, change {_interval(result.step_change_db[k])})"
        for k in worse)
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    return out


def round_weights(fp32_path, qdq_path, dst, feeds: Iterable[Mapping[str, np.ndarray]],
                  reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                  output_groups: OutputGroups | None = None, memo: RoundingMemo | None = None) -> RoundingResult:
    """:func:`round_model` from files: writes the re-rounded QDQ model to ``dst`` (never over either input)."""
    fp32, qdq = read_pair(fp32_path, qdq_path, dst, STAGE, "Weight rounding", "re-round")
    model, result = round_model(fp32, qdq, list(feeds), reporter, cancel, output_groups, memo)
    write_model(model, dst)
    return result
