"""The shared app in a real browser: OpenID Connect sign-in (a local mock provider), one private workspace per
user whose downloads are built from that workspace, and Netron drawing when the app is opened by a non-loopback
address. No request leaves the app's origin and the loopback provider."""

from __future__ import annotations

import hashlib
import html
import re
import secrets
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, free_port, start_app
from tests.browser.test_browser import DEMO_TIMEOUT_MS, STEP_TIMEOUT_MS, button, go_to, netron_frames, netron_nodes, wait_quiet

pytestmark = pytest.mark.browser


@contextmanager
def oidc_provider() -> Iterator[str]:
    """The ``oidc-provider-mock`` provider on 127.0.0.1 in a thread (any client id/secret; the test picks the
    subject on its authorization form); yields its issuer URL. Its pages' stylesheet link to a CDN is removed so
    that the browser requests nothing outside this machine."""
    import werkzeug.serving
    from oidc_provider_mock import app as provider_app

    flask_app = provider_app()

    @flask_app.after_request
    def _no_cdn(response):
        if response.mimetype == "text/html":
            response.set_data(re.sub(rb"<link[^>]*https://[^>]*>", b"", response.get_data()))
        return response

    server = werkzeug.serving.make_server("127.0.0.1", free_port(), flask_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory):
    """A second app server on 127.0.0.1 with sign-in configured (its own secrets.toml and ORTLAB_HOME)."""
    home = tmp_path_factory.mktemp("shared_home")
    with oidc_provider() as issuer:
        port_hint = tmp_path_factory.mktemp("shared_secrets")
        secrets_toml = port_hint / "secrets.toml"

        @contextmanager
        def run() -> Iterator[dict]:
            port = free_port()  # the redirect URI names the app's port
            secrets_toml.write_text(
                "[auth]\n"
                f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
                f'cookie_secret = "{secrets.token_hex(32)}"\n'
                'client_id = "ortlab-test"\n'
                'client_secret = "test-secret"\n'
                f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n')
            with start_app(home, port=port, extra_args=("--secrets.files", str(secrets_toml))) as a:
                yield a

        with run() as info:
            yield {**info, "issuer": issuer}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_page(browser, requests: list[str]):
    """A page in a fresh browser context (its own cookies: one user), logging every URL it requests."""
    context = browser.new_context(viewport=VIEWPORT, service_workers="block")
    context.on("request", lambda r: requests.append(r.url))
    context.on("websocket", lambda ws: requests.append(ws.url))
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return page


def sign_in(page, app_url: str, subject: str) -> None:
    """Open the app, press "Sign in", choose ``subject`` on the mock provider's form, land back signed in."""
    page.goto(app_url)
    page.get_by_role("button", name=re.compile("Sign in")).click()
    page.wait_for_url(re.compile(r"/oauth2/authorize"))
    page.locator('input[name="sub"]').fill(subject)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(re.escape(app_url) + r"/?(\?.*)?$"), timeout=60_000)
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
    page.get_by_text(subject, exact=True).first.wait_for()  # "Signed in as" in the sidebar
    wait_quiet(page)


def user_key(issuer: str, subject: str) -> str:
    from ortlab.ui.session.auth import user_key as key

    return key(issuer, subject)


def run_count(home: Path, key: str) -> int:
    db = home / "users" / key / "history.sqlite"
    if not db.is_file():
        return 0
    with sqlite3.connect(db) as con:
        return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def assert_local(requests: list[str], allowed_netlocs: set[str]) -> None:
    outside = [u for u in requests
               if urllib.parse.urlparse(u).scheme not in {"data", "blob", "about"}
               and urllib.parse.urlparse(u).netloc not in allowed_netlocs]
    assert outside == []


# every download button History offers for an int8 static run, and what its file must be
DOWNLOADS = {"⬇ Model (QDQ, portable)": "model", "⬇ ORT-only model": "model", "⬇ Recipe (JSON)": "recipe",
             "⬇ CLI line": "cli", "⬇ HTML report": "report"}


def download_everything(page, run_dir: Path, urls: list[str] | None = None) -> dict[str, bytes]:
    """Click every download button of the History run shown (``run_dir``: that run's folder in the signed-in
    user's workspace) and check each file: the models are the run's own ONNX files, byte for byte. ``urls``
    receives the address each file came from."""
    import onnx

    from ortlab.settings.config import Recipe

    from playwright.sync_api import expect

    widgets = page.locator('.st-key-history_actions [data-testid="stDownloadButton"]')
    expect(widgets).to_have_count(len(DOWNLOADS), timeout=60_000)  # the page may still be drawing them
    buttons = {w.inner_text().strip(): w.locator("button").first for w in widgets.all()}
    labels = sorted(buttons)
    assert labels == sorted(DOWNLOADS) and widgets.count() == len(DOWNLOADS), labels  # a new one needs a check
    title = page.get_by_role("heading", name=re.compile(r"^Run #\d+: ")).first.inner_text()
    heading = re.match(r"Run #(\d+): (.*)", title.strip())
    assert heading, title
    run_id, label = heading.groups()
    got: dict[str, bytes] = {}
    for name in labels:
        with page.expect_download(timeout=60_000) as info:
            buttons[name].click()
        download = info.value
        assert download.failure() is None, (name, download.failure())
        if urls is not None:
            urls.append(download.url)
        data = Path(download.path()).read_bytes()
        assert data, f"{name}: empty download"
        assert download.suggested_filename.startswith(f"run{run_id}_"), (name, download.suggested_filename)
        got[download.suggested_filename] = data
        kind = DOWNLOADS[name]
        if kind == "model":
            model = onnx.ModelProto.FromString(data)  # a valid ONNX protobuf
            assert model.ir_version > 0 and len(model.graph.node) > 0
            on_disk = run_dir / download.suggested_filename.removeprefix(f"run{run_id}_")
            assert data == on_disk.read_bytes(), f"{name} is not the run's {on_disk.name}"
        elif kind == "recipe":
            assert Recipe.from_json(data.decode("utf-8")).label() == label
        elif kind == "cli":
            assert data.decode("utf-8").startswith("ortlab optimize ") and f"run{run_id}.onnx" in data.decode()
        else:
            text = data.decode("utf-8")
            assert text.startswith("<!DOCTYPE html>") and download.suggested_filename.endswith(".html")
            assert f"<title>ortlab report — {html.escape(label)}</title>" in text and f"run #{run_id}" in text
            # built from this user's run: the report names the hash of the model in their workspace
            assert hashlib.sha256((run_dir / "model.onnx").read_bytes()).hexdigest() in text
    assert not page.locator('[data-testid="stDownloadButtonError"]').count()
    return got


