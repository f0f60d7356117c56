"""What changed between two versions of a model: op deltas, matched nodes, fusions and one count of the changes
(``GraphDiff.counts``). The graph to draw from it is :mod:`ortlab.model.diff_view`."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ortlab.core import dtypes
from ortlab.model.inspect import _tensor_nbytes, load_model, op_key
from ortlab.core.serial import from_plain, to_plain

_QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class GraphDiff:
    """The difference between two models as plain data."""

    op_deltas: list[dict]
    removed: list[dict]
    added: list[dict]
    changed: list[dict]
    unchanged_count: int
    initializer_bytes_before: dict[str, int]
    initializer_bytes_after: dict[str, int]
    fusions: list[str]
    notes: list[str] = field(default_factory=list)
    # The one count of the changes every view shows (see :func:`change_counts`): removed, added, changed,
    # unchanged, and within them fused (removed nodes folded into another one), fused_into (the nodes of the after
    # graph drawn "fused": they replaced removed ones, or a fused op took a node's place under its name),
    # quantized (the after graph's quantization nodes, Q/DQ, QLinear*, *Integer, added or in place of the float
    # node of the same name) and retyped (matched nodes with a new op: the same name and role, e.g. Conv → QLinearConv).
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.counts:  # a diff stored before counts existed: the four totals from its lists
            self.counts = {"removed": len(self.removed), "added": len(self.added), "changed": len(self.changed),
                           "unchanged": self.unchanged_count}

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this diff."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict) -> GraphDiff:
        return from_plain(cls, data)


# -- graph helpers ------------------------------------------------------------------------------------

def _dom(node: onnx.NodeProto) -> str:
    return "" if node.domain == "ai.onnx" else node.domain


def _node_dict(node: onnx.NodeProto) -> dict:
    return {"name": node.name, "op_type": node.op_type, "domain": _dom(node),
            "inputs": list(node.input), "outputs": list(node.output)}


def _short(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "com.microsoft") else op_key(domain, op_type)


class _Graph:
    """Index of one graph: producer of each tensor, consumers, initializer names."""

    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.initializers = {t.name for t in graph.initializer}
        self.graph_inputs = {v.name for v in graph.input}
        self.graph_outputs = [v.name for v in graph.output]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(self.nodes):
            for t in n.output:
                if t:
                    self.producer[t] = i
            for t in n.input:
                if t:
                    self.consumers[t].append(i)

    def key(self, i: int) -> tuple[str, str]:
        return _dom(self.nodes[i]), self.nodes[i].op_type

    def neighbour_signature(self, i: int) -> tuple:
        n = self.nodes[i]
        prod = tuple(sorted(self.nodes[self.producer[t]].op_type for t in n.input if t in self.producer))
        cons = tuple(sorted(self.nodes[c].op_type for t in n.output for c in self.consumers.get(t, ())))
        return prod, cons


# the suffixes ONNX Runtime's quantizer and its QDQ fusions append to the tensor a quantized tensor stands for
_QUANT_SUFFIXES = ("_QuantizeLinear_Output", "_DequantizeLinear_Output", "_quantized", "_dequantized", "_q_to_dq",
                   "_post_dq", "_output_quantized")


def quantized_tensor_base(t: str) -> str:
    """``t`` without the suffixes ONNX Runtime's quantizer appends (``X_QuantizeLinear_Output`` → ``X``)."""
    changed = True
    while changed:
        changed = False
        for suffix in _QUANT_SUFFIXES:
            if t.endswith(suffix) and len(t) > len(suffix):
                t, changed = t[: -len(suffix)], True
    return t


def _bases(tensors) -> tuple[str, ...]:
    return tuple(quantized_tensor_base(t) for t in tensors)


def _load(path) -> onnx.ModelProto:
    # big weights' values are never compared (only dims, and the values of tensors of <= 4,096 elements)
    return load_model(Path(path), check=False, load_external=False, weights=False)


def _init_bytes(graph: onnx.GraphProto) -> dict[str, int]:
    out: Counter[str] = Counter()
    for t in graph.initializer:
        out[dtypes.from_onnx(t.data_type)] += _tensor_nbytes(t) or 0
    return dict(out)


