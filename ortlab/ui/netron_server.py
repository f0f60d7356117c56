"""Serve one model per private, local-only Netron viewer.

The ``netron`` package keeps its server state on a shared class (one model per process), serves every
file in the model's folder, phones home to analytics, asks for cookie consent and refuses to start
180 days after its build. This module uses only netron's static viewer files: a patched copy (held in
memory, built once per process) without telemetry, consent dialog or expiry check, served together with
a private copy of one model by its own HTTP server bound to 127.0.0.1. A Content-Security-Policy keeps
every request on that server.
"""

from __future__ import annotations

import functools
import html
import http.server
import os
import re
import shutil
import tempfile
import threading
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelLoadError, OrtlabError
from ..model import external_data_files, sha256_file_cached

HOST = "127.0.0.1"
MAX_SERVERS = 6

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-src 'none'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'")

_MIME = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css",
         ".json": "application/json", ".png": "image/png", ".ico": "image/x-icon", ".svg": "image/svg+xml"}
_STATIC_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")


class NetronError(OrtlabError):
    """The embedded Netron viewer cannot be used; the message says why (callers fall back)."""


class NetronUnavailable(NetronError):
    """The netron package is missing or this version's viewer cannot be patched safely."""


# -- patching the viewer ------------------------------------------------------------------------------

def _replace_between(text: str, start: str, end: str, new: str, must_contain: tuple[str, ...], file: str) -> str:
    """Replace ``start``…``end`` (inclusive, each found exactly once) after checking what it holds."""
    if text.count(start) != 1 or text.count(end) != 1:
        raise NetronUnavailable(f"Cannot patch netron's {file}: expected code not found (netron version changed?).")
    i = text.index(start)
    j = text.index(end, i) + len(end)
    segment = text[i:j]
    if not all(s in segment for s in must_contain):
        raise NetronUnavailable(f"Cannot patch netron's {file}: the code around {start.strip()!r} changed.")
    return text[:i] + new + text[j:]


def _replace_once(text: str, old: str, new: str, file: str) -> str:
    if text.count(old) != 1:
        raise NetronUnavailable(f"Cannot patch netron's {file}: expected code not found (netron version changed?).")
    return text.replace(old, new)


_TELEMETRY_STUB = """base.Telemetry = class {
    // ortlab: telemetry removed; nothing leaves this machine.
    constructor() { this._config = new Map(); }
    async start() {}
    get session() { return null; }
    set(name, value) { this._config.set(name, value); }
    get(name) { return this._config.get(name); }
    send() {}
};

base.Metadata = class {"""


@dataclass(frozen=True)
class PatchedViewer:
    """Netron's static files: ``directory`` on disk plus patched ``overrides`` (file name → bytes)."""

    directory: Path
    version: str
    overrides: dict[str, bytes] = field(repr=False)

    def read(self, name: str) -> bytes | None:
        """Bytes of one flat viewer file (``index.html``, ``view.js``…), or None when not served."""
        if not _STATIC_NAME.match(name) or Path(name).suffix not in _MIME or name == "index.html":
            return None
        if name in self.overrides:
            return self.overrides[name]
        path = self.directory / name
        return path.read_bytes() if path.is_file() else None

    def index_html(self, model_name: str, title: str) -> bytes:
        """The viewer page that opens ``/data/<model_name>`` on load."""
        meta = "\n".join([
            '<meta name="type" content="Python">',
            f'<meta name="version" content="{html.escape(self.version)}">',
            f'<meta name="file" content="/data/{html.escape(urllib.parse.quote(model_name))}">',
            f'<meta name="name" content="{html.escape(title)}">',
            f'<meta name="identifier" content="{html.escape(model_name)}">',
        ])
        return self.overrides["index.html"].replace(b"<!--ortlab-meta-->", meta.encode("utf-8"))


def patch_viewer_sources(index: str, browser: str, base: str) -> tuple[dict[str, bytes], str]:
    """Patched ``index.html``, ``browser.js`` and ``base.js`` (name → bytes) and netron's version.

    Raises :class:`NetronUnavailable` when the code to remove is not where this netron version had it.
    """
    m = re.search(r'<meta name="version" content="(\d+\.\d+\.\d+)">', index)
    if not m:
        raise NetronUnavailable("Cannot patch netron's index.html: no version tag (netron version changed?).")
    version = m.group(1)

    # index.html: placeholder for the per-model meta tags; the build date (expiry) tag goes away.
    index = _replace_once(index, m.group(0), "<!--ortlab-meta-->", "index.html")
    index = re.sub(r'<meta name="date" content="[^"]*">\n?', "", index)
    index = _replace_once(index, """content="script-src 'self'; frame-src 'none'">""", f'content="{CSP}">',
                          "index.html")

    # browser.js: the age check, consent dialog (ipinfo.io lookup), Google Analytics set-up and the
    # "browser_open" event all live in Host.view(); drop them.
    browser = _replace_between(
        browser, "        const age = async () => {", "        await capabilities();\n",
        "        // ortlab: no expiry check, no consent dialog, no telemetry.\n",
        ("days > 180", "ipinfo.io", "measurement_id", "browser_open"), "browser.js")
    browser = _replace_once(
        browser, "packaged: this._meta.version && this._meta.version[0] !== '0.0.0',", "packaged: false,",
        "browser.js")
    browser = _replace_once(
        browser, "    openURL(url) {\n        const window = this.window;\n        window.location = url;\n    }",
        "    openURL(url) {\n        // ortlab: links to other hosts are not followed.\n"
        "        const window = this.window;\n"
        "        if (new URL(url, window.location.href).origin === window.location.origin) {\n"
        "            window.location = url;\n        }\n    }",
        "browser.js")
    # base.js: the Telemetry class sends beacons to analytics.google.com; replace it by a no-op.
    base = _replace_between(base, "base.Telemetry = class {", "base.Metadata = class {", _TELEMETRY_STUB,
                            ("sendBeacon", "analytics.google.com"), "base.js")

    overrides = {"index.html": index.encode("utf-8"), "browser.js": browser.encode("utf-8"),
                 "base.js": base.encode("utf-8")}
    for name, data in overrides.items():
        for bad in (b"analytics.google", b"google-analytics", b"googletagmanager", b"ipinfo.io", b"sendBeacon"):
            if bad in data:
                raise NetronUnavailable(f"Cannot patch netron's {name}: it still refers to {bad.decode()}.")
    return overrides, version


