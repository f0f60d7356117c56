"""Empirical bias correction of a static int8 QDQ model (built on top of ONNX Runtime's quantizer output).

Nagel, van Baalen, Blankevoort, Welling, "Data-Free Quantization Through Weight Equalization and Bias
Correction", ICCV 2019 (section 4.2 and its empirical variant): quantizing weights shifts the mean of each
output channel of a layer; adding the measured shift back to the layer's bias removes that systematic error.

ONNX Runtime has no such option, so it is applied to the QDQ graph its static quantizer wrote. For each Conv or
Gemm whose bias is ``DequantizeLinear(int32 initializer, scale = s_x*s_w[, zero point])`` (per-channel or
per-tensor), in topological order:

1. the float model and the *current* QDQ model run on the calibration samples, with that node's own output
   (before any QuantizeLinear, so before activation clipping) exposed as a graph output;
2. ``d`` = per-output-channel mean of the float output minus that of the QDQ output;
3. ``bias_q += round(d / scale)`` (clipped to int32), then on to the next node.

The correction must be sequential: each node is measured after every node before it was corrected (correcting
all nodes from a single pass over-corrects and diverged by -19 dB on EfficientNet-Lite0). To keep that cheap,
the float model runs once with every corrected node's output exposed; the QDQ model runs once per node, cut down
to the nodes that output depends on, with the samples in batches where the inputs allow.

Only bias values change: the graph, its nodes and its speed stay as they were. Nodes without a bias (or whose
bias is not an int32 DequantizeLinear of an initializer, e.g. MatMul+Add, where ORT quantizes the Add's constant
as an activation) are skipped and counted; no bias is added.

A correction is kept only where it helps on samples it was not fitted on. A seeded random quarter of the
calibration samples is held back; ``d`` is measured on the others (the fitting part), and the node keeps its
correction only if it lowers the node's output error against the float model on the held-back part, otherwise
its bias is reverted. The error is
the mean squared error of the node's own output, which is what the correction targets: shifting channel ``c`` by
``d_c`` turns a held-back error ``e`` into ``e + d_c``, so the MSE changes by ``2·d_c·m_c + d_c²`` per element,
``m_c`` the held-back mean error of that channel (every channel has the same number of elements). The check
therefore needs only the per-channel means the correction already measures — no extra pass — and it reverts
corrections that fitted sampling noise (then ``m`` and ``d`` are independent and ``(m + d)²`` is larger on
average) or an unrepresentative fitting part. A lower error at each node does not guarantee better model
outputs (clipping and non-linearities follow), so the whole step is judged too: the model's outputs on the
held-back samples are compared with the float model's, per output and, where ``output_groups`` splits an output
into channel groups (a detector's box and score channels), per group; if any of them loses more than
:data:`STEP_TOLERANCE_DB` of SQNR, every correction is dropped and the model is left as quantized, with a note
(this costs one pass each of the float, QDQ and corrected models over the held-back quarter, sample by sample).
SQNR does not see the task: on PP-OCR's direction classifier the correction raised held-back SQNR 14.4 → 18.9 dB
and still flipped confident answers. So where the caller gives a ``task_judge`` (the runs layer passes the
verdict's own task metric: confident flips, detections' F1, decoded strings, …), the step is judged on it first:
a correction that makes the task metric worse on the held-back samples is dropped, one that makes it better is
kept, and on a tie the SQNR check above decides. With fewer than
:data:`MIN_SAMPLES` calibration samples nothing can be checked, and bias correction is skipped with a note rather
than applied unchecked.

With a memo (a run in a workspace), each node's outcome is kept under a key of what decides it
(:mod:`ortlab.transforms.bias_memo`) and reused by a later run or tune trial whose node has the same key: such a node
is not measured, and where every node is found, neither model runs but for the whole-step check.

Size: one algorithm and the two checks that decide whether its result is kept; the checks read the per-channel means
and the cut-down models the correction itself builds, so they stay beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper

from ortlab.core.errors import Cancelled, QuantizationError
from ortlab.core.limits import is_alloc_failure, memory_budget_bytes, samples_per_run
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.runtime.providers import ORT_ERRORS
from ortlab.transforms.bias_memo import BiasMemo, BiasSteps, NodeBias
from ortlab.transforms.held_back import (
    OutputGroups,
    cpu_session,
    db_text,
    float_outputs,
    held_back_indices,
    output_parts,
    read_pair,
    sqnr_db,
    write_model,
)

STAGE = "bias_correction"
CORRECTED_OPS = ("Conv", "Gemm")
DEFAULT_BATCH = 16
MIN_FIT, MIN_HELD_BACK = 6, 2
MIN_SAMPLES = 8  # the fewest samples that give MIN_FIT fitting and MIN_HELD_BACK held-back samples
STEP_TOLERANCE_DB = 0.1  # an output (group) whose held-back SQNR falls by more than this drops the whole step
OUT_OF_MEMORY: tuple[type[BaseException], ...] = (MemoryError, *ORT_ERRORS)  # ORT's: when it says an allocation failed
MEMORY_SHARE = 0.25  # the step keeps its samples' activations within this share of the memory the process may use
_INT32 = np.iinfo(np.int32)
_FIT, _HELD = 0, 1

@dataclass(frozen=True)
class TaskChange:
    """A task judge's answer on the held-back samples: ``change`` is -1 when the corrected model is worse on the
    task's metric than the model as quantized, 0 when the same, +1 when better; ``text`` says what moved ("raised
    confident flips on the held-back samples from 0 to 2")."""

    change: int
    text: str


