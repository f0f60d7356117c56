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
from ortlab.settings.config import PreprocessConfig
from ortlab.core.errors import Cancelled, DataError
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.checks.task_metrics import channel_groups, infer_roles
from ortlab.runtime.providers import quiet_native_stderr
from ortlab.data.dataset import stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits
from ortlab.checks.evaluate import session_inputs
from ortlab.data.inputs import resolve_feed
from ortlab.core.serial import to_plain

QUANT_OPS = ("QuantizeLinear", "DequantizeLinear")
QUANT_INPUT_SUFFIX = "_QuantizeLinear_Input"
DEFAULT_SAMPLES = 32
CHUNK = 8  # samples per session run: bounds the memory of all exposed intermediate tensors
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


def _types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name → ONNX element type, from inputs, outputs, value_info and initializers."""
    g = model.graph
    out: dict[str, int] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    for init in g.initializer:
        out[init.name] = init.data_type
    return out


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:
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


@dataclass
class _Plan:
    """What to run and compare: per node (name, op, ref tensor, candidate tensor, local output or None)."""

    nodes: list[tuple[str, str, str, str, str | None]]
    ref_outputs: list[str]
    cand_outputs: list[str]
    local_model: bytes | None
    local_inputs: list[str]
    unmatched: list[str]
    qdq: bool


def _plan(ref: onnx.ModelProto, cand: onnx.ModelProto) -> _Plan:
    ref_types, cand_types = _types(ref), _types(cand)
    ref_inputs = {i.name for i in ref.graph.input}
    ref_known = set(ref_types) | ref_inputs
    g = cand.graph
    inits = {i.name: i for i in g.initializer}
    producer: dict[str, onnx.NodeProto] = {}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for o in node.output:
            producer[o] = node
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    qdq = any(n.op_type in QUANT_OPS for n in g.node)

    def fake_quant_of(t: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
        """(Q, DQ) that turn float tensor ``t`` into its dequantized form, when the candidate has them."""
        for q in consumers.get(t, []):
            if q.op_type == "QuantizeLinear" and q.input[0] == t:
                for dq in consumers.get(q.output[0], []):
                    if dq.op_type == "DequantizeLinear":
                        return q, dq
        return None

    def is_float(name: str, types: dict[str, int]) -> bool:
        return types.get(name) in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)

    nodes: list[tuple[str, str, str, str, str | None]] = []
    unmatched: list[str] = []
    # the local model
    l_nodes: list[onnx.NodeProto] = []
    l_inits: dict[str, onnx.TensorProto] = {}
    l_inputs: dict[str, int] = {}
    l_outputs: list[str] = []
    done_weights: set[str] = set()
    fq_cache: dict[str, str] = {}

    def add_init(name: str) -> None:
        if name and name in inits and name not in l_inits:
            l_inits[name] = inits[name]

    def add_copy(node: onnx.NodeProto, inputs: list[str], outputs: list[str], tag: str) -> None:
        c = onnx.NodeProto()
        c.CopyFrom(node)
        c.name = f"{node.name or node.op_type}{tag}"
        del c.input[:]
        c.input.extend(inputs)
        del c.output[:]
        c.output.extend(outputs)
        l_nodes.append(c)

    def local_input(x: str) -> str | None:
        """The local model's tensor for candidate input ``x`` of a quantized node (None: not possible)."""
        if not x or x in inits:
            add_init(x)
            return x
        p = producer.get(x)
        if p is not None and p.op_type == "DequantizeLinear":
            qin = p.input[0]
            if qin in inits:  # a quantized weight: its DequantizeLinear as it is
                if x not in done_weights:
                    for i in p.input:
                        add_init(i)
                    l_nodes.append(p)
                    done_weights.add(x)
                return x
            q = producer.get(qin)
            if q is None or q.op_type != "QuantizeLinear":
                return None
            t = q.input[0]
            if t not in ref_known or (not is_float(t, ref_types) and t not in ref_inputs):
                return None
            if x not in fq_cache:
                for i in list(q.input[1:]) + list(p.input[1:]):
                    add_init(i)
                if any(i and i not in inits for i in list(q.input[1:]) + list(p.input[1:])):
                    return None  # scales computed at run time: not reproducible here
                l_inputs[t] = ref_types.get(t, TensorProto.FLOAT)
                add_copy(q, [t, *q.input[1:]], [f"{x}__lq"], "__lq")
                add_copy(p, [f"{x}__lq", *p.input[1:]], [f"{x}__l"], "__ldq")
                fq_cache[x] = f"{x}__l"
            return fq_cache[x]
        if x in ref_known:  # a float activation the candidate does not quantize here
            l_inputs[x] = ref_types.get(x, TensorProto.FLOAT)
            return x
        return None

    for node in g.node:
        if node.op_type in QUANT_OPS or not node.output:
            continue
        y = node.output[0]
        quantized = any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear" for i in node.input)
        if qdq and not quantized:
            continue
        ry = y  # a graph output keeps its name on the DequantizeLinear; the node writes "<name>_QuantizeLinear_Input"
        if y not in ref_types and y.endswith(QUANT_INPUT_SUFFIX):
            ry = y[:-len(QUANT_INPUT_SUFFIX)]
        if ry not in ref_types or not is_float(ry, ref_types):
            if qdq and ry not in ref_types:
                unmatched.append(node.name or y)
            continue
        fq = fake_quant_of(y)
        cand_tensor = fq[1].output[0] if fq is not None else y
        local_out: str | None = None
        if qdq:
            ins = [local_input(x) for x in node.input]
            if all(i is not None for i in ins):
                outs = [f"{o}__lout" if o else "" for o in node.output]
                add_copy(node, [i or "" for i in ins], outs, "__local")
                local_out = outs[0]
                if fq is not None:
                    q, dq = fq
                    for i in list(q.input[1:]) + list(dq.input[1:]):
                        add_init(i)
                    add_copy(q, [local_out, *q.input[1:]], [f"{y}__loq"], "__loq")
                    add_copy(dq, [f"{y}__loq", *dq.input[1:]], [f"{y}__lodq"], "__lodq")
                    local_out = f"{y}__lodq"
                l_outputs.append(local_out)
        nodes.append((node.name or y, node.op_type, ry, cand_tensor, local_out))
    local_model = None
    if l_outputs:
        graph = helper.make_graph(
            l_nodes, "ortlab_local",
            [helper.make_tensor_value_info(n, t, None) for n, t in l_inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in l_outputs],
            list(l_inits.values()))
        lm = helper.make_model(graph, opset_imports=list(cand.opset_import))
        lm.ir_version = cand.ir_version
        local_model = lm.SerializeToString()
    ref_outputs = sorted({n[2] for n in nodes} | (set(l_inputs) - ref_inputs))
    cand_outputs = sorted({n[3] for n in nodes})
    del cand_types
    return _Plan(nodes, ref_outputs, cand_outputs, local_model, list(l_inputs), unmatched, qdq)


