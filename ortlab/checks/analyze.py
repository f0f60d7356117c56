"""Per-node error analysis of a quantized model against its float reference.

:func:`analyze` runs the reference (fp32) and the candidate on the same evaluation samples, batched, with the
intermediate tensors it needs exposed as graph outputs of temporary copies, and reports for every quantized
node of the candidate how far its output is from the fp32 tensor of the same name.

Matching. A QDQ candidate (``model.qdq.onnx`` beside an int8 static artifact's ``model.onnx``; the graph
ORT's quantizer wrote, before graph optimization) keeps the fp32 tensor names: a quantized node's output ``Y``
goes through ``QuantizeLinear → Y_QuantizeLinear_Output → DequantizeLinear → Y_DequantizeLinear_Output``. The
candidate's value of ``Y`` is its dequantized tensor when there is one (what the next node reads), else ``Y``;
it is compared with the reference's ``Y``. Names the pre-processing removed (a Conv output folded into its
BatchNormalization keeps the BatchNormalization's output name) simply do not match and are listed.

Two errors per node:

* **accumulated**: the candidate model's tensor vs fp32; everything upstream contributes.
* **local**: what the node itself adds. A "local" model holds, for every quantized node, a copy of its
  quantized form fed with the *reference's* fp32 inputs: each activation input is fake-quantized with the
  candidate's own QuantizeLinear/DequantizeLinear (same scale, zero point, axis), weights are the candidate's
  dequantized weights, and the output is quantized/dequantized as in the candidate. All these copies sit in one
  graph and run batched, once per chunk of samples, so the local error costs about one more forward pass.

Output groups. When the model's task splits its output into channel groups of very different ranges (a YOLO-style
detector's box pixels 0..640 and class scores 0..1, :func:`ortlab.checks.task_metrics.channel_groups`), a whole-tensor
SQNR is dominated by the wide group and hides a node that crushes the narrow one. Every node whose tensor has that
output's layout (3-D, the same channel count on the same axis) is then also measured per group, and ranked by its
worst group (``NodeError.group`` names it, ``group_sqnr_db`` holds each group's figure).

Nodes are ranked worst local SQNR first (accumulated SQNR when a node has no local figure). A candidate with no
QuantizeLinear/DequantizeLinear (dynamic, QOperator, fp16, an optimized model) gets accumulated errors for the
tensors whose names match and no local errors.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ortlab.core.layout import QDQ_FILE, qdq_path
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.core.limits import memory_budget_bytes, samples_per_run
from ortlab.settings.config import PreprocessConfig
from ortlab.core.errors import Cancelled, DataError
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.checks.task_metrics import channel_groups, infer_roles
from ortlab.runtime.providers import quiet_native_stderr
from ortlab.runtime.threads import limit_threads
from ortlab.data.dataset import stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits
from ortlab.checks.evaluate import session_inputs
from ortlab.checks.node_plan import NodePlan, plan_nodes, tensor_types
from ortlab.data.inputs import resolve_feed
from ortlab.core.serial import to_plain

DEFAULT_SAMPLES = 32
CHUNK = 8  # samples per session run, at most: bounds the memory of all exposed intermediate tensors
MEMORY_SHARE = 0.25  # a run's exposed tensors (three models, every node) stay within this share of the memory
METHOD = ("accumulated = candidate tensor vs fp32 tensor of the same name; local = the node's quantized form "
          "(candidate scales, zero points and dequantized weights) run on the fp32 model's inputs")


@dataclass
class NodeError:
    """Error of one quantized node's output over all samples. ``sqnr_db``/``cosine``/``max_abs``: accumulated
    (candidate model vs fp32); ``local_*``: the node alone on fp32 inputs (None when not measurable)."""

    name: str
    op_type: str
    output: str
    sqnr_db: float
    cosine: float
    max_abs: float
    local_sqnr_db: float | None = None
    local_cosine: float | None = None
    local_max_abs: float | None = None
    rank: int = 0
    group: str | None = None  # the output group that ranks the node (its worst), when the task has groups
    group_sqnr_db: dict[str, float] = field(default_factory=dict)  # each group's SQNR (local when measured)

    @property
    def score_db(self) -> float:
        """What the node is ranked by: its worst group's SQNR, else its local SQNR, else its accumulated SQNR."""
        if self.group is not None:
            return self.group_sqnr_db[self.group]
        return self.local_sqnr_db if self.local_sqnr_db is not None else self.sqnr_db

    @property
    def added_db(self) -> float | None:
        """How much worse the accumulated SQNR is than the local one (what upstream nodes contribute)."""
        if self.local_sqnr_db is None or not math.isfinite(self.local_sqnr_db) or not math.isfinite(self.sqnr_db):
            return None
        return self.local_sqnr_db - self.sqnr_db


