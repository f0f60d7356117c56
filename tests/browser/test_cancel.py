"""Cancel in a real browser at 1280×720: the demo started on the Model page is cancelled with its Cancel button
while its child works (the progress above the button redraws every 0.5 s meanwhile); the page says it was
cancelled within seconds, without an error and without landing on Compare, and no process of the run's group is
left."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from ortlab.runtime.child import STOP_GRACE_S, group_members
from tests.browser.conftest import LAPTOP, start_app
from tests.browser.test_browser import STEP_TIMEOUT_MS, button, wait_quiet
from tests.support.children import hold_recipe_children, recipe_children

SAID_WITHIN_S = STOP_GRACE_S + 12  # SIGTERM, SIGKILL after the grace, the watcher, the page's next tick: on a busy machine


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app (as conftest's ``app``) whose recipe children are held at their first progress event, so the run is
    surely at work when the test clicks, however fast the machine."""
    with pytest.MonkeyPatch.context() as mp:
        hold_recipe_children(tmp_path_factory.mktemp("held_hook"), mp)
        with start_app(tmp_path_factory.mktemp("ortlab_home")) as info:
            yield info


def _poll(until, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _elapsed_ticks(page, want: int, timeout_s: float = 30) -> int:
    """Wait until the running panel's "Running for N s" moved ``want`` times (the fragment redrew); how often it did."""
    counter = page.get_by_text(re.compile(r"^Running for \d+ s$"))
    last, moves = None, 0
    deadline = time.monotonic() + timeout_s
    while moves < want and time.monotonic() < deadline:
        try:
            now = counter.first.inner_text(timeout=1_000)
        except Exception:  # between two redraws, or the run ended
            now = last
        if last is not None and now != last:
            moves += 1
        last = now
        page.wait_for_timeout(100)
    return moves


def test_cancel_stops_the_running_demo_says_so_and_leaves_no_process(app, browser_page):
    page, _ = browser_page
    home = Path(app["home"])
    page.set_viewport_size(LAPTOP)
    page.goto(app["url"])
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
    wait_quiet(page)
    button(page, ["demo_run"], re.compile("demo", re.I)).click()
    cancel = page.locator(".st-key-model-cancel_recipe button")
    cancel.wait_for(state="visible", timeout=60_000)
    assert _poll(lambda: recipe_children(home), 60), "the demo's run process never started"
    groups = {pid: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2] for pid in recipe_children(home)}
    assert all(int(pgid) == pid for pid, pgid in groups.items()), f"the run leads its own process group: {groups}"
    assert page.locator(".st-key-model-cancel_recipe").count() == 1
    # the button a person sees stays the same element while the progress above it redraws (every 0.5 s): a
    # click on it is not lost to a redraw (before, it was replaced on each tick and could not be clicked under load)
    seen = cancel.element_handle()
    where = seen.bounding_box()
    ticks = _elapsed_ticks(page, 2)
    assert ticks >= 2, f"the progress panel did not redraw ({ticks} ticks)"
    assert seen.evaluate("e => e.isConnected"), "the Cancel button was replaced while the progress redrew"
    assert seen.bounding_box() == where, "the Cancel button moved while the progress redrew"
    seen.click(timeout=STEP_TIMEOUT_MS)
    began = time.monotonic()
    said = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="Running the recipe was cancelled.")
    said.first.wait_for(state="visible", timeout=SAID_WITHIN_S * 1000)
    shown = time.monotonic() - began
    assert not re.search(r"/compare/?$", page.url), "the cancelled demo landed on Compare"
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    assert _poll(lambda: not any(group_members(pid) for pid in groups), STOP_GRACE_S + 5), \
        f"processes of the run's group outlived its Cancel: {[group_members(pid) for pid in groups]}"
    assert recipe_children(home) == []
    artifacts = home / "artifacts"
    assert not artifacts.exists() or list(artifacts.iterdir()) == [], "the cancelled run left its folder"
    print(f"Cancel to 'was cancelled' on the page: {shown:.1f} s")
