"""Netron's viewer, patched, as the files of a Streamlit custom component (served from the app's own origin).

The ``netron`` package's own server keeps its state on a shared class (one model per process), serves
every file in the model's folder, phones home to analytics, asks for cookie consent and refuses to start
180 days after its build. ortlab uses only netron's static viewer files: a patched copy without telemetry,
consent dialog or expiry check, plus a small bridge (``netron_component/ortlab-netron.js``) that receives
the model's bytes from Python as component arguments and opens them in the viewer. The folder is written
once per netron version (and written again when something deleted it); Streamlit serves it under
``/component/…`` on the app's own address, so no other server or port is involved. A
Content-Security-Policy keeps every request of the viewer on that origin.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ortlab.core.errors import OrtlabError

BRIDGE = Path(__file__).resolve().parent / "netron_component" / "ortlab-netron.js"
BRIDGE_NAME = BRIDGE.name
STAMP = ".ortlab-complete"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-src 'none'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'")

_SERVED = (".html", ".js", ".css", ".json", ".png", ".ico", ".svg")
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

    def names(self) -> list[str]:
        """Every file of the component folder: netron's flat viewer files, the patched ones and the bridge."""
        found = {p.name for p in self.directory.iterdir()
                 if p.is_file() and _STATIC_NAME.match(p.name) and p.suffix in _SERVED}
        return sorted(found | set(self.overrides))

    def read(self, name: str) -> bytes | None:
        """Bytes of one flat viewer file (``index.html``, ``view.js``…), or None when it is not part of the viewer."""
        if not _STATIC_NAME.match(name) or Path(name).suffix not in _SERVED:
            return None
        if name in self.overrides:
            return self.overrides[name]
        path = self.directory / name
        return path.read_bytes() if path.is_file() else None

    @property
    def digest(self) -> str:
        """Short hash of the patched files (names the component folder, so a new patch gets a new folder)."""
        h = hashlib.sha256(self.version.encode())
        for name in sorted(self.overrides):
            h.update(name.encode() + b"\0" + self.overrides[name])
        return h.hexdigest()[:12]


def patch_viewer_sources(index: str, browser: str, base: str, bridge: str | None = None
                         ) -> tuple[dict[str, bytes], str]:
    """Patched ``index.html``, ``browser.js`` and ``base.js`` plus the bridge script (name → bytes), and
    netron's version. ``bridge`` is the text of ``ortlab-netron.js`` (default: the file next to this module).

    Raises :class:`NetronUnavailable` when the code to remove is not where this netron version had it.
    """
    m = re.search(r'<meta name="version" content="(\d+\.\d+\.\d+)">', index)
    if not m:
        raise NetronUnavailable("Cannot patch netron's index.html: no version tag (netron version changed?).")
    version = m.group(1)

    # index.html: the build date (expiry) tag goes away, the CSP keeps every request on the app's origin, the
    # bridge script is loaded after netron's loader, and the host type is "Python" (no "open file" menu).
    index = _replace_once(index, m.group(0), f'<meta name="type" content="Python">\n{m.group(0)}', "index.html")
    index = re.sub(r'<meta name="date" content="[^"]*">\n?', "", index)
    index = re.sub(r'\s+href="https?://[^"]*"', "", index)  # links to netron's home pages: nothing to follow
    index = _replace_once(index, """content="script-src 'self'; frame-src 'none'">""", f'content="{CSP}">',
                          "index.html")
    index = _replace_once(index, '<script type="text/javascript" src="index.js"></script>',
                          '<script type="text/javascript" src="index.js"></script>\n'
                          f'<script type="text/javascript" src="{BRIDGE_NAME}"></script>', "index.html")

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
    # browser.js: tell the bridge when the host has started (it then opens the model it was handed).
    browser = _replace_once(
        browser, "        });\n        this._view.show('welcome');\n    }\n\n    environment(name) {",
        "        });\n        this._view.show('welcome');\n"
        "        // ortlab: the bridge (ortlab-netron.js) opens the model handed over by Streamlit.\n"
        "        window.dispatchEvent(new window.CustomEvent('ortlab-netron-ready', { detail: this }));\n"
        "    }\n\n    environment(name) {",
        "browser.js")
    # base.js: the Telemetry class sends beacons to analytics.google.com; replace it by a no-op.
    base = _replace_between(base, "base.Telemetry = class {", "base.Metadata = class {", _TELEMETRY_STUB,
                            ("sendBeacon", "analytics.google.com"), "base.js")

    if bridge is None:
        try:
            bridge = BRIDGE.read_text("utf-8")
        except OSError as exc:
            raise NetronUnavailable(f"ortlab's Netron bridge is missing ({exc.strerror}: {exc.filename}).") from None
    overrides = {"index.html": index.encode("utf-8"), "browser.js": browser.encode("utf-8"),
                 "base.js": base.encode("utf-8"), BRIDGE_NAME: bridge.encode("utf-8")}
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


# -- the component folder ------------------------------------------------------------------------------

_build_lock = threading.Lock()


def _complete(folder: Path) -> bool:
    """True when ``folder`` holds every file its stamp lists (a cleaner may have removed some)."""
    try:
        names = (folder / STAMP).read_text("utf-8").split("\n")
    except OSError:
        return False
    return bool(names) and all((folder / n).is_file() for n in names if n)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def component_dir(parent: Path) -> Path:
    """The folder (under ``parent``) Streamlit serves as the viewer component; written when it is missing or
    incomplete. Raises :class:`NetronUnavailable` when netron cannot be patched or the folder not written."""
    viewer = patched_viewer()
    folder = Path(parent) / f"netron-{viewer.version}-{viewer.digest}"
    if _complete(folder):
        return folder
    with _build_lock:
        if _complete(folder):
            return folder
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            build = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
            try:
                names = viewer.names()
                for name in names:
                    if name in viewer.overrides:
                        (build / name).write_bytes(viewer.overrides[name])
                    else:
                        _link_or_copy(viewer.directory / name, build / name)
                (build / STAMP).write_text("\n".join(names), "utf-8")
                if folder.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                try:
                    build.rename(folder)
                except OSError:
                    if not _complete(folder):  # else another process wrote it at the same moment
                        raise
            finally:
                shutil.rmtree(build, ignore_errors=True)
        except OSError as exc:
            raise NetronUnavailable(f"Cannot write the Netron viewer's files to {folder.parent} "
                                    f"({exc.strerror or exc}).") from None
    return folder