@dataclass
class NodeAnalysis:
    """The result of :func:`analyze`: ``nodes`` ranked worst local first."""

    reference: str
    candidate: str
    n_samples: int
    nodes: list[NodeError]
    unmatched: list[str] = field(default_factory=list)  # quantized nodes whose tensors the reference lacks
    qdq: bool = True  # the candidate has QuantizeLinear/DequantizeLinear (local errors measured)
    seconds: float = 0.0
    method: str = METHOD
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # each input's shape as fed (one sample)
    groups: dict[str, str] = field(default_factory=dict)  # output → how its channels are grouped, when they are
    # rows named by their output tensor because the candidate's node has no name (ONNX Runtime's pre-processing
    # adds such nodes) → the reference's node that writes that tensor ("" when none): what --exclude-nodes takes
    unnamed: dict[str, str] = field(default_factory=dict)

    def unnamed_note(self, e: NodeError) -> str | None:
        """What to say of row ``e`` when its name is a tensor's (its node has no name), else None."""
        if e.name not in self.unnamed:
            return None
        writer = self.unnamed[e.name]
        return (f"{e.name} is a tensor, not a node: the {e.op_type} node that writes it in the quantized graph has no "
                "name, so --exclude-nodes cannot name it; " + (
                    f"in the fp32 model node {writer} writes it: give --exclude-nodes {writer}" if writer
                    else "no named node of the fp32 model writes it"))

    def worst(self, k: int = 10) -> list[NodeError]:
        return self.nodes[:k]

    def to_dict(self) -> dict:
        return to_plain(self)


class _Acc:
    """Streaming SQNR / cosine / max-abs of one tensor pair."""

    __slots__ = ("cand2", "diff2", "dot", "max_abs", "ref2")

    def __init__(self) -> None:
        self.ref2 = self.diff2 = self.cand2 = self.dot = self.max_abs = 0.0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.ascontiguousarray(ref, dtype=np.float32).ravel()
        c = np.ascontiguousarray(cand, dtype=np.float32).ravel()
        if r.shape != c.shape:
            raise ValueError("shape")
        d = r - c
        self.ref2 += float(np.dot(r, r))
        self.cand2 += float(np.dot(c, c))
        self.diff2 += float(np.dot(d, d))
        self.dot += float(np.dot(r, c))
        if d.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(d))))

    def sqnr(self) -> float:
        if self.diff2 == 0:
            return math.inf
        if self.ref2 == 0:
            return -math.inf
        return 10.0 * math.log10(self.ref2 / self.diff2)

    def cosine(self) -> float:
        if self.ref2 == 0 and self.cand2 == 0:
            return 1.0
        if self.ref2 == 0 or self.cand2 == 0:
            return 0.0
        return self.dot / math.sqrt(self.ref2 * self.cand2)


def resolve_candidate(path) -> Path:
    """The model to analyse for ``path``: an artifact folder or its ``model.onnx`` → ``model.qdq.onnx`` beside
    it, a result written as a file ``OUT.onnx`` → ``OUT.qdq.onnx`` beside it, when the run kept one (static int8
    QDQ), else the file itself."""
    p = Path(path)
    if p.is_dir():
        return p / QDQ_FILE if (p / QDQ_FILE).is_file() else p / "model.onnx"
    qdq = qdq_path(p)
    return qdq if qdq.is_file() else p


# -- graph plumbing ---------------------------------------------------------------------------------------


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model)
    except ONNX_ERRORS:  # the graph as it is: analysis then sees the declared shapes only
        return model


