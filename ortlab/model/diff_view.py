"""The before/after graph to draw, as plain data (:func:`graph_description`: nodes with their change kind, name
scope, attributes, shapes and quantization parameters; ``ortlab.ui.graph.graph_view`` groups it), and carrying per-node
values (e.g. the per-node int8 error, keyed by QDQ names) over to the fused graph (:func:`map_node_names`,
:func:`carry_values`). The diff itself is :mod:`ortlab.model.diff`."""

from __future__ import annotations

import functools

import onnx

from ortlab.core import dtypes
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.model.inspect import op_key
from ortlab.model.diff import (QDQ_OPS, change_counts, change_kinds, diff_parts, fusion_lines, is_quantization_op,
                               node_changes)
from ortlab.model.diff_match import IndexedGraph, load_for_diff, node_domain, short_op


_TEXT_CAP = 160


def _cap(text: str) -> str:
    return text if len(text) <= _TEXT_CAP else text[: _TEXT_CAP - 1] + "…"


def _attr_text(attr: onnx.AttributeProto) -> str:
    """An attribute's value as short plain text (tensors and graphs summarised)."""
    from onnx import helper

    if attr.type == onnx.AttributeProto.TENSOR:
        t = attr.t
        return f"tensor {dtypes.from_onnx(t.data_type)}{list(t.dims)}"
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "subgraph"
    try:
        value = helper.get_attribute_value(attr)
    except ValueError:  # a reference attribute or a type onnx does not know
        return "?"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, list):
        value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return _cap(str(value))


def _value_infos(model: onnx.ModelProto) -> dict[str, str]:
    """Tensor name → "dtype[d0, d1, …]" from the graph's inputs, outputs, value_info and ONNX shape inference
    (best effort: contrib ops and missing external data leave some tensors without a shape)."""
    graph = model.graph
    infos = list(graph.input) + list(graph.output) + list(graph.value_info)
    if len(graph.node) <= 20_000:
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
            infos += list(inferred.graph.value_info)
        except ONNX_ERRORS:  # best effort, as said: the declared shapes stand
            pass
    out: dict[str, str] = {}
    for v in infos:
        tt = v.type.tensor_type
        if not v.type.HasField("tensor_type") or v.name in out:
            continue
        dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        dtype = dtypes.from_onnx(tt.elem_type) if tt.elem_type else "?"
        out[v.name] = dtype + (f"[{', '.join(dims)}]" if dims is not None else "")
    for t in graph.initializer:
        out.setdefault(t.name, f"{dtypes.from_onnx(t.data_type)}[{', '.join(str(d) for d in t.dims)}]")
    return out