Outputs = Sequence[Mapping[str, np.ndarray]]  # a model's float outputs on each held-back sample (a batch of one)
# (float model's, quantized model's, corrected model's outputs) → the task metric's change, None without one
TaskJudge = Callable[[Outputs, Outputs, Outputs], TaskChange | None]


@dataclass(frozen=True)
class BiasTarget:
    """One node whose int32 bias is corrected: its ``name``, ``op_type``, the output tensor in the float model
    (``fp32_output``) and in the QDQ model (``qdq_output``), the int32 bias initializer and its scale."""

    name: str
    op_type: str
    fp32_output: str
    qdq_output: str
    bias: str
    scale: np.ndarray  # per channel ([C]) or per tensor (scalar)


@dataclass(frozen=True)
class MemoryCut:
    """Fewer samples than given, to keep the step's activations within its memory budget: ``given`` samples, the
    bytes of one sample's corrected-node outputs (``sample_bytes``) and the ``budget`` in bytes."""

    given: int
    sample_bytes: int
    budget: int

    def text(self, used: int) -> str:
        mb, gb = self.sample_bytes / 2**20, self.budget / 2**30
        return (f"one calibration sample's outputs of the corrected nodes take {mb:,.0f} MB, so {used} of the "
                f"{self.given} fit in the step's memory budget ({gb:.1f} GB, {MEMORY_SHARE:.0%} of what this process "
                "may use)")