# -- matching -----------------------------------------------------------------------------------------

def role(op_type: str) -> str:
    """The float op a node stands for: ONNX Runtime keeps a node's name when it quantizes or fuses it and only
    changes its op (``Conv`` → ``QLinearConv``, ``ConvInteger``, ``com.microsoft::FusedConv``, ``nchwc`` Conv;
    ``MatMul`` → ``QLinearMatMul``, ``MatMulInteger``, ``MatMulIntegerToFloat``, ``DynamicQuantizeMatMul``,
    ``FusedMatMul``; ``Gemm`` → ``QGemm``; ``Add`` → ``QLinearAdd``; ``Sigmoid`` → ``QLinearSigmoid``, ...)."""
    op = op_type
    for prefix in ("QLinear", "DynamicQuantize", "Fused", "QOrdered"):
        if op.startswith(prefix) and len(op) > len(prefix):
            op = op[len(prefix):]
            break
    else:
        if len(op) > 1 and op[0] == "Q" and op[1].isupper():  # QGemm, QAttention (not QuantizeLinear)
            op = op[1:]
    for suffix in ("IntegerToFloat", "Integer", "NBits"):
        if op.endswith(suffix) and len(op) > len(suffix):
            op = op[: -len(suffix)]
            break
    return op


def _match(b: _Graph, a: _Graph) -> dict[int, int]:
    """before index → after index, by unique name first, then by structure."""
    pairs: dict[int, int] = {}

    def unique(g: _Graph, keyf, pool) -> dict:
        seen: dict = {}
        dup = set()
        for i in pool:
            k = keyf(g, i)
            if k is None:
                continue
            if k in seen:
                dup.add(k)
            seen[k] = i
        return {k: v for k, v in seen.items() if k not in dup}

    keyfs = [
        lambda g, i: (g.nodes[i].name, g.key(i)) if g.nodes[i].name else None,
        # the same name and role: a node quantized or fused in place (Conv → QLinearConv keeps the Conv's name)
        lambda g, i: (g.nodes[i].name, role(g.nodes[i].op_type)) if g.nodes[i].name else None,
        # unnamed nodes: the same op on the same tensors once the quantizer's suffixes are stripped
        # (Reshape(c) → r is Reshape(c_QuantizeLinear_Output) → r_QuantizeLinear_Output), or the same role writing
        # the same tensor (Conv → c is QLinearConv → c_QuantizeLinear_Output)
        lambda g, i: (g.key(i), _bases(g.nodes[i].input), _bases(g.nodes[i].output)),
        lambda g, i: (role(g.nodes[i].op_type), _bases(g.nodes[i].output)) if g.nodes[i].output else None,
        lambda g, i: (g.key(i), tuple(g.nodes[i].input), tuple(g.nodes[i].output)),
        lambda g, i: (g.key(i), tuple(g.nodes[i].output)),
        lambda g, i: (g.key(i), tuple(g.nodes[i].input)),
    ]
    for keyf in keyfs:
        free_b = [i for i in range(len(b.nodes)) if i not in pairs]
        used_a = set(pairs.values())
        free_a = [j for j in range(len(a.nodes)) if j not in used_a]
        ub, ua = unique(b, keyf, free_b), unique(a, keyf, free_a)
        for k, i in ub.items():
            if k in ua:
                pairs[i] = ua[k]
    # topological-position signature: same op and neighbouring op types, paired in graph order
    used_a = set(pairs.values())
    groups_b: dict = defaultdict(list)
    groups_a: dict = defaultdict(list)
    for i in range(len(b.nodes)):
        if i not in pairs:
            groups_b[(b.key(i), b.neighbour_signature(i))].append(i)
    for j in range(len(a.nodes)):
        if j not in used_a:
            groups_a[(a.key(j), a.neighbour_signature(j))].append(j)
    for k, bs in groups_b.items():
        as_ = groups_a.get(k)
        if as_ and len(as_) == len(bs):
            pairs.update(zip(bs, as_))
    return pairs


