"""Known model patterns whose int8 quantization is known to hurt, found from the graph's structure: the float scope
a static int8 run starts from (``QuantConfig.known_patterns``), each stated in a note a person can read and edit.

* **YOLO-style detection head**: the post-processing between the head's last Convs and the output — DFL (a Softmax
  over the box-distribution bins and its 1×1 Conv), the box decode's Add/Sub/Mul/Div with the anchor and stride
  tables, the score Sigmoid and the final Concat that joins box pixels with scores. Ultralytics' int8 export keeps
  this part in float (NNCF's ignored scope).
* **Transformer attention**: a Softmax between two activation × activation MatMuls (Q·Kᵀ, with its scale and mask,
  and A·V) and the model's LayerNorms (``LayerNormalization`` or its exported decomposition).
* **LayerNorm exported as elementwise ops**, in a model without attention (PyTorch's ReduceMean/Pow/Sqrt/Div, JAX's
  E[x²] − E[x]² with Reciprocal): int8 would round its mean, variance and 1/std; a fused ``LayerNormalization``
  computes them inside the op and is left to the quantizer.
* **tanh-GELU exported as elementwise ops** (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))): x³ outranges x in int8.
* **CTC head**: a text recognizer's last Softmax/LogSoftmax over the classes of each time step (a rank-3 output)
  and the class projection that feeds it: uint8 probabilities (steps of 1/255) flip near-tied characters.
* **A Log's input**: the ops that compute what a ``Log`` reads (an audio front end's log-mel: the spectrum's Conv,
  the power, the mel filterbank's MatMul, the clamp to ε): int8 rounds the quiet bins to zero or one step, and the
  log turns them into −inf or a floor tens of dB too high.

Found by op types and connectivity; node names only add a hint (a head Sigmoid named ``dfl``). Only the main graph
is read, and only named nodes are listed (ONNX Runtime excludes nodes by name).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

import onnx

from ortlab.model.graph_index import CARRIERS, GraphIndex

# what a detection head's post-processing is made of (besides the DFL Conv)
HEAD_OPS = CARRIERS | {"Concat", "Split", "Slice", "Gather", "Expand", "Tile", "Add", "Sub", "Mul", "Div", "Pow",
                       "Exp", "Sigmoid", "Softmax", "ReduceSum"}
DFL_BINS = range(8, 33)  # Ultralytics' reg_max is 16
PROJECTIONS = frozenset({"MatMul", "Gemm", "Conv"})
MAX_NORM_NODES = 24  # a LayerNorm's mean or 1/std, computed with NORM_OPS
NORM_OPS = CARRIERS | {"Expand", "Mul", "Div", "Add", "Sub", "Sqrt", "Reciprocal", "Pow", "Max", "ReduceMean",
                       "ReduceSum"}
GELU_OPS = CARRIERS | {"Mul", "Add", "Pow", "Div"}  # a tanh-GELU's polynomial √(2/π)·(x + 0.044715·x³)
REDUCTIONS = frozenset({"ReduceMean", "ReduceSum"})
MAX_SCORE_STEPS = 6
# what a Log's input is computed with back to the spectrum: a power (x², |x|, a sum of squares), a filterbank
# projection, a clamp or offset to ε, and the ops that only move data
LOG_INPUT_OPS = CARRIERS | {"Add", "Sub", "Mul", "Div", "Max", "Min", "Clip", "Pow", "Sqrt", "Abs", "ReduceSumSquare",
                            "ReduceSum", "ReduceL2", "MatMul", "Gemm", "Conv", "Slice", "Concat", "Pad"}
SCORE_OPS = CARRIERS | {"Add", "Sub", "Mul", "Div", "Where"}  # between Q·Kᵀ and the Softmax: scale, mask
OFF_FLAG = "--no-known-patterns"
STEM_CONVS = 3  # YOLOv8's stem: model.0, model.1 and the first C2f's cv1, before its Split
STEM_ACTS = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Mul", "Clip", "HardSwish", "HardSigmoid", "PRelu"})
DETECTOR_BIAS_NOTE = ("Bias correction skipped: a YOLO-style detector (known patterns). With the stem in float it "
                      "lowered detection F1 vs fp32 on a YOLOv8n (0.93 → 0.89 on 150 photos); --no-known-patterns "
                      "brings it back.")
DETECTOR_TUNE_NOTE = ("A YOLO-style detector (known patterns): the search starts from int8 with its stem and head "
                      "post-processing in float and no bias correction, and keeps more in float from there.")
ENCODER_NOTE = ("A transformer encoder (attention found, no Conv): dynamic int8, the known answer for encoders, is "
                "tried first.")


class PatternKind(StrEnum):
    YOLO_HEAD = "yolo_head"
    DETECTOR_STEM = "detector_stem"
    ATTENTION = "attention"
    CTC_HEAD = "ctc_head"
    LAYER_NORM = "layer_norm"
    TANH_GELU = "tanh_gelu"
    LOG_INPUT = "log_input"


@dataclass(frozen=True)
class KnownPattern:
    """A pattern found in a model: its ``kind``, the names of the nodes kept in float (its scope, graph order),
    the ``parts`` found (e.g. "DFL", "box decode") and ``count`` (attention blocks, LayerNorms, heads)."""

    kind: PatternKind
    nodes: tuple[str, ...]
    parts: tuple[str, ...]
    count: int = 1

    def summary(self) -> str:
        """One line: what was found and why it stays float."""
        n = len(self.nodes)
        if self.kind == PatternKind.YOLO_HEAD:
            return (f"YOLO-style detection head: {n} nodes of post-processing ({', '.join(self.parts)}) kept in "
                    "float, as Ultralytics' int8 export does")
        if self.kind == PatternKind.DETECTOR_STEM:
            return (f"Detector stem: {n} nodes ({'; '.join(self.parts)}) kept in float: a YOLO-style detector's "
                    "first layers see the image's full range and carried most of its int8 error")
        if self.kind == PatternKind.ATTENTION:
            return (f"Transformer attention: {n} nodes ({'; '.join(self.parts)}) kept in float: their ranges move "
                    "with each input (attention scores, softmax probabilities, normalized activations), which one "
                    "calibrated int8 scale fits badly")
        if self.kind == PatternKind.LAYER_NORM:
            return (f"LayerNorm: {n} nodes ({'; '.join(self.parts)}) kept in float: their mean, variance and "
                    "1/std would each be rounded to an int8 step, and the normalized activations with them")
        if self.kind == PatternKind.TANH_GELU:
            return (f"GELU: {n} nodes ({'; '.join(self.parts)}) kept in float: x³ spans a range one int8 scale "
                    "cannot hold beside x, so the tanh's input loses its small values")
        if self.kind == PatternKind.LOG_INPUT:
            return (f"Log input: {n} nodes ({'; '.join(self.parts)}) kept in float: int8 would round the small values "
                    "a Log reads to zero or one step, which the log turns into -inf or a raised floor")
        return (f"CTC head: {n} nodes ({'; '.join(self.parts)}) kept in float: uint8 probabilities (steps of "
                "1/255) flip near-tied characters")

    def note(self) -> str:
        """The summary, how to turn it off, and every node of the scope (to copy into --exclude-nodes)."""
        return (f"{self.summary()} (known patterns; {OFF_FLAG} quantizes them, --exclude-nodes adds to them): "
                + ", ".join(self.nodes) + ".")


def _attr(n: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in n.attribute if a.name == name), default)


# -- YOLO-style detection head ---------------------------------------------------------------------------------


def is_silu(g: GraphIndex, n: onnx.NodeProto) -> bool:
    """A Mul(x, Sigmoid(x)): an activation (SiLU/Swish) of the network, not post-processing."""
    if n.op_type != "Mul" or len(n.input) != 2:
        return False
    for a, b in (n.input, reversed(n.input)):
        p = g.producer.get(a)
        if p is not None and p.op_type == "Sigmoid" and p.input[0] == b:
            return True
    return False


def _is_dfl_conv(g: GraphIndex, n: onnx.NodeProto) -> bool:
    """DFL's 1×1 Conv: one output channel over the bins of a Softmax (its weight ``[1, bins, 1, 1]``)."""
    if n.op_type != "Conv" or len(n.input) < 2 or n.input[1] not in g.initializers:
        return False
    dims = list(g.initializers[n.input[1]].dims)
    fed = g.producer.get(n.input[0])
    while fed is not None and fed.op_type in CARRIERS:
        fed = g.producer.get(fed.input[0])
    return (len(dims) == 4 and dims[0] == 1 and dims[1] in DFL_BINS and dims[2:] == [1, 1]
            and fed is not None and fed.op_type == "Softmax")


