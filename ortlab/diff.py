"""What changed between two versions of a model: op deltas, matched nodes, fusions, and a drawable view."""

from __future__ import annotations

import bisect
import functools
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from .model import _tensor_nbytes, dtype_name, load_model, op_key
from .serial import from_plain, to_plain

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


def _load(path) -> onnx.ModelProto:
    return load_model(Path(path), check=False, load_external=False)


def _init_bytes(graph: onnx.GraphProto) -> dict[str, int]:
    out: Counter[str] = Counter()
    for t in graph.initializer:
        out[dtype_name(t.data_type)] += _tensor_nbytes(t) or 0
    return dict(out)


# -- matching -----------------------------------------------------------------------------------------

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

    def before_name(self, t: str) -> str:
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
                covers.update({i: group[0] for i in cov if i in tracer.removed})
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
                covers.update({i: comp[0] for i in cov if i in tracer.removed})
            lines[label(cov, comp)] += 1
    out = [f"{k} ×{n}" for k, n in sorted(lines.items(), key=lambda kv: (-kv[1], kv[0]))]
    if qdq:
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
    inserted = Counter(_short(*a.key(j)) for j in rest if j not in explained)
    for k, n in sorted(inserted.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} inserted ×{n}")
    dropped = Counter(_short(*b.key(i)) for i in removed if i not in tracer.claimed)
    for k, n in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k} removed ×{n}")
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
    return GraphDiff(
        op_deltas=deltas,
        removed=[_node_dict(b.nodes[i]) for i in removed],
        added=[_node_dict(a.nodes[j]) for j in added],
        changed=changed_dicts,
        unchanged_count=len(pairs) - len(changed),
        initializer_bytes_before=_init_bytes(before.graph),
        initializer_bytes_after=_init_bytes(after.graph),
        fusions=_fusions(b, a, pairs, removed, added, changed),
        notes=notes,
    )


# -- public: view -------------------------------------------------------------------------------------

def graph_view(before_path, after_path, focus: str | None = None, max_nodes: int = 400, *, hops: int = 2) -> dict:
    """Plain data for drawing a before/after graph: the after graph plus removed nodes, laid out left to right.

    Returns ``{"nodes": [...], "edges": [...], "total_nodes", "truncated", "focus", "focus_matches",
    "counts"}``. Each node has id, label, name, op_type, domain, status (removed/added/changed/
    unchanged/collapsed), weight_only (computed from initializers/constants alone), layer, x (= layer), y
    and count (nodes it stands for; collapsed nodes add "ops"). Each edge has source, target, status
    (removed/added/unchanged) and points (bends of a long edge, ``[[x, y], ...]``). Runs of unchanged
    single-input/single-output nodes are collapsed; ``focus`` (a node name or op type) keeps nodes within
    ``hops`` of the matches. At most ``max_nodes`` nodes come back.
    """
    before, after = _load(before_path), _load(after_path)
    b, a, pairs, removed, added, changed = _diff_parts(before, after)
    covers: dict[int, int] = {}
    _fusions(b, a, pairs, removed, added, changed, covers)
    wb, wa = _weight_only(b), _weight_only(a)
    set_added, set_changed = set(added), set(changed)
    nodes: dict[str, dict] = {}
    for j, n in enumerate(a.nodes):
        status = "added" if j in set_added else "changed" if j in set_changed else "unchanged"
        nodes[f"a{j}"] = {"id": f"a{j}", "label": _short(_dom(n), n.op_type), "name": n.name, "op_type": n.op_type,
                          "domain": _dom(n), "status": status, "weight_only": wa[j], "count": 1}
    for i in removed:
        n = b.nodes[i]
        nodes[f"b{i}"] = {"id": f"b{i}", "label": _short(_dom(n), n.op_type), "name": n.name, "op_type": n.op_type,
                          "domain": _dom(n), "status": "removed", "weight_only": wb[i], "count": 1}
    vid_b = {i: f"a{j}" for i, j in pairs.items()}
    vid_b.update({i: f"b{i}" for i in removed})
    edges: set[tuple[str, str]] = set()
    for j, n in enumerate(a.nodes):
        for t in n.input:
            if t in a.producer:
                edges.add((f"a{a.producer[t]}", f"a{j}"))
    removed_set = set(removed)
    for i, n in enumerate(b.nodes):
        for t in n.input:
            p = b.producer.get(t)
            if p is not None and (p in removed_set or i in removed_set):
                edges.add((vid_b[p], vid_b[i]))
    edges = {(s, d) for s, d in edges if s != d}
    total = len(nodes)
    matches = None

    if focus:
        hits = [k for k, v in nodes.items() if focus in (v["name"], v["op_type"], op_key(v["domain"], v["op_type"]))]
        matches = len(hits)
        keep = _within_hops(hits, edges, hops)
        nodes = {k: v for k, v in nodes.items() if k in keep}
        edges = {(s, d) for s, d in edges if s in keep and d in keep}

    affinity = {f"b{i}": f"a{j}" for i, j in covers.items()}
    nodes, edges = _collapse_chains(nodes, edges)
    layer = _layers(nodes, edges, affinity)
    if len(nodes) > max_nodes:
        nodes, edges = _collapse_bands(nodes, edges, layer)
        layer = _layers(nodes, edges, affinity)
    truncated = False
    if len(nodes) > max_nodes:
        nodes, edges = _truncate(nodes, edges, layer, max_nodes)
        layer = _layers(nodes, edges, affinity)
        truncated = True
    affinity = {r: k for r, k in affinity.items() if r in nodes and k in nodes}
    y, bends = _place(nodes, edges, layer, affinity)
    for k, v in nodes.items():
        v.update(layer=layer[k], x=layer[k], y=y[k])
    out_nodes = sorted(nodes.values(), key=lambda v: (v["x"], v["y"]))
    status = {k: v["status"] for k, v in nodes.items()}
    out_edges = []
    for s, d in sorted(edges):
        kind = next((st for st in ("removed", "added") if st in (status[s], status[d])), "unchanged")
        out_edges.append({"source": s, "target": d, "status": kind, "points": bends.get((s, d), [])})
    return {
        "nodes": out_nodes,
        "edges": out_edges,
        "total_nodes": total,
        "truncated": truncated,
        "focus": focus,
        "focus_matches": matches,
        "counts": dict(Counter(v["status"] for v in out_nodes)),
    }


