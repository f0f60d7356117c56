"""The package's architecture, checked: the engine imports without Streamlit (or plotly), the layers import only
downwards with no circle, and pages/ and ortlab/ui/ never call onnx or onnxruntime themselves."""

import subprocess
import sys
from pathlib import Path

from tests.support import import_graph

GRAPH = import_graph.build()
ENGINE_MODULES = sorted(m for m in GRAPH.modules if m != "ortlab.ui" and not m.startswith("ortlab.ui."))
MAX_LAYER_FLOORS = 11  # the sub-packages: core … runs, the use-case services, then cli and ui on top (issues 15, 35)
MAX_FLOORS_IN_A_LAYER = 6  # files of one layer importing each other (runs: tune → pipeline → artifact → …)

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('streamlit', 'plotly', 'torch'):
            raise ImportError('blocked for the layering test: ' + name)
sys.meta_path.insert(0, Block())
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
print('imported', len(sys.argv) - 1)
"""


def test_engine_module_list_is_complete_and_walks_sub_packages():
    for expected in ("settings.config", "model.inspect", "transforms.optimize", "transforms.quantize",
                     "data.dataset", "checks.evaluate", "timing.bench", "model.diff", "runtime.providers",
                     "runs.pipeline", "cli.main", "core.errors"):
        assert f"ortlab.{expected}" in ENGINE_MODULES
    assert len(ENGINE_MODULES) > 50


def test_the_top_level_holds_only_the_layers():
    top = sorted(p.name for p in import_graph.PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__")))
    layers = [name for name in import_graph.LAYERS if name != "api"]
    allowed = {"__init__.py", "__main__.py", "api.py", *layers}
    assert set(top) <= allowed, f"not a layer: {sorted(set(top) - allowed)}"
    assert set(layers) <= set(top)


def test_imports_point_down_the_layers():
    bad = [f"{e.source}:{e.line} imports {e.target} ({import_graph.layer(e.source)} -> {import_graph.layer(e.target)})"
           for e in import_graph.upward(GRAPH)]
    assert bad == [], "imports from a lower layer to a higher one:\n" + "\n".join(bad)


def test_no_import_circle_between_files():
    assert import_graph.cycles(GRAPH) == []


def test_at_most_ten_floors_of_layers_each_shallow_inside():
    layers = import_graph.layer_floors(GRAPH)
    assert max(layers.values()) + 1 <= MAX_LAYER_FLOORS, layers
    inside = import_graph.floors_inside_layers(GRAPH)
    assert max(inside.values()) <= MAX_FLOORS_IN_A_LAYER, inside


def test_the_layer_checks_see_an_upward_import_and_a_circle(tmp_path):
    pkg = tmp_path / "ortlab"
    for folder in ("core", "runs"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from ortlab.runs import b\n")
    (pkg / "runs" / "b.py").write_text("def f():\n    from ortlab.core import a\n")
    graph = import_graph.build(pkg)
    assert [(e.source, e.target) for e in import_graph.upward(graph)] == [("ortlab.core.a", "ortlab.runs.b")]
    assert import_graph.cycles(graph) == [["ortlab.core.a", "ortlab.runs.b"]]
    assert any(e.in_function for e in graph.edges)


def test_every_engine_module_imports_without_streamlit_plotly_or_torch():
    proc = subprocess.run([sys.executable, "-c", BLOCKER, *ENGINE_MODULES], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"imported {len(ENGINE_MODULES)}" in proc.stdout


def test_blocker_really_blocks():
    proc = subprocess.run([sys.executable, "-c", BLOCKER, "streamlit"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "blocked for the layering test" in proc.stderr


UI_DIRS = ("pages", "ortlab/ui")
ENGINE_ONLY = ("onnx", "onnxruntime")


def _engine_imports(path: Path) -> list[str]:
    """Every ``import onnx…``/``from onnxruntime… import`` in a file, found by parsing it (functions included)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in ENGINE_ONLY]
    return found


def test_pages_and_ui_do_not_import_onnx_or_onnxruntime():
    root = Path(__file__).resolve().parents[2]
    files = [p for d in UI_DIRS for p in sorted((root / d).rglob("*.py"))]
    assert len(files) > 10
    bad = [hit for p in files for hit in _engine_imports(p)]
    assert bad == [], "pages/ and ortlab/ui/ call the engine instead:\n" + "\n".join(bad)


def test_the_import_check_sees_nested_and_from_imports(tmp_path):
    f = tmp_path / "page.py"
    f.write_text("import os\ndef f():\n    import onnx.helper\n    from onnxruntime import InferenceSession\n"
                 "from ortlab.model.inspect import load_model\n")
    assert [h.split(" imports ")[1] for h in _engine_imports(f)] == ["onnx.helper", "onnxruntime"]


FRONT_ENDS = ("pages", "ortlab/ui", "ortlab/cli")
BELOW_THE_API = ("model", "data", "transforms", "checks", "timing", "runs", "runtime")


def _calls_below_the_api(path: Path) -> list[str]:
    """Names a front-end file takes from the engine below ``ortlab.api`` that are not typed results (classes) or
    constants: those calls must go through ``ortlab.api``."""
    import ast
    import importlib

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{path}:{node.lineno} imports module {a.name}" for a in node.names
                      if a.name.split(".")[:2][-1] in BELOW_THE_API and a.name.startswith("ortlab.")]
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.startswith("ortlab.") and node.module.split(".")[1] in BELOW_THE_API):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            value = getattr(module, alias.name, None)
            if value is None or not (isinstance(value, type) or alias.name.isupper()):
                found.append(f"{path}:{node.lineno} takes {node.module}.{alias.name}")
    return found


