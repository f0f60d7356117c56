"""The part of a model that makes its decision, which int8 rounds coarsest: a detector's class-score branch and a
classifier's logits head (:func:`decision_head`). Tune tries the default with it in float once the default ran
(:meth:`ortlab.runs.tune_search.SearchStrategy.decision_head_trial`); it costs speed, and whether it buys accuracy is
for the paired comparison with the default to show.

**A YOLO-style detector's class-score branch** (:func:`score_branch`): the network nodes whose outputs reach only
the class-score channels. A detector's detections are decided by thresholding its class scores; the box channels
only move where a box lies. In YOLOv8's head each scale has two Conv branches, ``cv2`` (box distribution) and
``cv3`` (class logits), joined by a Concat on the channel axis, reshaped, joined across scales and split again into
boxes and scores before the score Sigmoid. The walk goes back from each score Sigmoid of a known YOLO head
(:mod:`ortlab.model.patterns`), following which channels of each tensor are scores through Split, Slice, Concat and
the ops that only reshape (ONNX shape inference tells which axes a Reshape keeps), and keeps a node only when every
reader of its outputs takes them as scores only: it stops where a tensor also feeds the boxes or the rest of the
network (the neck's features feed both branches). The branch splits into its parts by scale (:class:`ScalePart`:
the nodes that share no tensor with another part, and the grid of the score map each writes): on nudenet's YOLOv8n
at 320×320 the 40×40 scale holds 1,600 of the 2,100 anchors, and in float alone it bought most of the whole branch's
F1 (+0.007 vs +0.009 on 400 unseen photos) at about half its cost (0.93× vs 0.88× the default's speed,
``bench/bench_detector_scope.py``).

**A classifier's logits head** (:func:`logits_head`): the projection (Gemm, MatMul or Conv) that writes a rank-2
output of class scores, with the reshaping and Softmax between it and the output. Static int8 quantizes its output
too: the logits themselves are rounded to one int8 step of their whole range (0.063 on EfficientNet-Lite0,
where the gap between the top two classes moved by 0.66 logit RMS, and by 0.16 with this one node in float).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx
from onnx import numpy_helper, shape_inference

from ortlab.model.graph_index import CARRIERS, SHAPE_OPS, GraphIndex
from ortlab.model.patterns import KnownPattern, PatternKind, detect_patterns, is_silu

__all__ = ["DecisionHead", "ScalePart", "decision_head", "logits_head", "score_branch"]

HEAD_OPS = frozenset({"Softmax", "LogSoftmax", "Sigmoid"})  # between a classifier's projection and its output
PROJECTIONS = frozenset({"Gemm", "MatMul", "Conv"})
MIN_CLASSES = 2

Dim = int | str | None


@dataclass(frozen=True)
class _Part:
    """Channels ``lo``..``hi`` (end excluded) of ``axis`` are scores; the rest of the tensor is not."""

    axis: int
    lo: int
    hi: int


_WHOLE = None  # a mark: the whole tensor is scores


def _shapes(model: onnx.ModelProto, inputs: Mapping[str, Sequence[int]] | None = None) -> dict[str, list[Dim]]:
    """Each tensor's dims (a number, a symbol, or None) by ONNX shape inference with data propagation, the graph
    inputs named in ``inputs`` fixed to those shapes first; {} when it fails."""
    if inputs:
        fixed = onnx.ModelProto()
        fixed.CopyFrom(model)
        for v in fixed.graph.input:
            dims = v.type.tensor_type.shape.dim
            shape = inputs.get(v.name)
            if shape is not None and len(shape) == len(dims):
                for d, size in zip(dims, shape):
                    d.dim_value = int(size)
        model = fixed
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except (shape_inference.InferenceError, RuntimeError, ValueError):  # no shapes: no branch found, no error
        return {}
    out: dict[str, list[Dim]] = {}
    for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                           for d in v.type.tensor_type.shape.dim]
    return out


def _ints(g: GraphIndex, name: str) -> list[int] | None:
    """A constant integer tensor's values (an initializer or a Constant node's), else None."""
    if name in g.initializers:
        t = g.initializers[name]
        if t.data_location == onnx.TensorProto.EXTERNAL:  # its bytes were not read
            return None
        return [int(x) for x in numpy_helper.to_array(t).ravel()]
    p = g.producer.get(name)
    if p is not None and p.op_type == "Constant":
        value = next((a.t for a in p.attribute if a.name == "value"), None)
        return [int(x) for x in numpy_helper.to_array(value).ravel()] if value is not None else None
    return None


def _attr(n: onnx.NodeProto, name: str) -> list[int] | int | None:
    a = next((a for a in n.attribute if a.name == name), None)
    if a is None:
        return None
    return list(a.ints) if a.type == onnx.AttributeProto.INTS else int(a.i)


def _axis(n: onnx.NodeProto) -> int:
    a = _attr(n, "axis")
    return a if isinstance(a, int) else 0


class _Walk:
    """The marks each reader put on a tensor (whole scores, a part, or none), read back in reverse graph order."""

    def __init__(self, model: onnx.ModelProto, inputs: Mapping[str, Sequence[int]] | None = None) -> None:
        self.g = GraphIndex(model)
        self.shapes = _shapes(model, inputs)
        self.marks: dict[str, dict[int, _Part | None]] = {}  # tensor → reader node id → its mark

    def mark(self, tensor: str, reader: onnx.NodeProto, part: _Part | None) -> None:
        if tensor and tensor not in self.g.const:
            self.marks.setdefault(tensor, {})[id(reader)] = part

    def state(self, tensor: str) -> tuple[bool, _Part | None]:
        """(known, mark): known when every reader (shape reads aside) marked ``tensor`` alike and it is not a graph
        output."""
        readers = [r for r in self.g.consumers.get(tensor, []) if r.op_type not in SHAPE_OPS]
        marks = self.marks.get(tensor, {})
        if tensor in self.g.outputs or not readers or any(id(r) not in marks for r in readers):
            return False, None
        got = {marks[id(r)] for r in readers}
        return (True, got.pop()) if len(got) == 1 else (False, None)

    def rank(self, tensor: str) -> int | None:
        dims = self.shapes.get(tensor)
        return len(dims) if dims is not None else None

    def dim(self, tensor: str, axis: int) -> int | None:
        dims = self.shapes.get(tensor)
        d = dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None
        return d if isinstance(d, int) and d > 0 else None

    def axis(self, tensor: str, axis: int) -> int | None:
        r = self.rank(tensor)
        return None if r is None or not -r <= axis < r else axis % r


def _split(w: _Walk, n: onnx.NodeProto) -> None:
    """A Split's input: the channels of the one output that is wholly scores."""
    axis = w.axis(n.input[0], _axis(n))
    if axis is None:
        return
    sizes = _ints(w.g, n.input[1]) if len(n.input) > 1 and n.input[1] else _attr(n, "split")
    if not isinstance(sizes, list) or len(sizes) != len(n.output):
        return
    whole = [k for k, o in enumerate(n.output) if w.state(o) == (True, _WHOLE)]
    if len(whole) == 1:
        k = whole[0]
        w.mark(n.input[0], n, _Part(axis, sum(sizes[:k]), sum(sizes[:k + 1])))


