"""The engine must import without Streamlit (or plotly): only ortlab.ui, pages/ and app.py may use them."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import ortlab

ENGINE_MODULES = sorted(
    f"ortlab.{m.name}" for m in pkgutil.iter_modules(ortlab.__path__) if m.name != "ui"
)

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


def test_engine_module_list_is_complete():
    for expected in ("config", "model", "optimize", "quantize", "data", "evaluate", "bench", "diff",
                     "providers", "pipeline", "cli"):
        assert f"ortlab.{expected}" in ENGINE_MODULES


def test_every_engine_module_imports_without_streamlit_plotly_or_torch():
    proc = subprocess.run([sys.executable, "-c", BLOCKER, *ENGINE_MODULES], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=120)
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
    root = Path(__file__).resolve().parent.parent
    files = [p for d in UI_DIRS for p in sorted((root / d).rglob("*.py"))]
    assert len(files) > 10
    bad = [hit for p in files for hit in _engine_imports(p)]
    assert bad == [], "pages/ and ortlab/ui/ call the engine instead:\n" + "\n".join(bad)


def test_the_import_check_sees_nested_and_from_imports(tmp_path):
    f = tmp_path / "page.py"
    f.write_text("import os\ndef f():\n    import onnx.helper\n    from onnxruntime import InferenceSession\n"
                 "from ortlab.model.inspect import load_model\n")
    assert [h.split(" imports ")[1] for h in _engine_imports(f)] == ["onnx.helper", "onnxruntime"]