def _with_outputs(model: onnx.ModelProto, names: Sequence[str], types: dict[str, int]) -> bytes:
    """A copy of ``model`` (serialised) that also outputs ``names``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None))
            have.add(n)
    return m.SerializeToString()


# -- running ------------------------------------------------------------------------------------------------


SPIN = "0"  # a shared machine: threads that spin while waiting steal the other sessions' cores
SESSION_LEVEL = "ORT_ENABLE_EXTENDED"  # fusions never remove an exposed tensor; measured to equal DISABLE_ALL's SQNR


def _session(model: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, SESSION_LEVEL)
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", SPIN)
    limit_threads(so)
    with quiet_native_stderr():
        return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def analyze(reference_path, candidate_path, dataset, preprocess: PreprocessConfig | None, n: int | None = DEFAULT_SAMPLES,
            *, chunk: int = CHUNK, reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
            shapes: dict[str, list[int]] | None = None) -> NodeAnalysis:
    """Per-node error of ``candidate_path`` (an artifact folder, its model.onnx or any .onnx; see
    :func:`resolve_candidate`) against ``reference_path`` on ``n`` samples of ``dataset`` (stratified; all
    when None), ``chunk`` samples per batched run. ``shapes`` (``{input name: shape}``, ``--shape``) sets dims
    the model leaves open (:func:`ortlab.data.inputs.resolve_feed`). Reports "analyze" progress; honours ``cancel``."""

    start = time.perf_counter()
    cand_path = resolve_candidate(candidate_path)
    ref_model = _infer(onnx.load(str(reference_path)))
    cand_model = _infer(onnx.load(str(cand_path)))
    plan = plan_nodes(ref_model, cand_model)
    if not plan.nodes:
        raise DataError("No node of the candidate matches a float tensor of the reference; analyse the QDQ model "
                        "of a static int8 run (model.qdq.onnx) against its fp32 source.")
    ref_types, cand_types = tensor_types(ref_model), tensor_types(cand_model)
    graph_outputs = [o.name for o in ref_model.graph.output if ref_types.get(o.name) == TensorProto.FLOAT]
    ref_names = sorted(set(plan.ref_outputs) | set(graph_outputs))
    ref_sess = _session(_with_outputs(ref_model, ref_names, ref_types))
    cand_sess = _session(_with_outputs(cand_model, plan.cand_outputs, cand_types))
    local_sess = _session(plan.local_model) if plan.local_model is not None else None
    writers = {o: n.name for n in ref_model.graph.node for o in n.output if n.name}
    unnamed = {row: writers.get(ry, "") for row, _, ry, _, _ in plan.nodes if row in plan.unnamed}
    del ref_model, cand_model
    ds = dataset if not n or n >= len(dataset) else stratified_sample(dataset, n, seed=0)
    inputs = session_inputs(ref_sess)
    preprocess, specs = resolve_feed(inputs, preprocess, ds, shapes)
    check_fits(ds, preprocess, inputs, specs)
    if any(s.batch_axis is None or s.batch_fixed for s in specs):
        chunk = 1  # a fixed batch dimension (or none): one sample per run
    errors = _Errors(plan)
    cand_names = plan.cand_outputs
    layouts: list[_Layout] | None = None  # the outputs' channel groups
    local_names = [nd[4] for nd in plan.nodes if nd[4] is not None]
    cand_feed_names = {i.name for i in cand_sess.get_inputs()}
    total = len(ds)
    s, step = 0, 1  # one sample first: its exposed tensors size the chunks after it (:func:`_chunk_within`)
    while s < total:
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step="analyze")
        feed = batch_inputs(ds, list(range(s, min(total, s + step))), preprocess, inputs, specs)
        ref_vals = dict(zip(ref_names, ref_sess.run(ref_names, feed)))
        ref_vals.update(feed)
        cand_vals = dict(zip(cand_names, cand_sess.run(cand_names, {k: v for k, v in feed.items()
                                                                     if k in cand_feed_names})))
        local_vals: dict[str, Any] = {}
        if local_sess is not None:
            local_vals = dict(zip(local_names, local_sess.run(local_names, {k: ref_vals[k] for k in plan.local_inputs})))
        if layouts is None:
            layouts, errors.grouped = _grouping(graph_outputs, ref_vals, ds.labeled(), plan.nodes)
        errors.add(ref_vals, cand_vals, local_vals)
        if s == 0:
            chunk = _chunk_within(chunk, ref_vals, cand_vals, local_vals)
        del ref_vals, cand_vals, local_vals
        s += step
        step = chunk
        reporter(ProgressEvent("analyze", min(total, s), total, f"samples {min(total, s)}/{total}"))
    out = errors.node_errors()
    out.sort(key=lambda e: (e.score_db, e.sqnr_db))
    for i, e in enumerate(out, 1):
        e.rank = i
    described = {f"{n} [{', '.join(map(str, shape))}]": ", ".join(
        f"{g} ({_channels(sl)} of axis {axis})" for g, sl in groups.items())
        for n, shape, (axis, _, groups) in (layouts or [])}
    return NodeAnalysis(str(reference_path), str(cand_path), total, out, plan.unmatched, plan.qdq,
                        time.perf_counter() - start, input_shapes={s.name: list(s.shape) for s in specs},
                        groups=described, unnamed=unnamed)


def _chunk_within(chunk: int, *one_sample: dict[str, Any]) -> int:
    """The samples per run (at most ``chunk``) whose exposed tensors — ``one_sample``'s, times the samples, twice:
    ONNX Runtime's and their copies here — stay within :data:`MEMORY_SHARE` of what this process may use (a
    640×640 OCR detector's are 1.5 GB a sample)."""
    per_sample = sum(int(getattr(v, "nbytes", 0)) for vals in one_sample for v in vals.values())
    return samples_per_run(chunk, per_sample, memory_budget_bytes(MEMORY_SHARE))