def _slice(w: _Walk, n: onnx.NodeProto) -> None:
    """A Slice (steps of 1 on one axis) whose output is wholly scores: those channels of its input."""
    known, part = w.state(n.output[0])
    starts = _ints(w.g, n.input[1]) if len(n.input) > 2 else None
    ends = _ints(w.g, n.input[2]) if len(n.input) > 2 else None
    axes = _ints(w.g, n.input[3]) if len(n.input) > 3 and n.input[3] else [0]
    steps = _ints(w.g, n.input[4]) if len(n.input) > 4 and n.input[4] else [1]
    if not known or part is not _WHOLE or not starts or not ends or not axes or len(starts) != 1 or steps != [1]:
        return
    axis = w.axis(n.input[0], axes[0])
    size = w.dim(n.input[0], axes[0])
    if axis is None or size is None:
        return
    lo, hi = (max(0, min(size, v if v >= 0 else v + size)) for v in (starts[0], ends[0]))
    if lo < hi:
        w.mark(n.input[0], n, _Part(axis, lo, hi))


def _concat(w: _Walk, n: onnx.NodeProto) -> None:
    """A Concat: wholly scores → every input is; a part on the joined axis → the inputs inside it are wholly scores
    (those outside it are not); a part on another axis → each input has that part."""
    known, part = w.state(n.output[0])
    if not known:
        return
    ins = [i for i in n.input if i]
    if part is _WHOLE:
        for i in ins:
            w.mark(i, n, _WHOLE)
        return
    axis = w.axis(n.output[0], _axis(n))
    if axis != part.axis:
        for i in ins:
            w.mark(i, n, part)
        return
    start = 0
    for i in ins:
        size = w.dim(i, axis)
        if size is None:
            return
        if part.lo <= start and start + size <= part.hi:
            w.mark(i, n, _WHOLE)
        start += size


