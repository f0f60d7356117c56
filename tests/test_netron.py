"""The Netron viewer as a Streamlit component: patched (nothing phoning home), served from the app's own origin,
the model handed over as bytes; models above the cap and failures get the built-in drawing."""

from __future__ import annotations

import re
import shutil
import sys

import onnx
import pytest

from ortlab.ui.netron_assets import (BRIDGE_NAME, CSP, STAMP, NetronUnavailable, component_dir, patch_viewer_sources,
                                     patched_viewer)
from models import conv_bn_model, external_data_model

ANALYTICS = (b"google-analytics", b"googletagmanager", b"analytics.google", b"ipinfo.io", b"sendBeacon")
COMPONENT = "ortlab.ui.netron.ortlab_netron"
GRAPH_VIEW = "ortlab.ui.graph_view.ortlab_graphdiff"


@pytest.fixture
def folder(tmp_path):
    return component_dir(tmp_path / "viewer")


def test_component_folder_holds_the_patched_viewer(folder):
    pv = patched_viewer()
    assert pv.version == "9.3.3"
    names = sorted(p.name for p in folder.iterdir() if p.name != STAMP)
    assert len(names) > 100 and "index.html" in names and BRIDGE_NAME in names
    assert not any(n.endswith(".py") for n in names)  # netron's own server code is not part of the viewer
    for name in names:
        body = (folder / name).read_bytes()
        assert not any(bad in body for bad in ANALYTICS), name
    browser_js = (folder / "browser.js").read_bytes()
    assert b"days > 180" not in browser_js and b"Please update to the newest version" not in browser_js
    assert b"This app uses cookies" not in browser_js
    assert b"packaged: false," in browser_js and b"ortlab-netron-ready" in browser_js
    assert b"ortlab: telemetry removed" in (folder / "base.js").read_bytes()


