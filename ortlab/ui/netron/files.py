"""Which of netron's files the embedded viewer needs for the models ortlab opens (ONNX), read from netron's own
sources whenever the viewer is patched, so that another netron version brings its own list.

The set: what ``index.html`` links (``index.js``, ``grapher.css``, the icons), the modules ``index.js`` preloads,
every module ``view.js`` registers for a ``.onnx`` file name (``onnx``, ``tflite``, ``tensorrt``…), and whatever
those import or ask for (``import``, ``require('./x')``, ``worker('./x')``, ``'x-metadata.json'``), transitively.
``view.js`` registers every format netron knows, so only its imports are followed, not the modules it names.
"""

from __future__ import annotations

import re
from pathlib import Path

MODEL_SUFFIX = ".onnx"
# file names the registry's patterns are tried on (a pattern that fits any of them brings its module)
SAMPLE_NAMES = ("model.onnx", "m.onnx")

_INDEX_LINK = re.compile(r'(?:src|href)="([A-Za-z0-9_.-]+)"')
_PRELOAD = re.compile(r"window\.exports\.preload\s*=\s*function[^{]*\{\s*var\s+modules\s*=\s*(\[[^;]*\]);")
_REGISTER = re.compile(r"this\.register\(\s*'(\./[A-Za-z0-9_-]+)'\s*,\s*\[")
_QUOTED = r"""['"`]"""
_IMPORT = re.compile(rf"(?:\bfrom\s*|\bimport\s*\(?\s*){_QUOTED}(\./[A-Za-z0-9_-]+\.js){_QUOTED}")
_WORKER = re.compile(rf"\bworker\(\s*{_QUOTED}(\./[A-Za-z0-9_-]+){_QUOTED}\s*\)")
_REQUIRE = re.compile(rf"\brequire\(\s*{_QUOTED}(\./[A-Za-z0-9_-]+){_QUOTED}\s*\)")
_ASSET = re.compile(rf"{_QUOTED}([A-Za-z0-9_-]+\.json){_QUOTED}")
_FLAGS = re.compile(r"[a-z]*")
_NEXT_LIST = re.compile(r"\s*,\s*\[")
_REGISTRY = "view.js"


class NetronSourceError(ValueError):
    """netron's sources do not have the shape this module reads (another netron version)."""


Pattern = str | re.Pattern[str]  # a literal of a register(...) list


def _literals(text: str, start: int) -> tuple[list[Pattern], int]:
    """The string and regular-expression literals of the JavaScript array that opens at ``text[start]``, and the
    index just past it."""
    out: list[Pattern] = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "]":
            return out, i + 1
        if c in " \t\r\n,":
            i += 1
        elif c == "'":
            j = i + 1
            while text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i + 1:j].encode("latin-1", "backslashreplace").decode("unicode_escape"))
            i = j + 1
        elif c == "/":
            j, in_class = i + 1, False
            while in_class or text[j] != "/":
                if text[j] == "\\":
                    j += 1
                elif text[j] == "[":
                    in_class = True
                elif text[j] == "]":
                    in_class = False
                j += 1
            flags = _FLAGS.match(text, j + 1).group(0)  # type: ignore[union-attr]  # [a-z]* always matches
            out.append(_js_regex(text[i + 1:j], flags))
            i = j + 1 + len(flags)
        else:
            raise NetronSourceError(f"unexpected {c!r} in a register(...) list of view.js")
    raise NetronSourceError("unterminated register(...) list in view.js")


def _js_regex(source: str, flags: str) -> re.Pattern[str]:
    """A JavaScript regular expression as a Python one (the constructs netron's patterns use mean the same)."""
    py_flags = (re.I if "i" in flags else 0) | (re.M if "m" in flags else 0) | (re.S if "s" in flags else 0)
    try:
        return re.compile(source, py_flags)
    except re.error as exc:
        raise NetronSourceError(f"a pattern of view.js cannot be read ({source!r}: {exc})") from None