def test_sign_in_gives_each_user_a_private_workspace(shared_app, browser, screenshots):
    app_url, home, issuer = shared_app["url"], shared_app["home"], shared_app["issuer"]
    requests: list[str] = []

    # Signed out: every page is the sign-in page, nothing of the app runs.
    anon = new_page(browser, requests)
    anon.goto(app_url + "/history")
    anon.get_by_role("button", name=re.compile("Sign in")).wait_for()
    wait_quiet(anon)
    assert not anon.get_by_text("No runs yet").count() and not anon.locator('[data-testid="stSidebarNav"]').count()
    anon.screenshot(path=str(screenshots / "sharing_1_signed_out.png"))
    anon.context.close()

    # User A signs in and runs the demo: the run lands in A's workspace only.
    a = new_page(browser, requests)
    sign_in(a, app_url, "alice")
    demo = button(a, ["demo_run"], re.compile("Run the demo"))
    demo.click()
    a.wait_for_url(re.compile(r"/compare/?$"), timeout=DEMO_TIMEOUT_MS)
    wait_quiet(a)
    key_a, key_b = user_key(issuer, "alice"), user_key(issuer, "bob")
    assert run_count(home, key_a) == 1
    go_to(a, "History", "history")
    a.get_by_role("button", name=re.compile("Load into Compare")).wait_for()  # A sees and may load A's run
    a.screenshot(path=str(screenshots / "sharing_2_alice_history.png"), full_page=True)
    a_text = a.locator("body").inner_text()
    # Every download of A's run, signed in: built in A's session from A's workspace.
    (run_folder,) = (home / "users" / user_key(issuer, "alice") / "artifacts").iterdir()
    urls: list[str] = []
    files = download_everything(a, run_folder, urls)
    assert len(files) == len(DOWNLOADS) and len(urls) == len(DOWNLOADS)

    # User B, in another browser context, sees none of it: empty History, nothing to load or compare.
    b = new_page(browser, requests)
    sign_in(b, app_url, "bob")
    go_to(b, "History", "history")
    b.get_by_text("No runs yet").first.wait_for()
    assert not b.get_by_role("button", name=re.compile("Load into Compare")).count()
    b.screenshot(path=str(screenshots / "sharing_3_bob_history.png"), full_page=True)
    go_to(b, "Compare", "compare")
    b.get_by_text("Nothing to compare yet").first.wait_for()
    b_text = b.locator("body").inner_text()
    run_dir = next((home / "users" / key_a / "artifacts").iterdir()).name
    assert run_dir not in b_text and "alice" not in b_text and "bob" in b_text
    assert "alice" in a_text
    assert run_count(home, key_b) == 0
    # Every download link of A's expired with its click (the recipe's answered 200 to B and to anyone minutes
    # later, when it was handed over as bytes): B and an anonymous request get none of them.
    for url in urls:
        assert b.context.request.get(url).status == 404, url
        anonymous = b.context.browser.new_context()
        try:
            assert anonymous.request.get(url).status == 404, url
        finally:
            anonymous.close()
    assert sorted(p.name for p in (home / "users").iterdir()) == sorted([key_a, key_b])
    # Nothing was written to the shared top-level workspace, not even the Netron viewer's files (in the cache).
    assert sorted(p.name for p in home.iterdir()) == ["users"]
    a.context.close()
    b.context.close()

    app_netloc, provider_netloc = (urllib.parse.urlparse(u).netloc for u in (app_url, issuer))
    assert_local(requests, {app_netloc, provider_netloc})


def interface_address() -> tuple[str, str]:
    """The address the app is opened by: 127.0.0.2, not the 127.0.0.1 the old viewer iframe was wired to.

    Tests send traffic only to loopback addresses, so "another machine" is a second loopback address: a
    viewer that only worked from 127.0.0.1 fails here as it failed from a colleague's laptop."""
    return "127.0.0.2", "second loopback address"


def test_netron_draws_when_the_app_is_opened_by_another_address(tmp_path_factory, browser, screenshots):
    address, kind = interface_address()
    requests: list[str] = []
    with start_app(tmp_path_factory.mktemp("remote_home"), address=address) as info:
        page = new_page(browser, requests)
        page.goto(info["url"])
        page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
        nodes = netron_nodes(page, 60)
        assert nodes > 0, f"Netron drew no graph when opened via {address} ({kind})"
        frames = netron_frames(page)
        assert frames and all(f.url.startswith(info["url"] + "/component/") for f in frames)
        page.screenshot(path=str(screenshots / "sharing_4_netron_via_interface.png"))
        page.context.close()
    assert_local(requests, {urllib.parse.urlparse(info["url"]).netloc})
