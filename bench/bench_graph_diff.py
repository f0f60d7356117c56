"""Time to build the graph-diff view's data for a generated 2,000-node model against its ORT-optimized copy
(MatMul → Add → Relu blocks with residual Adds; 1,501 nodes fused into 500 FusedGemm): the engine's diff
(``graph_description``: load both files, match, trace fusions, attributes, shapes) plus the grouping
(``build_view``) and the component's JSON arguments. The browser then lays out at most ~120 elements.

    python bench/bench_graph_diff.py [--nodes 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from models import big_chain_model  # noqa: E402
from ortlab.config import OptLevel  # noqa: E402
from ortlab.diff import graph_description  # noqa: E402
from ortlab.optimize import optimize_model  # noqa: E402
from ortlab.ui.graph_view import build_view, component_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = big_chain_model(Path(tmp) / "big.onnx", n_nodes=args.nodes)
        opt = optimize_model(src, Path(tmp) / "opt.onnx", OptLevel.EXTENDED).path
        rows = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            desc = graph_description(src, opt)
            t1 = time.perf_counter()
            view = build_view(desc)
            payload = json.dumps(component_args(view, 720))
            t2 = time.perf_counter()
            rows.append((t1 - t0, t2 - t1, t2 - t0))
        print(f"{len(desc['nodes'])} nodes in the merged graph ({args.nodes} before), "
              f"{view['visible']} visible elements, {len(payload) / 1024:.0f} KiB of component arguments")
        for name, k in (("graph_description", 0), ("build_view + args", 1), ("total", 2)):
            print(f"{name:>18}: median {statistics.median(r[k] for r in rows):.3f} s "
                  f"(min {min(r[k] for r in rows):.3f}, max {max(r[k] for r in rows):.3f})")


if __name__ == "__main__":
    main()