@functools.lru_cache(maxsize=1)
def patched_viewer() -> PatchedViewer:
    """Netron's viewer with analytics, the consent dialog and the 180-day expiry removed (built once)."""
    try:
        import netron
    except ImportError:
        raise NetronUnavailable("The netron package is not installed (pip install netron==9.3.3).") from None
    directory = Path(netron.__file__).resolve().parent
    try:
        index = (directory / "index.html").read_text("utf-8")
        browser = (directory / "browser.js").read_text("utf-8")
        base = (directory / "base.js").read_text("utf-8")
    except OSError as exc:
        raise NetronUnavailable(f"netron's viewer files are missing ({exc.strerror}: {exc.filename}).") from None
    overrides, version = patch_viewer_sources(index, browser, base)
    return PatchedViewer(directory, version, overrides)


# -- model staging (ortlab.model.external_data_files lists and checks the external data) ------------------------

def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


# -- serving --------------------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    viewer: PatchedViewer
    data_dir: Path
    index: bytes
    protocol_version = "HTTP/1.0"

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
        body, ctype = None, "application/octet-stream"
        if path in ("/", "/index.html"):
            body, ctype = self.index, _MIME[".html"]
        elif path.startswith("/data/"):
            body = self._data(path[len("/data/"):])
        elif path.count("/") == 1:
            name = path[1:]
            body = self.viewer.read(name)
            ctype = _MIME.get(Path(name).suffix, ctype)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", ctype if body is not None else "text/plain")
        self.send_header("Content-Length", str(len(body) if body is not None else 9))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body if body is not None else b"not found")

    def _data(self, rel: str) -> bytes | None:
        root = self.data_dir.resolve()
        target = (root / rel).resolve()
        if not rel or not target.is_relative_to(root) or not target.is_file():
            return None
        return target.read_bytes()

    def log_message(self, format: str, *args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False


@dataclass
class ServedModel:
    """One running viewer: its URL, the private folder it serves and the server itself."""

    url: str
    model_path: Path
    sha256: str
    data_dir: Path
    server: _Server = field(repr=False)
    thread: threading.Thread = field(repr=False)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


class NetronViewer:
    """Local Netron viewers, one private HTTP server per model (LRU, at most ``max_servers`` live).

    Thread-safe; holds no per-user state, so one instance may serve every Streamlit session.
    """

    def __init__(self, max_servers: int = MAX_SERVERS, temp_root: Path | None = None):
        self.max_servers = max(1, max_servers)
        self.temp_root = temp_root
        self._servers: OrderedDict[tuple[str, str], ServedModel] = OrderedDict()
        self._lock = threading.Lock()

    def serve(self, model_path: str | Path) -> str:
        """Start (or reuse) a viewer for ``model_path`` and return its ``http://127.0.0.1:<port>/`` URL."""
        viewer = patched_viewer()
        path = Path(model_path).resolve()
        if not path.is_file():
            raise ModelLoadError(f"Model file not found: {model_path}")
        digest = sha256_file_cached(path)
        key = (str(path), digest)
        with self._lock:
            served = self._servers.get(key)
            if served is not None and served.thread.is_alive():
                self._servers.move_to_end(key)
                return served.url
        extra = [p.relative_to(path.parent.resolve()).as_posix() for p in external_data_files(path).values()]
        served = self._start(viewer, path, digest, extra)
        evicted: list[ServedModel] = []
        with self._lock:
            old = self._servers.pop(key, None)
            if old is not None:
                evicted.append(old)
            self._servers[key] = served
            while len(self._servers) > self.max_servers:
                evicted.append(self._servers.popitem(last=False)[1])
        for s in evicted:
            s.stop()
        return served.url

    def _start(self, viewer: PatchedViewer, path: Path, digest: str, extra: list[str]) -> ServedModel:
        if self.temp_root is not None:
            Path(self.temp_root).mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="ortlab-netron-", dir=self.temp_root))
        data_dir = root / "data"
        try:
            _link_or_copy(path, data_dir / path.name)
            for rel in extra:
                _link_or_copy(path.parent / rel, data_dir / rel)
            handler = type("Handler", (_Handler,), {
                "viewer": viewer, "data_dir": data_dir, "index": viewer.index_html(path.name, path.name)})
            server = _Server((HOST, 0), handler)
        except Exception:
            shutil.rmtree(root, ignore_errors=True)
            raise
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                  name=f"netron-{path.name}", daemon=True)
        thread.start()
        return ServedModel(f"http://{HOST}:{server.server_address[1]}/", path, digest, data_dir, server, thread)

    def served(self) -> list[ServedModel]:
        """The live viewers, least recently used first."""
        with self._lock:
            return list(self._servers.values())

    def stop_all(self) -> None:
        """Stop every viewer and delete their private folders."""
        with self._lock:
            stopped = list(self._servers.values())
            self._servers.clear()
        for s in stopped:
            s.stop()
