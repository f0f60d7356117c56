"""A real browser (Debian chromium driven by Playwright) against ``streamlit run app.py``.

Skipped when chromium or playwright is missing, except under CI (env ``CI`` set), where that is a failure.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING
from pathlib import Path

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ORTLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
                 "--disable-domain-reliability", "--no-pings", "--metrics-recording-only",
                 # the tests talk only to the app; a proxy from the environment (https_proxy) would otherwise carry
                 # the app's websocket when it is opened by a non-loopback address, and the page never connects
                 "--no-proxy-server",
                 # shared memory in /tmp: a container's /dev/shm (64 MB by default) is too small for a large page
                 "--disable-dev-shm-usage"]
VIEWPORT: ViewportSize = {"width": 1600, "height": 2200}


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the app is local: never via a proxy


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives a real chromium against the running app")


def pytest_collection_modifyitems(config, items):
    browser_items = [item for item in items if Path(str(item.fspath)).parent == Path(__file__).parent]
    for item in browser_items:
        item.add_marker(pytest.mark.slow)  # each starts the app and drives Chromium
    why = browser_missing()
    if why is None:
        return
    for item in browser_items:
        if os.environ.get("CI"):
            item.add_marker(pytest.mark.usefixtures("_fail_in_ci"))
        else:
            item.add_marker(pytest.mark.skip(reason=f"browser test skipped: {why}"))


@pytest.fixture
def _fail_in_ci():
    pytest.fail(f"browser test cannot run under CI: {browser_missing()}", pytrace=False)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


_STREAMLIT_WITH_STACK_DUMPS = ("import faulthandler, signal, sys\n"
                               "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
                               "from streamlit.web.cli import main\n"
                               "sys.exit(main(prog_name='streamlit'))\n")


@contextlib.contextmanager
def start_app(home: Path, address: str = "127.0.0.1", extra_args: tuple[str, ...] = (),
              port: int | None = None) -> Iterator[dict]:
    """``streamlit run app.py`` on a free port of ``address`` with its own ORTLAB_HOME (``extra_args`` go to
    streamlit, e.g. ``--secrets.files``); yields ``{"url", "home", "log"}`` once it is healthy."""
    log_path = home.parent / f"streamlit-{home.name}.log"
    port = port or free_port(address)
    # everything these tests reach (the app, a mock sign-in provider) is on this machine: no proxy from the environment
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(ORTLAB_HOME=str(home), PYTHONUNBUFFERED="1")
    env.setdefault("ORTLAB_CACHE_DIR", str(home.parent / "ortlab_cache"))  # tests/conftest.py sets one per session
    # a crash prints every thread's stack to the log (PYTHONFAULTHANDLER); SIGUSR1 prints them while it runs
    # (:func:`diagnose` sends it when the page lost the app)
    env["PYTHONFAULTHANDLER"] = "1"
    cmd = [sys.executable, "-c", _STREAMLIT_WITH_STACK_DUMPS, "run", "app.py", "--server.port", str(port),
           "--server.address", address, "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", *extra_args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://{address}:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}", pytrace=False)
            try:
                with _DIRECT.open(base + "/_stcore/health", timeout=1) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit not healthy after 60 s:\n{log_path.read_text()[-3000:]}", pytrace=False)
            try:
                proc.wait(0.25)  # returns at once if streamlit exits; otherwise poll the health URL again
            except subprocess.TimeoutExpired:
                pass
        yield {"url": base, "home": home, "log": log_path, "proc": proc}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """``streamlit run app.py`` on a free loopback port with its own ORTLAB_HOME; yields the base URL."""
    with start_app(tmp_path_factory.mktemp("ortlab_home")) as info:
        yield info


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    """A chromium page (fresh user-data dir, tall viewport) and the list of every URL it requested."""
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium_profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport=VIEWPORT, service_workers="block")
        context.on("request", lambda r: requests.append(r.url))
        page = context.pages[0] if context.pages else context.new_page()
        page.on("websocket", lambda ws: requests.append(ws.url))  # a page emits it; a BrowserContext never does
        page.set_default_timeout(30_000)
        watch_page(page)
        yield page, requests
        context.close()


LAPTOP: ViewportSize = {"width": 1280, "height": 720}


@pytest.fixture(scope="module")
def demo(app, browser_page, screenshots):
    """The page at 1280×720 on Compare after the demo ran, and the folder for screenshots ($ORTLAB_SHOTS or
    ``screenshots``)."""
    from playwright.sync_api import Error as PlaywrightError

    from tests.browser.test_browser import STEP_TIMEOUT_MS, button, wait_quiet

    page, _ = browser_page
    page.set_viewport_size(LAPTOP)
    for attempt in (1, 2):
        page.goto(app["url"])
        page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
        wait_quiet(page)
        button(page, ["demo_run"], re.compile("demo", re.I)).click()
        page.wait_for_url(re.compile(r"/compare/?$"), timeout=120_000)
        wait_quiet(page)
        try:  # Compare draws its metric cards at once; none within a minute means the page lost the app
            page.locator('[data-testid="stMetric"]').first.wait_for(timeout=60_000)
            break
        except PlaywrightError:
            state = diagnose(page, app)
            if attempt == 2 or app["proc"].poll() is not None:
                pytest.fail(f"Compare drew nothing after the demo:\n{state}", pytrace=False)
            # the app still runs: a lost connection of this page, not the app's failure; say so and start over
            warnings.warn(f"Compare drew nothing after the demo; the page is opened again:\n{state}", stacklevel=1)
    shots = Path(os.environ.get("ORTLAB_SHOTS") or screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    return page, shots


@pytest.fixture(scope="module")
def screenshots() -> Path:
    """Where the step screenshots go: $ORTLAB_SCREENSHOTS or <repo>/artifacts/screenshots."""
    out = Path(os.environ.get("ORTLAB_SCREENSHOTS") or REPO / "artifacts" / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


PAGE_EVENTS: dict[int, list[str]] = {}  # id(page) -> what the page said or did that a failure should show


def watch_page(page) -> None:
    """Record the page's errors, crashes, main-frame navigations and failed requests for :func:`diagnose`."""
    events = PAGE_EVENTS.setdefault(id(page), [])

    def note(text: str) -> None:
        text = text[:300]
        if events and events[-1].split(" ", 1)[1].split(" [×")[0] == text:  # a repeat: count it, keep older events
            repeats = int(events[-1].rsplit("[×", 1)[1].split(",")[0]) + 1 if " [×" in events[-1] else 2
            events[-1] = f"{events[-1].split(' ', 1)[0]} {text} [×{repeats}, last {time.strftime('%H:%M:%S')}]"
            return
        events.append(f"{time.strftime('%H:%M:%S')} {text}")
        del events[:-40]

    def console(m) -> None:
        if m.type == "error" or m.text.startswith("ortlab"):
            note(f"console.{m.type}: {m.text}")

    def navigated(frame) -> None:
        if frame == page.main_frame:
            note(f"navigated to {frame.url}")

    page.on("console", console)
    page.on("pageerror", lambda e: note(f"page error: {e}"))
    page.on("crash", lambda _: note("the page CRASHED (renderer gone)"))
    page.on("framenavigated", navigated)
    page.on("requestfailed", lambda r: note(f"request failed: {r.url} ({r.failure})"))