def _weight_only(g: _Graph) -> list[bool]:
    """Per node: computed from initializers and constants alone (weights, DequantizeLinear of weights, Constant)."""
    flags = [False] * len(g.nodes)
    for _ in range(len(g.nodes) + 1):  # one pass when the graph is stored in topological order
        grew = False
        for i, n in enumerate(g.nodes):
            if not flags[i] and all(t in g.initializers or (t in g.producer and flags[g.producer[t]])
                                    for t in n.input if t):
                flags[i] = grew = True
        if not grew:
            break
    return flags


def _order(k: str) -> tuple:
    # after-graph nodes first in file order, then removed ones; collapsed ids keep their first member's order
    base = k.split(":")[-1]
    return (base[0] != "a", int(base[1:]) if base[1:].isdigit() else 0)


def _within_hops(hits: list[str], edges: set[tuple[str, str]], hops: int) -> set[str]:
    adj: dict[str, set[str]] = defaultdict(set)
    for s, d in edges:
        adj[s].add(d)
        adj[d].add(s)
    keep = set(hits)
    frontier = set(hits)
    for _ in range(max(hops, 0)):
        frontier = {n for f in frontier for n in adj[f]} - keep
        keep |= frontier
    return keep


def _collapse_chains(nodes: dict[str, dict], edges: set[tuple[str, str]]):
    succ: dict[str, list[str]] = defaultdict(list)
    pred: dict[str, list[str]] = defaultdict(list)
    for s, d in edges:
        succ[s].append(d)
        pred[d].append(s)

    def simple(k: str) -> bool:
        return nodes[k]["status"] == "unchanged" and len(pred[k]) <= 1 and len(succ[k]) <= 1

    def links(u: str, v: str) -> bool:  # u → v is the only way out of u and into v
        return simple(u) and simple(v) and succ[u] == [v] and pred[v] == [u]

    done: set[str] = set()
    groups: list[list[str]] = []
    for k in sorted(nodes, key=_order):
        if k in done or not simple(k):
            continue
        if pred[k] and links(pred[k][0], k):
            continue  # not the head of its run
        run = [k]
        while succ[run[-1]] and links(run[-1], succ[run[-1]][0]):
            run.append(succ[run[-1]][0])
        done |= set(run)
        if len(run) >= 2:
            groups.append(run)
    return _merge(nodes, edges, groups)