def _head_scope(g: GraphIndex, last: onnx.NodeProto) -> tuple[list[onnx.NodeProto], bool]:
    """The post-processing nodes upstream of ``last`` (up to the head's Convs) and whether a network Conv feeds
    them."""
    scope: dict[int, onnx.NodeProto] = {}
    todo, fed_by_conv = [last], False
    while todo:
        n = todo.pop()
        if id(n) in scope or not g.computes(n):
            continue
        if not (n.op_type in HEAD_OPS or _is_dfl_conv(g, n)) or is_silu(g, n):
            fed_by_conv = fed_by_conv or n.op_type == "Conv"
            continue
        scope[id(n)] = n
        todo.extend(g.up(n))
    return list(scope.values()), fed_by_conv


def _within(g: GraphIndex, start: onnx.NodeProto, scope: dict[int, onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``start`` and its ancestors inside ``scope``."""
    seen: dict[int, onnx.NodeProto] = {}
    todo = [start]
    while todo:
        n = todo.pop()
        if id(n) in scope and id(n) not in seen:
            seen[id(n)] = n
            todo.extend(g.up(n))
    return list(seen.values())


def _box_decode(nodes: list[onnx.NodeProto]) -> bool:
    ops = {n.op_type for n in nodes}
    return bool(ops & {"Add", "Sub"}) and bool(ops & {"Mul", "Div"})


def _score_sigmoid(g: GraphIndex, nodes: list[onnx.NodeProto]) -> bool:
    return any(n.op_type == "Sigmoid" and not any(is_silu(g, c) for c in g.down(n)) for n in nodes)


def _yolo_heads(g: GraphIndex) -> Iterator[KnownPattern]:
    """One head per graph output whose post-processing, fed by Convs, joins boxes and scores in a Concat."""
    seen: set[int] = set()
    for name in g.outputs:
        last = g.producer.get(name)
        if last is None or id(last) in seen:
            continue
        nodes, fed_by_conv = _head_scope(g, last)
        scope = {id(n): n for n in nodes}
        if not fed_by_conv or not any(n.op_type == "Concat" and _joins_boxes_and_scores(g, n, scope) for n in nodes):
            continue
        seen.update(scope)
        # DFL: a Softmax over the bins into a 1×1 Conv; a node named "dfl" is a hint for other forms
        dfl = any(_is_dfl_conv(g, n) or "dfl" in n.name.lower() for n in nodes)
        parts = ("DFL",) * dfl + ("box decode", "score Sigmoid", "final Concat")
        yield KnownPattern(PatternKind.YOLO_HEAD, g.named(nodes), parts)


def _stem(g: GraphIndex, image: str) -> list[onnx.NodeProto]:
    """The first :data:`STEM_CONVS` Conv units that ``image`` flows through, each Conv with the activation nodes
    that follow it (a SiLU's Sigmoid and Mul), while the flow is one chain: it stops at a node that is neither, or a
    unit whose output more than one node reads."""
    out: list[onnx.NodeProto] = []
    tensor, convs = image, 0
    while convs < STEM_CONVS:
        readers = g.consumers.get(tensor, [])
        if len(readers) != 1 or readers[0].op_type != "Conv":
            break
        conv = readers[0]
        unit, end = [conv], conv.output[0]
        while True:
            nxt = g.consumers.get(end, [])
            acts = [c for c in nxt if c.op_type in STEM_ACTS]
            if not nxt or len(acts) != len(nxt):
                break
            if len(nxt) == 2 and {c.op_type for c in nxt} == {"Sigmoid", "Mul"}:  # SiLU: x * Sigmoid(x)
                mul = next(c for c in nxt if c.op_type == "Mul")
                unit += [next(c for c in nxt if c.op_type == "Sigmoid"), mul]
                end = mul.output[0]
            elif len(nxt) == 1:
                unit.append(nxt[0])
                end = nxt[0].output[0]
            else:
                break
        out += unit
        tensor, convs = end, convs + 1
    return out


def _detector_stem(g: GraphIndex, model: onnx.ModelProto) -> Iterator[KnownPattern]:
    """The stem (:func:`_stem`) of the model's one rank-4 input, as a pattern."""
    images = [i.name for i in model.graph.input if i.name not in g.initializers and _rank(i) == 4]
    if len(images) != 1:
        return
    nodes = _stem(g, images[0])
    convs = sum(n.op_type == "Conv" for n in nodes)
    if convs:
        yield KnownPattern(PatternKind.DETECTOR_STEM, g.named(nodes), (f"the first {convs} Conv units",), convs)


def _joins_boxes_and_scores(g: GraphIndex, join: onnx.NodeProto, scope: dict[int, onnx.NodeProto]) -> bool:
    """Whether one input of ``join`` comes from a score Sigmoid and another from box-decode arithmetic."""
    branches = [_within(g, p, scope) for p in g.up(join)]
    for i, a in enumerate(branches):
        for j, b in enumerate(branches):
            if i != j and _score_sigmoid(g, a) and _box_decode(b):
                return True
    return False


# -- transformer attention ---------------------------------------------------------------------------------------


def _act_matmul(g: GraphIndex, n: onnx.NodeProto) -> bool:
    return n.op_type == "MatMul" and len(g.activations(n)) == 2


def _attention_block(g: GraphIndex, softmax: onnx.NodeProto) -> list[onnx.NodeProto]:
    """Q·Kᵀ → (scale, mask) → ``softmax`` → A·V, when both MatMuls multiply two activations; else []."""
    after, n = [softmax], softmax
    while not _act_matmul(g, n):  # down to A·V, through carriers only
        nxt = g.down(n)
        if len(nxt) != 1 or not (nxt[0].op_type in CARRIERS or _act_matmul(g, nxt[0])):
            return []
        n = nxt[0]
        after.append(n)
    paths: list[list[onnx.NodeProto]] = [[softmax]]
    for _ in range(MAX_SCORE_STEPS):  # up to Q·Kᵀ, through the scale, the mask and carriers
        longer = []
        for path in paths:
            for u in g.up(path[-1]):
                if _act_matmul(g, u):
                    return [u, *reversed(path[1:]), *after]
                if u.op_type in SCORE_OPS:
                    longer.append([*path, u])
        paths = longer
    return []


def _cone(g: GraphIndex, tensor: str, stops: set[str], ops: frozenset[str] = NORM_OPS) -> list[onnx.NodeProto]:
    """The nodes that compute ``tensor`` from the tensors in ``stops`` (and constants) with ``ops`` only; [] when
    another op or a graph input is met on the way, or the cone grows past :data:`MAX_NORM_NODES`."""
    seen: set[str] = set()
    nodes: list[onnx.NodeProto] = []
    todo = [tensor]
    while todo:
        t = todo.pop()
        if t in stops or t in seen:
            continue
        seen.add(t)
        n = g.producer.get(t)
        if n is None or n.op_type not in ops or len(nodes) >= MAX_NORM_NODES:
            return []
        if n not in nodes:
            nodes.append(n)
        todo.extend(g.activations(n))
    return nodes


def _layer_norm(g: GraphIndex, sub: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The exported decomposition of a LayerNorm around ``sub`` = x − mean(x), in any of the exporters' forms:
    the mean (a ReduceMean, or a ReduceSum times 1/n, broadcast back), the scaling of ``sub`` by a Div or Mul whose
    other input is computed from reductions over x (or over ``sub``) through a Sqrt or Reciprocal (PyTorch's
    ReduceMean(Pow) + ε → Sqrt → Div; JAX's E[x²] − E[x]², clamped, + ε → Sqrt → Reciprocal → × γ), and the
    affine Mul/Add with constants after it; [] when it is not one."""
    acts = g.activations(sub)
    if sub.op_type != "Sub" or len(acts) != 2 or acts != list(sub.input):
        return []
    x, m = sub.input
    mean = _cone(g, m, {x})
    if not any(n.op_type in REDUCTIONS for n in mean):
        return []
    for scale in (c for c in g.down(sub) if c.op_type in ("Mul", "Div")):
        other = [i for i in g.activations(scale) if i != sub.output[0]]
        if len(other) != 1 or (scale.op_type == "Div" and scale.input[0] != sub.output[0]):
            continue
        std = _cone(g, other[0], {x, sub.output[0]})
        ops = {n.op_type for n in std}
        if not ops & REDUCTIONS or not ops & {"Sqrt", "Reciprocal"}:
            continue
        nodes, n = [*mean, sub, *std, scale], scale
        for op in ("Mul", "Add"):  # the affine γ·x + β
            nxt = g.down(n)
            if len(nxt) != 1 or nxt[0].op_type != op or len(g.activations(nxt[0])) != 1:
                continue
            n = nxt[0]
            nodes.append(n)
        return nodes
    return []


def _layer_norms(g: GraphIndex) -> list[list[onnx.NodeProto]]:
    """Each exported LayerNorm decomposition of the graph (:func:`_layer_norm`), its nodes."""
    return [ln for n in g.nodes if n.op_type == "Sub" for ln in [_layer_norm(g, n)] if ln]


def _attention(g: GraphIndex) -> Iterator[KnownPattern]:
    blocks = [b for n in g.nodes if n.op_type == "Softmax" for b in [_attention_block(g, n)] if b]
    if not blocks:
        return
    norms = [[n] for n in g.nodes if n.op_type == "LayerNormalization"] + _layer_norms(g)
    parts = [f"{len(blocks)} attention block{'s' * (len(blocks) > 1)}: Softmax between activation × activation "
             "MatMuls"]
    if norms:
        parts.append(f"{len(norms)} LayerNorm{'s' * (len(norms) > 1)}")
    nodes = [n for b in blocks for n in b] + [n for ln in norms for n in ln]
    yield KnownPattern(PatternKind.ATTENTION, g.named(nodes), tuple(parts), count=len(blocks))


def _standalone_layer_norms(g: GraphIndex, attention: bool) -> Iterator[KnownPattern]:
    """The exported LayerNorm decompositions of a model without attention (with it, they belong to that pattern)."""
    if attention:
        return
    norms = _layer_norms(g)
    if norms:
        word = f"{len(norms)} LayerNorm{'s' * (len(norms) > 1)} exported as elementwise ops"
        yield KnownPattern(PatternKind.LAYER_NORM, g.named(n for ln in norms for n in ln), (word,), count=len(norms))


def _tanh_gelu(g: GraphIndex, tanh: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The exported tanh-approximated GELU around ``tanh``: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) — the
    polynomial in x before it (a cube: Pow, or two activation × activation Muls), the Add/Mul after it up to the
    product with x (or with 0.5·x, which is included); [] when it is not one."""
    after: list[onnx.NodeProto] = []
    n, other = tanh, ""
    while len(after) < 3 and not other:
        nxt = g.down(n)
        if len(nxt) != 1 or nxt[0].op_type not in ("Add", "Mul"):
            return []
        after.append(nxt[0])
        acts = [i for i in g.activations(nxt[0]) if i not in n.output]
        n, other = nxt[0], acts[0] if acts else ""
    if not other or after[-1].op_type != "Mul":
        return []
    half = g.producer.get(other)
    candidates = [(other, after)]  # x itself, or 0.5·x computed beside the tanh
    if half is not None and half.op_type == "Mul" and len(g.activations(half)) == 1:
        candidates.append((g.activations(half)[0], [*after, half]))
    for x, tail in candidates:  # x is what the polynomial reads
        poly = _cone(g, tanh.input[0], {x}, GELU_OPS)
        cubes = sum(m.op_type == "Mul" and len(g.activations(m)) == 2 for m in poly)
        if any(x in m.input for m in poly) and (cubes >= 2 or any(m.op_type == "Pow" for m in poly)):
            return [*poly, tanh, *tail]
    return []


def _tanh_gelus(g: GraphIndex) -> Iterator[KnownPattern]:
    gelus = [f for n in g.nodes if n.op_type == "Tanh" for f in [_tanh_gelu(g, n)] if f]
    if gelus:
        word = f"{len(gelus)} tanh-approximated GELU{'s' * (len(gelus) > 1)} exported as elementwise ops"
        yield KnownPattern(PatternKind.TANH_GELU, g.named(n for f in gelus for n in f), (word,), count=len(gelus))


# -- CTC head --------------------------------------------------------------------------------------------------


def _rank(value: onnx.ValueInfoProto) -> int:
    t = value.type.tensor_type
    return len(t.shape.dim) if t.HasField("shape") else -1


def _ctc_heads(g: GraphIndex) -> Iterator[KnownPattern]:
    for name, value in g.outputs.items():
        n = g.producer.get(name)
        after = []
        while n is not None and n.op_type in CARRIERS:
            after.append(n)
            n = g.producer.get(n.input[0])
        rank = _rank(value)
        if n is None or n.op_type not in ("Softmax", "LogSoftmax") or rank != 3:
            continue
        if _attr(n, "axis", -1 if g.opset >= 13 else 1) not in (-1, 2):  # over each step's classes (opset < 13: 1)
            continue
        softmax, before, p = n, [], g.producer.get(n.input[0])
        while p is not None and (p.op_type in CARRIERS or (p.op_type == "Add" and len(g.activations(p)) == 1)):
            before.append(p)
            p = g.producer.get(g.activations(p)[0]) if g.activations(p) else None
        parts = [f"{softmax.op_type} over the classes of each time step"]
        if p is not None and p.op_type in PROJECTIONS and len(g.activations(p)) == 1:
            before.append(p)
            parts.append(f"the class projection ({p.op_type}) feeding it")
        yield KnownPattern(PatternKind.CTC_HEAD, g.named([*before, softmax, *after]), tuple(parts))


# -- a Log's input ---------------------------------------------------------------------------------------------


def _log_input(g: GraphIndex, log: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes that compute ``log``'s input with :data:`LOG_INPUT_OPS` (a projection only with a constant weight),
    back to the first other op, a graph input or a Conv (an STFT as a Conv: its quiet bins would round to zero
    too), at most :data:`MAX_NORM_NODES`; [] for none."""
    nodes: list[onnx.NodeProto] = []
    seen: set[str] = set()
    todo = [log.input[0]]
    while todo and len(nodes) < MAX_NORM_NODES:
        t = todo.pop()
        n = g.producer.get(t)
        if t in seen or n is None or n.op_type not in LOG_INPUT_OPS:
            continue
        seen.add(t)
        acts = g.activations(n)
        if n.op_type in PROJECTIONS and len(acts) != 1:
            continue
        if n not in nodes:
            nodes.append(n)
        if n.op_type != "Conv":  # a Conv on the signal is the spectrum (an STFT as a Conv): the walk ends with it
            todo.extend(acts)
    return nodes


def _log_inputs(g: GraphIndex) -> Iterator[KnownPattern]:
    found = [(n, f) for n in g.nodes if n.op_type == "Log" for f in [_log_input(g, n)] if f]
    if found:
        chains = sorted({" ← ".join(m.op_type for m in f[:4]) + (" ← …" if len(f) > 4 else "") for _, f in found})
        parts = (f"{len(found)} Log{'s' * (len(found) > 1)}: " + ", ".join(chains),)
        yield KnownPattern(PatternKind.LOG_INPUT, g.named(m for _, f in found for m in f), parts, count=len(found))


# -- public API ------------------------------------------------------------------------------------------------


def detect_patterns(model: onnx.ModelProto) -> list[KnownPattern]:
    """The known patterns of ``model``'s main graph (a YOLO-style detector's stem and heads, attention, exported
    LayerNorms outside attention, exported tanh-GELUs, CTC heads, a Log's input), each with its scope; [] when there is none."""
    g = GraphIndex(model)
    heads = list(_yolo_heads(g))
    stem = list(_detector_stem(g, model)) if heads else []
    attention = list(_attention(g))
    found = [*stem, *heads, *attention, *_standalone_layer_norms(g, bool(attention)), *_tanh_gelus(g),
             *_ctc_heads(g), *_log_inputs(g)]
    return [p for p in found if p.nodes]


def is_detector(patterns: Iterable[KnownPattern]) -> bool:
    """Whether a YOLO-style head is among ``patterns`` (bias correction is then skipped, :data:`DETECTOR_BIAS_NOTE`)."""
    return any(p.kind == PatternKind.YOLO_HEAD for p in patterns)


def float_scope(patterns: Iterable[KnownPattern], skip: Iterable[str] = ()) -> tuple[str, ...]:
    """The node names the ``patterns`` keep in float, once each, without those in ``skip`` (already excluded)."""
    skipped = set(skip)
    return tuple(dict.fromkeys(n for p in patterns for n in p.nodes if n not in skipped))


def is_encoder(model: onnx.ModelProto, patterns: Iterable[KnownPattern] | None = None) -> bool:
    """A transformer encoder: attention found and no Conv (dynamic int8 is its known answer)."""
    found = detect_patterns(model) if patterns is None else list(patterns)
    return any(p.kind == PatternKind.ATTENTION for p in found) and not GraphIndex(model).has_conv


def is_detector_file(path) -> bool:
    """:func:`is_detector` of the model at ``path`` (its graph only; external weights are not read)."""
    return is_detector(detect_patterns(onnx.load(str(path), load_external_data=False)))


def is_encoder_file(path) -> bool:
    """:func:`is_encoder` of the model at ``path`` (its graph only; external weights are not read)."""
    return is_encoder(onnx.load(str(path), load_external_data=False))
