"""``ortlab inspect``: a model's inputs, outputs, opsets, ops, size and this CPU's int8 abilities."""

from __future__ import annotations

import argparse

from ortlab.core.text import format_bytes
from ortlab.cli.common import model_file
from ortlab.cli.render import print_json
from ortlab import api
from ortlab.cli.inputs import read_model


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("inspect", help="Show a model's inputs, outputs, opsets, ops and size.")
    p.add_argument("model", metavar="MODEL", help="An .onnx file, a bundled sample's name, or a "
                                                  "folder that ortlab optimize wrote.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_inspect)


def open_sizes_line(name: str, dtype: str, dims: list) -> str:
    """What an input's open dims (beyond a leading batch, which follows the batch size) will need: the flag that
    sets them from data (--size for an image, --seq-len for text) and the --shape that sets them outright; "" when
    nothing is open."""
    batch = [i == 0 or str(d).lower() in ("n", "batch", "batch_size", "batchsize") for i, d in enumerate(dims)]
    is_open = [not isinstance(d, int) or d <= 0 for d in dims]
    if not any(o and not b for o, b in zip(is_open, batch)):
        return ""
    chans = [i for i in (1, len(dims) - 1) if len(dims) == 4 and dims[i] in (1, 3, 4)]
    spatial = (2, 3) if chans[:1] == [1] else (1, 2) if chans else ()
    hint = ",".join("1" if batch[i] and is_open[i] else str(d) if not is_open[i] else "HW"[spatial.index(i)] if i in spatial
                    else f"D{i}" for i, d in enumerate(dims))
    names = ", ".join(str(d) if d not in (None, "") else f"axis {i}" for i, d in enumerate(dims)
                      if is_open[i] and not batch[i])
    if spatial and any(is_open[i] for i in spatial):  # a fixed height (an OCR recognizer's 48) is given as it is
        h, w = ("HW"[k] if is_open[i] else str(dims[i]) for k, i in enumerate(spatial))
        source = f"--size {h} {w} (the images are resized to it)"
    elif "int" in dtype:
        source = "--seq-len N with text data"
    else:
        source = "the data's tensors"
    return (f"{name}: {names} open: give {source} to optimize, compare, analyze and tune, or --shape {name}={hint} "
            "(bench needs --shape)")


def cmd_inspect(ns: argparse.Namespace) -> int:
    """`ortlab inspect`: print what a model holds."""

    info = read_model(model_file(ns.model))
    if ns.json:
        print_json(info.to_dict())
        return 0
    shape = lambda t: "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(info.opsets.items()))
    print(f"{info.path}\n  size      {format_bytes(info.total_bytes)}{' (with external data)' if info.has_external_data else ''}"
          f"\n  sha256    {info.sha256}\n  ir        {info.ir_version}   opsets: {opsets}"
          f"\n  producer  {info.producer} {info.producer_version}".rstrip()
          + f"\n  params    {info.param_count:,}"
          + (f" ({info.constant_params:,} in Constant nodes)" if info.constant_params else "")
          + f"   nodes: {info.node_count}"
          + (f" ({info.subgraph_node_count} in subgraphs)" if info.subgraph_node_count else ""))
    for kind, tensors in (("input", info.inputs), ("output", info.outputs)):
        for t in tensors:
            print(f"  {kind:<9} {t.name}  {t.dtype}  {shape(t)}")
    for t in info.inputs:
        line = open_sizes_line(t.name, t.dtype, list(t.shape))
        if line:
            print(f"  sizes     {line}")
    ops = sorted(info.op_counts.items(), key=lambda kv: (-kv[1], api.models.op_key(*kv[0])))
    print("  ops       " + ", ".join(f"{api.models.op_key(*k)}×{n}" for k, n in ops))

    cpu = api.machine.detect_hardware()
    print(f"  cpu       {cpu.summary()}")
    for note in api.machine.hardware_advice(cpu, model_bytes=info.total_bytes).notes:
        print(f"  int8      {note}")
    for w in info.warnings:
        print(f"  warning   {w}")
    return 0
