"""Run inside a network namespace whose only outward interface holds a non-loopback address (see
``test_remote_netron.py``): start the app listening on that address, as a person sharing it on a network would,
open it there in chromium, and print JSON: how many nodes Netron drew on the Model page, and every request that
went anywhere but the app's own origin."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, diagnose, start_app, watch_page  # noqa: E402
from tests.browser.test_browser import netron_frames, netron_nodes  # noqa: E402


def main(address: str) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, start_app(Path(tmp) / "home", address=address) as app:
        requests: list[str] = []
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(str(Path(tmp) / "profile"), executable_path=CHROMIUM,
                                                           headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT,
                                                           service_workers="block")
            context.on("request", lambda r: requests.append(r.url))
            page = context.pages[0] if context.pages else context.new_page()
            page.on("websocket", lambda ws: requests.append(ws.url))  # a page emits it; a BrowserContext never does
            watch_page(page)
            page.goto(app["url"])
            try:
                page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
            except Exception:  # say what the app and the page showed, then fail
                print(diagnose(page, app), file=sys.stderr)
                raise
            nodes = netron_nodes(page, 60)
            frames = [f.url for f in netron_frames(page)]
            context.close()
    origin = app["url"].split("://", 1)[1]
    elsewhere = [u for u in requests if not (u.split("://", 1)[-1].startswith(origin + "/") or
                                             u.split("://", 1)[-1] == origin or u.startswith(("data:", "blob:", "about:")))]
    print(json.dumps({"url": app["url"], "nodes": nodes, "netron_frames": frames, "requests": len(requests),
                      "elsewhere": elsewhere}))


if __name__ == "__main__":
    main(sys.argv[1])
