"""The graph diff as two interactive Cytoscape.js panes, before and after side by side (``graphdiff_component/``).

The engine (``ortlab.model.diff_view.graph_description``) gives the before/after graph as plain nodes and edges. This module
splits it into the two sides (a node matched across them keeps one id in both) and groups each side by name scope
(``/encoder/layer.0/…`` or ``namespace`` metadata): runs of unchanged nodes become one "n unchanged nodes" box,
and a level with too many members is split into parts in graph order. A group of one side is paired with its
twin on the other (the same name scope or part of the graph, by shared members), and which groups are open at
first is decided once for both sides (at most ``budget`` boxes a side): twins are open or closed together. Each
pane receives its whole group tree, the twins and the open groups; the component opens and closes groups itself
(a group with its twin) and lines matched groups up side by side.
Layout (dagre, layered top to bottom) and drawing happen in the browser, from files the app serves itself. Text
from the model is handed over as JSON data and drawn as text (canvas labels, ``textContent``), never as HTML.

Size: the grouping of the merged graph and the component's data contract (ids, groups, overlay) change
together with the JavaScript in ``graphdiff_component/``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

KIND_COLORS = {
    "removed": "#d62728",
    "fused": "#9467bd",
    "quantized": "#1f77b4",
    "added": "#2ca02c",
    "changed": "#f0a000",
    "unchanged": "#9e9e9e",
}
KIND_TEXT = {
    "removed": "removed",
    "fused": "fused (replaced by a fused/quantized node, or the fused node)",
    "quantized": "quantized (an int8 node: added, or in place of the float op of its name)",
    "added": "added",
    "changed": "changed (inputs or attributes)",
    "unchanged": "unchanged",
}
KIND_ORDER = ("removed", "fused", "quantized", "added", "changed", "unchanged")
DEFAULT_BUDGET = 120  # visible elements (nodes, boxes and open groups) when the view opens
MAX_CHILDREN = 24  # members of one level before it is split into parts
RUN_MIN = 3  # unchanged nodes in a row that become one box
_FUSED_MAX = 8  # removed nodes one fused node may stand for when groups are paired (more: a rewritten region)
FOCUS_HOPS = 2
OVERLAY_STOPS = ("#ffffcc", "#fd8d3c", "#bd0026")  # best … worst
# Fills of an absolute SQNR scale (green at or above the ok bar, amber between, red below the broken bar).
BAND_COLORS = {"ok": "#a6dba0", "amber": "#ffcc66", "bad": "#f08080"}
_CHAR_PX = 7.4
_TEXT_CAP = 60


def clean_text(text: object, cap: int = _TEXT_CAP) -> str:
    """Model text for a label: control characters dropped, capped. It stays text (never parsed as markup)."""
    s = "".join(ch for ch in str(text) if ch >= " " and ch != "\x7f")
    return s if len(s) <= cap else s[: cap - 1] + "…"


@dataclass
class _Group:
    id: str
    label: str
    kind: str  # scope | part | run
    children: list[str] = field(default_factory=list)
    order: float = 0.0


def _summary(kinds: Counter) -> str:
    n = sum(kinds.values())
    parts = [f"{kinds[k]} {k}" for k in KIND_ORDER[:-1] if kinds.get(k)]
    return f"{n} node{'s' if n != 1 else ''}" + (" · " + " · ".join(parts) if parts else " · unchanged")


def _dominant(kinds: Counter) -> str:
    changed = [(n, -KIND_ORDER.index(k), k) for k, n in kinds.items() if k != "unchanged"]
    return max(changed)[2] if changed else "unchanged"


class _Tree:
    """Name-scope groups over the description's nodes, with unchanged runs and parts."""

    def __init__(self, nodes: dict[str, dict]):
        self.nodes = nodes
        self.groups: dict[str, _Group] = {"": _Group("", "", "scope")}
        self.parent: dict[str, str] = {}
        # A scope met again after other members of its parent (a module called in several places, such as a
        # shared activation) starts a new group: a group holds one stretch of the graph, never a far-flung set.
        current: dict[str, str] = {}  # "s:" + scope path → the group of its current stretch
        seen: dict[str, int] = {}  # stretches of each scope path so far
        for nid in sorted(nodes, key=lambda k: nodes[k]["order"]):
            scope = [str(p) for p in nodes[nid].get("scope") or []]
            gid = ""
            for k in range(len(scope)):
                path = "s:" + "/".join(scope[: k + 1])
                child = current.get(path)
                siblings = self.groups[gid].children
                if child is None or not siblings or siblings[-1] != child:
                    seen[path] = seen.get(path, 0) + 1
                    child = path if seen[path] == 1 else f"{path}#{seen[path]}"
                    current[path] = child
                    self.groups[child] = _Group(child, scope[k], "scope")
                    self._add(gid, child)
                gid = child
            self._add(gid, nid)
        self._compress("")
        self._runs_and_parts("")
        self.members: dict[str, list[str]] = {}
        self._collect("")

    def _add(self, gid: str, child: str) -> None:
        self.groups[gid].children.append(child)
        self.parent[child] = gid

    def _compress(self, gid: str) -> None:
        """A scope holding one other scope only becomes one group (``model/encoder``); a scope holding a single
        node disappears (the node moves up)."""
        g = self.groups[gid]
        for c in list(g.children):
            if c in self.groups:
                self._compress(c)
        if not gid:
            return
        while len(g.children) == 1 and g.children[0] in self.groups:
            inner = self.groups.pop(g.children[0])
            g.label = f"{g.label}/{inner.label}"
            g.children = inner.children
            for c in g.children:
                self.parent[c] = gid
        if len(g.children) == 1:
            parent = self.groups[self.parent[gid]]
            only = g.children[0]
            parent.children[parent.children.index(gid)] = only
            self.parent[only] = self.parent.pop(gid)
            del self.groups[gid]

    def _order(self, item: str) -> float:
        if item in self.nodes:
            return float(self.nodes[item]["order"])
        return self.groups[item].order

    def _runs_and_parts(self, gid: str) -> float:
        g = self.groups[gid]
        for c in g.children:
            if c in self.groups:
                self._runs_and_parts(c)
        g.children.sort(key=self._order)
        # unchanged runs
        out: list[str] = []
        run: list[str] = []

        def flush() -> None:
            if len(run) >= RUN_MIN and len(run) < len(g.children):
                rid = f"r:{gid}:{run[0]}"
                self.groups[rid] = _Group(rid, f"{len(run)} unchanged nodes", "run", list(run), self._order(run[0]))
                for x in run:
                    self.parent[x] = rid
                self.parent[rid] = gid
                out.append(rid)
            else:
                out.extend(run)
            run.clear()

        for c in g.children:
            if c in self.nodes and self.nodes[c]["kind"] == "unchanged":
                run.append(c)
            else:
                flush()
                out.append(c)
        flush()
        g.children = self._parts(gid, out)
        g.order = self._order(g.children[0]) if g.children else 0.0
        return g.order

    def _parts(self, gid: str, items: list[str]) -> list[str]:
        """Split a level of more than MAX_CHILDREN members into consecutive parts of equal size (recursively),
        each named by its first and last member."""
        if len(items) <= MAX_CHILDREN:
            return items
        n_parts = min(MAX_CHILDREN, math.ceil(len(items) / MAX_CHILDREN))
        size = math.ceil(len(items) / n_parts)
        out = []
        for k in range(n_parts):
            chunk = items[k * size: (k + 1) * size]
            if len(chunk) <= 1:
                out.extend(chunk)
                continue
            pid = f"p:{gid}:{chunk[0]}"
            name = f"{self._name(chunk[0])} … {self._name(chunk[-1])}"
            part = _Group(pid, name, "part", [], self._order(chunk[0]))
            self.groups[pid] = part
            self.parent[pid] = gid
            for x in chunk:
                self.parent[x] = pid
            part.children = self._parts(pid, chunk)
            out.append(pid)
        return out

    def _name(self, item: str) -> str:
        if item in self.groups:
            g = self.groups[item]
            return g.label.split(" … ")[0] if g.kind == "part" else g.label.split("/")[-1]
        n = self.nodes[item]
        return str(n.get("name") or n.get("label") or "?").rsplit("/", 1)[-1] or str(n.get("label"))

    def _collect(self, gid: str) -> list[str]:
        out: list[str] = []
        for c in self.groups[gid].children:
            out.extend(self._collect(c) if c in self.groups else [c])
        self.members[gid] = out
        return out

    def kinds(self, gid: str) -> Counter:
        return Counter(self.nodes[m]["kind"] for m in self.members[gid])


