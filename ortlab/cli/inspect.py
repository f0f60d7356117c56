"""``ortlab inspect``: a model's inputs, outputs, opsets, ops, size and this CPU's int8 abilities."""

from __future__ import annotations

import argparse

from ortlab.core.text import format_bytes
from ortlab.cli.common import model_file
from ortlab.cli.render import print_json
from ortlab.api import detect_hardware, hardware_advice, inspect_model, op_key


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("inspect", help="Show a model's inputs, outputs, opsets, ops and size.")
    p.add_argument("model", metavar="MODEL", help="An .onnx file, a bundled sample's name, or a "
                                                  "folder that ortlab optimize wrote.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(ns: argparse.Namespace) -> int:
    """`ortlab inspect`: print what a model holds."""

    info = inspect_model(model_file(ns.model))
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
    ops = sorted(info.op_counts.items(), key=lambda kv: (-kv[1], op_key(*kv[0])))
    print("  ops       " + ", ".join(f"{op_key(*k)}×{n}" for k, n in ops))

    cpu = detect_hardware()
    print(f"  cpu       {cpu.summary()}")
    for note in hardware_advice(cpu, model_bytes=info.total_bytes).notes:
        print(f"  int8      {note}")
    for w in info.warnings:
        print(f"  warning   {w}")
    return 0