def _keeps_axis(w: _Walk, n: onnx.NodeProto, axis: int) -> int | None:
    """The input axis that a reshaping ``n`` maps to its output's ``axis`` unchanged (the dims up to it equal,
    or a Transpose's permutation), else None."""
    src, dst = n.input[0], n.output[0]
    if n.op_type in ("Identity", "Cast", "Dropout"):
        return axis
    if n.op_type == "Transpose":
        perm = _attr(n, "perm")
        return perm[axis] if isinstance(perm, list) and axis < len(perm) else None
    a, b = w.shapes.get(src), w.shapes.get(dst)
    if a is None or b is None or len(a) <= axis or len(b) <= axis or any(x is None for x in a[:axis + 1]):
        return None
    return axis if a[:axis + 1] == b[:axis + 1] else None


def _carrier(w: _Walk, n: onnx.NodeProto) -> None:
    known, part = w.state(n.output[0])
    if not known:
        return
    if part is _WHOLE:
        w.mark(n.input[0], n, _WHOLE)
        return
    axis = _keeps_axis(w, n, part.axis)
    if axis is not None:
        w.mark(n.input[0], n, _Part(axis, part.lo, part.hi))


def _compute(w: _Walk, n: onnx.NodeProto, branch: list[onnx.NodeProto]) -> None:
    """A node that computes: in the branch when all its outputs are wholly scores; its activation inputs then are."""
    if not w.g.computes(n):
        return
    outs = [o for o in n.output if o]
    if not outs or any(w.state(o) != (True, _WHOLE) for o in outs):
        return
    branch.append(n)
    for i in w.g.activations(n):
        w.mark(i, n, _WHOLE)


def _to_output(g: GraphIndex, n: onnx.NodeProto) -> bool:
    """Whether ``n``'s output reaches a graph output through Concats and reshaping only (a score Sigmoid's does; a
    Sigmoid inside the box decode's arithmetic does not)."""
    todo, seen = [n], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if any(o in g.outputs for o in x.output):
            return True
        todo.extend(c for c in g.down(x) if c.op_type in CARRIERS or c.op_type == "Concat")
    return False


def _score_sigmoids(g: GraphIndex, head: set[str]) -> list[onnx.NodeProto]:
    return [n for n in g.nodes if n.name in head and n.op_type == "Sigmoid"
            and not any(is_silu(g, c) for c in g.down(n)) and _to_output(g, n)]


def _branch(model: onnx.ModelProto, patterns: Sequence[KnownPattern] | None,
            inputs: Mapping[str, Sequence[int]] | None = None) -> tuple[list[onnx.NodeProto], _Walk | None]:
    """The class-score branch's nodes (see :func:`score_branch`) and the walk that found them (None: no YOLO head);
    ``inputs``: shapes that fix the graph inputs' open dims."""
    found = detect_patterns(model) if patterns is None else patterns
    heads = [p for p in found if p.kind == PatternKind.YOLO_HEAD]
    if not heads:
        return [], None
    w = _Walk(model, inputs)
    head = {name for p in heads for name in p.nodes}
    sigmoids = _score_sigmoids(w.g, head)
    for s in sigmoids:
        w.mark(s.input[0], s, _WHOLE)
    branch: list[onnx.NodeProto] = []
    starts = {id(s) for s in sigmoids}
    for n in reversed(w.g.nodes):
        if id(n) in starts:
            continue
        if n.op_type == "Split":
            _split(w, n)
        elif n.op_type == "Slice":
            _slice(w, n)
        elif n.op_type == "Concat":
            _concat(w, n)
        elif n.op_type in CARRIERS:
            _carrier(w, n)
        else:
            _compute(w, n, branch)
    return [n for n in branch if n.name not in head], w


def score_branch(model: onnx.ModelProto, patterns: Sequence[KnownPattern] | None = None) -> tuple[str, ...]:
    """The names of the nodes, outside the YOLO head's post-processing (which the known patterns keep in float
    already), whose outputs reach only the class-score channels, in graph order; () for a model with no known YOLO
    head, or when the walk cannot follow the channels (no shapes)."""
    branch, w = _branch(model, patterns)
    return w.g.named(branch) if w is not None else ()


@dataclass(frozen=True)
class ScalePart:
    """The class-score branch at one scale of the head: its ``nodes`` (graph order) and the ``grid`` (height,
    width) of the score map it writes, one anchor per cell."""

    nodes: tuple[str, ...]
    grid: tuple[int, int]

    @property
    def anchors(self) -> int:
        return self.grid[0] * self.grid[1]


