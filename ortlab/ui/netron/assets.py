"""Netron's viewer, patched, as the files of a Streamlit custom component (served from the app's own origin).

The ``netron`` package's own server keeps its state on a shared class (one model per process), serves
every file in the model's folder, phones home to analytics, asks for cookie consent and refuses to start
180 days after its build. ortlab uses only netron's static viewer files: a patched copy without telemetry,
consent dialog or expiry check, plus a small bridge (``netron_component/ortlab-netron.js``) that receives
the model's bytes from Python as component arguments and opens them in the viewer. Only the files an ONNX
model needs are part of it (``netron_files``; for netron 9.3.3, 36 of its 177 files, 8.4 of 28.8 MB): the
viewer answers a request for any other module or asset with a message that says so.

Streamlit serves a component from one folder and refuses files whose real path leaves it, so the folder holds
the files themselves: hard links to the netron package's files where it is on the same filesystem (no extra
bytes), copies elsewhere. It lives in ortlab's cache directory (``cache_dirs``: ``$ORTLAB_CACHE_DIR``,
``$XDG_CACHE_HOME/ortlab`` or ``~/.cache/ortlab``), outside every workspace, is written once per netron version
and patch (again when something deleted it), and is served under ``/component/…`` on the app's own address, so
no other server or port is involved. A Content-Security-Policy keeps every request of the viewer on that origin.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ortlab.core.errors import OrtlabError
from ortlab.ui.netron.files import NetronSourceError, needed_files

BRIDGE = Path(__file__).resolve().parent / "netron_component" / "ortlab-netron.js"
BRIDGE_NAME = BRIDGE.name
STAMP = ".ortlab-complete"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-src 'none'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'")

_SERVED = (".html", ".js", ".css", ".json", ".png", ".ico", ".svg")
_STATIC_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
_FOLDER_NAME = re.compile(r"^(netron-\d+\.\d+\.\d+-[0-9a-f]{12}|\.build-[A-Za-z0-9_]+)$")


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


def _servable(name: str) -> bool:
    return bool(_STATIC_NAME.match(name)) and Path(name).suffix in _SERVED


@dataclass(frozen=True)
class PatchedViewer:
    """Netron's static files: the ``served`` names of ``directory`` plus patched ``overrides`` (name → bytes)."""

    directory: Path
    version: str
    overrides: dict[str, bytes] = field(repr=False)
    served: frozenset[str] = field(repr=False)

    def names(self) -> list[str]:
        """Every file of the component folder: netron's files an ONNX model needs, the patched ones, the bridge."""
        found = {n for n in self.served if _servable(n) and (self.directory / n).is_file()}
        return sorted(found | set(self.overrides))

    def read(self, name: str) -> bytes | None:
        """Bytes of one flat viewer file (``index.html``, ``view.js``…), or None when it is not part of the viewer."""
        if not _servable(name):
            return None
        if name in self.overrides:
            return self.overrides[name]
        if name not in self.served:
            return None
        path = self.directory / name
        return path.read_bytes() if path.is_file() else None

    @property
    def digest(self) -> str:
        """Short hash of the patched files (names the component folder, so a new patch gets a new folder)."""
        h = hashlib.sha256(self.version.encode())
        for name in sorted(self.overrides):
            h.update(name.encode() + b"\0" + self.overrides[name])
        return h.hexdigest()[:12]


