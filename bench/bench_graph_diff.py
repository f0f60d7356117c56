"""Time to open the graph diff of a generated 2,000-node model against its ORT-optimized copy (MatMul → Add →
Relu blocks with residual Adds; 1,501 nodes fused into 500 FusedGemm), in the same run:

- engine: ``graph_description`` (load both files, match, trace fusions, attributes, shapes);
- view: ``build_view`` (both sides' group trees) and the component's JSON arguments;
- browser (``--browser``, needs playwright and /usr/bin/chromium): the component's own page in headless
  chromium at 1280×720, from fetching the arguments to both panes laid out and drawn, and then opening a
  group in the client (no rerun).

    python bench/bench_graph_diff.py [--nodes 2000] [--repeat 3] [--browser] [--before A.onnx --after B.onnx]
                                     [--screenshot OUT.png]

``--before/--after`` time a real pair instead of the generated one; ``--screenshot`` saves the browser view.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.models import big_chain_model  # noqa: E402
from ortlab.settings.config import OptLevel  # noqa: E402
from ortlab.model.diff_view import graph_description  # noqa: E402
from ortlab.transforms.optimize import optimize_model  # noqa: E402
from ortlab.ui.graph.graph_view import COMPONENT_DIR, build_view, component_args  # noqa: E402

# The parent page plays Streamlit's part of the component protocol: it posts one render message with the
# arguments, as the app does, and the component draws.
PARENT = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="index.html" style="width:%dpx;height:%dpx;border:0"></iframe>
<script>
window.addEventListener('message', function (e) { if (e.data && e.data.type === 'streamlit:componentReady') window.ready = true; });
window.go = function () {
  window.t0 = Date.now();
  return fetch('args.json').then(function (r) { return r.json(); }).then(function (a) {
    document.getElementById('f').contentWindow.postMessage({type: 'streamlit:render', args: a}, location.origin);
  });
};
</script></body></html>"""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _serve(root: Path):
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def browser_times(args_json: str, repeat: int, screenshot: Path | None, width: int = 940,
                  height: int = 720, inspect=None) -> list[tuple[float, float, float]]:
    """(seconds to draw both panes, seconds to open a group, zoom kept: 1.0 or 0.0) per repeat; ``inspect``
    (frame → None) runs on the drawn view before the group is opened."""
    from playwright.sync_api import sync_playwright

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for f in COMPONENT_DIR.iterdir():
            shutil.copyfile(f, root / f.name)
        (root / "args.json").write_text(args_json)
        (root / "parent.html").write_text(PARENT % (width, height))
        server = _serve(root)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                for _ in range(repeat):
                    page.goto(f"http://127.0.0.1:{server.server_port}/parent.html")
                    page.wait_for_function("() => window.ready === true")
                    page.evaluate("() => window.go()")
                    frame = page.frames[1]
                    frame.wait_for_selector("body[data-ortlab-graphdiff=ready]", state="attached", timeout=60_000)
                    drawn = (page.evaluate("() => Date.now()") - page.evaluate("() => window.t0")) / 1000
                    if inspect:
                        inspect(frame)
                    toggle = frame.evaluate("""() => {
                        const p = window.ortlabPanes.after;
                        const g = p.cy.nodes('.closed')[0];
                        if (!g) return [0, 1];
                        const z = p.cy.zoom(), t = performance.now();
                        p.toggle(g.id(), true);
                        return [(performance.now() - t) / 1000, p.cy.zoom() === z ? 1 : 0];
                    }""")
                    out.append((drawn, toggle[0], toggle[1]))
                if screenshot:
                    page.wait_for_timeout(400)
                    page.screenshot(path=str(screenshot))
                browser.close()
        finally:
            server.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--before", type=Path)
    ap.add_argument("--after", type=Path)
    ap.add_argument("--screenshot", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.before and args.after:
            src, opt = args.before, args.after
        else:
            src = big_chain_model(Path(tmp) / "big.onnx", n_nodes=args.nodes)
            opt = optimize_model(src, Path(tmp) / "opt.onnx", OptLevel.EXTENDED).path
        rows = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            desc = graph_description(src, opt)
            t1 = time.perf_counter()
            view = build_view(desc)
            payload = json.dumps(component_args(view, 720, (src.name, opt.name)))
            t2 = time.perf_counter()
            rows.append((t1 - t0, t2 - t1, t2 - t0))
        panes = view["panes"]
        print(f"{panes['before']['total_nodes']} nodes before, {panes['after']['total_nodes']} after; "
              f"{panes['before']['visible']} + {panes['after']['visible']} boxes shown at first; "
              f"{len(payload) / 1024:.0f} KiB of component arguments")
        for name, k in (("graph_description", 0), ("build_view + args", 1), ("engine total", 2)):
            print(f"{name:>20}: median {statistics.median(r[k] for r in rows):.3f} s "
                  f"(min {min(r[k] for r in rows):.3f}, max {max(r[k] for r in rows):.3f})")
        if args.browser:
            b = browser_times(payload, args.repeat, args.screenshot)
            print(f"{'browser: both drawn':>20}: median {statistics.median(r[0] for r in b):.3f} s "
                  f"(min {min(r[0] for r in b):.3f}, max {max(r[0] for r in b):.3f})")
            print(f"{'browser: open group':>20}: median {statistics.median(r[1] for r in b):.3f} s, "
                  f"zoom kept in {sum(r[2] for r in b):.0f} of {len(b)}")
            total = statistics.median(r[2] for r in rows) + statistics.median(r[0] for r in b)
            print(f"{'opens in (median)':>20}: {total:.2f} s (engine + browser)")


if __name__ == "__main__":
    main()