def _merge(nodes: dict[str, dict], edges: set[tuple[str, str]], groups: list[list[str]]):
    rep: dict[str, str] = {}
    nodes = dict(nodes)
    for run in groups:
        cid = f"c:{run[0]}"
        count = sum(nodes[k]["count"] for k in run)
        ops: Counter[str] = Counter()
        for k in run:
            ops.update(nodes[k].get("ops") or {nodes[k]["label"]: 1})
        top = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in ops.most_common(3))
        more = "" if len(ops) <= 3 else ", …"
        nodes[cid] = {"id": cid, "label": f"{count} unchanged ({top}{more})", "name": nodes[run[0]]["name"],
                      "op_type": "", "domain": "", "status": "collapsed", "count": count, "ops": dict(ops),
                      "weight_only": all(nodes[k].get("weight_only", False) for k in run)}
        for k in run:
            rep[k] = cid
            del nodes[k]
    new_edges = {(rep.get(s, s), rep.get(d, d)) for s, d in edges}
    return nodes, {(s, d) for s, d in new_edges if s != d}


def _topo(nodes: dict[str, dict], edges: set[tuple[str, str]]) -> list[str]:
    """Topological order; nodes on cycles (possible when two graphs are merged) follow their placed
    predecessors, the cycle broken at the earliest unplaced node."""
    indeg = {k: 0 for k in nodes}
    succ: dict[str, list[str]] = defaultdict(list)
    for s, d in edges:
        succ[s].append(d)
        indeg[d] += 1
    queue = deque(sorted((k for k, v in indeg.items() if v == 0), key=_order))
    rest = sorted(nodes, key=_order)
    order: list[str] = []
    placed: set[str] = set()
    while len(placed) < len(nodes):
        if not queue:
            while rest[0] in placed:
                rest.pop(0)
            queue.append(rest[0])
        k = queue.popleft()
        if k in placed:
            continue
        placed.add(k)
        order.append(k)
        for d in succ[k]:
            if d not in placed:
                indeg[d] -= 1
                if indeg[d] == 0:
                    queue.append(d)
    return order