def registered(view_js: str) -> dict[str, tuple[list[Pattern], list[Pattern]]]:
    """Each module of ``view.js``'s model registry (``'./onnx'``…): the file-name patterns it is tried on, and
    the content patterns (of a file's first bytes) it is tried on whatever the file's name."""
    found: dict[str, tuple[list[Pattern], list[Pattern]]] = {}
    for m in _REGISTER.finditer(view_js):
        names, content = found.setdefault(m.group(1), ([], []))
        lists: list[list[Pattern]] = []
        i = m.end() - 1
        while True:
            try:
                items, i = _literals(view_js, i)
            except IndexError:
                raise NetronSourceError("unterminated literal in a register(...) list of view.js") from None
            lists.append(items)
            arg = _NEXT_LIST.match(view_js, i)
            if not arg:
                break
            i = arg.end() - 1
        names.extend(lists[0])
        if len(lists) > 2:
            content.extend(lists[2])
    if "./onnx" not in found:
        raise NetronSourceError("view.js registers no './onnx' module")
    return found


def _fits(pattern: Pattern) -> bool:
    """Whether netron would try a module with this file-name pattern on some ONNX file."""
    if isinstance(pattern, str):
        return bool(pattern) and (pattern.endswith(MODEL_SUFFIX) or MODEL_SUFFIX.endswith(pattern))
    return any(pattern.search(name) for name in SAMPLE_NAMES)


def modules_for_onnx(view_js: str) -> list[str]:
    """The modules ``view.js`` tries on a ``.onnx`` file (``onnx.js``, ``tflite.js``…), in registry order."""
    return [f"{module[2:]}.js" for module, (patterns, _) in registered(view_js).items() if any(map(_fits, patterns))]


def preloaded(index_js: str) -> list[str]:
    """The modules ``index.js`` loads before the viewer starts (``view.js``, ``base.js``…)."""
    m = _PRELOAD.search(index_js)
    if not m:
        raise NetronSourceError("index.js has no preload list")
    return [f"{name}.js" for name in re.findall(r"'([A-Za-z0-9_-]+)'", m.group(1))]


def linked(index_html: str) -> list[str]:
    """The files ``index.html`` loads by relative name (``index.js``, ``grapher.css``, icons)."""
    return _INDEX_LINK.findall(index_html)


def references(name: str, text: str) -> set[str]:
    """The files one of netron's scripts loads: its imports and workers, and, except in the registry
    (``view.js``), the modules it requires and the ``.json`` assets it names."""
    refs = {r[2:] for r in _IMPORT.findall(text)} | {f"{r[2:]}.js" for r in _WORKER.findall(text)}
    if name != _REGISTRY:
        refs |= {f"{r[2:]}.js" for r in _REQUIRE.findall(text)} | set(_ASSET.findall(text))
    return refs


def needed_files(directory: Path) -> frozenset[str]:
    """The names (flat, in ``directory``) of netron's files the viewer needs to show an ONNX model.

    Raises :class:`NetronSourceError` when ``index.html``, ``index.js`` or ``view.js`` is missing or changed shape.
    """
    directory = Path(directory)
    try:
        index_html = (directory / "index.html").read_text("utf-8")
        roots = ["index.html", *linked(index_html), *preloaded((directory / "index.js").read_text("utf-8")),
                 *modules_for_onnx((directory / _REGISTRY).read_text("utf-8"))]
    except OSError as exc:
        raise NetronSourceError(f"{exc.strerror}: {exc.filename}") from None
    needed: set[str] = set()
    queue = [n for n in roots if (directory / n).is_file()]
    while queue:
        name = queue.pop()
        if name in needed:
            continue
        needed.add(name)
        if name.endswith(".js"):
            refs = references(name, (directory / name).read_text("utf-8"))
            queue.extend(sorted(r for r in refs if r not in needed and (directory / r).is_file()))
    return frozenset(needed)
