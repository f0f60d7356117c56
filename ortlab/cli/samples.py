"""``ortlab samples``: the bundled sample models."""

from __future__ import annotations

import argparse

from ortlab.cli.common import PROG, display_path
from ortlab.cli.render import print_json
from ortlab import api


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("samples", help="List the bundled sample models.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_samples)


def cmd_samples(ns: argparse.Namespace) -> int:
    """`ortlab samples`: list the bundled sample models."""

    found = api.models.list_samples(skip_broken=True)
    if ns.json:
        print_json([{"name": s.name, "title": s.title, "model_path": str(s.model_path), "labels": s.labels,
                      "calibration_dir": str(s.calibration_dir) if s.calibration_dir else None,
                      "evaluation_dir": str(s.evaluation_dir) if s.evaluation_dir else None,
                      "preprocess": s.preprocess.to_dict(), "reference": s.reference, "license": s.license}
                     for s in found])
        return 0
    if not found:
        print("No bundled sample models.")
        return 0
    for s in found:
        print(f"{s.name:<18} {s.title}\n{'':<18} {display_path(s.model_path)}")
    example = next((s.name for s in found if s.name == "digits_cnn"), found[0].name)
    print(f"\nGive a sample's name wherever a model is asked for, from any folder (e.g. {PROG} inspect {example}); "
          "its calibration and evaluation images are then the default data.")
    return 0