# -- running ------------------------------------------------------------------------------------------------


SPIN = "0"  # a shared machine: threads that spin while waiting steal the other sessions' cores
SESSION_LEVEL = "ORT_ENABLE_EXTENDED"  # fusions never remove an exposed tensor; measured to equal DISABLE_ALL's SQNR


def _session(model: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, SESSION_LEVEL)
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", SPIN)
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
    plan = _plan(ref_model, cand_model)
    if not plan.nodes:
        raise DataError("No node of the candidate matches a float tensor of the reference; analyse the QDQ model "
                        "of a static int8 run (model.qdq.onnx) against its fp32 source.")
    ref_types, cand_types = _types(ref_model), _types(cand_model)
    graph_outputs = [o.name for o in ref_model.graph.output if ref_types.get(o.name) == TensorProto.FLOAT]
    ref_names = sorted(set(plan.ref_outputs) | set(graph_outputs))
    ref_sess = _session(_with_outputs(ref_model, ref_names, ref_types))
    cand_sess = _session(_with_outputs(cand_model, plan.cand_outputs, cand_types))
    local_sess = _session(plan.local_model) if plan.local_model is not None else None
    del ref_model, cand_model
    ds = dataset if not n or n >= len(dataset) else stratified_sample(dataset, n, seed=0)
    inputs = session_inputs(ref_sess)
    preprocess, specs = resolve_feed(inputs, preprocess, ds, shapes)
    check_fits(ds, preprocess, inputs, specs)
    if any(s.batch_axis is None or s.batch_fixed for s in specs):
        chunk = 1  # a fixed batch dimension (or none): one sample per run
    acc = {k: _Acc() for k in range(len(plan.nodes))}
    local_acc = {k: _Acc() for k, nd in enumerate(plan.nodes) if nd[4] is not None}
    bad: set[int] = set()
    cand_names = plan.cand_outputs
    layouts: list[_Layout] | None = None  # the outputs' channel groups
    grouped: dict[int, tuple[int, dict[str, slice]]] = {}  # node → (channel axis, groups)
    group_acc: dict[tuple[int, str], _Acc] = {}
    local_names = [nd[4] for nd in plan.nodes if nd[4] is not None]
    cand_feed_names = {i.name for i in cand_sess.get_inputs()}
    total = len(ds)
    for s in range(0, total, chunk):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step="analyze")
        feed = batch_inputs(ds, list(range(s, min(total, s + chunk))), preprocess, inputs, specs)
        ref_vals = dict(zip(ref_names, ref_sess.run(ref_names, feed)))
        ref_vals.update(feed)
        cand_vals = dict(zip(cand_names, cand_sess.run(cand_names, {k: v for k, v in feed.items()
                                                                     if k in cand_feed_names})))
        local_vals: dict[str, Any] = {}
        if local_sess is not None:
            local_vals = dict(zip(local_names, local_sess.run(local_names, {k: ref_vals[k] for k in plan.local_inputs})))
        if layouts is None:
            layouts, grouped = _grouping(graph_outputs, ref_vals, ds.labeled(), plan.nodes)
        for k, (_, _, ry, cy, ly) in enumerate(plan.nodes):
            if k in bad:
                continue
            try:
                acc[k].add(ref_vals[ry], cand_vals[cy])
                if ly is not None:
                    local_acc[k].add(ref_vals[ry], local_vals[ly])
                if k in grouped:
                    axis, groups = grouped[k]
                    theirs = local_vals[ly] if ly is not None else cand_vals[cy]
                    for g, sl in groups.items():
                        idx = np.arange(sl.start, sl.stop)
                        group_acc.setdefault((k, g), _Acc()).add(np.take(ref_vals[ry], idx, axis=axis),
                                                                 np.take(theirs, idx, axis=axis))
            except ValueError:
                bad.add(k)
        del ref_vals, cand_vals, local_vals
        reporter(ProgressEvent("analyze", min(total, s + chunk), total, f"samples {min(total, s + chunk)}/{total}"))
    out: list[NodeError] = []
    for k, (name, op, ry, _, _ly) in enumerate(plan.nodes):
        if k in bad:
            continue
        a = acc[k]
        la = local_acc.get(k)
        e = NodeError(name, op, ry, a.sqnr(), a.cosine(), a.max_abs,
                      la.sqnr() if la is not None else None, la.cosine() if la is not None else None,
                      la.max_abs if la is not None else None)
        if k in grouped:
            e.group_sqnr_db = {g: group_acc[k, g].sqnr() for g in grouped[k][1] if (k, g) in group_acc}
            whole = e.local_sqnr_db if e.local_sqnr_db is not None else e.sqnr_db
            worst = min(e.group_sqnr_db, key=lambda g: e.group_sqnr_db[g], default=None)
            if worst is not None and e.group_sqnr_db[worst] < whole:
                e.group = worst
        out.append(e)
    out.sort(key=lambda e: (e.score_db, e.sqnr_db))
    for i, e in enumerate(out, 1):
        e.rank = i
    described = {f"{n} [{', '.join(map(str, shape))}]": ", ".join(
        f"{g} (channels {sl.start}–{sl.stop - 1} of axis {axis})" for g, sl in groups.items())
        for n, shape, (axis, _, groups) in (layouts or [])}
    return NodeAnalysis(str(reference_path), str(cand_path), total, out, plan.unmatched, plan.qdq,
                        time.perf_counter() - start, input_shapes={s.name: list(s.shape) for s in specs},
                        groups=described)


_Layout = tuple[str, list[int], tuple[int, int, dict[str, slice]]]  # output, its shape, channel_groups()


def _grouping(outputs: list[str], ref_vals: dict[str, Any], labeled: bool,
              nodes: list[tuple[str, str, str, str, str | None]],
              ) -> tuple[list[_Layout], dict[int, tuple[int, dict[str, slice]]]]:
    """The outputs whose task groups their channels (from the first chunk's reference values) as
    (name, shape, (axis, channels, groups)), and the nodes whose tensors share such a layout: node → (axis, groups)."""
    arrays = [np.asarray(ref_vals[n])[:1] for n in outputs]
    _, _, _, roles = infer_roles(outputs, arrays, labeled)
    layouts: list[_Layout] = []
    for n, arr in zip(outputs, arrays):
        found = channel_groups(roles.get(n), arr.shape)
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
