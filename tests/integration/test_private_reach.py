"""No module reaches another's private member (issue 35), checked by parsing ``ortlab/``: neither ``x._name`` where
``x`` is not ``self`` or ``cls`` nor ``from m import _name`` (dunders aside). What a module keeps to itself can
change without a search through the others."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ortlab"

# (file, name) → why it may stay
ALLOWED = {
    ("ortlab/cli/common.py", "_actions"): "argparse offers no public list of a parser's actions",
    ("ortlab/ui/session/uploads.py", "_replace"): "a namedtuple's documented copy-with-changes (the _ keeps field names free)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, name) of every reach into another object's or module's private member under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    out.append((rel, node.lineno, node.attr))
            elif isinstance(node, ast.ImportFrom):
                out += [(rel, node.lineno, a.name) for a in node.names if _private(a.name)]
    return out


def test_no_module_reaches_another_modules_private_member():
    found = [f"{f}:{n} {name}" for f, n, name in private_reaches(PACKAGE)
             if (f, name) not in ALLOWED]
    assert found == [], "make it public where it is defined, or give it a public accessor:\n" + "\n".join(found)


def test_the_check_sees_attributes_and_imports_but_not_self_cls_or_dunders(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("from a import _hidden, shown\nclass C:\n    def f(self, other):\n"
                              "        return self._mine, cls._ours, other._theirs, other.__dict__\n")
    assert private_reaches(pkg) == [("pkg/m.py", 1, "_hidden"), ("pkg/m.py", 4, "_theirs")]