def test_the_app_and_the_cli_call_the_engine_through_its_api():
    root = Path(__file__).resolve().parents[2]
    files = [root / "app.py"] + [p for d in FRONT_ENDS for p in sorted((root / d).rglob("*.py"))]
    bad = [hit for p in files for hit in _calls_below_the_api(p)]
    assert bad == [], "call these through ortlab.api:\n" + "\n".join(bad)


def test_the_api_check_sees_a_function_and_a_module(tmp_path):
    f = tmp_path / "page.py"
    f.write_text("from ortlab.runs.artifact import Artifact\nfrom ortlab.core.layout import QDQ_FILE\n"
                 "def f():\n    from ortlab.checks.evaluate import evaluate\n    from ortlab.runs import service\n")
    assert [h.split(" takes ")[1] for h in _calls_below_the_api(f)] == ["ortlab.checks.evaluate.evaluate",
                                                                        "ortlab.runs.service"]


def test_a_module_over_500_lines_says_why_in_its_docstring():
    import ast

    long = []
    for name, path in GRAPH.modules.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Size:" not in doc:
                long.append(f"{name} ({text.count(chr(10))} lines)")
    assert long == [], "split these, or give the reason in a 'Size:' line of the docstring: " + ", ".join(long)


FRONT_END_LAYERS = ("ui", "cli")
THROUGH = ("api", "core", "ui", "cli")  # what a front end may import: the front door, the foundation, itself


def _front_end_edges(graph: import_graph.ImportGraph) -> list[str]:
    """Imports (function-level ones included) from ``ortlab/ui`` or ``ortlab/cli`` of an engine layer other than
    ``ortlab.api`` and ``ortlab.core``."""
    return [f"{e.source}:{e.line} imports {e.target}" for e in graph.edges
            if import_graph.layer(e.source) in FRONT_END_LAYERS and import_graph.layer(e.target) not in THROUGH]


def _page_imports(path: Path) -> list[str]:
    """The same for a file outside the package (``pages/``, ``app.py``): its ``ortlab.…`` imports, parsed."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if node.module == "ortlab" else node.module for a in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                  if n.split(".")[0] == "ortlab" and len(n.split(".")) > 1 and n.split(".")[1] not in THROUGH]
    return found


def test_ui_cli_and_pages_import_the_engine_only_through_its_api():
    root = Path(__file__).resolve().parents[2]
    pages = [root / "app.py", *sorted((root / "pages").glob("*.py"))]
    assert len(pages) > 5 and any(import_graph.layer(m) == "ui" for m in GRAPH.modules)
    bad = _front_end_edges(GRAPH) + [hit for p in pages for hit in _page_imports(p)]
    assert bad == [], "import these from ortlab.api (or ortlab.core):\n" + "\n".join(bad)


def test_the_front_end_check_sees_a_lower_layer_import(tmp_path):
    pkg = tmp_path / "ortlab"
    for folder in ("core", "runs", "ui"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text("")
    (pkg / "runs" / "history.py").write_text("")
    (pkg / "ui" / "view.py").write_text("from ortlab import api\nfrom ortlab.core import x\nfrom ortlab.ui import y\n"
                                        "def f():\n    from ortlab.runs.history import History\n")
    assert _front_end_edges(import_graph.build(pkg)) == ["ortlab.ui.view:5 imports ortlab.runs.history"]
    page = tmp_path / "page.py"
    page.write_text("from ortlab import api\nfrom ortlab.core.text import one_line\nfrom ortlab.ui import state\n"
                    "def f():\n    from ortlab.settings.config import Recipe\n    from ortlab import runs\n"
                    "    import ortlab.timing.bench\n")
    assert [h.split(" imports ")[1] for h in _page_imports(page)] == ["ortlab.settings.config", "ortlab.runs",
                                                                      "ortlab.timing.bench"]


MAX_API_NAMES = 60  # issue 35: a few use-case services and the typed results and settings the front ends read


def _api_names_used(path: Path) -> set[str]:
    """The ``ortlab.api`` names a front-end file uses: ``from ortlab.api import X`` and ``api.X``."""
    import ast

    used = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "ortlab.api":
            used |= {a.name for a in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
            used.add(node.attr)
    return used


def test_the_front_door_is_narrow_and_every_name_in_it_is_used():
    from ortlab import api

    root = Path(__file__).resolve().parents[2]
    assert len(api.__all__) <= MAX_API_NAMES, f"ortlab.api exports {len(api.__all__)} names"
    public = {n for n in vars(api) if not n.startswith("_")}
    assert public == set(api.__all__), f"importable from ortlab.api by accident: {sorted(public - set(api.__all__))}"
    files = [root / "app.py"] + [p for d in FRONT_ENDS for p in sorted((root / d).rglob("*.py"))]
    used = set().union(*(_api_names_used(p) for p in files))
    assert used - set(api.__all__) == set(), f"front ends use names ortlab.api lacks: {sorted(used - set(api.__all__))}"
    assert set(api.__all__) - used == set(), f"no front end uses: {sorted(set(api.__all__) - used)}"


def test_the_services_are_grouped_calls_not_barrels_of_modules():
    """Each service offers calls and constants of its use case, never a module (a sub-barrel) or another service."""
    import types

    from ortlab import api

    services = [n for n in api.__all__ if n.islower()]
    assert 5 <= len(services) <= 10, services
    for name in services:
        members = {m: getattr(getattr(api, name), m) for m in dir(getattr(api, name)) if not m.startswith("_")}
        assert not [m for m, v in members.items() if isinstance(v, types.ModuleType)], name
        assert len(members) <= 35, f"{name} holds {len(members)} members: split its use case"