def patch_viewer_sources(index: str, browser: str, base: str, bridge: str | None = None, *,
                         served: frozenset[str]) -> tuple[dict[str, bytes], str]:
    """Patched ``index.html``, ``browser.js`` and ``base.js`` plus the bridge script (name → bytes), and
    netron's version. ``bridge`` is the text of ``ortlab-netron.js`` (default: the file next to this module);
    ``served`` the names of netron's files the folder holds (the viewer refuses to load any other module).

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
    # browser.js: only the files in the folder are asked for; any other module or asset (a format other than
    # ONNX) fails with a message the viewer shows, instead of a request that finds nothing.
    listed = json.dumps(sorted({n for n in served if _servable(n)} | {"index.html", "browser.js", "base.js",
                                                                     BRIDGE_NAME}))
    browser = _replace_once(
        browser, "const browser = {};\n",
        "const browser = {};\n\n// ortlab: the files this viewer serves (netron's files for ONNX models, see "
        f"ortlab/ui/netron/files.py).\nbrowser.served = new Set({listed});\n"
        "browser.notServed = (name) => new Error(`Netron's '${name}' is not part of this viewer: ortlab serves "
        "only the files Netron needs for ONNX models.`);\n", "browser.js")
    browser = _replace_once(
        browser, "    async require(id) {\n        return import(`${id}.js`);\n    }",
        "    async require(id) {\n"
        "        const name = `${id.replace(/^\\.\\//, '')}.js`;\n"
        "        if (!browser.served.has(name)) {\n            throw browser.notServed(name);\n        }\n"
        "        return import(`${id}.js`);\n    }",
        "browser.js")
    browser = _replace_once(
        browser, "    async asset(file) {\n        this._assets = this._assets || new Map();\n",
        "    async asset(file) {\n        if (!browser.served.has(file)) {\n"
        "            throw browser.notServed(file);\n        }\n"
        "        this._assets = this._assets || new Map();\n",
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


def load_viewer(directory: Path) -> PatchedViewer:
    """The viewer patched from netron's files in ``directory``, with the set of files ONNX models need."""
    directory = Path(directory)
    try:
        index = (directory / "index.html").read_text("utf-8")
        browser = (directory / "browser.js").read_text("utf-8")
        base = (directory / "base.js").read_text("utf-8")
        served = needed_files(directory)
    except OSError as exc:
        raise NetronUnavailable(f"netron's viewer files are missing ({exc.strerror}: {exc.filename}).") from None
    except NetronSourceError as exc:
        raise NetronUnavailable(f"Cannot tell which of netron's files ONNX models need: {exc} "
                                "(netron version changed?).") from None
    overrides, version = patch_viewer_sources(index, browser, base, served=served)
    return PatchedViewer(directory, version, overrides, served)


@functools.lru_cache(maxsize=1)
def patched_viewer() -> PatchedViewer:
    """Netron's viewer with analytics, the consent dialog and the 180-day expiry removed (built once)."""
    try:
        import netron
    except ImportError:
        raise NetronUnavailable("The netron package is not installed (pip install netron==9.3.3).") from None
    return load_viewer(Path(netron.__file__).resolve().parent)


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
    """A hard link (no extra bytes) where ``src`` is on the same filesystem and links are allowed, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _write(folder: Path, viewer: PatchedViewer) -> None:
    """Write the viewer's files to ``folder`` (built beside it, then renamed into place)."""
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


def component_dir(*parents: Path, viewer: PatchedViewer | None = None) -> Path:
    """The folder Streamlit serves as the viewer component, under the first of ``parents`` where it is complete
    or can be written (written when missing or incomplete). Raises :class:`NetronUnavailable` when netron cannot
    be patched or no parent can be written."""
    viewer = viewer or patched_viewer()
    if not parents:
        raise ValueError("component_dir needs a parent folder")
    failures: list[str] = []
    for parent in parents:
        folder = Path(parent) / f"netron-{viewer.version}-{viewer.digest}"
        if _complete(folder):
            return folder
        with _build_lock:
            if _complete(folder):
                return folder
            try:
                _write(folder, viewer)
                return folder
            except OSError as exc:
                failures.append(f"{folder.parent} ({exc.strerror or exc})")
    raise NetronUnavailable(f"Cannot write the Netron viewer's files to {' or '.join(failures)}.")


def remove_viewer_folders(parent: Path) -> None:
    """Delete the viewer folders this module wrote under ``parent`` (and ``parent`` when nothing else is left):
    the copy older versions kept in every workspace, once the cache holds one. Other files are left alone."""
    parent = Path(parent)
    try:
        children = list(parent.iterdir())
    except OSError:
        return
    for child in children:
        if _FOLDER_NAME.match(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
    try:
        parent.rmdir()
    except OSError:  # something else lives there, or it is gone already
        pass
