"""The Netron viewer as a Streamlit component: patched (nothing phoning home), served from the app's own origin,
the model handed over as bytes; models above the cap and failures get the built-in drawing."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
from pathlib import Path

import onnx
import pytest

from ortlab.runs.workspace import HOME_CACHE, Workspace, folder_bytes
from ortlab.ui.netron.assets import (BRIDGE_NAME, CSP, STAMP, NetronUnavailable, component_dir, load_viewer,
                                     patch_viewer_sources, patched_viewer)
from ortlab.ui.netron.files import modules_for_onnx, needed_files, registered
from tests.support.models import conv_bn_model, external_data_model

ANALYTICS = (b"google-analytics", b"googletagmanager", b"analytics.google", b"ipinfo.io", b"sendBeacon")
COMPONENT = "ortlab.ui.netron.viewer.ortlab_netron"
GRAPH_VIEW = "ortlab.ui.graph.graph_view.ortlab_graphdiff"


@pytest.fixture
def folder(tmp_path):
    return component_dir(tmp_path / "viewer")


def test_component_folder_holds_the_patched_viewer(folder):
    pv = patched_viewer()
    assert pv.version == "9.3.3"
    names = sorted(p.name for p in folder.iterdir() if p.name != STAMP)
    assert len(names) > 20 and "index.html" in names and BRIDGE_NAME in names
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
    served = frozenset({"view.js"})
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's browser\.js: expected code not found"):
        patch_viewer_sources(index, browser.replace("const age = async", "const age2 = async"), base, served=served)
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's browser\.js: expected code not found"):
        patch_viewer_sources(index, browser.replace("    async require(id) {", "    async req(id) {"), base,
                             served=served)
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's base\.js"):
        patch_viewer_sources(index, browser, base.replace("base.Telemetry = class {", "base.Tele = class {"),
                             served=served)
    with pytest.raises(NetronUnavailable, match="no version tag"):
        patch_viewer_sources(index.replace('name="version"', 'name="v"'), browser, base, served=served)


def test_missing_netron_package_is_typed(monkeypatch, tmp_path):
    patched_viewer.cache_clear()
    monkeypatch.setitem(sys.modules, "netron", None)
    try:
        with pytest.raises(NetronUnavailable, match=r"The netron package is not installed"):
            component_dir(tmp_path / "viewer")
    finally:
        patched_viewer.cache_clear()




# -- which of netron's files, and where --------------------------------------------------------------------

ONNX_FILES = {"index.js", "view.js", "base.js", "grapher.js", "grapher.css", "protobuf.js", "python.js", "onnx.js",
              "onnx-proto.js", "onnx-schema.js", "onnx-metadata.json", "tflite.js", "tflite-schema.js",
              "worker.js", "dagre.js", "icon.png"}
OTHER_FORMATS = {"pytorch.js", "pytorch-metadata.json", "keras.js", "keras-metadata.json", "tf.js", "caffe.js",
                 "message.js", "mlnet.js"}
SAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models")


def test_the_served_files_are_read_from_netrons_sources():
    pv = patched_viewer()
    onnx_modules = modules_for_onnx((pv.directory / "view.js").read_text("utf-8"))
    assert onnx_modules[0] == "onnx.js" and {"tflite.js", "tensorrt.js", "rknn.js"} <= set(onnx_modules)
    assert pv.served >= ONNX_FILES and not pv.served & OTHER_FORMATS
    assert not any(n.endswith(".py") for n in pv.served)
    for name in sorted(n for n in pv.served if n.endswith(".js")):  # every static import of a served module
        for ref in re.findall(r"from '\./([\w-]+\.js)'", (pv.directory / name).read_text("utf-8")):
            assert ref in pv.served, (name, ref)
    assert set(pv.names()) == pv.served | {BRIDGE_NAME}


def test_no_module_left_out_claims_an_onnx_file_by_its_content(tmp_path):
    """netron also tries a module on any file whose first bytes fit the module's content patterns."""
    pv = patched_viewer()
    modules = registered((pv.directory / "view.js").read_text("utf-8"))
    models = [conv_bn_model(tmp_path / "a.onnx"), external_data_model(tmp_path / "ext"),
              *sorted(p for p in Path(SAMPLES).glob("*/*.onnx"))]
    for path in models:
        with open(path, "rb") as f:
            head = f.read(4096).decode("latin-1")
        claimed = {f"{m[2:]}.js" for m, (_, content) in modules.items() if any(p.search(head) for p in content)}
        assert "onnx.js" in claimed and claimed <= pv.served, (path.name, claimed)


def _package_copy(tmp_path) -> Path:
    """The netron files the viewer uses, copied (not linked) into ``tmp_path``: on the test's own filesystem."""
    pkg = tmp_path / "netron"
    pkg.mkdir()
    for name in patched_viewer().served:
        shutil.copyfile(patched_viewer().directory / name, pkg / name)
    return pkg


