"""The CLI's flags for a model's inputs: ``--shape``, ``--tokenizer``/``--seq-len``, ``--input-value``, their
parsing, and the check that they name inputs the models take; and the command's one read of each model's facts."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ortlab.api import ModelInfo, UsageError
from ortlab import api
from ortlab.core.errors import DataError


_READ: dict[tuple[Path, int, int], ModelInfo] | None = None  # while a command runs (:func:`one_read_per_model`)


@contextmanager
def one_read_per_model() -> Iterator[None]:
    """While inside, :func:`read_model` reads each model file once (the CLI runs each command inside)."""
    global _READ
    saved, _READ = _READ, {}
    try:
        yield
    finally:
        _READ = saved


def read_model(path: str | Path) -> ModelInfo:
    """The facts of the model at ``path``. Each read runs in a child process (about a second) and one command asks
    several times (preprocessing, input names, a text's sequence length): inside :func:`one_read_per_model` each
    file is read once, and again when it changed since."""
    if _READ is None:
        return api.models.inspect_in_child(path)
    resolved = Path(path).expanduser().resolve()
    stat = resolved.stat()
    key = (resolved, stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        _READ[key] = api.models.inspect_in_child(path)
    return _READ[key]


def add_input_arguments(p: argparse.ArgumentParser, text: bool = True) -> None:
    """``--shape NAME=D0,D1,…`` (repeatable) and, for commands that read data, ``--tokenizer`` and ``--seq-len``."""
    g = p.add_argument_group("model inputs")
    g.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,…",
                   help="The full shape of input NAME, for dims the model leaves open (e.g. images=1,3,640,640 or "
                        "input_ids=1,128); repeat for each input. The batch axis follows the batch size.")
    if text:
        g.add_argument("--tokenizer", metavar="TOKENIZER.json",
                       help="Hugging Face tokenizer.json for .txt data (default: tokenizer.json beside the .txt).")
        g.add_argument("--seq-len", type=int, metavar="N",
                       help="Sequence length of text data, padded or truncated (default: the model's fixed length, "
                            "else 128).")


def parse_shapes(flags: Sequence[str] | None) -> dict[str, list[int]]:
    """``{input name: shape}`` of the ``--shape`` flags' texts (UsageError when one is malformed or repeated)."""

    out: dict[str, list[int]] = {}
    for text in flags or []:
        try:
            name, shape = api.data.parse_shape(text)
        except DataError as exc:
            raise UsageError(exc.message) from None
        if name in out:
            raise UsageError(f"--shape {name} is given twice.")
        out[name] = shape
    return out


def add_input_value_argument(p: Any) -> None:
    """``--input-value NAME=VALUE`` (repeatable): a control input's value for timing and random data (never
    made up)."""
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE",
                   help="The value of a control input (e.g. a sample rate, sr=16000) when timing, and in random data "
                        "(--allow-random-data): such inputs are never made up. Repeat for each.")


def parse_input_values(flags: Sequence[str] | None) -> dict[str, float]:
    """``{input name: number}`` of the ``--input-value NAME=VALUE`` flags' texts (UsageError when one is malformed)."""
    out: dict[str, float] = {}
    for text in flags or []:
        name, sep, value = str(text).rpartition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name or not math.isfinite(number):
            raise UsageError(f"--input-value takes NAME=NUMBER (e.g. sr=16000), got {text!r}.")
        if name in out:
            raise UsageError(f"--input-value {name} is given twice.")
        out[name] = int(number) if number.is_integer() else number
    return out


def shapes_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} [{', '.join(str(d) for d in v)}]" for k, v in shapes.items())


def check_input_names(paths: list[Path], shapes: dict, values: dict) -> None:
    """UsageError when --shape or --input-value names an input that none of the models takes."""
    if not shapes and not values:
        return
    taken = {t.name for p in paths for t in read_model(p).inputs}
    for flag, given in (("--shape", shapes), ("--input-value", values)):
        unknown = [k for k in given if k not in taken]
        if unknown:
            raise UsageError(f"{flag} names {', '.join(unknown)}, which none of the models takes "
                             f"(inputs: {', '.join(sorted(taken))}).")