def test_component_files_load_nothing_from_another_host(folder):
    index = (folder / "index.html").read_text("utf-8")
    assert 'name="date"' not in index
    # Every script, style and icon the page loads is a relative path: served by Streamlit next to index.html.
    refs = [r for r in re.findall(r'(?:src|href)="([^"]*)"', index) if r != "javascript:void(0)"]
    assert refs and all(re.fullmatch(r"[A-Za-z0-9_.-]+", r) for r in refs), refs
    assert "http:" not in index and "https:" not in index and "//" not in index.replace("<!--", "")
    assert f'<script type="text/javascript" src="{BRIDGE_NAME}"></script>' in index
    # The CSP allows the page's own origin only (plus inline data: images/fonts and blob: workers).
    (csp,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', index)
    assert csp == CSP
    for directive in csp.split(";"):
        sources = directive.split()[1:]
        assert set(sources) <= {"'self'", "'none'", "'unsafe-inline'", "data:", "blob:"}, directive
    assert "connect-src 'self'" in csp and "default-src 'self'" in csp
    bridge = (folder / BRIDGE_NAME).read_text("utf-8")
    assert "http" not in bridge and "fetch(" not in bridge and "XMLHttpRequest" not in bridge
    assert "window.location.origin" in bridge  # postMessage only to the app page on the same origin


def test_component_folder_is_written_again_when_removed(folder, tmp_path):
    (folder / "view.js").unlink()  # e.g. a cleaner of old files
    again = component_dir(tmp_path / "viewer")
    assert again == folder and (folder / "view.js").is_file()
    shutil.rmtree(folder)
    assert component_dir(tmp_path / "viewer") == folder and (folder / "index.html").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no build leftovers


def test_patch_refuses_an_unknown_netron_version():
    d = patched_viewer().directory
    index, browser, base = ((d / n).read_text("utf-8") for n in ("index.html", "browser.js", "base.js"))
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's browser\.js: expected code not found"):
        patch_viewer_sources(index, browser.replace("const age = async", "const age2 = async"), base)
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's base\.js"):
        patch_viewer_sources(index, browser, base.replace("base.Telemetry = class {", "base.Tele = class {"))
    with pytest.raises(NetronUnavailable, match="no version tag"):
        patch_viewer_sources(index.replace('name="version"', 'name="v"'), browser, base)


def test_missing_netron_package_is_typed(monkeypatch, tmp_path):
    patched_viewer.cache_clear()
    monkeypatch.setitem(sys.modules, "netron", None)
    try:
        with pytest.raises(NetronUnavailable, match=r"The netron package is not installed"):
            component_dir(tmp_path / "viewer")
    finally:
        patched_viewer.cache_clear()




def _page(model: str, break_netron: bool = False, cap: int | None = None) -> None:
    import sys
    from pathlib import Path

    from ortlab.ui import netron
    from ortlab.ui.netron_assets import patched_viewer

    original = sys.modules.get("netron")
    if cap is not None:
        netron.MAX_NETRON_BYTES = cap
    if break_netron:
        patched_viewer.cache_clear()
        sys.modules["netron"] = None  # type: ignore[assignment]  # None makes the import fail (documented; typeshed allows modules only)
    try:
        netron.show_netron(Path(model), key="t", height=300)
    finally:
        netron.MAX_NETRON_BYTES = 64 * 1024 * 1024
        if break_netron:
            sys.modules.pop("netron")
            if original is not None:
                sys.modules["netron"] = original
            patched_viewer.cache_clear()


def _run(monkeypatch, tmp_path, **kwargs):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    return AppTest.from_function(_page, kwargs=kwargs).run(timeout=30)


def test_show_netron_hands_the_model_to_the_component(monkeypatch, tmp_path):
    import json

    model = conv_bn_model(tmp_path / "m.onnx")
    at = _run(monkeypatch, tmp_path, model=str(model))
    assert not at.exception and not at.warning
    (el,) = at.get("component_instance")
    proto = el.proto
    assert proto.component_name == COMPONENT
    assert proto.url == ""  # no URL of its own: the frontend loads /component/<name>/ from the app's origin
    args = json.loads(proto.json_args)
    assert args["names"] == ["m.onnx"] and args["height"] == 300 and len(args["digest"]) == 64
    (special,) = proto.special_args
    assert special.key == "f0" and special.bytes == model.read_bytes()
    assert "drawn in your browser, served by this app" in at.caption[0].value


def test_external_data_is_handed_over_with_the_model(monkeypatch, tmp_path):
    import json

    path = external_data_model(tmp_path / "ext")
    (tmp_path / "ext" / "secret.txt").write_text("do not send me")
    at = _run(monkeypatch, tmp_path, model=str(path))
    assert not at.exception and not at.warning
    proto = at.get("component_instance")[0].proto
    assert json.loads(proto.json_args)["names"] == [path.name, "weights.bin"]
    assert [s.bytes for s in proto.special_args] == [path.read_bytes(), (tmp_path / "ext" / "weights.bin").read_bytes()]


def test_models_above_the_cap_get_the_built_in_drawing(monkeypatch, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    at = _run(monkeypatch, tmp_path, model=str(model), cap=100)
    assert not at.exception
    assert re.search(r"m\.onnx is .* more than the .* Netron is handed in the browser: showing the built-in graph",
                     at.info[0].value)
    # the app's own graph view of the same model instead (no model bytes handed over)
    assert [e.proto.component_name for e in at.get("component_instance")] == [GRAPH_VIEW]


def test_missing_netron_falls_back_to_the_built_in_drawing(monkeypatch, tmp_path):
    model = conv_bn_model(tmp_path / "m.onnx")
    at = _run(monkeypatch, tmp_path, model=str(model), break_netron=True)
    assert not at.exception
    assert at.warning[0].value.startswith("Netron viewer unavailable: The netron package is not installed")
    assert [e.proto.component_name for e in at.get("component_instance")] == [GRAPH_VIEW]  # the built-in view


def test_bad_models_and_external_data_outside_the_folder_are_refused(monkeypatch, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    at = _run(monkeypatch, tmp_path, model=str(bad))
    assert not at.get("component_instance")
    assert "not an ONNX model" in at.warning[0].value

    path = external_data_model(tmp_path / "ext")
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../outside.bin"
    (tmp_path / "outside.bin").write_bytes((tmp_path / "ext" / "weights.bin").read_bytes())
    evil = tmp_path / "ext" / "evil.onnx"
    evil.write_bytes(model.SerializeToString())
    at = _run(monkeypatch, tmp_path, model=str(evil))
    assert not at.get("component_instance")
    assert "points outside the model's folder" in at.warning[0].value