def _twins(trees: tuple[_Tree, _Tree], affinity: dict[str, str]) -> dict[str, str]:
    """{before group: after group} for the groups that stand for the same part of the graph on both sides: the
    same kind (and for a name scope, the same scope path), paired one to one by the most shared members (a
    removed node counts as the node that replaced it, unless that node stands for a whole rewritten region),
    else by the same id. A scope met in several stretches
    (``s:layer2``, ``s:layer2#2``) pairs with the stretch that holds its nodes, not the one of the same number."""
    keys = _member_keys(trees, affinity)
    sets = [{g: {keys[s][m] for m in t.members[g] if m in keys[s]} for g in t.groups if g}
            for s, t in enumerate(trees)]
    shared = _shared_members(trees, sets)
    ranked = sorted(shared, key=lambda p: (-shared[p] / max(1, len(sets[0][p[0]] | sets[1][p[1]])),
                                           p[0] != p[1], trees[0].groups[p[0]].order, p))
    twins: dict[str, str] = {}
    taken: set[str] = set()
    for a, b in ranked:
        if a not in twins and b not in taken and (shared[(a, b)] or a == b):
            twins[a] = b
            taken.add(b)
    return twins


def _member_keys(trees: tuple[_Tree, _Tree], affinity: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Per side, node → the key it is compared by: its own id when both sides have it, a removed node's
    replacement (unless that replaces a whole region); nodes with no counterpart have none."""
    before, after = trees
    claims = Counter(affinity.values())
    key_before: dict[str, str] = {}
    for k in before.nodes:
        if k in after.nodes:
            key_before[k] = k
        elif affinity.get(k) in after.nodes and claims[affinity[k]] <= _FUSED_MAX:
            key_before[k] = affinity[k]
    linked = set(key_before.values())
    return key_before, {k: k for k in after.nodes if k in linked}


def _scope_base(gid: str) -> str:
    return re.sub(r"#\d+$", "", gid)


def _compatible(trees: tuple[_Tree, _Tree], a: str, b: str) -> bool:
    """Whether before group ``a`` may pair with after group ``b``: the same kind, a scope with the same path."""
    ka, kb = trees[0].groups[a].kind, trees[1].groups[b].kind
    return ka == kb and (ka != "scope" or _scope_base(a) == _scope_base(b))


def _shared_members(trees: tuple[_Tree, _Tree], sets: list[dict[str, set[str]]]) -> Counter:
    """(before group, after group) → how many member keys they share, for every compatible pair that shares one
    and every compatible pair with the same id."""
    holders: dict[str, list[str]] = defaultdict(list)  # member key → after groups holding it
    for g, ks in sets[1].items():
        for k in ks:
            holders[k].append(g)
    shared: Counter = Counter()
    for a, ks in sets[0].items():
        for k in ks:
            for b in holders[k]:
                if _compatible(trees, a, b):
                    shared[(a, b)] += 1
    for g in trees[0].groups:
        if g and g in trees[1].groups and _compatible(trees, g, g):
            shared[(g, g)] += 0
    return shared


def _shared_expansion(trees: tuple[_Tree, _Tree], twin: tuple[dict[str, str], dict[str, str]], budget: int
                      ) -> tuple[set[str], set[str]]:
    """The groups open at first on each side, decided once for both: a group and its twin (``twin[side]``: that
    side's group → the other side's) are open together or closed together. Breadth first (groups with changes
    first), a group opens with its ancestors and their twins when every side still draws at most ``budget``
    elements; runs of unchanged nodes stay closed."""
    opened: tuple[set[str], set[str]] = ({""}, {""})
    count = [len(t.groups[""].children) for t in trees]
    seen: set[tuple[int, str]] = set()

    def closure(side: int, gid: str) -> tuple[set[str], set[str]]:
        add: tuple[set[str], set[str]] = (set(), set())
        todo = [(side, gid)]
        while todo:
            s, g = todo.pop()
            while g and g not in opened[s] and g not in add[s]:
                add[s].add(g)
                if g in twin[s]:
                    todo.append((1 - s, twin[s][g]))
                g = trees[s].parent[g]
        return add

    def unchanged(s: int, g: str) -> bool:
        return trees[s].kinds(g).get("unchanged", 0) == len(trees[s].members[g])

    while True:
        layer = [(s, c) for s in (0, 1) for g in opened[s] for c in trees[s].groups[g].children
                 if c in trees[s].groups and c not in opened[s] and (s, c) not in seen]
        if not layer:
            return opened
        layer.sort(key=lambda x: (unchanged(*x), trees[x[0]].groups[x[1]].order, x))
        for s, g in layer:
            seen.add((s, g))
            if g in opened[s] or trees[s].groups[g].kind == "run":
                continue
            add = closure(s, g)
            cost = [sum(len(trees[k].groups[x].children) for x in add[k]) for k in (0, 1)]
            if all(count[k] + cost[k] <= budget for k in (0, 1)):
                for k in (0, 1):
                    opened[k].update(add[k])
                    count[k] += cost[k]


def _within_hops(hits: list[str], edges: list[list[str]], hops: int) -> set[str]:
    adj: dict[str, set[str]] = defaultdict(set)
    for s, d in edges:
        adj[s].add(d)
        adj[d].add(s)
    keep = set(hits)
    frontier = set(hits)
    for _ in range(hops):
        frontier = {n for f in frontier for n in adj[f]} - keep
        keep |= frontier
    return keep


def overlay_color(t: float) -> str:
    """Colour of a normalised overlay value (0 best … 1 worst)."""
    t = min(1.0, max(0.0, t))
    stops = [tuple(int(c[i: i + 2], 16) for i in (1, 3, 5)) for c in OVERLAY_STOPS]
    seg = min(len(stops) - 2, int(t * (len(stops) - 1)))
    f = t * (len(stops) - 1) - seg
    rgb = [round(stops[seg][i] + (stops[seg + 1][i] - stops[seg][i]) * f) for i in range(3)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def band_color(value: float, broken_db: float, ok_db: float) -> str:
    """Fill of an SQNR ``value`` (dB) on the absolute scale: red below ``broken_db``, amber below ``ok_db``,
    green from ``ok_db`` up."""
    if value < broken_db:
        return BAND_COLORS["bad"]
    return BAND_COLORS["amber"] if value < ok_db else BAND_COLORS["ok"]


def band_legend(broken_db: float, ok_db: float, unit: str = "dB") -> list[dict]:
    """The legend entries of the absolute scale, with the numbers."""
    return [{"color": BAND_COLORS["ok"], "text": f"≥ {ok_db:g} {unit} (ok)"},
            {"color": BAND_COLORS["amber"], "text": f"{broken_db:g}–{ok_db:g} {unit}"},
            {"color": BAND_COLORS["bad"], "text": f"< {broken_db:g} {unit} (broken bar)"}]


def _size(lines: list[str]) -> tuple[int, int]:
    return int(max(64, _CHAR_PX * max(len(x) for x in lines) + 22)), int(16 * len(lines) + 14)


def _details(n: dict) -> dict:
    """What the side panel shows for a node (plain text fields)."""
    return {"name": clean_text(n.get("name") or "(unnamed)", 300), "op_type": clean_text(n.get("op_type", "")),
            "domain": clean_text(n.get("domain") or "ai.onnx"), "status": n.get("status", ""),
            "scope": clean_text("/".join(n.get("scope") or []), 300),
            "attributes": [[clean_text(k), clean_text(v, 200)] for k, v in (n.get("attributes") or {}).items()],
            "inputs": [[clean_text(t, 200), clean_text(s)] for t, s in n.get("inputs") or []],
            "outputs": [[clean_text(t, 200), clean_text(s)] for t, s in n.get("outputs") or []],
            "quant": [[clean_text(q["param"]), clean_text(q["tensor"], 200), clean_text(q["value"], 120)]
                      for q in n.get("quant") or []],
            "changes": list(n.get("changes") or []),
            "before_op_type": clean_text(n.get("before_op_type") or ""),
            "before_domain": clean_text(n.get("before_domain") or "ai.onnx"),
            "matched": clean_text(n.get("matched") or "", 300),
            "before": {"attributes": [[clean_text(k), clean_text(v, 200)]
                                      for k, v in ((n.get("before") or {}).get("attributes") or {}).items()],
                       "inputs": [[clean_text(t, 200), clean_text(s)]
                                  for t, s in (n.get("before") or {}).get("inputs") or []]}
            if n.get("before") else None}


def counts_text(counts: dict) -> str:
    """The one line of change counts (``GraphDiff.counts``) the page header and the view show, short enough for
    one line beside the view's tools at 1280 px: "21 removed (8 folded) · 14 added · 60 changed (60 int8/fused) ·
    180 unchanged" (folded: into a fused or quantized node; int8/fused: a changed node that became one)."""
    if not counts:
        return ""
    removed = f"{counts.get('removed', 0)} removed"
    if counts.get("fused"):
        removed += f" ({counts['fused']} folded)"
    added = f"{counts.get('added', 0)} added"
    changed = f"{counts.get('changed', 0)} changed"
    if counts.get("retyped"):
        changed += f" ({counts['retyped']} int8/fused)"
    return f"{removed} · {added} · {changed} · {counts.get('unchanged', 0)} unchanged"


SIDES = ("before", "after")


def is_constant(node: dict) -> bool:
    """An ONNX ``Constant`` node: data (a weight in node form), drawn no more than an initializer is."""
    return node.get("op_type") == "Constant" and node.get("domain", "ai.onnx") in ("", "ai.onnx")


def _side_nodes(description: dict, side: str, keep: set[str] | None) -> tuple[dict[str, dict], list[list[str]]]:
    """The nodes and data edges of one side: ``after`` is the candidate graph (ids ``a<j>``); ``before`` is the
    reference graph, a matched node under its after id with its before name, scope and position. ``Constant``
    nodes are left out (exporters such as Paddle's hold every weight in one; quantization moves them into
    initializers, and hundreds of removed boxes with an edge each hid the graph), unless ``keep`` names them."""
    nodes: dict[str, dict] = description.get("nodes") or {}
    out: dict[str, dict] = {}
    for k, v in nodes.items():
        if keep is not None and k not in keep:
            continue
        if keep is None and is_constant(v):
            continue
        if side == "after" and k.startswith("a"):
            out[k] = v
        elif side == "before" and k.startswith("b"):
            out[k] = {**v, "order": v.get("before_order", v.get("order", 0.0))}
        elif side == "before" and v.get("matched") is not None:
            out[k] = {**v, "name": v["matched"], "scope": v.get("before_scope", v.get("scope")),
                      "order": v.get("before_order", v.get("order", 0.0))}
            if v.get("before_op_type"):  # quantized or fused in place: drawn as the op it was
                out[k].update(op_type=v["before_op_type"], label=v.get("before_label", v["before_op_type"]),
                              domain=v.get("before_domain", ""))
    edges = description.get(f"edges_{side}")
    if edges is None:  # a description without per-side edges: the merged edges between this side's nodes
        edges = description.get("edges") or []
    return out, [[s, d] for s, d in edges if s in out and d in out and s != d]


def _overlay_values(nodes: dict[str, dict], overlay: dict[str, float] | None, higher_is_worse: bool
                    ) -> dict[str, float]:
    """{node id: value, oriented so that higher is worse} for the nodes whose name has a finite value."""
    if not overlay:
        return {}
    by_name: dict[str, list[str]] = defaultdict(list)
    for k, v in nodes.items():
        if v.get("name"):
            by_name[str(v["name"])].append(k)
    values: dict[str, float] = {}
    for name, value in overlay.items():
        try:
            x = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            for k in by_name.get(str(name), []):
                y = x if higher_is_worse else -x
                values[k] = max(values.get(k, y), y)
    return values


def _pane(tree: _Tree, opened: set[str], twin: dict[str, str], edges: list[list[str]], values: dict[str, float],
          color, dark, higher_is_worse: bool) -> dict:
    """One side's whole group tree as Cytoscape.js element data (every group and node, each with its parent; a
    group with its ``twin`` on the other side), the groups open at first, and the node-level edges: the
    component shows and hides groups itself."""
    nodes = tree.nodes
    elements: list[dict] = []

    def add_overlay(data: dict, ids: list[str]) -> None:
        vals = [values[m] for m in ids if m in values]
        if vals:
            worst = max(vals)
            data["value"] = worst if higher_is_worse else -worst
            data["value_color"] = color(worst)
            if dark(worst):
                data["value_ink"] = "#ffffff"  # light text on the dark end of the ramp

    def walk(gid: str) -> None:
        for c in tree.groups[gid].children:
            if c in tree.groups:
                grp = tree.groups[c]
                kinds = tree.kinds(c)
                title = clean_text(grp.label, 48)
                summary = _summary(kinds)
                lines = [f"▸ {title}", summary] if grp.kind != "run" else [f"▸ {title}"]
                data: dict = {"id": c, "group": grp.kind, "kind": _dominant(kinds), "count": len(tree.members[c]),
                              "label_open": f"▾ {title} · {summary}", "label_closed": "\n".join(lines)}
                data["w"], data["h"] = _size(lines)
                if gid:
                    data["parent"] = gid
                if c in twin:
                    data["twin"] = twin[c]
                add_overlay(data, tree.members[c])
                elements.append({"data": data})
                walk(c)
            else:
                n = nodes[c]
                op = clean_text(n.get("label") or n.get("op_type") or "?", 40)
                short = clean_text(str(n.get("name") or "").rsplit("/", 1)[-1], 28)
                lines = [op, short] if short and short != op else [op]
                data = {"id": c, "label": "\n".join(lines), "kind": n.get("kind", n.get("status", "unchanged")),
                        "status": n.get("status", ""), "weight": bool(n.get("weight_only"))}
                data["w"], data["h"] = _size(lines)
                if gid:
                    data["parent"] = gid
                add_overlay(data, [c])
                elements.append({"data": data})

    walk("")
    shown = [e["data"]["id"] for e in elements
             if all(a in opened for a in _ancestors(tree, e["data"]["id"]))]
    return {"elements": elements, "open": sorted(g for g in opened if g), "visible": len(shown),
            "edges": [[s, d, "removed" if s.startswith("b") or d.startswith("b") else "data"] for s, d in edges],
            "total_nodes": len(nodes),
            "present": sorted({nodes[k].get("kind", "unchanged") for k in nodes})}


def _ancestors(tree: _Tree, item: str) -> list[str]:
    out = []
    x = tree.parent.get(item, "")
    while x:
        out.append(x)
        x = tree.parent.get(x, "")
    return out


def visible_elements(pane: dict, opened: set[str] | None = None) -> list[dict]:
    """What a pane draws with ``opened`` groups open (default: the groups open at first), as the component
    computes it: the elements whose ancestors are all open (an open group as a box around its members, a closed
    one as a node), and the edges between what is drawn, each ending at the innermost drawn box."""
    opened = set(pane["open"]) if opened is None else opened
    parent = {e["data"]["id"]: e["data"].get("parent") for e in pane["elements"]}

    def rep(x: str) -> str:
        chain = [x]
        while parent.get(chain[-1]):
            chain.append(parent[chain[-1]])
        top = x
        for g in chain[1:]:
            if g not in opened:
                top = g
        return top

    out = []
    for e in pane["elements"]:
        d = dict(e["data"])
        if rep(d["id"]) != d["id"]:
            continue
        if "group" in d:
            d["open"] = d["id"] in opened
            d["label"] = d["label_open"] if d["open"] else d["label_closed"]
        out.append(d)
    seen = set()
    for s, d, kind in pane["edges"]:
        rs, rd = rep(s), rep(d)
        if rs != rd and (rs, rd) not in seen:
            seen.add((rs, rd))
            out.append({"id": f"e{len(seen)}", "source": rs, "target": rd, "kind": kind})
    return out


def build_view(description: dict, *, focus: str | None = None, overlay: dict[str, float] | None = None,
               overlay_label: str = "value", higher_is_worse: bool = True, budget: int = DEFAULT_BUDGET,
               thresholds: tuple[float, float] | None = None) -> dict:
    """The two panes of the graph-diff view, before and after (``description`` from
    ``ortlab.model.diff_view.graph_description``), drawn side by side by the component.

    ``focus`` (a node name or part of one, an op type or op key) keeps the nodes within two hops of the
    matches; ``overlay`` ({node name: value}; names of either side) colours the nodes by value, worst in red
    (the highest, unless ``higher_is_worse`` is False); a closed group shows its members' worst value. With
    ``thresholds`` (broken bar, ok bar; lower is worse) the colours are absolute: red below the broken bar, amber
    below the ok bar, green above, whatever the other values are.

    Returns ``{"panes": {"before": pane, "after": pane}, "details": {node id: panel fields}, "affinity",
    "counts", "header", "legend", "overlay", "visible", "constants_hidden", "total_nodes", "focus",
    "focus_matches", "found"}`` (``found``: {side: the ids of the focus's hits drawn there}). A pane
    holds its whole group tree (``elements``: groups by name scope, runs of unchanged nodes, parts of long
    levels; nodes; each with its parent, a group with its ``twin`` on the other side), the groups ``open`` at
    first (at most ``budget`` boxes shown; the same on both sides for twins) and its node-level ``edges``: the
    component opens and closes groups itself, without a round trip to Python. A node
    matched across the two sides has the same id in both panes; ``affinity`` maps a removed node to the node
    that replaced it.
    """
    nodes: dict[str, dict] = description.get("nodes") or {}
    affinity: dict[str, str] = dict(description.get("affinity") or {})
    counts = dict(description.get("counts") or {})
    matches = None
    keep: set[str] | None = None
    hits: list[str] = []
    if focus:
        f = focus.strip().lower()
        hits = [k for k, v in nodes.items()
                if f in (str(v.get("op_type", "")).lower(), str(v.get("key", "")).lower(),
                         str(v.get("before_op_type", "")).lower())
                or f in str(v.get("name", "")).lower() or f in str(v.get("matched") or "").lower()]
        matches = len(hits)
        merged = list(description.get("edges") or [])
        keep = _within_hops(hits, merged + [[s, d] for s, d in affinity.items()], FOCUS_HOPS)
        affinity = {s: d for s, d in affinity.items() if s in keep and d in keep}
    sides = {side: _side_nodes(description, side, keep) for side in SIDES}
    found = _found(hits, affinity, sides["before"][0], sides["after"][0])
    values = {side: _overlay_values(sides[side][0], overlay, higher_is_worse) for side in SIDES}
    every = [x for v in values.values() for x in v.values()]
    lo, hi = (min(every), max(every)) if every else (0.0, 0.0)

    def norm(x: float) -> float:
        return 0.5 if hi <= lo else (x - lo) / (hi - lo)

    if thresholds is not None:
        sign = 1.0 if higher_is_worse else -1.0

        def fill(x: float) -> str:
            return band_color(sign * x, *thresholds)

        def dark(x: float) -> bool:
            return False  # the band fills are light: dark text everywhere
    else:
        def fill(x: float) -> str:
            return overlay_color(norm(x))

        def dark(x: float) -> bool:
            return norm(x) > 0.6
    trees = (_Tree(sides["before"][0]), _Tree(sides["after"][0]))
    twins = _twins(trees, affinity)
    twin = (twins, {b: a for a, b in twins.items()})
    opened = _shared_expansion(trees, twin, budget)
    panes = {side: _pane(trees[k], opened[k], twin[k], sides[side][1], values[side], fill, dark, higher_is_worse)
             for k, side in enumerate(SIDES)}
    shown = {k for side in SIDES for k in sides[side][0]}
    details = {k: _details(nodes[k]) for k in nodes if k in shown}
    present = {k for p in panes.values() for k in p.pop("present")}
    legend = [{"kind": k, "color": KIND_COLORS[k], "text": KIND_TEXT[k]} for k in KIND_ORDER if k in present]
    return {
        "panes": panes,
        "details": details,
        "affinity": affinity,
        "counts": counts,
        "header": counts_text(counts),
        "legend": legend,
        "overlay": {"label": clean_text(overlay_label), "min": lo if higher_is_worse else -hi,
                    "max": hi if higher_is_worse else -lo, "colors": list(OVERLAY_STOPS),
                    "higher_is_worse": higher_is_worse, "n": len(values["after"]),
                    "n_before": len(values["before"]),
                    "bands": band_legend(*thresholds) if thresholds is not None else None} if every else None,
        "visible": max(p["visible"] for p in panes.values()),
        "constants_hidden": sum(1 for v in nodes.values() if is_constant(v)) if keep is None else 0,
        "total_nodes": len(shown),
        "focus": focus or None,
        "focus_matches": matches,
        "found": found,
    }


def _found(hits: list[str], affinity: dict[str, str], before: dict, after: dict) -> dict[str, list[str]]:
    """The search's hits drawn on each side: the hits that side has; on a side with none, the nodes that stand
    for them across a fusion (after: what replaced a removed hit; before: the removed nodes a new hit replaced)."""
    hit = set(hits)
    own = {side: sorted(h for h in hit if h in nodes) for side, nodes in (("before", before), ("after", after))}
    across = {"before": sorted({b for b, a in affinity.items() if a in hit and b in before}),
              "after": sorted({a for b, a in affinity.items() if b in hit and a in after})}
    return {side: own[side] or across[side] for side in ("before", "after")}


# -- the Streamlit component ------------------------------------------------------------------------------

COMPONENT_DIR = Path(__file__).resolve().parent / "graphdiff_component"
COMPONENT_NAME = "ortlab_graphdiff"
_component: list = []


def _declared():
    if not _component:
        import streamlit.components.v1 as components

        _component.append(components.declare_component(COMPONENT_NAME, path=str(COMPONENT_DIR)))
    return _component[0]


def component_args(view: dict, height: int, titles: tuple[str, str] = ("Before", "After")) -> dict:
    """The arguments the component receives (JSON data only), with a revision that changes with the view."""
    args = {k: view[k] for k in ("panes", "details", "affinity", "header", "legend", "overlay")}
    args["found"] = view.get("found") or {}
    args["search"] = clean_text(view["focus"]) if view.get("focus") else None
    args["titles"] = [clean_text(t, 80) for t in titles]
    args["height"] = int(height)
    args["revision"] = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return args


def show_graph_diff(description: dict, key: str, *, titles: tuple[str, str] = ("Before", "After"),
                    focus: str | None = None, overlay: dict[str, float] | None = None, overlay_label: str = "value",
                    higher_is_worse: bool = True, height: int = 720,
                    thresholds: tuple[float, float] | None = None) -> dict:
    """Draw the graph diff of ``description`` in the Cytoscape.js component: before and after side by side,
    ``titles`` over the panes. Groups open and close inside the component (no rerun, the zoom stays), so it
    sends nothing back. ``overlay`` ({node name: value}) colours nodes by value. Returns the view that was drawn
    (see :func:`build_view`)."""
    view = build_view(description, focus=focus, overlay=overlay, overlay_label=overlay_label,
                      higher_is_worse=higher_is_worse, thresholds=thresholds)
    _declared()(key=key, default=None, **component_args(view, height, titles))
    return view
