"""What a recipe makes (``Recipe.kind``: fp32, fp16, static int8, dynamic int8) is decided in one place:
:attr:`ortlab.settings.config.QuantConfig.is_dynamic` reads the quantization mode, :attr:`Recipe.kind` builds on it,
and no other code compares a quantization mode.

What counts as deciding the mode (anywhere in ``ortlab/``, ``pages/`` and ``app.py`` but ``QuantConfig.is_dynamic``):
a comparison (``==``, ``!=``, ``in``, ``is``…) with a ``QuantMode`` member, or of something named ``mode`` (a name
or an attribute) with the string "static" or "dynamic".
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe, RecipeKind

ROOT = Path(__file__).resolve().parents[2]
MODES = {m.value for m in QuantMode}
OWNER = ("ortlab/settings/config.py", "is_dynamic")


def _is_mode_member(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "QuantMode"


def _names_mode(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Name) and node.id == "mode") or (isinstance(node, ast.Attribute) and node.attr == "mode")
            or (isinstance(node, ast.Attribute) and node.attr == "value" and _names_mode(node.value)))


def _decides_mode(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    if any(_is_mode_member(x) for x in operands):
        return True
    words = any(isinstance(c, ast.Constant) and c.value in MODES for x in operands
                for c in (x.elts if isinstance(x, (ast.Tuple, ast.List, ast.Set)) else [x]))
    return words and any(_names_mode(x) for x in operands)


def mode_decisions(source: str, allowed_function: str | None = None) -> list[int]:
    """The lines of ``source`` that compare a quantization mode, outside the function named ``allowed_function``."""
    tree = ast.parse(source)
    allowed = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == allowed_function
               for n in ast.walk(f)}
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Compare) and id(n) not in allowed and _decides_mode(n))


def _sources():
    for path in sorted([*(ROOT / "ortlab").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]):
        yield path.relative_to(ROOT).as_posix(), path


def test_dynamic_int8_is_decided_once():
    found = {rel: lines for rel, path in _sources()
             if (lines := mode_decisions(path.read_text(), OWNER[1] if rel == OWNER[0] else None))}
    assert not found, found


def test_the_owner_really_decides_it():
    assert mode_decisions((ROOT / OWNER[0]).read_text()) != []  # the one comparison the check lets through


@pytest.mark.parametrize("source", [
    "x = r.precision == Precision.INT8 and r.quant.mode == QuantMode.DYNAMIC\n",
    "if q.mode != QuantMode.STATIC:\n    pass\n",
    "def f(mode):\n    return 1 if mode == 'dynamic' else 0\n",
    "ok = recipe.quant.mode.value in ('static',)\n",
])
def test_the_check_sees_a_mode_decided_inline(source):
    assert mode_decisions(source)


def test_the_check_lets_other_words_through():
    assert not mode_decisions("a = img.mode == 'L'\nb = kind == 'static'\nc = replace(q, mode=QuantMode.DYNAMIC)\n")


@pytest.mark.parametrize("recipe, kind", [
    (Recipe(), RecipeKind.FP32),
    (Recipe(precision=Precision.FP16), RecipeKind.FP16),
    (Recipe(precision=Precision.INT8), RecipeKind.STATIC),
    (Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)), RecipeKind.DYNAMIC),
    (Recipe(precision=Precision.FP16, quant=QuantConfig(mode=QuantMode.DYNAMIC)), RecipeKind.FP16),  # int8 only
])
def test_a_recipe_knows_its_kind(recipe, kind):
    assert recipe.kind == kind
    assert recipe.is_dynamic == (kind == RecipeKind.DYNAMIC) and recipe.is_static == (kind == RecipeKind.STATIC)
