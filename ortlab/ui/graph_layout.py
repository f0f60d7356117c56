"""Layout of a before/after graph for drawing: plain nodes and edges in, positioned nodes and bent edges out.

The engine (``ortlab.diff.graph_description``) says which nodes and edges there are; this module only
arranges them: collapsing unchanged runs, focusing, layering left to right and ordering each layer.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict, deque


def graph_view(description: dict, focus: str | None = None, max_nodes: int = 400, *, hops: int = 2) -> dict:
    """Plain data for drawing a before/after graph (``description`` from ``ortlab.diff.graph_description``),
    laid out left to right.

    Returns ``{"nodes": [...], "edges": [...], "total_nodes", "truncated", "focus", "focus_matches",
    "counts"}``. Each node has id, label, name, op_type, domain, key, status (removed/added/changed/
    unchanged/collapsed), weight_only (computed from initializers/constants alone), layer, x (= layer), y
    and count (nodes it stands for; collapsed nodes add "ops"). Each edge has source, target, status
    (removed/added/unchanged) and points (bends of a long edge, ``[[x, y], ...]``). Runs of unchanged
    single-input/single-output nodes are collapsed; ``focus`` (a node name, op type or op key) keeps nodes
    within ``hops`` of the matches. At most ``max_nodes`` nodes come back. ``description`` is not modified.
    """
    nodes: dict[str, dict] = {k: dict(v) for k, v in description["nodes"].items()}
    edges: set[tuple[str, str]] = {(s, d) for s, d in description["edges"]}
    total = len(nodes)
    matches = None

    if focus:
        hits = [k for k, v in nodes.items() if focus in (v["name"], v["op_type"], v["key"])]
        matches = len(hits)
        keep = _within_hops(hits, edges, hops)
        nodes = {k: v for k, v in nodes.items() if k in keep}
        edges = {(s, d) for s, d in edges if s in keep and d in keep}

    affinity = dict(description.get("affinity") or {})
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
                      "op_type": "", "domain": "", "key": "", "status": "collapsed", "count": count, "ops": dict(ops),
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
                 "domain": "", "key": "", "status": "collapsed", "count": count, "ops": dict(ops), "weight_only": False}
    moved = set(rest)
    new_edges = {(cid if s in moved else s, cid if d in moved else d) for s, d in edges}
    return keep, {(s, d) for s, d in new_edges if s != d}