def app_state(app_info: dict) -> str:
    """Whether the app's process still runs and answers its health URL; when it runs but does not answer, its
    threads' stacks are dumped into its log (SIGUSR1, see :func:`start_app`)."""
    proc = app_info.get("proc")
    if proc is None:
        return "app process: unknown"
    if proc.poll() is not None:
        return f"app process: EXITED with code {proc.returncode} (a negative code is the signal that ended it)"
    try:
        with _DIRECT.open(app_info["url"] + "/_stcore/health", timeout=5) as r:
            health = r.read().strip().decode(errors="replace")
    except OSError as e:
        health = f"no answer ({type(e).__name__}: {e})"
    if health != "ok":
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(1.0)
    return f"app process: running (pid {proc.pid}), health URL: {health}"


def diagnose(page, app_info: dict | None) -> str:
    """What a failed browser step needs to be understood where only CI's log is left: whether the page still
    answers (a busy main thread makes every locator time out), its URL and text, what it logged, the app's log."""
    lines = [f"page url: {page.url}"]
    try:
        page.wait_for_function("() => true", timeout=5_000)
        answers = True
    except Exception as e:  # any failure is the diagnosis
        answers = False
        lines.append(f"the page does not answer within 5 s ({type(e).__name__}): its main thread is busy or gone")
    if answers:
        text = page.evaluate("() => document.body ? document.body.innerText : ''")
        lines.append("page text: " + " | ".join(t for t in str(text).split("\n") if t.strip())[:2500])
        lines.append(f"graph diff frames: {page.locator('iframe[src*=graphdiff]').count()}, "
                     f"status widget: {page.locator('[data-testid=stStatusWidget]').all_inner_texts()}")
    lines += PAGE_EVENTS.get(id(page), [])[-15:]
    if app_info:
        lines.append(app_state(app_info))
    if app_info and Path(app_info["log"]).exists():
        log = Path(app_info["log"]).read_text(errors="replace").splitlines()
        lines.append(f"app log ({len(log)} lines), last 60:")
        lines += log[-60:]
    return "\n".join(lines)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    if rep.when == "call" and rep.failed and "browser_page" in item.funcargs:
        page, _ = item.funcargs["browser_page"]
        try:
            text = diagnose(page, item.funcargs.get("app"))
        except Exception as e:
            text = f"no diagnosis: {type(e).__name__}: {e}"
        rep.sections.append(("browser diagnosis", text))
        crash = getattr(rep.longrepr, "reprcrash", None)
        if crash is not None:  # the short summary at the end of CI's log shows this message
            crash.message += "\n[browser diagnosis]\n" + text


@pytest.fixture(autouse=True)
def _screenshot_on_failure(request, screenshots):
    """On a failed step, save the page as FAILED_<test>.png next to the step screenshots."""
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed or "browser_page" not in request.fixturenames:
        return
    page, _ = request.getfixturevalue("browser_page")
    try:
        page.screenshot(path=str(screenshots / f"FAILED_{request.node.name}.png"), full_page=True)
    except Exception:
        pass