@dataclass
class BiasCorrectionResult:
    """What :func:`correct_biases` did: the ``corrected`` node names (in order; their correction lowered their
    error on the held-back samples), the int32 ``shifts`` added to each, the nodes that ``kept`` their bias with
    their held-back output MSE (without, with the correction), the weighted nodes ``skipped`` with the reason, the
    held-back SQNR of each output (group) ``step_sqnr_db`` as (without, with) correction, ``step_task`` (how the
    task metric moved on the held-back samples, when a task judge was given), ``dropped`` (why the
    whole step was undone; then no bias changed), ``too_few`` (not enough samples to check: nothing was done),
    ``seconds`` and ``warnings``."""

    corrected: list[str] = field(default_factory=list)
    shifts: dict[str, np.ndarray] = field(default_factory=dict)
    kept: dict[str, tuple[float, float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    step_sqnr_db: dict[str, tuple[float, float]] = field(default_factory=dict)
    step_task: TaskChange | None = None
    dropped: str = ""
    too_few: bool = False
    out_of_memory: bool = False
    memory_cut: MemoryCut | None = None
    seconds: float = 0.0
    samples: int = 0
    held_back: int = 0
    reused: int = 0  # nodes whose outcome was kept from an earlier run
    warnings: list[str] = field(default_factory=list)

    @property
    def targets(self) -> int:
        """How many nodes had a bias to correct (corrected + kept their bias)."""
        return len(self.corrected) + len(self.kept)

    @property
    def applied(self) -> list[str]:
        """The nodes whose bias differs in the written model: ``corrected`` unless the step was dropped."""
        return [] if self.dropped or self.too_few or self.out_of_memory else list(self.corrected)

    @property
    def notes(self) -> list[str]:
        head = "Bias correction (Nagel et al. 2019)"
        cut = self.memory_cut
        if self.out_of_memory:
            return [f"{head} skipped: it ran out of memory on {self.samples} calibration samples (this run's limit, "
                    "$ORTLAB_RUN_MEMORY_GB); the biases are as quantized."]
        if self.too_few:
            why = f" ({cut.text(self.samples)})" if cut is not None else ""
            return [f"{head} skipped: {self.samples} calibration sample(s) are too few to check each correction on "
                    f"held-back samples (it needs at least {MIN_SAMPLES}){why}; the biases are as quantized."]
        if not self.targets and not self.dropped:
            found = (f"{len(self.skipped)} {'/'.join(CORRECTED_OPS)} node(s) have no int32 bias to correct"
                     if self.skipped else f"the quantized model has no {' or '.join(CORRECTED_OPS)} with a bias")
            return [f"{head} found nothing to correct: {found}; the biases are as quantized."]
        text = f"{head}: {len(self.corrected)} of {self.targets} node(s) corrected"
        if self.kept:
            text += (f" ({len(self.kept)} kept their bias: the correction did not lower their error on held-back "
                     "calibration samples)")
        text += (f", fitted on {self.samples - self.held_back} calibration samples and checked on {self.held_back} "
                 f"held back" + (f" ({cut.text(self.samples)})" if cut is not None else "") + f", in {self.seconds:.1f} s")
        if self.reused:
            text += (f" ({self.reused} node(s) reused from an earlier run: the same output computed the same way, "
                     "reference and samples)")
        if self.shifts and not self.dropped:
            moved = sum(int(np.count_nonzero(s)) for s in self.shifts.values())
            total = sum(int(s.size) for s in self.shifts.values())
            text += f" ({moved} of {total} channel biases changed)"
        text += "."
        if self.dropped:
            text += f" The step was dropped and the biases are as quantized: {self.dropped}."
        elif self.step_sqnr_db:
            text += " Held-back output SQNR without → with it: " + ", ".join(
                f"{k} {db_text(a)} → {db_text(b)} dB" for k, (a, b) in self.step_sqnr_db.items()) + "."
            if self.step_task is not None:
                text += f" It {self.step_task.text}."
        if self.skipped:
            text += f" {len(self.skipped)} node(s) have no int32 bias to correct and were left as they were."
        return [text]




# -- finding the targets ------------------------------------------------------------------------------------


def _initializers(graph: onnx.GraphProto) -> dict[str, TensorProto]:
    return {t.name: t for t in graph.initializer}


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def _out_channels(node: onnx.NodeProto, inits: Mapping[str, TensorProto],
                  producer: Mapping[str, onnx.NodeProto]) -> int | None:
    """The number of output channels from the (possibly dequantized) weight's shape."""
    w = node.input[1] if len(node.input) > 1 else ""
    if w in producer and producer[w].op_type == "DequantizeLinear":
        w = producer[w].input[0]
    if w not in inits:
        return None
    dims = list(inits[w].dims)
    if node.op_type == "Conv":
        return dims[0] if dims else None
    trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
    return (dims[0] if trans_b else dims[1]) if len(dims) == 2 else None


def find_targets(fp32: onnx.ModelProto, qdq: onnx.ModelProto) -> tuple[list[BiasTarget], dict[str, str]]:
    """The Conv/Gemm nodes of ``qdq`` with an int32 bias to correct, in graph (topological) order, and the
    skipped weighted nodes with why. Nodes are matched with ``fp32`` by name."""
    g = qdq.graph
    inits = _initializers(g)
    producer = {o: n for n in g.node for o in n.output}
    consumers = _consumers(g)
    fp32_nodes: dict[str, onnx.NodeProto] = {}
    for n in fp32.graph.node:
        if n.name:
            fp32_nodes[n.name] = None if n.name in fp32_nodes else n  # type: ignore[assignment]
    targets: list[BiasTarget] = []
    skipped: dict[str, str] = {}
    for node in g.node:
        if node.op_type not in CORRECTED_OPS or node.domain not in ("", "ai.onnx"):
            continue
        label = node.name or node.output[0]
        if len(node.input) < 3 or not node.input[2]:
            skipped[label] = "no bias"
            continue
        dq = producer.get(node.input[2])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            skipped[label] = "bias not quantized"
            continue
        bias = inits[dq.input[0]]
        if bias.data_type != TensorProto.INT32 or len(bias.dims) != 1:
            skipped[label] = "bias not a 1-D int32 tensor"
            continue
        if len(consumers.get(dq.input[0], [])) != 1 or len(consumers.get(dq.output[0], [])) != 1:
            skipped[label] = "bias shared with other nodes"
            continue
        if len(dq.input) < 2 or dq.input[1] not in inits:
            skipped[label] = "bias scale not a constant"
            continue
        scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
        channels = int(bias.dims[0])
        if scale.size not in (1, channels) or np.any(scale <= 0) or _out_channels(node, inits, producer) != channels:
            skipped[label] = "bias shape or scale not per output channel"
            continue
        ref = fp32_nodes.get(node.name) if node.name else None
        if ref is None or ref.op_type != node.op_type:
            skipped[label] = "no node of the same name in the float model"
            continue
        targets.append(BiasTarget(node.name, node.op_type, ref.output[0], node.output[0], bias.name,
                                  scale.reshape(-1) if scale.size > 1 else scale.reshape(())))
    return targets, skipped


# -- running ------------------------------------------------------------------------------------------------


def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs are ``names`` (float tensors)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(onnx.helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return m


class _Segments:
    """Runs a QDQ graph piece by piece over the calibration batches, keeping the tensors later pieces read.

    When node ``k`` is measured, every node it depends on is final (its ancestors precede it in topological
    order, so their biases were corrected before): their outputs are computed once, cached, and fed to the
    pieces that follow. Node ``k`` itself is recomputed by the next piece that needs it, with its corrected bias.
    In all, the QDQ model runs about twice over the samples instead of once per corrected node."""

    def __init__(self, model: onnx.ModelProto, batches: Sequence[Mapping[str, np.ndarray]],
                 parts: Sequence[int]) -> None:
        self.model = model
        self.parts = list(parts)
        g = model.graph
        self.producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
        self.consumers: dict[str, set[int]] = {}
        for i, n in enumerate(g.node):
            for x in n.input:
                self.consumers.setdefault(x, set()).add(i)
        self.outputs = {o.name for o in g.output}
        self.done: set[int] = set()
        self.cache = [dict(b) for b in batches]
        self.input_types = {i.name: i.type for i in g.input}
        # nodes computed from initializers alone (weights' and biases' DequantizeLinear): never cached, since a
        # corrected bias must reach its node through them
        inits = {t.name for t in g.initializer}
        const: set[str] = set(inits)
        self.static: set[int] = set()
        for i, n in enumerate(g.node):
            if all(not x or x in const for x in n.input):
                self.static.add(i)
                const.update(n.output)

    def ancestors(self, k: int) -> set[int]:
        seen: set[int] = set()
        stack = [self.producer[x] for x in self.model.graph.node[k].input if x in self.producer]
        while stack:
            i = stack.pop()
            if i in seen or i in self.done:
                continue
            seen.add(i)
            stack += [self.producer[x] for x in self.model.graph.node[i].input if x in self.producer]
        return seen

    def run(self, k: int, output: str, channels: int, cancel: CancelToken | None) -> np.ndarray:
        """The per-channel means ([part, channel]) of node ``k``'s ``output`` over the fitting and the held-back
        batches, with the model as it is now."""
        g = self.model.graph
        new = self.ancestors(k)
        piece = sorted(new | {k})
        made = {o for i in piece for o in g.node[i].output}
        inits = {t.name for t in g.initializer}
        reads = list(dict.fromkeys(x for i in piece for x in g.node[i].input if x and x not in made and x not in inits))
        keep = sorted({o for i in new - self.static for o in g.node[i].output
                       if o and (self.consumers.get(o, set()) - self.done - new)})
        m = onnx.ModelProto()
        m.ir_version = self.model.ir_version
        m.opset_import.extend(self.model.opset_import)
        m.graph.name = g.name
        m.graph.node.extend(g.node[i] for i in piece)
        used = {x for i in piece for x in g.node[i].input}
        m.graph.initializer.extend(t for t in g.initializer if t.name in used)
        first = self.cache[0] if self.cache else {}
        for x in reads:
            if x in self.input_types:
                m.graph.input.append(onnx.ValueInfoProto(name=x, type=self.input_types[x]))
            else:
                elem = onnx.helper.np_dtype_to_tensor_dtype(first[x].dtype)
                m.graph.input.append(onnx.helper.make_tensor_value_info(x, elem, None))
        m.graph.output.append(onnx.helper.make_tensor_value_info(output, TensorProto.FLOAT, None))
        m.graph.output.extend(onnx.ValueInfoProto(name=x) for x in keep if x != output)
        sess = cpu_session(m)
        names = [o.name for o in sess.get_outputs()]
        sums = _PartSums(channels)
        for cached, part in zip(self.cache, self.parts, strict=True):
            if cancel is not None and cancel.cancelled:
                raise Cancelled(step=STAGE)
            values = dict(zip(names, sess.run(names, {x: cached[x] for x in reads}), strict=True))
            sums.add(part, values[output], output)
            cached.update((x, values[x]) for x in keep)
        self.done |= new - self.static
        for cached in self.cache:  # drop what no piece reads any more
            for x in [x for x in cached if not (self.consumers.get(x, set()) - self.done)]:
                del cached[x]
        return sums.means()


def _has_subgraphs(graph: onnx.GraphProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node
               for a in n.attribute)




def _batches(feeds: Sequence[Mapping[str, np.ndarray]], batch: int, batchable: bool) -> list[dict[str, np.ndarray]]:
    """The samples stacked along axis 0 in groups of ``batch`` where every input's first axis is open and the
    samples' shapes agree; one sample a run otherwise."""
    if not batchable or batch <= 1:
        return [dict(f) for f in feeds]
    out: list[dict[str, np.ndarray]] = []
    for start in range(0, len(feeds), batch):
        chunk = feeds[start:start + batch]
        same = all({k: v.shape for k, v in f.items()} == {k: v.shape for k, v in chunk[0].items()} for f in chunk)
        if same:
            out.append({k: np.concatenate([f[k] for f in chunk], axis=0) for k in chunk[0]})
        else:
            out += [dict(f) for f in chunk]
    return out


def _open_batch_axis(model: onnx.ModelProto) -> bool:
    inits = {t.name for t in model.graph.initializer}
    for i in model.graph.input:
        if i.name in inits:
            continue
        dims = i.type.tensor_type.shape.dim
        if not dims or (dims[0].HasField("dim_value") and dims[0].dim_value > 0):
            return False
    return True


def _channel_sum(y: np.ndarray, name: str, c: int) -> tuple[np.ndarray, int]:
    axis = 1 if y.ndim > 1 else 0
    if y.ndim < 1 or y.shape[axis] != c:
        raise QuantizationError(f"Node output {name} has shape {list(y.shape)}, not {c} channels on axis {axis}; "
                                "cannot correct its bias.", step=STAGE)
    moved = np.moveaxis(y, axis, 0).reshape(c, -1)
    return moved.sum(axis=1, dtype=np.float64), moved.shape[1]


class _PartSums:
    """Per-channel sums and element counts of one tensor, kept apart for the fitting and the held-back part."""

    def __init__(self, channels: int) -> None:
        self.channels = channels
        self.sums = np.zeros((2, channels), np.float64)
        self.counts = [0, 0]

    def add(self, part: int, y: np.ndarray, name: str) -> None:
        total, n = _channel_sum(y, name, self.channels)
        self.sums[part] += total
        self.counts[part] += n

    def means(self) -> np.ndarray:
        return self.sums / np.maximum(1, np.asarray(self.counts, np.float64))[:, None]


def _channel_means(sess: ort.InferenceSession, batches: Sequence[Mapping[str, np.ndarray]], parts: Sequence[int],
                   outputs: Sequence[tuple[str, str, int]], cancel: CancelToken | None) -> dict[str, np.ndarray]:
    """Per-output-channel means ([part, channel]) of ``outputs`` ((tensor, op type, channels)) over the samples of
    each part (``parts[i]`` is batch ``i``'s)."""
    wanted = {i.name for i in sess.get_inputs()}
    sums = {name: _PartSums(c) for name, _, c in outputs}
    names = list(sums)
    for feed, part in zip(batches, parts, strict=True):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step=STAGE)
        values = sess.run(names, {k: v for k, v in feed.items() if k in wanted})
        for name, y in zip(names, values, strict=True):
            sums[name].add(part, y, name)
    return {k: v.means() for k, v in sums.items()}




def lowers_error(shift: np.ndarray, scale: np.ndarray, fp32_held: np.ndarray, qdq_held: np.ndarray,
                 ) -> tuple[bool, float, float]:
    """Whether adding ``shift`` (int32 units of ``scale``) to a bias lowers the node's output MSE vs the float
    model on the held-back samples, and that MSE's change-relevant part before and after: the mean over channels
    of the squared held-back mean error, ``m_c²`` and ``(m_c + d_c)²`` (the within-channel variance, equal in
    both, is left out). An all-zero shift changes nothing and is not kept."""
    d = np.asarray(shift, np.float64) * np.broadcast_to(np.asarray(scale, np.float64), np.shape(shift))
    m = np.asarray(qdq_held, np.float64) - np.asarray(fp32_held, np.float64)
    before, after = float(np.mean(m * m)), float(np.mean((m + d) ** 2))
    return bool(np.any(shift != 0) and after < before), before, after


def bias_shift(fp32_mean: np.ndarray, qdq_mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The int32 amount to add to a bias: ``round((fp32_mean - qdq_mean) / scale)``."""
    return np.rint((np.asarray(fp32_mean, np.float64) - np.asarray(qdq_mean, np.float64)) / scale).astype(np.int64)








def correct_model(fp32: onnx.ModelProto, qdq: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
                  reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                  batch: int = DEFAULT_BATCH, output_groups: OutputGroups | None = None,
                  task_judge: TaskJudge | None = None, memory_budget: int | None = None,
                  memo: BiasMemo | None = None) -> tuple[onnx.ModelProto, BiasCorrectionResult]:
    """The bias-corrected copy of ``qdq`` (``fp32`` is the float model it was quantized from) and what was done.
    ``feeds`` are the calibration samples as model inputs (every 4th is held back to check the corrections on);
    ``output_groups`` splits outputs into the channel groups the whole step is judged on (each output whole when
    None); ``task_judge`` judges the whole step on the task's metric before SQNR (see the module docstring).
    Progress goes to ``reporter`` as ``"bias_correction"`` n/N events and ``cancel`` raises ``Cancelled``
    between runs. The samples' activations are kept within ``memory_budget`` bytes (default: :data:`MEMORY_SHARE`
    of what this process may use): fewer samples, spread over those given, and smaller batches where one sample's
    take much. With a ``memo``, each node's outcome is looked up under its key (:mod:`ortlab.transforms.bias_memo`)
    before it is measured, and kept once measured (not for a model with subgraphs)."""
    start = time.perf_counter()
    result = BiasCorrectionResult(samples=len(feeds))
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    targets, result.skipped = find_targets(fp32, out)
    # the float model with every corrected node's output: it sizes the step on one sample, then gives the means
    ref_sess = cpu_session(_with_outputs(fp32, [t.fp32_output for t in targets])) if targets and feeds else None
    if ref_sess is not None:
        feeds, batch, result.memory_cut = _within_budget(ref_sess, feeds, batch, memory_budget)
        result.samples = len(feeds)
    total = len(targets)
    reporter(ProgressEvent(STAGE, 0, max(total, 1), f"bias correction 0/{total}"))
    fit, held = held_back_indices(len(feeds))
    if not targets or len(fit) < MIN_FIT or len(held) < MIN_HELD_BACK:
        if not feeds and result.memory_cut is None:
            result.warnings.append("Bias correction had no calibration samples; nothing was corrected.")
        elif targets:
            result.too_few = True
        result.seconds = time.perf_counter() - start
        reporter(ProgressEvent(STAGE, max(total, 1), max(total, 1), f"bias correction {total}/{total}"))
        return out, result
    result.held_back = len(held)
    batchable = _open_batch_axis(fp32) and _open_batch_axis(qdq)
    fit_batches = _batches([feeds[i] for i in fit], batch, batchable)
    held_batches = _batches([feeds[i] for i in held], batch, batchable)
    batches = fit_batches + held_batches
    parts = [_FIT] * len(fit_batches) + [_HELD] * len(held_batches)
    inits = _initializers(out.graph)

    def channels(t: BiasTarget) -> int:
        return int(inits[t.bias].dims[0])

    assert ref_sess is not None  # there are targets and samples
    ref: dict[str, np.ndarray] = {}  # the float model's means, measured once the first node is not found kept
    index = {n.name: i for i, n in enumerate(out.graph.node) if n.name}
    subgraphs = _has_subgraphs(out.graph)
    pieces = None if subgraphs else _Segments(out, batches, parts)
    held_set = set(held)
    steps = None if memo is None or subgraphs else BiasSteps(
        memo, fp32, out, feeds, [int(i in held_set) for i in range(len(feeds))],
        {"batch": batch, "batchable": batchable, "min_fit": MIN_FIT, "min_held_back": MIN_HELD_BACK})
    for k, t in enumerate(targets):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step=STAGE)
        found = steps.look_up(out, t.name, t.qdq_output, t.fp32_output, t.scale) if steps is not None else None
        if found is not None and found.fits(channels(t)):
            outcome = found
            result.reused += 1
        else:
            if not ref:
                ref = _channel_means(ref_sess, batches, parts, [(u.fp32_output, u.op_type, channels(u))
                                                                 for u in targets[k:]], cancel)
            outcome = _measure(t, ref[t.fp32_output], out, pieces, index[t.name], channels(t), batches, parts, cancel)
            if steps is not None:
                steps.keep(t.name, outcome)
        if outcome.applied:
            init = inits[t.bias]
            new = np.clip(numpy_helper.to_array(init).astype(np.int64) + outcome.shift, _INT32.min,
                          _INT32.max).astype(np.int32)
            init.CopyFrom(numpy_helper.from_array(new, t.bias))
            result.corrected.append(t.name)
            result.shifts[t.name] = outcome.shift
            if steps is not None:
                steps.changed(out, t.bias)
        else:
            result.kept[t.name] = (outcome.before, outcome.after)
        reporter(ProgressEvent(STAGE, k + 1, total, f"bias correction {k + 1}/{total}"))
    if result.corrected:
        out = _judge_step(fp32, qdq, out, [dict(feeds[i]) for i in held], output_groups, task_judge, cancel, result)
    result.seconds = time.perf_counter() - start
    return out, result


def _measure(t: BiasTarget, ref: np.ndarray, out: onnx.ModelProto, pieces: _Segments | None, k: int, channels: int,
             batches: Sequence[Mapping[str, np.ndarray]], parts: Sequence[int], cancel: CancelToken | None) -> NodeBias:
    """Node ``t``'s correction towards the float model's per-channel means ``ref`` ([part, channel]), measured on the
    QDQ model ``out`` as it is now (node ``k`` of its graph, run by ``pieces``; the whole model where it has
    subgraphs), and whether it lowers the node's held-back error."""
    if pieces is not None:
        cur = pieces.run(k, t.qdq_output, channels, cancel)
    else:  # If/Loop/Scan bodies read outer tensors implicitly: run the whole model each time
        cur = _channel_means(cpu_session(_with_outputs(out, [t.qdq_output])), batches, parts,
                             [(t.qdq_output, t.op_type, channels)], cancel)[t.qdq_output]
    shift = bias_shift(ref[_FIT], cur[_FIT], t.scale)
    keep, before, after = lowers_error(shift, t.scale, ref[_HELD], cur[_HELD])
    return NodeBias(shift.astype(np.int64), keep, before, after)


def _within_budget(ref_sess: ort.InferenceSession, feeds: Sequence[Mapping[str, np.ndarray]], batch: int,
                   budget: int | None) -> tuple[Sequence[Mapping[str, np.ndarray]], int, MemoryCut | None]:
    """(the samples, the batch, the cut) that keep the step within ``budget`` bytes: the QDQ pieces keep the tensors
    later pieces read for every sample, and the float model (``ref_sess``) returns every corrected node's output
    for a batch, so one sample's outputs of the corrected nodes (measured on the first) times the samples, and
    twice that times the batch, must fit. The samples kept are spread evenly over those given."""
    budget = memory_budget_bytes(MEMORY_SHARE) if budget is None else budget
    if budget is None:
        return feeds, batch, None
    wanted = {i.name for i in ref_sess.get_inputs()}
    per_sample = max(1, sum(int(np.asarray(y).nbytes) for y in ref_sess.run(
        None, {k: v for k, v in feeds[0].items() if k in wanted})))
    batch = samples_per_run(batch, per_sample, budget)
    fits = int(budget // per_sample)
    if fits >= len(feeds):
        return feeds, batch, None
    keep = sorted({int(i) for i in np.linspace(0, len(feeds) - 1, max(fits, 1)).round()}) if fits > 0 else []
    return [feeds[i] for i in keep], batch, MemoryCut(len(feeds), per_sample, int(budget))


def _judge_step(fp32: onnx.ModelProto, qdq: onnx.ModelProto, corrected: onnx.ModelProto,
                held: Sequence[Mapping[str, np.ndarray]], output_groups: OutputGroups | None,
                task_judge: TaskJudge | None, cancel: CancelToken | None,
                result: BiasCorrectionResult) -> onnx.ModelProto:
    """``corrected``, or ``qdq`` unchanged (with ``result.dropped`` saying why) when, on the ``held`` back samples
    (run one by one), ``task_judge`` finds the task metric worse, or it finds no change (or there is no judge) and
    an output (group) of the corrected model is further from the float model's than without the correction."""
    ref = float_outputs(fp32, held, cancel, STAGE)
    base = float_outputs(qdq, held, cancel, STAGE)
    cand = float_outputs(corrected, held, cancel, STAGE)
    parts = output_parts(ref, output_groups)
    before, after = sqnr_db(parts, ref, base), sqnr_db(parts, ref, cand)
    result.step_sqnr_db = {k: (before[k], after[k]) for k in parts}
    result.step_task = task_judge(ref, base, cand) if task_judge is not None else None
    change = result.step_task.change if result.step_task is not None else 0
    worse = [k for k in parts if after[k] < before[k] - STEP_TOLERANCE_DB]
    if change > 0 or (change == 0 and not worse):
        return corrected
    if change < 0:
        assert result.step_task is not None
        result.dropped = "it " + result.step_task.text + " (held-back output SQNR " + ", ".join(
            f"{k} {db_text(before[k])} → {db_text(after[k])} dB" for k in parts) + ")"
    else:
        result.dropped = "it lowered the held-back SQNR of " + ", ".join(
            f"{k} ({db_text(before[k])} → {db_text(after[k])} dB)" for k in worse)
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    return out


def correct_biases(fp32_path, qdq_path, dst, feeds: Iterable[Mapping[str, np.ndarray]],
                   reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                   batch: int = DEFAULT_BATCH, output_groups: OutputGroups | None = None,
                   task_judge: TaskJudge | None = None, memory_budget: int | None = None,
                   memo: BiasMemo | None = None) -> BiasCorrectionResult:
    """:func:`correct_model` from files: reads the float model ``fp32_path`` and the QDQ model ``qdq_path``,
    writes the corrected QDQ model to ``dst`` (never over either input)."""
    fp32, qdq = read_pair(fp32_path, qdq_path, dst, STAGE, "Bias correction", "correct")
    samples = list(feeds)
    try:
        model, result = correct_model(fp32, qdq, samples, reporter, cancel, batch, output_groups, task_judge,
                                      memory_budget, memo)
    except OUT_OF_MEMORY as exc:  # past the budget's estimate: the step goes, the run goes on
        if not isinstance(exc, MemoryError) and not is_alloc_failure(str(exc)):
            raise
        model, result = qdq, BiasCorrectionResult(out_of_memory=True, samples=len(samples))
    write_model(model, dst)
    return result
