"""Why a result is larger than its source: the weights it stores that the source computes at run time (constant
folding writes them out: a resampler's sinc kernel, built from a few hundred numbers, becomes a 76 kB int8 weight),
or the nodes it adds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx

from ortlab.core.text import format_bytes

_MADE_SUFFIXES = ("_quantized", "_scale", "_zero_point", "_fp16")


def _base(name: str) -> str:
    for suffix in _MADE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def growth_note(source: Path, result: Path, source_bytes: int, result_bytes: int) -> str | None:
    """A sentence on why ``result`` (``result_bytes``) is larger than ``source`` (``source_bytes``); None when it
    is not larger. Reads both graphs (not external weights)."""
    if result_bytes <= source_bytes or source_bytes <= 0:
        return None
    src = onnx.load(str(source), load_external_data=False)
    out = onnx.load(str(result), load_external_data=False)
    had = {t.name for t in src.graph.initializer}
    stored: dict[str, list[onnx.TensorProto]] = {}  # a computed tensor and its scale, zero point …, by its name
    for t in out.graph.initializer:
        if _base(t.name) not in had:
            stored.setdefault(_base(t.name), []).append(t)
    sizes = sorted(((sum(t.ByteSize() for t in ts), name, max(ts, key=lambda t: t.ByteSize()))
                    for name, ts in stored.items()), key=lambda p: -p[0])
    ratio = result_bytes / source_bytes
    how = f"{ratio:.1f}× the source's size" if ratio >= 1.95 else f"{(ratio - 1) * 100:.0f}% larger than the source"
    head = f"The result is {how} ({format_bytes(result_bytes)} vs {format_bytes(source_bytes)})"
    new_bytes = sum(size for size, _, _ in sizes)
    if sizes and new_bytes >= (result_bytes - source_bytes) / 2:
        size, name, biggest = sizes[0]
        more = f" and {len(sizes) - 1} more, {format_bytes(new_bytes)} in all" if len(sizes) > 1 else ""
        return (f"{head}: it stores '{name}' {list(biggest.dims)} ({format_bytes(size)}){more}, which the source "
                "computes at run time from smaller constants; ONNX Runtime's constant folding writes such a tensor "
                "out (and int8 needs it as a weight). It computes the same.")
    added = Counter(n.op_type for n in out.graph.node) - Counter(n.op_type for n in src.graph.node)
    if added:
        top = ", ".join(f"{count} {op}" for op, count in added.most_common(3))
        count = sum(added.values())
        return f"{head}: it adds {count} node{'s' * (count > 1)} ({top}) around what it changed."
    return f"{head}."