def test_the_served_files_follow_a_change_of_netrons_registry(tmp_path):
    pkg = _package_copy(tmp_path)
    for name in ("keras.js", "keras-metadata.json", "keras-proto.js", "pytorch.js"):
        shutil.copyfile(patched_viewer().directory / name, pkg / name)
    view = (pkg / "view.js").read_text("utf-8")
    assert "keras.js" not in needed_files(pkg)
    (pkg / "view.js").write_text(view.replace("this.register('./keras', [", "this.register('./keras', ['.onnx', "))
    assert {"keras.js", "keras-metadata.json", "keras-proto.js"} <= needed_files(pkg)
    assert "pytorch.js" not in needed_files(pkg)
    (pkg / "view.js").write_text(view.replace("this.register('./onnx',", "this.register('./onnx2',"))
    with pytest.raises(NetronUnavailable, match="Cannot tell which of netron's files ONNX models need: view.js "
                                                "registers no './onnx' module"):
        load_viewer(pkg)


def test_the_folder_is_a_fraction_of_the_package(folder):
    package = [p for p in patched_viewer().directory.iterdir() if p.is_file()]
    ours = [p for p in folder.iterdir() if p.name != STAMP]
    assert len(ours) < 50 < 150 < len(package)
    assert sum(p.stat().st_size for p in ours) < 0.4 * sum(p.stat().st_size for p in package)


def test_the_browser_host_loads_only_the_served_files(folder):
    browser_js = (folder / "browser.js").read_text("utf-8")
    (listed,) = re.findall(r"browser\.served = new Set\((\[.*\])\);", browser_js)
    assert set(json.loads(listed)) == {p.name for p in folder.iterdir() if p.name != STAMP}
    # require() and asset() refuse anything else with a message the viewer shows
    assert browser_js.count("throw browser.notServed(") == 2
    assert "is not part of this viewer: ortlab serves only the files Netron needs for ONNX models" in browser_js


def test_hard_links_on_the_same_filesystem(tmp_path):
    pkg = _package_copy(tmp_path)
    viewer = load_viewer(pkg)
    folder = component_dir(tmp_path / "cache", viewer=viewer)
    linked = [n for n in viewer.names() if n not in viewer.overrides]
    assert len(linked) > 20
    for name in linked:
        assert os.path.samefile(folder / name, pkg / name) and (folder / name).stat().st_nlink == 2, name
    for name in viewer.overrides:
        assert (folder / name).stat().st_nlink == 1 and (folder / name).read_bytes() == viewer.overrides[name]


def test_copies_across_filesystems(tmp_path, monkeypatch):
    pkg = _package_copy(tmp_path)
    viewer = load_viewer(pkg)

    def cross_device(src, dst, *args, **kwargs):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))

    monkeypatch.setattr(os, "link", cross_device)
    folder = component_dir(tmp_path / "cache", viewer=viewer)
    for name in (n for n in viewer.names() if n not in viewer.overrides):
        assert not os.path.samefile(folder / name, pkg / name) and (folder / name).stat().st_nlink == 1, name
        assert (folder / name).read_bytes() == (pkg / name).read_bytes()


def test_an_unwritable_cache_falls_back_to_the_next_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    folder = component_dir(blocker / "cache", tmp_path / "home" / HOME_CACHE)
    assert folder.parent == tmp_path / "home" / HOME_CACHE and (folder / "onnx.js").is_file()
    with pytest.raises(NetronUnavailable, match=r"Cannot write the Netron viewer's files to .*a-file/cache"):
        component_dir(blocker / "cache")


def _page(model: str, break_netron: bool = False, cap: int | None = None) -> None:
    import sys
    from pathlib import Path

    from ortlab.ui.netron import viewer as netron
    from ortlab.ui.netron.assets import patched_viewer

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


def test_the_viewer_lives_in_the_cache_and_the_old_copy_in_the_workspace_goes(monkeypatch, tmp_path):
    home = tmp_path / "home"
    old = home / HOME_CACHE / "netron-9.3.2-0123456789ab"  # written by an older version of ortlab
    old.mkdir(parents=True)
    (old / "view.js").write_text("old")
    (home / HOME_CACHE / ".build-x1y2").mkdir()
    (home / HOME_CACHE / "notes.txt").write_text("not ours")
    monkeypatch.setenv("ORTLAB_CACHE_DIR", str(tmp_path / "cache"))
    at = _run(monkeypatch, tmp_path, model=str(conv_bn_model(tmp_path / "m.onnx")))
    assert not at.exception and not at.warning and at.get("component_instance")
    (folder,) = (tmp_path / "cache").iterdir()
    assert folder.name.startswith("netron-9.3.3-") and (folder / "onnx.js").is_file()
    assert [p.name for p in (home / HOME_CACHE).iterdir()] == ["notes.txt"]


def test_without_a_writable_cache_the_viewer_is_in_the_workspace_but_not_counted(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ORTLAB_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    at = _run(monkeypatch, tmp_path, model=str(conv_bn_model(tmp_path / "m.onnx")))
    assert not at.exception and not at.warning and at.get("component_instance")
    (folder,) = (home / HOME_CACHE).iterdir()
    assert (folder / "onnx.js").is_file() and folder_bytes(home / HOME_CACHE) > 1_000_000
    assert Workspace(home).size_bytes() == folder_bytes(home) - folder_bytes(home / HOME_CACHE)