def _small_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Initializers and Constant outputs of at most 4,096 elements with their data in the file."""
    out: dict[str, onnx.TensorProto] = {}
    for t in model.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n <= 4096 and t.data_location != onnx.TensorProto.EXTERNAL:
            out[t.name] = t
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    out[node.output[0]] = attr.t
    return out


def _values_text(t: onnx.TensorProto) -> str:
    from onnx import numpy_helper

    try:
        arr = numpy_helper.to_array(t)
    except ONNX_ERRORS + (OSError,):  # an unknown data type, or external data not at hand
        return "?"
    flat = arr.reshape(-1)
    if flat.size == 1:
        v = flat[0].item()
        return f"{v:.6g}" if isinstance(v, float) else str(v)
    if flat.size == 0:
        return "[]"
    lo, hi = flat.min().item(), flat.max().item()
    fmt = (lambda x: f"{x:.4g}") if flat.dtype.kind == "f" else str
    return f"{flat.size} values (per channel), {fmt(lo)} … {fmt(hi)}"


_QLINEAR_SLOTS = {  # contrib QLinear ops (no ONNX schema): input slot → parameter name
    "QLinearAdd": {1: "A_scale", 2: "A_zero_point", 4: "B_scale", 5: "B_zero_point", 6: "C_scale", 7: "C_zero_point"},
    "QLinearMul": {1: "A_scale", 2: "A_zero_point", 4: "B_scale", 5: "B_zero_point", 6: "C_scale", 7: "C_zero_point"},
    "QLinearGlobalAveragePool": {1: "x_scale", 2: "x_zero_point", 3: "y_scale", 4: "y_zero_point"},
    "QLinearAveragePool": {1: "x_scale", 2: "x_zero_point", 3: "y_scale", 4: "y_zero_point"},
    "QLinearSigmoid": {1: "X_scale", 2: "X_zero_point", 3: "Y_scale", 4: "Y_zero_point"},
    "QLinearLeakyRelu": {1: "X_scale", 2: "X_zero_point", 3: "Y_scale", 4: "Y_zero_point"},
    "QLinearSoftmax": {1: "X_scale", 2: "x_zero_point", 3: "y_scale", 4: "y_zero_point"},
}


@functools.lru_cache(maxsize=512)
def _slot_names(domain: str, op_type: str) -> dict[int, str]:
    if op_type in _QLINEAR_SLOTS:
        return _QLINEAR_SLOTS[op_type]
    try:
        schema = onnx.defs.get_schema(op_type, domain=domain)
    except onnx.defs.SchemaError:  # a contrib or custom op: inputs by position
        return {}
    return {k: f.name for k, f in enumerate(schema.inputs)}


def _quant_params(node: onnx.NodeProto, values: dict[str, onnx.TensorProto]) -> list[dict]:
    """Scale and zero point inputs of a quantization node: [{"param", "tensor", "value"}]."""
    if not is_quantization_op(node.op_type):
        return []
    slots = _slot_names(node_domain(node), node.op_type)
    out = []
    for k, t in enumerate(node.input):
        if not t:
            continue
        param = slots.get(k, "")
        if not param:  # ORT's quantizer names these tensors <tensor>_scale / <tensor>_zero_point
            param = "scale" if t.endswith("scale") else "zero_point" if t.endswith("zero_point") else ""
        if "scale" not in param and "zero_point" not in param:
            continue
        out.append({"param": param, "tensor": t, "value": _values_text(values[t]) if t in values else "?"})
    return out


def _scope(node: onnx.NodeProto) -> list[str]:
    """The node's name scope: its ``namespace`` metadata, else the ``/``-separated prefix of its name
    (``/encoder/layer.0/attention/MatMul`` → ``["encoder", "layer.0", "attention"]``). PyTorch's exporter
    writes ``name: type`` segments ending with the op itself (``: Net/_blocks.4: MBConvBlock/_blocks.4._bn0:
    BatchNorm2d/batch_norm: aten.batch_norm``): the module names are kept (``_blocks.4``, ``_bn0``)."""
    for prop in node.metadata_props:
        if prop.key == "namespace" and prop.value.strip():
            segs = prop.value.split("/")
            typed = ": " in prop.value
            if typed and len(segs) > 1:
                segs = segs[:-1]  # the op itself
            parts: list[str] = []
            for seg in segs:
                name = seg.split(": ", 1)[0].strip() if typed else seg.strip()
                if parts and name.startswith(parts[-1] + "."):
                    name = name[len(parts[-1]) + 1:]
                if name:
                    parts.append(name)
            return parts[:12]
    parts = [p for p in node.name.split("/") if p]
    return parts[:-1][:12]


def _inherit_scopes(g: IndexedGraph, scopes: list[list[str]]) -> None:
    """Give unscoped nodes (ORT's added Q/DQ, weight DequantizeLinear) the scope of the node they feed, else of
    the node that feeds them, when the graph has scopes at all."""
    if not any(scopes):
        return
    for _ in range(3):
        for i in reversed(range(len(g.nodes))):
            if scopes[i]:
                continue
            cons = [c for t in g.nodes[i].output for c in g.consumers.get(t, ()) if scopes[c]]
            if cons:
                scopes[i] = list(scopes[cons[0]])
                continue
            prods = [g.producer[t] for t in g.nodes[i].input if t in g.producer and scopes[g.producer[t]]]
            if prods:
                scopes[i] = list(scopes[prods[0]])


def _scopes(b: IndexedGraph, a: IndexedGraph, covers: dict[int, int], pairs: dict[int, int]
            ) -> tuple[list[list[str]], list[list[str]]]:
    """Each node's name scope in the before and the after graph: a new fused node's where the nodes it replaced
    were, a rewritten node's by its name (a QLinearConv is where its Conv was), else inherited from its
    neighbours."""
    scopes_a = [_scope(n) for n in a.nodes]
    scopes_b = [_scope(n) for n in b.nodes]
    fused_scope: dict[int, list[str]] = {}
    matched = set(pairs.values())  # a node that kept its name keeps its scope (found by name below)
    for i, j in covers.items():  # a fused node belongs where the nodes it replaced were
        if j in matched:
            continue
        common = fused_scope.get(j, scopes_b[i])
        n = 0
        while n < min(len(common), len(scopes_b[i])) and common[n] == scopes_b[i][n]:
            n += 1
        fused_scope[j] = common[:n]
    for j, sc in fused_scope.items():
        if sc:
            scopes_a[j] = sc
    by_name = {n.name: scopes_b[i] for i, n in enumerate(b.nodes) if n.name and scopes_b[i]}
    for j, node in enumerate(a.nodes):  # ORT drops the metadata of the nodes it rewrites but keeps their names
        if not scopes_a[j] and node.name in by_name:
            scopes_a[j] = list(by_name[node.name])
    _inherit_scopes(a, scopes_a)
    _inherit_scopes(b, scopes_b)
    return scopes_b, scopes_a


def graph_description(before_path, after_path) -> dict:
    """The before/after graph as plain data for ``ortlab.ui.graph.graph_view`` to group and draw.

    Returns ``{"nodes": {id: node}, "edges": [[source, target], ...], "edges_before", "edges_after",
    "affinity": {removed id: after id}, "counts": GraphDiff.counts}``: the after graph (ids ``a<j>``) plus the
    removed nodes (``b<i>``), and the data edges between them (``edges``: merged; ``edges_before``: the before
    graph, a matched node under its after id; ``edges_after``: the after graph). A matched node also has
    before_scope and before_order, a removed node before_order: where it sits in the before graph; a matched node
    whose op changed (Conv quantized to QLinearConv under its name) also before_op_type, before_label and
    before_domain.
    Each node has id, label, name, op_type, domain, key (``op_key``), status
    (removed/added/changed/unchanged), kind (removed/fused/quantized/added/changed/unchanged: the colour),
    weight_only, scope (name-scope parts), order (position in the after graph's node order; removed nodes sit
    next to the nodes around them), attributes ({name: text}), inputs/outputs ([[tensor, "dtype[shape]"]]),
    quant ([{"param", "tensor", "value"}]: scale and zero point) and, for changed nodes, before (attributes,
    inputs and outputs of the matched before-node) and changes. ``affinity`` maps a removed node to the node
    that replaced it (a fusion).
    """
    before, after = load_for_diff(before_path), load_for_diff(after_path)
    b, a, pairs, removed, added, changed = diff_parts(before, after)
    covers: dict[int, int] = {}
    fusion_lines(b, a, pairs, removed, added, changed, covers)
    kinds_b, kinds_a = change_kinds(b, a, pairs, removed, added, changed, covers)
    wb, wa = _weight_only(b), _weight_only(a)
    set_added, set_changed = set(added), set(changed)
    shapes_b, shapes_a = _value_infos(before), _value_infos(after)
    values_b, values_a = _small_values(before), _small_values(after)
    scopes_b, scopes_a = _scopes(b, a, covers, pairs)
    rev = {j: i for i, j in pairs.items()}

    def io(names, shapes: dict[str, str]) -> list[list[str]]:
        return [[t, shapes.get(t, "")] for t in names if t]

    def node(vid: str, n: onnx.NodeProto, status: str, kind: str, weight_only: bool, scope: list[str],
             order: float, shapes: dict[str, str], values: dict[str, onnx.TensorProto]) -> dict:
        return {"id": vid, "label": short_op(node_domain(n), n.op_type), "name": n.name, "op_type": n.op_type,
                "domain": node_domain(n), "key": op_key(node_domain(n), n.op_type), "status": status, "kind": kind,
                "weight_only": weight_only, "scope": scope, "order": order,
                "attributes": {x.name: _attr_text(x) for x in n.attribute},
                "inputs": io(n.input, shapes), "outputs": io(n.output, shapes),
                "quant": _quant_params(n, values)}

    nodes: dict[str, dict] = {}
    for j, n in enumerate(a.nodes):
        status = "added" if j in set_added else "changed" if j in set_changed else "unchanged"
        d = node(f"a{j}", n, status, kinds_a[j], wa[j], scopes_a[j], float(j), shapes_a, values_a)
        if j in rev:
            nb = b.nodes[rev[j]]
            d["matched"] = nb.name
            if (node_domain(nb), nb.op_type) != (node_domain(n), n.op_type):  # quantized or fused in place: the op it was
                d["before_op_type"], d["before_label"] = nb.op_type, short_op(node_domain(nb), nb.op_type)
                d["before_domain"] = node_domain(nb)
            d["before_scope"], d["before_order"] = scopes_b[rev[j]], float(rev[j])
            if status == "changed":
                d["changes"] = node_changes(nb, n)
                d["before"] = {"attributes": {x.name: _attr_text(x) for x in nb.attribute},
                               "inputs": io(nb.input, shapes_b), "outputs": io(nb.output, shapes_b)}
        nodes[f"a{j}"] = d
    # a removed node sits just after the last matched before-node preceding it (or beside its replacement)
    anchor = -1.0
    anchors: dict[int, float] = {}
    for i in range(len(b.nodes)):
        if i in pairs:
            anchor = float(pairs[i])
        else:
            anchors[i] = anchor
    for k, i in enumerate(removed):
        order = float(covers[i]) - 0.5 if i in covers else anchors[i] + 0.5
        nodes[f"b{i}"] = node(f"b{i}", b.nodes[i], "removed", kinds_b[i], wb[i], scopes_b[i],
                              order + k * 1e-6, shapes_b, values_b)
        nodes[f"b{i}"]["before_order"] = float(i)
        if i in covers:
            nodes[f"b{i}"]["replaced_by"] = f"a{covers[i]}"
    vid_b = {i: f"a{j}" for i, j in pairs.items()}
    vid_b.update({i: f"b{i}" for i in removed})
    edges_after = {(f"a{a.producer[t]}", f"a{j}") for j, n in enumerate(a.nodes) for t in n.input if t in a.producer}
    edges_before = {(vid_b[b.producer[t]], vid_b[i]) for i, n in enumerate(b.nodes) for t in n.input
                    if t in b.producer}
    edges = edges_after | {(s, d) for s, d in edges_before if s.startswith("b") or d.startswith("b")}

    def listed(pairs: set[tuple[str, str]]) -> list[list[str]]:
        return sorted([s, d] for s, d in pairs if s != d)

    return {"nodes": nodes, "edges": listed(edges), "edges_before": listed(edges_before),
            "edges_after": listed(edges_after),
            "affinity": {f"b{i}": f"a{j}" for i, j in covers.items()},
            "counts": change_counts(b, a, pairs, removed, added, changed, covers)}


def _weight_only(g: IndexedGraph) -> list[bool]:
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


def map_node_names(source_path, target_path) -> dict[str, str]:
    """Where each node of ``source`` (e.g. the plain QDQ model a per-node analysis ran on) is in ``target``
    (e.g. ORT's optimized graph with QLinearConv and fused nodes): ``{source name: target name}``.

    A node keeps its name through ORT's fusions (QDQ → QLinearConv keeps the Conv's name), else the target node
    that produces its output tensor (directly or after its QuantizeLinear/DequantizeLinear) is it, else a node
    folded away (a Clip or Relu fused into the Conv before it) lands on where its input's producer landed.
    Q/DQ nodes of ``source`` are not mapped; nodes that leave no trace are left out."""
    placer = _NamePlacer(IndexedGraph(load_for_diff(source_path).graph), IndexedGraph(load_for_diff(target_path).graph))
    for i, n in enumerate(placer.src.nodes):
        if n.op_type in QDQ_OPS or not n.name:
            continue
        hit = placer.place(i)
        if hit:
            placer.out[n.name] = hit
    return placer.out


class _NamePlacer:
    """Finds where a node of ``src`` is in ``tgt`` (:func:`map_node_names`); ``out`` holds the names placed so far."""

    def __init__(self, src: IndexedGraph, tgt: IndexedGraph) -> None:
        self.src, self.tgt = src, tgt
        self.names = {n.name for n in tgt.nodes if n.name}
        self.out: dict[str, str] = {}

    def _through_qdq(self, tensors: list[str], downstream: bool) -> list[str]:
        """``tensors`` and the tensors their Q/DQ nodes lead to (downstream: outputs of consumers; else: first
        inputs of producers)."""
        src = self.src
        seen: list[str] = []
        todo = list(tensors)
        while todo and len(seen) < 16:
            t = todo.pop(0)
            seen.append(t)
            steps = src.consumers.get(t, ()) if downstream else ([src.producer[t]] if t in src.producer else [])
            todo += [x for k in steps if src.nodes[k].op_type in QDQ_OPS for x in
                     (src.nodes[k].output if downstream else src.nodes[k].input[:1])]
        return seen

    def _by_output(self, n: onnx.NodeProto) -> str | None:
        """The target node that produces ``n``'s output (directly or after its Q/DQ)."""
        for t in self._through_qdq([t for t in n.output if t], downstream=True):
            k = self.tgt.producer.get(t)
            if k is not None and self.tgt.nodes[k].op_type not in QDQ_OPS and self.tgt.nodes[k].name:
                return self.tgt.nodes[k].name
        return None

    def _by_input(self, n: onnx.NodeProto, depth: int) -> str | None:
        """Where ``n``'s input's producer landed (a node folded away)."""
        for t in self._through_qdq([t for t in n.input if t], downstream=False):
            p = self.src.producer.get(t)
            if p is not None and self.src.nodes[p].op_type not in QDQ_OPS:
                hit = self.place(p, depth + 1)
                if hit:
                    return hit
        return None

    def place(self, i: int, depth: int = 0) -> str | None:
        n = self.src.nodes[i]
        if n.name in self.out:
            return self.out[n.name]
        if n.name and n.name in self.names:
            return n.name
        hit = self._by_output(n)
        if hit is None and depth < 4:
            hit = self._by_input(n, depth)
        return hit


def carry_values(values: dict[str, float], mapping: dict[str, str], lower_is_worse: bool = True) -> dict[str, float]:
    """Per-node values (``{source name: value}``) plus the same values under the names ``mapping`` gives them
    in another graph (:func:`map_node_names`); a node that several map onto keeps the worst."""
    out = dict(values)
    pick = min if lower_is_worse else max
    carried: dict[str, float] = {}
    for name, value in values.items():
        dst = mapping.get(name)
        if dst is not None and dst != name:
            carried[dst] = pick(carried.get(dst, value), value)
    for dst, value in carried.items():
        out[dst] = pick(out.get(dst, value), value)
    return out
