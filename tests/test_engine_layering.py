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
