"""The local Netron viewer: one private server per model, loopback only, nothing phoning home."""

from __future__ import annotations

import re
import socket
import sys
import urllib.error
import urllib.request

import onnx
import pytest

from ortlab.errors import ExternalDataError, ModelLoadError
from ortlab.ui.netron_server import (CSP, NetronUnavailable, NetronViewer, patch_viewer_sources, patched_viewer)
from models import conv_bn_model, external_data_model, matmul_model

ANALYTICS = (b"google-analytics", b"googletagmanager", b"analytics.google", b"ipinfo.io", b"sendBeacon")


def get(url: str) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@pytest.fixture
def viewer(tmp_path):
    v = NetronViewer(max_servers=3, temp_root=tmp_path / "netron-tmp")
    yield v
    v.stop_all()


@pytest.fixture
def two_models(tmp_path):
    a = conv_bn_model(tmp_path / "a" / "model.onnx")
    b = matmul_model(tmp_path / "b" / "model.onnx")
    (tmp_path / "a" / "secret.txt").write_text("do not serve me")
    (tmp_path / "a" / "other.onnx").write_bytes(b.read_bytes())
    return a, b


def test_two_models_each_show_only_their_own(viewer, two_models):
    a, b = two_models
    ua, ub = viewer.serve(a), viewer.serve(b)
    assert ua != ub
    for url, path in ((ua, a), (ub, b)):
        status, page, _ = get(url)
        assert status == 200
        assert b'<meta name="file" content="/data/model.onnx">' in page
        status, data, _ = get(url + "data/model.onnx")
        assert status == 200 and data == path.read_bytes()
    assert a.read_bytes() != b.read_bytes()
    # Nothing else of the model's folder is reachable, however the path is spelled.
    for probe in ("data/secret.txt", "data/other.onnx", "data/../secret.txt", "data/%2e%2e/secret.txt",
                  "data/..%2fsecret.txt", "secret.txt", "data/", "data/%2fetc%2fpasswd", "../data/model.onnx",
                  "server.py", "__init__.py"):
        status, body, _ = get(ua + probe)
        assert status == 404, probe
        assert b"do not serve me" not in body


def test_binds_loopback_only(viewer, two_models):
    url = viewer.serve(two_models[0])
    assert url.startswith("http://127.0.0.1:")
    (served,) = viewer.served()
    assert served.server.server_address[0] == "127.0.0.1"
    # Not reachable through another interface address, if the machine has one.
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        other = probe.getsockname()[0]
    except OSError:
        other = None
    finally:
        probe.close()
    if other and not other.startswith("127."):
        with pytest.raises(OSError):
            socket.create_connection((other, served.port), timeout=1).close()


def test_patched_viewer_has_no_telemetry_consent_or_expiry(viewer, two_models):
    url = viewer.serve(two_models[0])
    status, page, headers = get(url)
    assert headers["Content-Security-Policy"] == CSP
    assert "connect-src 'self'" in CSP and "default-src 'self'" in CSP
    assert b'name="date"' not in page and b"connect-src 'self'" in page
    pv = patched_viewer()
    assert pv.version == "9.3.3"
    served_files = [p.name for p in pv.directory.iterdir() if p.suffix in (".js", ".html", ".json", ".css")]
    assert len(served_files) > 100
    for name in served_files:
        status, body, _ = get(url + name)
        assert status == 200, name
        assert not any(bad in body for bad in ANALYTICS), name
    _, browser_js, _ = get(url + "browser.js")
    assert b"days > 180" not in browser_js and b"Please update to the newest version" not in browser_js
    assert b"This app uses cookies" not in browser_js
    assert b"packaged: false," in browser_js
    _, base_js, _ = get(url + "base.js")
    assert b"ortlab: telemetry removed" in base_js


def test_patch_refuses_an_unknown_netron_version():
    d = patched_viewer().directory
    index, browser, base = ((d / n).read_text("utf-8") for n in ("index.html", "browser.js", "base.js"))
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's browser\.js: expected code not found"):
        patch_viewer_sources(index, browser.replace("const age = async", "const age2 = async"), base)
    with pytest.raises(NetronUnavailable, match=r"Cannot patch netron's base\.js"):
        patch_viewer_sources(index, browser, base.replace("base.Telemetry = class {", "base.Tele = class {"))
    with pytest.raises(NetronUnavailable, match="no version tag"):
        patch_viewer_sources(index.replace('name="version"', 'name="v"'), browser, base)


def test_missing_netron_package_is_typed(monkeypatch, viewer, tmp_path):
    patched_viewer.cache_clear()
    monkeypatch.setitem(sys.modules, "netron", None)
    try:
        with pytest.raises(NetronUnavailable, match=r"The netron package is not installed"):
            viewer.serve(conv_bn_model(tmp_path / "m.onnx"))
    finally:
        patched_viewer.cache_clear()