def _scales(branch: list[onnx.NodeProto], w: _Walk) -> tuple[ScalePart, ...]:
    """The branch split into its parts that share no tensor (one per scale of a YOLO head), most anchors first;
    () when it is one part, or when a part's score map has no known [N, C, H, W] shape."""
    ids = {id(n): k for k, n in enumerate(branch)}
    root = list(range(len(branch)))

    def find(k: int) -> int:
        while root[k] != k:
            root[k] = root[root[k]]
            k = root[k]
        return k

    for k, n in enumerate(branch):
        for up in w.g.up(n):
            if id(up) in ids:
                root[find(k)] = find(ids[id(up)])
    groups: dict[int, list[onnx.NodeProto]] = {}
    for k, n in enumerate(branch):
        groups.setdefault(find(k), []).append(n)
    if len(groups) < 2:
        return ()
    parts = []
    for nodes in groups.values():
        inside = {id(n) for n in nodes}
        maps = {o for n in nodes for o in n.output if o and any(id(r) not in inside for r in w.g.consumers.get(o, []))}
        dims = {tuple(w.shapes.get(o) or ()) for o in maps}
        if len(dims) != 1:
            return ()
        (shape,) = dims
        if len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape[2:]):
            return ()
        parts.append(ScalePart(w.g.named(nodes), (int(shape[2]), int(shape[3]))))  # type: ignore[arg-type]
    return tuple(sorted(parts, key=lambda p: -p.anchors))


def logits_head(model: onnx.ModelProto) -> tuple[str, ...]:
    """The names of a classifier's logits head (see the module), in graph order: for the model's one graph output,
    when it has rank 2 with at least :data:`MIN_CLASSES` classes (or no known shape) and is written through
    reshaping ops and a Softmax from a Gemm/MatMul/Conv whose output nothing else reads; () otherwise (several
    outputs, a detector, anything else on the way)."""
    g = GraphIndex(model)
    outputs = list(model.graph.output)
    if len(outputs) != 1:
        return ()
    dims = [d.dim_value for d in outputs[0].type.tensor_type.shape.dim]
    if dims and (len(dims) != 2 or 0 < dims[1] < MIN_CLASSES):
        return ()
    chain: list[onnx.NodeProto] = []
    n = g.producer.get(outputs[0].name)
    while n is not None and (n.op_type in CARRIERS or n.op_type in HEAD_OPS or n.op_type in PROJECTIONS):
        ins = g.activations(n)
        readers = [r for r in g.consumers.get(n.output[0], []) if r.op_type not in SHAPE_OPS]
        if len(ins) != 1 or (chain and readers != [chain[-1]]):
            return ()
        chain.append(n)
        if n.op_type in PROJECTIONS:
            return g.named(chain)
        n = g.producer.get(ins[0])
    return ()


@dataclass(frozen=True)
class DecisionHead:
    """A model's decision head: ``what`` it is ("class-score branch", "logits head"), its ``nodes``, and for a
    class-score branch its parts by scale, most anchors first (() when it has one)."""

    what: str
    nodes: tuple[str, ...]
    scales: tuple[ScalePart, ...] = ()

    def why(self) -> str:
        """Why tune keeps it in float, for a trial's note."""
        if self.what == SCORE_BRANCH:
            return (f"keep the class-score branch in float ({len(self.nodes)} nodes whose outputs reach only the "
                    "class scores, which decide the detections)")
        return (f"keep the logits head in float ({', '.join(self.nodes)}: int8 rounds the logits that decide the "
                "class to one step of their range)")

    def largest_scale(self) -> ScalePart | None:
        """The branch's part at the scale with the most anchors, when it has several."""
        return self.scales[0] if self.scales else None

    def why_scale(self, part: ScalePart) -> str:
        """Why tune keeps ``part`` alone in float, for a trial's note."""
        total = sum(p.anchors for p in self.scales)
        return (f"keep the class-score branch at its {part.grid[0]}×{part.grid[1]} scale in float ({len(part.nodes)} "
                f"of its {len(self.nodes)} nodes, for {part.anchors:,} of the {total:,} anchors): the scale with the most "
                "scores to decide, at part of the whole branch's cost")


SCORE_BRANCH = "class-score branch"
LOGITS_HEAD = "logits head"


def decision_head(model: onnx.ModelProto, patterns: Sequence[KnownPattern] | None = None,
                  inputs: Mapping[str, Sequence[int]] | None = None) -> DecisionHead | None:
    """The class-score branch of a YOLO-style detector, else the logits head of a classifier; None when neither is
    found. ``patterns``: the model's known patterns when already found (:func:`ortlab.model.patterns.detect_patterns`);
    ``inputs``: the shapes the model runs at, for a graph with open dims (a branch's scales are told apart by the
    size of their score maps)."""
    found = detect_patterns(model) if patterns is None else patterns
    if any(p.kind == PatternKind.YOLO_HEAD for p in found):
        branch, w = _branch(model, found, inputs)
        return DecisionHead(SCORE_BRANCH, w.g.named(branch), _scales(branch, w)) if branch and w is not None else None
    head = logits_head(model)
    return DecisionHead(LOGITS_HEAD, head) if head else None