def _changes(nb: onnx.NodeProto, na: onnx.NodeProto) -> list[str]:
    out = []
    if (_dom(nb), nb.op_type) != (_dom(na), na.op_type):
        out.append("op_type")
    if nb.name != na.name:
        out.append("name")
    if list(nb.input) != list(na.input):
        out.append("inputs")
    if list(nb.output) != list(na.output):
        out.append("outputs")
    if _attrs(nb) != _attrs(na):
        out.append("attributes")
    return out


@functools.lru_cache(maxsize=1024)
def _defaults(domain: str, op_type: str) -> dict[str, bytes]:
    try:
        schema = onnx.defs.get_schema(op_type, domain=domain)
    except Exception:
        return {}
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value is not None and a.default_value.type != onnx.AttributeProto.UNDEFINED:
            out[name] = a.default_value.SerializeToString(deterministic=True)
    return out


def _attrs(node: onnx.NodeProto) -> dict[str, bytes]:
    """Attributes with schema defaults filled in, so an explicit default equals an omitted one."""
    got = {}
    for a in node.attribute:
        proto = onnx.AttributeProto()
        proto.CopyFrom(a)
        proto.ClearField("doc_string")
        got[a.name] = proto.SerializeToString(deterministic=True)
    return {**_defaults(_dom(node), node.op_type), **got}


# -- fusion tracing -----------------------------------------------------------------------------------

class _Tracer:
    def __init__(self, b: _Graph, a: _Graph, pairs: dict[int, int], removed: set[int]):
        self.b, self.a, self.removed = b, a, removed
        self.rev = {j: i for i, j in pairs.items()}
        # tensors ORT renamed (e.g. NCHWc layouts) map back to the before-name through matched nodes
        known = set(b.producer) | b.initializers | b.graph_inputs
        self.alias: dict[str, str] = {}
        for i, j in pairs.items():
            for lst_b, lst_a in ((b.nodes[i].input, a.nodes[j].input), (b.nodes[i].output, a.nodes[j].output)):
                if len(lst_b) == len(lst_a):
                    for tb, ta in zip(lst_b, lst_a):
                        if ta and tb and ta != tb and ta not in known:
                            self.alias.setdefault(ta, tb)
        self.claimed: set[int] = set()
        self.known = known

    def before_name(self, t: str) -> str:
        """The before-graph tensor ``t`` stands for: itself, the tensor ONNX Runtime's quantizer named it after
        (``X_QuantizeLinear_Output`` is ``X`` quantized), else the tensor of a matched node at the same place."""
        if t in self.known:
            return t
        stripped = quantized_tensor_base(t)
        if stripped in self.known:
            return stripped
        return self.alias.get(t, t)

    def boundary(self, t: str) -> str | None:
        """The before-graph tensor an after-graph input stands for (looking through added Q/DQ nodes), "" for
        a new constant, or None when the tensor comes from another new node."""
        a, b = self.a, self.b
        while True:
            name = self.before_name(t)
            if name in b.producer or name in b.graph_inputs or name in b.initializers:
                return name
            if t in a.initializers:
                return ""
            p = a.producer.get(t)
            if p is None or p in self.rev or a.nodes[p].op_type not in _QDQ or not a.nodes[p].input:
                return None
            t = a.nodes[p].input[0]

    def cover(self, group: list[int]) -> list[int] | None:
        """Removed before-nodes that ``group`` (after-node indices) replaces, or None when the
        group's inputs do not bound a clean region of removed nodes."""
        a, b = self.a, self.b
        produced = {t for j in group for t in a.nodes[j].output}
        own = {self.rev[j] for j in group if j in self.rev}
        ins = set()
        for t in (t for j in group for t in a.nodes[j].input if t and t not in produced):
            name = self.boundary(t)
            if name is None:
                return None  # fed by another new node: where this group's region starts is unknown
            ins.add(name)
        outs = [self.before_name(t) for j in group for t in a.nodes[j].output if t]
        outs = [t for t in outs if t in b.producer]
        if not outs:
            return None
        seen: set[int] = set()
        stack = list(outs)
        visited_t: set[str] = set()
        while stack:
            t = stack.pop()
            if t in visited_t or t in ins:
                continue
            visited_t.add(t)
            p = b.producer.get(t)
            if p is None:
                continue  # an initializer or graph input that the group reads in another form
            if p not in own and (p not in self.removed or p in self.claimed):
                return None
            if p not in seen:
                seen.add(p)
                stack.extend(x for x in b.nodes[p].input if x)
        covered = sorted(seen - own)
        return sorted(seen) if covered else []


