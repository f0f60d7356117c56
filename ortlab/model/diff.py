"""What changed between two versions of a model: op deltas, matched nodes, fusions and one count of the changes
(``GraphDiff.counts``). The graph to draw from it is :mod:`ortlab.model.diff_view`."""

from __future__ import annotations

import functools
from collections import Counter, deque
from dataclasses import dataclass, field

import onnx

from ortlab.model.inspect import op_key
from ortlab.core.serial import from_plain, to_plain
from ortlab.model.diff_match import IndexedGraph, initializer_bytes, load_for_diff, match_nodes, node_dict, node_domain
from ortlab.model.diff_match import quantized_tensor_base, short_op

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


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

def node_changes(nb: onnx.NodeProto, na: onnx.NodeProto) -> list[str]:
    """What differs between two matched nodes: "op", "inputs", "outputs", "attributes"."""
    out = []
    if (node_domain(nb), nb.op_type) != (node_domain(na), na.op_type):
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
    except onnx.defs.SchemaError:  # a contrib or custom op: no defaults known
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
    return {**_defaults(node_domain(node), node.op_type), **got}


# -- fusion tracing -----------------------------------------------------------------------------------

class _Tracer:
    def __init__(self, b: IndexedGraph, a: IndexedGraph, pairs: dict[int, int], removed: set[int]):
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
            if p is None or p in self.rev or a.nodes[p].op_type not in QDQ_OPS or not a.nodes[p].input:
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


def fusion_lines(b: IndexedGraph, a: IndexedGraph, pairs: dict[int, int], removed: list[int], added: list[int],
             changed: list[int], covers: dict[int, int] | None = None) -> list[str]:
    """Readable fusion lines; ``covers`` (when given) receives removed before-index → after-index that replaced it."""
    tracer = _Tracer(b, a, pairs, set(removed))
    lines: Counter[str] = Counter()
    explained: set[int] = set()

    def label(before_nodes: list[int], group: list[int]) -> str:
        if len(before_nodes) > 8 or len(group) > 2:  # a rewritten region, not one fusion: count its ops
            left = _counted(b.nodes[i].op_type for i in before_nodes)
            right = _counted(short_op(*a.key(j)) for j in group)
            plural = "s" if len(group) > 1 else ""
            return f"region of {len(before_nodes)} nodes ({left}) → {len(group)} node{plural} ({right})"
        left = "+".join(b.nodes[i].op_type for i in before_nodes)
        right = "+".join(short_op(*a.key(j)) for j in sorted(group))
        return f"{left} → {right}"

    qdq = [j for j in added if a.nodes[j].op_type in QDQ_OPS]
    rest = [j for j in added if a.nodes[j].op_type not in QDQ_OPS]
    candidates = [[j] for j in rest] + [[j] for j in changed if set(node_changes(b.nodes[tracer.rev[j]],
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
            lines[f"{b.nodes[i].op_type} → {short_op(*a.key(j))}"] += 1
    lines.update(_folded_into_quantize(b, a, tracer, removed, qdq, covers))
    out = [f"{k} ×{n}" for k, n in sorted(lines.items(), key=lambda kv: (-kv[1], kv[0]))]
    if qdq:
        out += _qdq_lines(a, qdq)
    inserted = Counter(short_op(*a.key(j)) for j in rest if j not in explained)
    for k, n in sorted(inserted.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} inserted ×{n}")
    dropped = Counter(short_op(*b.key(i)) for i in removed if i not in tracer.claimed)
    for k, n in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} removed ×{n}")
    return out


def _folded_into_quantize(b: IndexedGraph, a: IndexedGraph, tracer: _Tracer, removed: list[int], qdq: list[int],
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


def _qdq_lines(a: IndexedGraph, qdq: list[int]) -> list[str]:
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


def _replacements(b: IndexedGraph, a: IndexedGraph, replaced: list[int], group: list[int]) -> dict[int, int]:
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


def _components(a: IndexedGraph, nodes: list[int]) -> list[list[int]]:
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

def diff_parts(before: onnx.ModelProto, after: onnx.ModelProto):
    """The two indexed graphs, their matched node pairs and the removed, added and changed node indexes."""
    b, a = IndexedGraph(before.graph), IndexedGraph(after.graph)
    pairs = match_nodes(b, a)
    matched_a = set(pairs.values())
    removed = [i for i in range(len(b.nodes)) if i not in pairs]
    added = [j for j in range(len(a.nodes)) if j not in matched_a]
    changed = sorted(j for i, j in pairs.items() if node_changes(b.nodes[i], a.nodes[j]))
    return b, a, pairs, removed, added, changed


def graph_diff(before_path, after_path) -> GraphDiff:
    """Compare two model files: op deltas by (domain, op_type), removed/added/changed nodes (matched by
    name, then by structure), initializer bytes by dtype, and a readable fusion summary."""
    before, after = load_for_diff(before_path), load_for_diff(after_path)
    b, a, pairs, removed, added, changed = diff_parts(before, after)
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
        d = node_dict(a.nodes[j])
        d["changes"] = node_changes(b.nodes[rev[j]], a.nodes[j])
        d["before"] = node_dict(b.nodes[rev[j]])
        changed_dicts.append(d)
    notes = []
    if any(a.nodes[j].op_type in ("If", "Loop", "Scan") for j in range(len(a.nodes))):
        notes.append("Nodes inside control-flow subgraphs are not compared.")
    covers: dict[int, int] = {}
    fusions = fusion_lines(b, a, pairs, removed, added, changed, covers)
    return GraphDiff(
        op_deltas=deltas,
        removed=[node_dict(b.nodes[i]) for i in removed],
        added=[node_dict(a.nodes[j]) for j in added],
        changed=changed_dicts,
        unchanged_count=len(pairs) - len(changed),
        initializer_bytes_before=initializer_bytes(before.graph),
        initializer_bytes_after=initializer_bytes(after.graph),
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


def change_kinds(b: IndexedGraph, a: IndexedGraph, pairs: dict[int, int], removed: list[int], added: list[int], changed: list[int],
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


def change_counts(b: IndexedGraph, a: IndexedGraph, pairs: dict[int, int], removed: list[int], added: list[int], changed: list[int],
                  covers: dict[int, int]) -> dict[str, int]:
    """The one count of the changes (``GraphDiff.counts``, also in ``graph_description``'s "counts")."""
    kb, ka = change_kinds(b, a, pairs, removed, added, changed, covers)
    return {"removed": len(removed), "added": len(added), "changed": len(changed),
            "unchanged": len(pairs) - len(changed),
            "fused": sum(1 for k in kb.values() if k == "fused"),
            "fused_into": sum(1 for k in ka.values() if k == "fused"),
            "quantized": sum(1 for k in ka.values() if k == "quantized"),
            "retyped": sum(1 for i, j in pairs.items() if b.key(i) != a.key(j))}