def _channels(sl: slice) -> str:
    """"channels 0–3", or "channel 4" for one."""
    return f"channels {sl.start}–{sl.stop - 1}" if sl.stop - sl.start > 1 else f"channel {sl.start}"


_Layout = tuple[str, list[int], tuple[int, int, dict[str, slice]]]  # output, its shape, channel_groups()


class _Errors:
    """The streaming errors of every planned node: accumulated, local and per output group."""

    def __init__(self, plan: NodePlan) -> None:
        self.plan = plan
        self.acc = {k: _Acc() for k in range(len(plan.nodes))}
        self.local_acc = {k: _Acc() for k, nd in enumerate(plan.nodes) if nd[4] is not None}
        self.bad: set[int] = set()  # nodes whose tensors do not compare (shapes differ)
        self.grouped: dict[int, tuple[int, dict[str, slice]]] = {}  # node → (channel axis, groups)
        self.group_acc: dict[tuple[int, str], _Acc] = {}

    def add(self, ref_vals: dict[str, Any], cand_vals: dict[str, Any], local_vals: dict[str, Any]) -> None:
        """Adds one chunk's tensors of every node still comparable."""
        for k, (_, _, ry, cy, ly) in enumerate(self.plan.nodes):
            if k in self.bad:
                continue
            try:
                self.acc[k].add(ref_vals[ry], cand_vals[cy])
                if ly is not None:
                    self.local_acc[k].add(ref_vals[ry], local_vals[ly])
                if k in self.grouped:
                    self._add_groups(k, ref_vals[ry], local_vals[ly] if ly is not None else cand_vals[cy])
            except ValueError:
                self.bad.add(k)

    def _add_groups(self, k: int, ref: Any, theirs: Any) -> None:
        axis, groups = self.grouped[k]
        for g, sl in groups.items():
            idx = np.arange(sl.start, sl.stop)
            self.group_acc.setdefault((k, g), _Acc()).add(np.take(ref, idx, axis=axis), np.take(theirs, idx, axis=axis))

    def node_errors(self) -> list[NodeError]:
        """One :class:`NodeError` per comparable node, in plan order."""
        out: list[NodeError] = []
        for k, (name, op, ry, _, _ly) in enumerate(self.plan.nodes):
            if k in self.bad:
                continue
            a = self.acc[k]
            la = self.local_acc.get(k)
            e = NodeError(name, op, ry, a.sqnr(), a.cosine(), a.max_abs,
                          la.sqnr() if la is not None else None, la.cosine() if la is not None else None,
                          la.max_abs if la is not None else None)
            if k in self.grouped:
                self._rank_by_group(k, e)
            out.append(e)
        return out

    def _rank_by_group(self, k: int, e: NodeError) -> None:
        """Fills ``e``'s per-group SQNR and names its worst group when that is worse than the whole tensor."""
        e.group_sqnr_db = {g: self.group_acc[k, g].sqnr() for g in self.grouped[k][1] if (k, g) in self.group_acc}
        whole = e.local_sqnr_db if e.local_sqnr_db is not None else e.sqnr_db
        worst = min(e.group_sqnr_db, key=lambda g: e.group_sqnr_db[g], default=None)
        if worst is not None and e.group_sqnr_db[worst] < whole:
            e.group = worst


def _grouping(outputs: list[str], ref_vals: dict[str, Any], labeled: bool,
              nodes: list[tuple[str, str, str, str, str | None]],
              ) -> tuple[list[_Layout], dict[int, tuple[int, dict[str, slice]]]]:
    """The outputs whose task groups their channels (from the first chunk's reference values) as
    (name, shape, (axis, channels, groups)), and the nodes whose tensors share such a layout: node → (axis, groups)."""
    arrays = [np.asarray(ref_vals[n])[:1] for n in outputs]
    _, _, _, roles = infer_roles(outputs, arrays, labeled)
    layouts: list[_Layout] = []
    for n, arr in zip(outputs, arrays):
        found = channel_groups(roles.get(n), arr.shape, arr)
        if found is not None:
            layouts.append((n, list(arr.shape), found))
    grouped: dict[int, tuple[int, dict[str, slice]]] = {}
    for k, nd in enumerate(nodes):
        shape = np.shape(ref_vals[nd[2]])
        for _, _, (axis, channels, groups) in layouts:
            if len(shape) == 3 and shape[axis] == channels:
                grouped[k] = (axis, groups)
                break
    return layouts, grouped
