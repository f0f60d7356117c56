"""Peak memory of the server-side process through each memory case, every case in a fresh interpreter.

Each case runs what the app's server process runs (the engine calls the pages make) and prints that process's
peak resident memory (VmHWM) and its resident memory afterwards (VmRSS); the target is the server staying under
1.5 GB through all of them. Heavy work runs in children (recipes, benchmarks), whose memory is their own.

    python bench/bench_memory_cases.py [--only zero_npz,upload_new] [--upload-mb 300]

Cases: zero_npz (3 MB npz → 3.1 GB), huge_png_zip (12 × 13000×13000 PNG), big_input_recipe (a [1,3,4000,4000]
model calibrated on random data, child limit 1.5 GB), wide_zip (250 × 15 MiB declared), bench_over_cap (a
benchmark child over a 1.2 GB limit), upload_old / upload_new (a model with --upload-mb MB of external data in a
zip, imported from the bytes as before, and streamed from the upload as now; both hold the upload itself, as
Streamlit does; "new" also draws the Model page's graph of it), upload_onnx_old / upload_onnx_new (the same for a
plain .onnx of --upload-mb MB), and local_import (a plain .onnx of --upload-mb MB imported from a path, the way
for models over the upload limit, and drawn). "child peak" is the largest peak RSS among the case's children
(where the model is read now).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _status(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def prepare(name: str, tmp: Path, upload_mb: int) -> None:
    """Build the case's files (in another process than the one measured)."""
    from tests.support import memory_cases as mc

    if name == "zero_npz":
        mc.zero_npz(tmp / "z.npz")
    elif name == "huge_png_zip":
        mc.huge_png_zip(tmp / "big.zip")
    elif name == "wide_zip":
        mc.declared_zip(tmp / "wide.zip")
    elif name == "big_input_recipe":
        mc.big_input_model(tmp / "big.onnx")
    elif name == "bench_over_cap":
        mc.big_input_model(tmp / "big.onnx", shape=("N", 3, 4000, 4000))
    elif name in ("upload_old", "upload_new"):
        mc.external_data_zip(tmp / "up.zip", upload_mb * 10**6)
    elif name in ("upload_onnx_old", "upload_onnx_new"):
        mc.single_file_model(tmp / "up.zip", upload_mb * 10**6)  # a plain .onnx (the name does not matter)
    elif name == "local_import":
        mc.single_file_model(tmp / "up.onnx", upload_mb * 10**6)


def case(name: str, tmp: Path, upload_mb: int) -> str:
    """Run one case in this process; returns what happened (the error message or "ok")."""

    from ortlab.data.loaders import load_image_zip, load_tensor_file
    from ortlab.runs import bench_service, prepare
    from ortlab.settings.config import BenchConfig, Recipe
    from ortlab.core.errors import OrtlabError
    from ortlab.runs.history import BenchVariant
    from ortlab.runs.runspec import DataRef, RunSpec
    from ortlab.runs.workspace import Workspace

    try:
        if name == "zero_npz":
            load_tensor_file(tmp / "z.npz")
        elif name == "huge_png_zip":
            load_image_zip((tmp / "big.zip").read_bytes())
        elif name == "wide_zip":
            from ortlab.model.importing import import_model

            import_model(tmp / "wide.zip", tmp / "store")
        elif name == "big_input_recipe":
            spec = RunSpec(str(tmp / "big.onnx"), Recipe(allow_random_data=True),
                           calibration=DataRef(random=64), verify_samples=64)
            handle = prepare.start_recipe(spec, workspace=Workspace(tmp / "ws"), memory_gb=1.5)
            handle.follow()
        elif name == "bench_over_cap":
            model = tmp / "big.onnx"
            handle = bench_service.start_benchmark([BenchVariant("big", "big", str(model))],
                                             BenchConfig(warmup=0, duration_s=0, runs=2, batch_sizes=[4]),
                                             workspace=Workspace(tmp / "ws"), memory_gb=1.2)
            handle.follow()
        elif name in ("upload_old", "upload_new", "upload_onnx_old", "upload_onnx_new"):
            from ortlab.model import isolated
            from ortlab.model.inspect import inspect_model
            from ortlab.model.importing import import_model

            raw = (tmp / "up.zip").read_bytes()  # what Streamlit holds
            print(f"  holding the upload ({len(raw) / 1e6:.0f} MB): VmRSS {_status('VmRSS'):.0f} MB", flush=True)
            if name.endswith("_old"):  # as before: actions.import_uploaded_model(name, up.getvalue()), in-process
                path = import_model(bytes(raw), tmp / "models", filename="model.onnx")
                inspect_model(path)
            else:  # now: streamed to the workspace, dropped once on disk (on_saved), read in a child process
                up = io.BytesIO(raw)
                del raw

                def drop() -> None:
                    up.close()

                path, _ = isolated.import_upload(up, tmp / "models", filename="model.onnx", on_saved=drop)
                isolated.graph_description(path, path)  # the Model page's drawing of a model too big for Netron
        elif name == "local_import":  # a model over the upload limit, imported from a path as the Model page does
            from ortlab.model import isolated

            path, _ = isolated.import_model(tmp / "up.onnx", tmp / "models")
            isolated.graph_description(path, path)
        else:
            raise SystemExit(f"unknown case {name}")
        return "ok"
    except OrtlabError as exc:
        return str(exc)


CASES = ["zero_npz", "huge_png_zip", "wide_zip", "big_input_recipe", "bench_over_cap", "upload_old", "upload_new",
         "upload_onnx_old", "upload_onnx_new", "local_import"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated cases (default: all)")
    parser.add_argument("--upload-mb", type=int, default=300)
    parser.add_argument("--_case", default="", help=argparse.SUPPRESS)
    parser.add_argument("--_prepare", default="", help=argparse.SUPPRESS)
    parser.add_argument("--_dir", default="", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns._prepare:
        prepare(ns._prepare, Path(ns._dir), ns.upload_mb)
        return
    if ns._case:
        base = _status("VmRSS")
        outcome = case(ns._case, Path(ns._dir), ns.upload_mb)
        import resource

        child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print("RESULT " + json.dumps({"start_rss_mb": base, "peak_mb": _status("VmHWM"), "child_mb": child_mb,
                                      "after_rss_mb": _status("VmRSS"), "outcome": outcome}), flush=True)
        return
    names = [c for c in ns.only.split(",") if c] or CASES
    print(f"{'case':<18} {'start RSS':>10} {'peak (VmHWM)':>13} {'RSS after':>10} {'child peak':>11}  outcome")
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            common = ["--upload-mb", str(ns.upload_mb), "--_dir", tmp]
            subprocess.run([sys.executable, __file__, "--_prepare", name, *common], check=True)
            proc = subprocess.run([sys.executable, __file__, "--_case", name, *common], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        for ln in proc.stdout.splitlines():
            if ln.startswith("  "):
                print(f"{name:<18}{ln}")
        if not lines:
            print(f"{name:<18} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        r = json.loads(lines[-1][len("RESULT "):])
        print(f"{name:<18} {r['start_rss_mb']:>7.0f} MB {r['peak_mb']:>10.0f} MB {r['after_rss_mb']:>7.0f} MB "
              f"{r['child_mb']:>8.0f} MB  {r['outcome'][:150]}", flush=True)


if __name__ == "__main__":
    main()
