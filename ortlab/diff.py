"""What changed between two versions of a model: op deltas, matched nodes, fusions, and a drawable view."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from .model import _tensor_nbytes, dtype_name, load_model, op_key

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
        return asdict(self)


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

    def cover(self, group: list[int]) -> list[int] | None:
        """Removed before-nodes that ``group`` (after-node indices) replaces, or None when the
        group's inputs do not bound a clean region of removed nodes."""
        a, b = self.a, self.b
        produced = {t for j in group for t in a.nodes[j].output}
        own = {self.rev[j] for j in group if j in self.rev}
        ins = {self.before_name(t) for j in group for t in a.nodes[j].input if t and t not in produced}
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
             changed: list[int]) -> list[str]:
    tracer = _Tracer(b, a, pairs, set(removed))
    lines: Counter[str] = Counter()
    explained: set[int] = set()

    def label(before_nodes: list[int], group: list[int]) -> str:
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
    """Plain data for drawing a before/after graph: the after graph plus removed nodes.

    Returns ``{"nodes": [...], "edges": [...], "total_nodes", "truncated", "focus", "focus_matches",
    "counts"}``. Each node has id, label, name, op_type, domain, status (removed/added/changed/
    unchanged/collapsed), layer, x, y and count (nodes it stands for; collapsed nodes add "ops"). Runs of unchanged single-input/single-output nodes
    are collapsed; ``focus`` (a node name or op type) keeps nodes within ``hops`` of the matches.
    At most ``max_nodes`` nodes come back.
    """
    before, after = _load(before_path), _load(after_path)
    b, a, pairs, removed, added, changed = _diff_parts(before, after)
    set_added, set_changed = set(added), set(changed)
    nodes: dict[str, dict] = {}
    for j, n in enumerate(a.nodes):
        status = "added" if j in set_added else "changed" if j in set_changed else "unchanged"
        nodes[f"a{j}"] = {"id": f"a{j}", "label": _short(_dom(n), n.op_type), "name": n.name, "op_type": n.op_type,
                          "domain": _dom(n), "status": status, "count": 1}
    for i in removed:
        n = b.nodes[i]
        nodes[f"b{i}"] = {"id": f"b{i}", "label": _short(_dom(n), n.op_type), "name": n.name, "op_type": n.op_type,
                          "domain": _dom(n), "status": "removed", "count": 1}
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

    nodes, edges = _collapse_chains(nodes, edges)
    layer = _layers(nodes, edges)
    if len(nodes) > max_nodes:
        nodes, edges = _collapse_bands(nodes, edges, layer)
        layer = _layers(nodes, edges)
    truncated = False
    if len(nodes) > max_nodes:
        nodes, edges = _truncate(nodes, edges, layer, max_nodes)
        layer = _layers(nodes, edges)
        truncated = True
    by_layer: dict[int, list[str]] = defaultdict(list)
    for k in sorted(nodes, key=lambda k: (layer[k], _order(k))):
        by_layer[layer[k]].append(k)
    for x, ids in by_layer.items():
        for y, k in enumerate(ids):
            nodes[k].update(layer=x, x=x, y=y)
    out_nodes = sorted(nodes.values(), key=lambda v: (v["x"], v["y"]))
    return {
        "nodes": out_nodes,
        "edges": [{"source": s, "target": d} for s, d in sorted(edges)],
        "total_nodes": total,
        "truncated": truncated,
        "focus": focus,
        "focus_matches": matches,
        "counts": dict(Counter(v["status"] for v in out_nodes)),
    }


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
                      "op_type": "", "domain": "", "status": "collapsed", "count": count, "ops": dict(ops)}
        for k in run:
            rep[k] = cid
            del nodes[k]
    new_edges = {(rep.get(s, s), rep.get(d, d)) for s, d in edges}
    return nodes, {(s, d) for s, d in new_edges if s != d}


def _layers(nodes: dict[str, dict], edges: set[tuple[str, str]]) -> dict[str, int]:
    """Longest-path depth from the sources; nodes on cycles (possible when two graphs are merged) are
    placed after their placed predecessors."""
    indeg = {k: 0 for k in nodes}
    succ: dict[str, list[str]] = defaultdict(list)
    for s, d in edges:
        succ[s].append(d)
        indeg[d] += 1
    depth = {k: 0 for k in nodes}
    queue = deque(sorted((k for k, v in indeg.items() if v == 0), key=_order))
    placed = set()
    while len(placed) < len(nodes):
        if not queue:  # break a cycle at the earliest unplaced node
            k = min((k for k in nodes if k not in placed), key=_order)
            indeg[k] = 0
            queue.append(k)
        k = queue.popleft()
        if k in placed:
            continue
        placed.add(k)
        for d in succ[k]:
            if d in placed:
                continue
            depth[d] = max(depth[d], depth[k] + 1)
            indeg[d] -= 1
            if indeg[d] == 0:
                queue.append(d)
    return depth


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
                 "domain": "", "status": "collapsed", "count": count, "ops": dict(ops)}
    moved = set(rest)
    new_edges = {(cid if s in moved else s, cid if d in moved else d) for s, d in edges}
    return keep, {(s, d) for s, d in new_edges if s != d}
