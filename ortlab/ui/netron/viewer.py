"""Netron embedded in a page as a Streamlit custom component, with the app's own graph drawing as the fallback.

The viewer's files are served by Streamlit itself (``/component/…`` on the app's own address) from ortlab's
cache directory, outside every workspace, and the model reaches the viewer as bytes through the app's WebSocket,
so Netron works from any machine that can open the app, needs no other server or port, and shows each session
only the models that session's pages pass in.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

from ortlab.core.errors import OrtlabError
from ortlab.core.text import format_bytes
from ortlab.ui.session.inert import md
from ortlab.ui.netron.assets import component_dir, remove_viewer_folders
from ortlab import api
from ortlab.core.errors import ModelLoadError
from ortlab.ui.session.model_cache import graph_description
from ortlab.ui.graph.graph_view import show_graph_diff

# Models up to this size (the .onnx plus its external data) are handed to Netron in the browser. The bytes
# travel in one WebSocket message (Streamlit allows 200 MB by default), the browser keeps them in Streamlit's
# message cache, copies them into the viewer and Netron parses them: several copies in browser memory. 64 MiB
# keeps that within a few hundred MB per view (the Compare page shows two) and a first load over a LAN within
# seconds; larger models get the app's own drawing, which runs on the server.
MAX_NETRON_BYTES = 64 * 1024 * 1024
COMPONENT_NAME = "ortlab_netron"

_declared: dict[Path, object] = {}


def netron_component():
    """The declared component over the (re)written viewer folder: in the cache directory, or under
    ``$ORTLAB_HOME`` when the cache cannot be written (shared by every user: netron's code only, no models)."""
    cache, fallback = api.workspaces.cache_dirs()
    folder = component_dir(cache, fallback)
    comp = _declared.get(folder)
    if comp is None:
        if folder.parent != fallback:  # the copy versions before kept in the workspace is no longer used
            remove_viewer_folders(fallback)
        comp = components.declare_component(COMPONENT_NAME, path=str(folder))
        _declared[folder] = comp
    return comp


def model_files(model_path: Path) -> list[tuple[str, Path]]:
    """(name the viewer sees, path): the model file, then its external-data files (checked: inside the model's
    folder, present, long enough)."""

    path = Path(model_path)
    if not path.is_file():
        raise ModelLoadError(f"Model file not found: {model_path}")
    return [(path.name, path), *api.models.external_data_files(path).items()]


def _digest(files: list[tuple[str, Path]]) -> str:
    """Identifies what the viewer shows (the bridge opens the model again only when this changes)."""

    h = hashlib.sha256()
    for name, p in files:
        st_ = p.stat()
        h.update(f"{name}\0{st_.st_size}\0{st_.st_mtime_ns}\0".encode())
    h.update(api.models.sha256_file_cached(files[0][1]).encode())
    return h.hexdigest()


def show_netron(model_path: Path, key: str, height: int = 600) -> None:
    """Show ``model_path`` (and its external data) in the embedded Netron viewer.

    Models above :data:`MAX_NETRON_BYTES` and failures (netron missing or unpatchable, unreadable model) get a
    message that says why and the app's own graph drawing instead. ``key`` keeps several viewers apart.
    """
    model_path = Path(model_path)
    try:
        # a file over the cap is never parsed here (listing its external data would read it whole)
        big = model_path.is_file() and model_path.stat().st_size > MAX_NETRON_BYTES
        files = [(model_path.name, model_path)] if big else model_files(model_path)
        total = sum(p.stat().st_size for _, p in files)
        if total > MAX_NETRON_BYTES:
            st.info(f"{md(model_path.name)} is {format_bytes(total)}, more than the {format_bytes(MAX_NETRON_BYTES)} "
                    "Netron is handed in the browser: showing the built-in graph drawing instead.")
            _fallback(model_path, key, height)
            return
        comp = netron_component()
        digest = _digest(files)
        data = {f"f{i}": p.read_bytes() for i, (_, p) in enumerate(files)}
    except (OrtlabError, OSError) as exc:
        st.warning(f"Netron viewer unavailable: {md(exc)}. Showing the built-in graph view instead.")
        _fallback(model_path, key, height)
        return
    names = [name for name, _ in files]
    with st.container(border=True):
        comp(names=names, digest=digest, height=height, key=key, default=None, **data)
    st.caption(f"Netron · {md(model_path.name)} · {format_bytes(total)} · drawn in your browser, served by this app")


def _fallback(model_path: Path, key: str, height: int) -> None:
    """The model drawn by the app's own graph view (``graph_view``: grouped by name scope, laid out in the
    browser), used when Netron cannot be."""
    try:

        description = graph_description(model_path, model_path)
    except (OrtlabError, ImportError) as exc:
        st.info(f"No graph drawing available: {md(exc)}")
        return
    show_graph_diff(description, key=f"{key}_graph_fallback", height=height)