def _fusions(b: _Graph, a: _Graph, pairs: dict[int, int], removed: list[int], added: list[int],
             changed: list[int], covers: dict[int, int] | None = None) -> list[str]:
    """Readable fusion lines; ``covers`` (when given) receives removed before-index → after-index that replaced it."""
    tracer = _Tracer(b, a, pairs, set(removed))
    lines: Counter[str] = Counter()
    explained: set[int] = set()

    def label(before_nodes: list[int], group: list[int]) -> str:
        if len(before_nodes) > 8 or len(group) > 2:  # a rewritten region, not one fusion: count its ops
            left = _counted(b.nodes[i].op_type for i in before_nodes)
            right = _counted(_short(*a.key(j)) for j in group)
            plural = "s" if len(group) > 1 else ""
            return f"region of {len(before_nodes)} nodes ({left}) → {len(group)} node{plural} ({right})"
        left = "+".join(b.nodes[i].op_type for i in before_nodes)
        right = "+".join(_short(*a.key(j)) for j in sorted(group))
        return f"{left} → {right}"

    qdq = [j for j in added if a.nodes[j].op_type in _QDQ]
    rest = [j for j in added if a.nodes[j].op_type not in _QDQ]
    candidates = [[j] for j in rest] + [[j] for j in changed if set(_changes(b.nodes[tracer.rev[j]],
                                                                         a.nodes[j])) & {"inputs", "outputs"}]
    for group in candidates:
        cov = tracer.cover(group)
        if cov:
            tracer.claimed |= set(cov) - {tracer.rev.get(j) for j in group}
            explained |= set(group)
            if covers is not None:
                covers.update(_replacements(b, a, [i for i in cov if i in tracer.removed], group))
            lines[label(cov, group)] += 1
    # groups of connected added nodes that replace removed ones together (e.g. dynamic quantization)
    left = [j for j in rest if j not in explained]
    for comp in _components(a, left):
        if len(comp) < 2:
            continue
        cov = tracer.cover(comp)
        if cov:
            tracer.claimed |= set(cov)
            explained |= set(comp)
            if covers is not None:
                covers.update(_replacements(b, a, [i for i in cov if i in tracer.removed], comp))
            lines[label(cov, comp)] += 1
    # a node quantized or fused in place (the same name, a new op) that replaced nothing else
    for j in changed:
        i = tracer.rev[j]
        if j not in explained and b.key(i) != a.key(j):
            lines[f"{b.nodes[i].op_type} → {_short(*a.key(j))}"] += 1
    lines.update(_folded_into_quantize(b, a, tracer, removed, qdq, covers))
    out = [f"{k} ×{n}" for k, n in sorted(lines.items(), key=lambda kv: (-kv[1], kv[0]))]
    if qdq:
        out += _qdq_lines(a, qdq)
    inserted = Counter(_short(*a.key(j)) for j in rest if j not in explained)
    for k, n in sorted(inserted.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} inserted ×{n}")
    dropped = Counter(_short(*b.key(i)) for i in removed if i not in tracer.claimed)
    for k, n in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} removed ×{n}")
    return out


def _folded_into_quantize(b: _Graph, a: _Graph, tracer: _Tracer, removed: list[int], qdq: list[int],
                          covers: dict[int, int] | None) -> Counter[str]:
    """A Relu or Clip the quantizer dropped (the QuantizeLinear of its output clips to its range): claimed, linked
    to that QuantizeLinear in ``covers``, counted by op."""
    q_of = {quantized_tensor_base(t): j for j in qdq if a.nodes[j].op_type == "QuantizeLinear"
            for t in a.nodes[j].output}
    lines: Counter[str] = Counter()
    for i in removed:
        hit = [q_of[t] for t in b.nodes[i].output if t in q_of]
        if i in tracer.claimed or not hit:
            continue
        tracer.claimed.add(i)
        if covers is not None:
            covers[i] = hit[0]
        lines[f"{b.nodes[i].op_type} folded into the QuantizeLinear of its output"] += 1
    return lines