def _layers(nodes: dict[str, dict], edges: set[tuple[str, str]], affinity: dict[str, str] | None = None) -> dict[str, int]:
    """Layer (column) of each node: longest path from the sources over data edges, nodes with slack centred
    between their neighbours (a node that replaced removed ones: amid them), weight-only nodes one layer
    before their first consumer; no empty layers."""
    order = _topo(nodes, edges)
    rank = {k: i for i, k in enumerate(order)}
    succ: dict[str, list[str]] = defaultdict(list)
    pred: dict[str, list[str]] = defaultdict(list)
    for s, d in edges:
        if rank[s] < rank[d]:  # back edges of broken cycles do not constrain
            succ[s].append(d)
            pred[d].append(s)
    weight = {}
    for k in order:
        weight[k] = bool(nodes[k].get("weight_only")) and all(weight[p] for p in pred[k])
    layer: dict[str, int] = {}
    for k in order:
        layer[k] = max((layer[p] + 1 for p in pred[k] if not weight[p]), default=0)
    data = [k for k in order if not weight[k] and succ[k] and any(not weight[p] for p in pred[k])]
    for _ in range(3):  # spread nodes with slack (parallel removed/added branches) between their neighbours
        for k in data:
            lo = max(layer[p] for p in pred[k] if not weight[p]) + 1
            hi = min(layer[s] for s in succ[k]) - 1
            if hi > lo:
                layer[k] = (lo + hi) // 2
    replaced: dict[str, list[str]] = defaultdict(list)
    for r, k in (affinity or {}).items():
        if r in nodes and k in nodes:
            replaced[k].append(r)
    for k in order:
        if replaced[k] and not weight[k]:
            lo = max((layer[p] + 1 for p in pred[k] if not weight[p]), default=0)
            hi = min((layer[s] - 1 for s in succ[k]), default=lo)
            amid = sorted(layer[r] for r in replaced[k])[len(replaced[k]) // 2]
            layer[k] = min(max(amid, lo), max(hi, lo))
    for k in reversed(order):
        if weight[k] and succ[k]:
            layer[k] = min(layer[s] for s in succ[k]) - 1
    squeeze = {x: i for i, x in enumerate(sorted(set(layer.values())))}
    return {k: squeeze[x] for k, x in layer.items()}


def _pava(want: list[float], weight: list[float], gaps: list[float]) -> list[float]:
    """Positions closest to ``want`` (weighted least squares) keeping the order and ``gaps[i]`` between i and i+1."""
    offset = [0.0]
    for g in gaps:
        offset.append(offset[-1] + g)
    blocks: list[list[float]] = []  # [sum w, sum w*z, n, sum z]
    for z, w in zip((d - o for d, o in zip(want, offset)), weight):
        blocks.append([w, w * z, 1, z])
        while len(blocks) > 1 and _mean(blocks[-2]) > _mean(blocks[-1]):
            top = blocks.pop()
            for i in range(4):
                blocks[-1][i] += top[i]
    out: list[float] = []
    for blk in blocks:
        out.extend([float(round(_mean(blk)))] * int(blk[2]))
    return [z + o for z, o in zip(out, offset)]


def _median(values: list[float], default: float) -> float:
    if not values:
        return default
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _mean(block: list[float]) -> float:
    return block[1] / block[0] if block[0] > 0 else block[3] / block[2]


def _crossings(rows: list[list], pos: dict, down: dict) -> int:
    total = 0
    for row in rows[:-1]:
        ends = sorted((pos[u], pos[v]) for u in row for v in down[u])
        seen: list[int] = []
        for _, pv in ends:
            total += len(seen) - bisect.bisect_right(seen, pv)
            bisect.insort(seen, pv)
    return total


def _place(nodes: dict[str, dict], edges: set[tuple[str, str]], layer: dict[str, int], affinity: dict[str, str],
           sweeps: int = 8, dummy_budget: int = 4000):
    """Vertical position of each node and the bends of long edges (Sugiyama style): long edges get a dummy
    point per layer they cross, a few barycenter sweeps order each layer to reduce crossings, and positions
    are pulled towards their neighbours (straight chains) while keeping order and spacing."""
    n_layers = max(layer.values(), default=-1) + 1
    lay: dict = dict(layer)
    up: dict = defaultdict(list)  # neighbours one layer to the left (or further, for edges without dummies)
    down: dict = defaultdict(list)  # neighbours one layer to the right (used for crossing counts)
    far_down: dict = defaultdict(list)
    chains: dict[tuple[str, str], list] = {}
    fwd = sorted(((s, d) for s, d in edges if layer[s] < layer[d]), key=lambda e: (layer[e[1]] - layer[e[0]], e))
    budget = max(dummy_budget, 4 * len(nodes))
    for s, d in fwd:
        span = layer[d] - layer[s]
        if 1 < span <= budget + 1:
            budget -= span - 1
            chain = [s] + [("~", s, d, x) for x in range(layer[s] + 1, layer[d])] + [d]
            for x, v in enumerate(chain[1:-1], layer[s] + 1):
                lay[v] = x
            chains[(s, d)] = chain[1:-1]
        else:
            chain = [s, d]
        for u, v in zip(chain, chain[1:]):
            (down if lay[v] == lay[u] + 1 else far_down)[u].append(v)
            up[v].append(u)
    lean: dict = defaultdict(list)
    for r, a in affinity.items():  # a removed node leans towards the node that replaced it
        lean[r].append(a)
        if layer[a] == layer[r] - 1:
            up[r].append(a)
        elif layer[a] == layer[r] + 1:
            far_down[r].append(a)
    seq = {k: i for i, k in enumerate(sorted(nodes, key=_order))}
    weight_only = {k: bool(v.get("weight_only")) for k, v in nodes.items()}
    status = {k: v["status"] for k, v in nodes.items()}
    rows: list[list] = [[] for _ in range(n_layers)]
    for v in lay:
        rows[lay[v]].append(v)
    for row in rows:
        row.sort(key=lambda v: seq[v] if v in seq else seq[v[1]] + 0.5)
    pos = {v: i for row in rows for i, v in enumerate(row)}
    after = {v: down[v] + far_down[v] for v in lay}

    def reorder(rng, nbrs):
        for x in rng:
            def key(v):
                ns = nbrs[v]
                bary = sum(pos[u] for u in ns) / len(ns) if ns else pos[v]
                return bary, not weight_only.get(v, False), status.get(v) == "removed", pos[v]
            rows[x].sort(key=key)
            for i, v in enumerate(rows[x]):
                pos[v] = i

    best, best_rows = _crossings(rows, pos, down), [list(r) for r in rows]
    for it in range(sweeps):
        if best == 0:
            break
        if it % 2 == 0:
            reorder(range(1, n_layers), up)
        else:
            reorder(range(n_layers - 2, -1, -1), after)
        c = _crossings(rows, pos, down)
        if c < best:
            best, best_rows = c, [list(r) for r in rows]
    rows = best_rows

    # coordinates: each node wants the median height of its neighbours, on a unit grid; weight-only nodes
    # give way to everything, removed nodes to the after graph, so the new data path runs straight
    y = {v: i - (len(row) - 1) / 2 for row in rows for i, v in enumerate(row)}
    links: dict = defaultdict(list)
    for v in lay:
        for u in up[v]:
            if u not in lean[v]:
                links[v].append(u)
                links[u].append(v)
        links[v].extend(lean[v])
    mass = {v: 0.0 if weight_only.get(v, False) else 0.05 if status.get(v) == "removed" else 1.0 for v in lay}
    for it in range(8):
        rng = range(n_layers) if it % 2 == 0 else range(n_layers - 1, -1, -1)
        for x in rng:
            row = rows[x]
            if not row:
                continue
            want = [_median([y[u] for u in links[v] if mass[u] >= mass[v]] or [y[u] for u in links[v]], y[v])
                    for v in row]
            gaps = [1.0] * (len(row) - 1)
            for v, yv in zip(row, _pava(want, [mass[v] for v in row], gaps)):
                y[v] = yv
    real = [y[k] for k in nodes]
    mid = round((max(real) + min(real)) / 2) if real else 0  # keeps the grid
    y = {v: yv - mid + 0.0 for v, yv in y.items()}
    bends = {e: [[lay[v], y[v]] for v in chain] for e, chain in chains.items()}
    return {k: y[k] for k in nodes}, bends


def _collapse_bands(nodes: dict[str, dict], edges: set[tuple[str, str]], layer: dict[str, int]):
    """Merge consecutive layers that hold only unchanged/collapsed nodes into one node each."""
    by_layer: dict[int, list[str]] = defaultdict(list)
    for k, x in layer.items():
        by_layer[x].append(k)
    groups, run = [], []
    for x in sorted(by_layer):
        quiet = all(nodes[k]["status"] in ("unchanged", "collapsed") for k in by_layer[x])
        if quiet:
            run.extend(sorted(by_layer[x], key=_order))
        else:
            if len(run) >= 2:
                groups.append(run)
            run = []
    if len(run) >= 2:
        groups.append(run)
    return _merge(nodes, edges, groups)


def _truncate(nodes: dict[str, dict], edges: set[tuple[str, str]], layer: dict[str, int], max_nodes: int):
    """Keep the first ``max_nodes - 1`` nodes by layer; the rest become one collapsed node."""
    order = sorted(nodes, key=lambda k: (layer[k], _order(k)))
    rest = order[max_nodes - 1:]
    count = sum(nodes[k]["count"] for k in rest)
    keep = {k: nodes[k] for k in order[: max_nodes - 1]}
    ops: Counter[str] = Counter()
    for k in rest:
        ops.update(nodes[k].get("ops") or {nodes[k]["label"]: 1})
    cid = "c:rest"
    keep[cid] = {"id": cid, "label": f"{count} more nodes (use focus to see them)", "name": "", "op_type": "",
                 "domain": "", "status": "collapsed", "count": count, "ops": dict(ops), "weight_only": False}
    moved = set(rest)
    new_edges = {(cid if s in moved else s, cid if d in moved else d) for s, d in edges}
    return keep, {(s, d) for s, d in new_edges if s != d}