def test_missing_file_and_bad_model_are_typed(viewer, tmp_path):
    with pytest.raises(ModelLoadError, match=r"^Model file not found: .*nope\.onnx$"):
        viewer.serve(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(ModelLoadError, match=r"not an ONNX model"):
        viewer.serve(bad)
    assert viewer.served() == []


def test_external_data_is_served_with_the_model_only(viewer, tmp_path):
    path = external_data_model(tmp_path / "ext")
    (tmp_path / "ext" / "secret.txt").write_text("do not serve me")
    url = viewer.serve(path)
    status, data, _ = get(url + "data/weights.bin")
    assert status == 200 and data == (tmp_path / "ext" / "weights.bin").read_bytes()
    assert get(url + "data/secret.txt")[0] == 404
    (served,) = viewer.served()
    assert sorted(p.name for p in served.data_dir.iterdir()) == ["model.onnx", "weights.bin"]


def test_external_data_outside_the_folder_is_refused(viewer, tmp_path):
    path = external_data_model(tmp_path / "ext")
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../outside.bin"
    (tmp_path / "outside.bin").write_bytes((tmp_path / "ext" / "weights.bin").read_bytes())
    evil = tmp_path / "ext" / "evil.onnx"
    evil.write_bytes(model.SerializeToString())
    with pytest.raises(ExternalDataError, match=r"External data location '\.\./outside\.bin' .* points outside the model's folder"):
        viewer.serve(evil)
    (tmp_path / "ext" / "weights.bin").unlink()
    with pytest.raises(ExternalDataError, match=r"External data file 'weights\.bin' is missing next to the model"):
        viewer.serve(path)


def test_reuse_lru_cap_and_stop_all(viewer, tmp_path):
    paths = [conv_bn_model(tmp_path / f"m{i}" / "model.onnx", seed=i) for i in range(4)]
    before = paths[0].read_bytes()
    first = viewer.serve(paths[0])
    assert viewer.serve(paths[0]) == first  # same path and content: same server
    assert paths[0].read_bytes() == before
    urls = [viewer.serve(p) for p in paths[1:]]  # cap is 3: the least recently used one stops
    assert len(viewer.served()) == 3
    with pytest.raises(OSError):
        urllib.request.urlopen(first, timeout=2)
    assert all(get(u)[0] == 200 for u in urls)
    # New content at the same path gets a fresh server.
    conv_bn_model(paths[3], seed=99)
    fresh = viewer.serve(paths[3])
    assert fresh != urls[-1] and get(fresh + "data/model.onnx")[1] == paths[3].read_bytes()
    dirs = [s.data_dir for s in viewer.served()]
    viewer.stop_all()
    assert viewer.served() == [] and not any(d.exists() for d in dirs)
    with pytest.raises(OSError):
        urllib.request.urlopen(fresh, timeout=2)


def test_index_meta_escapes_odd_names(viewer, tmp_path):
    path = conv_bn_model(tmp_path / 'we"ird <name>.onnx')
    url = viewer.serve(path)
    page = get(url)[1].decode()
    assert '<meta name="file" content="/data/we%22ird%20%3Cname%3E.onnx">' in page
    assert "<name>" not in page
    assert get(url + "data/we%22ird%20%3Cname%3E.onnx")[1] == path.read_bytes()
    assert re.search(r'<meta name="identifier" content="we&quot;ird &lt;name&gt;\.onnx">', page)


def _page(model: str, break_netron: bool) -> None:
    import sys
    from pathlib import Path

    from ortlab.ui.netron_server import patched_viewer
    from ortlab.ui.netron import netron_viewer, show_netron

    original = sys.modules.get("netron")
    if break_netron:
        patched_viewer.cache_clear()
        sys.modules["netron"] = None
    try:
        show_netron(Path(model), key="t", height=300)
    finally:
        if break_netron:
            sys.modules.pop("netron")
            if original is not None:
                sys.modules["netron"] = original
            patched_viewer.cache_clear()
    netron_viewer().stop_all()


def test_show_netron_embeds_or_falls_back(tmp_path):
    from streamlit.testing.v1 import AppTest

    model = conv_bn_model(tmp_path / "m.onnx")
    at = AppTest.from_function(_page, kwargs={"model": str(model), "break_netron": False}).run(timeout=30)
    assert not at.exception and not at.warning
    assert "served on this machine only" in at.caption[0].value and "http://127.0.0.1:" in at.caption[0].value
    at = AppTest.from_function(_page, kwargs={"model": str(model), "break_netron": True}).run(timeout=30)
    assert not at.exception
    assert at.warning[0].value.startswith("Netron viewer unavailable: The netron package is not installed")
    charts = at.get("plotly_chart")
    assert len(charts) == 1  # the built-in drawing of the same model