def _qdq_lines(a: _Graph, qdq: list[int]) -> list[str]:
    """The QuantizeLinear/DequantizeLinear nodes added (``qdq``: after-indices), counted as pairs, weight
    DequantizeLinears and others."""
    out = []
    q_ids = {j for j in qdq if a.nodes[j].op_type == "QuantizeLinear"}
    dq_ids = {j for j in qdq if a.nodes[j].op_type == "DequantizeLinear"}
    n_pairs = sum(1 for j in q_ids if any(c in dq_ids for t in a.nodes[j].output for c in a.consumers.get(t, ())))
    weight_dq = sum(1 for j in dq_ids if a.nodes[j].input and a.nodes[j].input[0] in a.initializers)
    if n_pairs:
        out.append(f"QuantizeLinear/DequantizeLinear pairs added ×{n_pairs}")
    if weight_dq:
        out.append(f"DequantizeLinear on quantized weights added ×{weight_dq}")
    other = len(qdq) - 2 * n_pairs - weight_dq
    if other > 0:
        out.append(f"Other QuantizeLinear/DequantizeLinear nodes added ×{other}")
    return out


def _replacements(b: _Graph, a: _Graph, replaced: list[int], group: list[int]) -> dict[int, int]:
    """Which node of ``group`` (after-indices) stands for each of the ``replaced`` before-nodes: the one of the same
    name (ONNX Runtime keeps a Conv's name on its QLinearConv), else the one its input's producer went to (a
    BatchNormalization or Relu folded into the Conv before it), else the one its first consumer went to, else the
    group's first node."""
    if len(group) == 1:
        return {i: group[0] for i in replaced}
    by_name = {a.nodes[j].name: j for j in group if a.nodes[j].name}
    out = {i: by_name[b.nodes[i].name] for i in replaced if b.nodes[i].name in by_name}
    todo = sorted(set(replaced) - set(out))  # ONNX nodes are stored in topological order
    for i in todo:
        ups = [out[p] for t in b.nodes[i].input if (p := b.producer.get(t)) is not None and p in out]
        if ups:
            out[i] = ups[0]
    for i in reversed(todo):
        if i not in out:
            downs = [out[c] for t in b.nodes[i].output for c in b.consumers.get(t, ()) if c in out]
            out[i] = downs[0] if downs else group[0]
    return out


def _counted(ops) -> str:
    counts = Counter(ops)
    return ", ".join(f"{op} ×{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _components(a: _Graph, nodes: list[int]) -> list[list[int]]:
    pool = set(nodes)
    out, seen = [], set()
    for start in nodes:
        if start in seen:
            continue
        comp, queue = [], deque([start])
        seen.add(start)
        while queue:
            j = queue.popleft()
            comp.append(j)
            nbrs = [a.producer[t] for t in a.nodes[j].input if t in a.producer]
            nbrs += [c for t in a.nodes[j].output for c in a.consumers.get(t, ())]
            for k in nbrs:
                if k in pool and k not in seen:
                    seen.add(k)
                    queue.append(k)
        out.append(sorted(comp))
    return out


# -- public: diff -------------------------------------------------------------------------------------

def _diff_parts(before: onnx.ModelProto, after: onnx.ModelProto):
    b, a = _Graph(before.graph), _Graph(after.graph)
    pairs = _match(b, a)
    matched_a = set(pairs.values())
    removed = [i for i in range(len(b.nodes)) if i not in pairs]
    added = [j for j in range(len(a.nodes)) if j not in matched_a]
    changed = sorted(j for i, j in pairs.items() if _changes(b.nodes[i], a.nodes[j]))
    return b, a, pairs, removed, added, changed


def graph_diff(before_path, after_path) -> GraphDiff:
    """Compare two model files: op deltas by (domain, op_type), removed/added/changed nodes (matched by
    name, then by structure), initializer bytes by dtype, and a readable fusion summary."""
    before, after = _load(before_path), _load(after_path)
    b, a, pairs, removed, added, changed = _diff_parts(before, after)
    rev = {j: i for i, j in pairs.items()}
    cb = Counter(b.key(i) for i in range(len(b.nodes)))
    ca = Counter(a.key(j) for j in range(len(a.nodes)))
    deltas = []
    for k in set(cb) | set(ca):
        deltas.append({"key": op_key(*k), "domain": k[0], "op_type": k[1], "before": cb.get(k, 0),
                       "after": ca.get(k, 0), "delta": ca.get(k, 0) - cb.get(k, 0)})
    deltas.sort(key=lambda d: (d["delta"] == 0, -abs(d["delta"]), d["key"]))
    changed_dicts = []
    for j in changed:
        d = _node_dict(a.nodes[j])
        d["changes"] = _changes(b.nodes[rev[j]], a.nodes[j])
        d["before"] = _node_dict(b.nodes[rev[j]])
        changed_dicts.append(d)
    notes = []
    if any(a.nodes[j].op_type in ("If", "Loop", "Scan") for j in range(len(a.nodes))):
        notes.append("Nodes inside control-flow subgraphs are not compared.")
    covers: dict[int, int] = {}
    fusions = _fusions(b, a, pairs, removed, added, changed, covers)
    return GraphDiff(
        op_deltas=deltas,
        removed=[_node_dict(b.nodes[i]) for i in removed],
        added=[_node_dict(a.nodes[j]) for j in added],
        changed=changed_dicts,
        unchanged_count=len(pairs) - len(changed),
        initializer_bytes_before=_init_bytes(before.graph),
        initializer_bytes_after=_init_bytes(after.graph),
        fusions=fusions,
        notes=notes,
        counts=change_counts(b, a, pairs, removed, added, changed, covers),
    )


# -- public: one count of the changes ----------------------------------------------------------------

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
              "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulNBits", "DynamicQuantizeLSTM"}


