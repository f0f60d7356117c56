"""The import graph of the ``ortlab`` package, read from the source (function-level imports included)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ortlab"

# Each layer may import itself and the layers before it. ``cli`` and ``ui`` are both on top and do not
# import each other. Top-level modules (``__init__``, ``__main__``, ``api``) are placed in LAYER_OF_TOP.
LAYERS = ("core", "settings", "runtime", "model", "data", "transforms", "checks", "timing", "runs", "services",
          "api", "cli", "ui")
LAYER_OF_TOP = {"ortlab": "core", "ortlab.__main__": "cli", "ortlab.api": "api"}


@dataclass
class Edge:
    source: str
    target: str
    line: int
    in_function: bool


@dataclass
class ImportGraph:
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)

    def targets(self, module: str) -> set[str]:
        return {e.target for e in self.edges if e.source == module}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(module: str) -> str:
    if module in LAYER_OF_TOP:
        return LAYER_OF_TOP[module]
    return module.split(".")[1]


def _resolve(graph_modules: dict[str, Path], current: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = current.split(".") if is_package else current.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    out = []
    for alias in node.names:
        full = f"{module}.{alias.name}"
        out.append(full if full in graph_modules else module)
    return out


def build(package: Path = PACKAGE) -> ImportGraph:
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph = ImportGraph(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                in_function.update(id(n) for n in ast.walk(fn))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = _resolve(modules, name, path.name == "__init__.py", node)
            else:
                continue
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                inside_own_package = path.name != "__init__.py" and name.startswith(target + ".")
                if target in modules and target != name and not inside_own_package:
                    graph.edges.append(Edge(name, target, node.lineno, id(node) in in_function))
    return graph


def cycles(graph: ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.targets(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph.modules:
        if v not in index:
            visit(v)
    return found


def _floors(nodes: set[str], deps: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor: 0 for one that depends on nothing, else one above its highest dependency (the graph
    has no cycles: ``cycles`` checks that first)."""
    memo: dict[str, int] = {}

    def floor(v: str) -> int:
        if v not in memo:
            memo[v] = 0
            memo[v] = max((floor(w) + 1 for w in deps.get(v, ())), default=0)
        return memo[v]

    return {v: floor(v) for v in nodes}


def floors_inside_layers(graph: ImportGraph) -> dict[str, int]:
    """For each layer, how many floors its own files stand on each other (1: none imports another)."""
    deps: dict[str, set[str]] = {}
    for e in graph.edges:
        if layer(e.source) == layer(e.target):
            deps.setdefault(e.source, set()).add(e.target)
    out: dict[str, int] = {}
    for m, f in _floors(set(graph.modules), deps).items():
        out[layer(m)] = max(out.get(layer(m), 0), f + 1)
    return out


def layer_floors(graph: ImportGraph) -> dict[str, int]:
    """Each layer's floor in the graph of layers (one layer importing another is one step up)."""
    deps: dict[str, set[str]] = {}
    for e in graph.edges:
        if layer(e.source) != layer(e.target):
            deps.setdefault(layer(e.source), set()).add(layer(e.target))
    return _floors({layer(m) for m in graph.modules}, deps)


def upward(graph: ImportGraph) -> list[Edge]:
    """Imports from a lower layer to a higher one (and between cli and ui)."""
    bad = []
    for e in graph.edges:
        src, dst = layer(e.source), layer(e.target)
        if {src, dst} == {"cli", "ui"} or LAYERS.index(dst) > LAYERS.index(src):
            bad.append(e)
    return bad