def is_quantization_op(op_type: str) -> bool:
    """Whether ``op_type`` computes on quantized values (Q/DQ, QLinear*, *Integer, ...)."""
    return op_type in _QUANT_OPS or op_type.startswith("QLinear") or op_type.startswith("QGemm") \
        or op_type.startswith("QAttention") or op_type.startswith("QOrdered")


def _kinds(b: _Graph, a: _Graph, pairs: dict[int, int], removed: list[int], added: list[int], changed: list[int],
           covers: dict[int, int]) -> tuple[dict[int, str], dict[int, str]]:
    """The change kind of every node: (before index → kind of removed nodes, after index → kind).

    Removed nodes are "fused" (folded into a node that replaced them) or "removed"; added nodes are "quantized"
    (a quantization op), "fused" (a node that replaced removed ones) or "added"; matched ones "changed" or
    "unchanged", except a node whose op changed under the same name: "quantized" (QLinearConv in place of Conv) or
    "fused" (FusedConv in place of Conv)."""
    fused_into = set(covers.values())
    before = {i: "fused" if i in covers else "removed" for i in removed}
    after: dict[int, str] = {}
    set_changed = set(changed)
    for j in range(len(a.nodes)):
        after[j] = "changed" if j in set_changed else "unchanged"
    for i, j in pairs.items():  # quantized or fused in place: the same name, a new op
        if a.key(j) != b.key(i):
            after[j] = ("quantized" if is_quantization_op(a.nodes[j].op_type)
                        else "fused" if j in fused_into or a.nodes[j].op_type.startswith("Fused") else "changed")
    for j in added:
        after[j] = ("quantized" if is_quantization_op(a.nodes[j].op_type)
                    else "fused" if j in fused_into else "added")
    return before, after


def change_counts(b: _Graph, a: _Graph, pairs: dict[int, int], removed: list[int], added: list[int], changed: list[int],
                  covers: dict[int, int]) -> dict[str, int]:
    """The one count of the changes (``GraphDiff.counts``, also in ``graph_description``'s "counts")."""
    kb, ka = _kinds(b, a, pairs, removed, added, changed, covers)
    return {"removed": len(removed), "added": len(added), "changed": len(changed),
            "unchanged": len(pairs) - len(changed),
            "fused": sum(1 for k in kb.values() if k == "fused"),
            "fused_into": sum(1 for k in ka.values() if k == "fused"),
            "quantized": sum(1 for k in ka.values() if k == "quantized"),
            "retyped": sum(1 for i, j in pairs.items() if b.key(i) != a.key(j))}
