"""Sign-in and per-user workspaces (ortlab.ui.session.auth); the real sign-in flow is in tests/browser/test_sharing.py."""

from __future__ import annotations

import types

import pytest

from ortlab.runs import prepare
from ortlab.ui.session import actions, auth


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path))
    return tmp_path.resolve()


def signed_in_as(monkeypatch, **claims):
    monkeypatch.setattr(auth, "sign_in_configured", lambda: True)
    monkeypatch.setattr(auth, "st", types.SimpleNamespace(user={"is_logged_in": bool(claims), **claims}))


def test_without_sign_in_configured_there_is_one_workspace(home):
    assert auth.sign_in_configured() is False  # no .streamlit/secrets.toml in this repository
    assert auth.current_user_key() is None
    assert actions.workspace().root == home


def test_each_signed_in_user_gets_a_private_workspace(home, monkeypatch):
    signed_in_as(monkeypatch, iss="https://id.example", sub="alice", email="alice@example")
    root_a = actions.workspace().root
    assert root_a == home / "users" / auth.user_key("https://id.example", "alice")
    assert actions.history().db_path == root_a / "history.sqlite"
    signed_in_as(monkeypatch, iss="https://id.example", sub="bob", email="bob@example")
    root_b = actions.workspace().root
    assert root_b != root_a and root_b.parent == root_a.parent
    # The same subject at another provider is another user; the key is stable and a plain folder name.
    assert auth.user_key("https://other.example", "alice") != auth.user_key("https://id.example", "alice")
    assert auth.user_key("https://id.example", "alice") == auth.user_key("https://id.example", "alice")
    assert len(auth.user_key("i", "../../etc")) == 32 and auth.user_key("i", "../../etc").isalnum()


def test_configured_but_signed_out_fails_closed(home, monkeypatch):
    signed_in_as(monkeypatch)
    with pytest.raises(auth.NotSignedIn, match="Sign in first"):
        actions.workspace()
    signed_in_as(monkeypatch, iss="https://id.example", sub="")
    with pytest.raises(auth.NotSignedIn, match="no subject"):
        actions.workspace()
    assert not (home / "history.sqlite").exists()


def test_a_path_import_never_reads_another_users_files(home, monkeypatch, tmp_path_factory):
    """Path import is a local, single-user feature: refused while sign-in is on, whatever the address; and even
    locally only from $ORTLAB_IMPORT_ROOTS, never inside $ORTLAB_HOME, with one message for every refusal."""
    from ortlab import api
    from ortlab.core.errors import ModelLoadError
    from tests.support.models import matmul_model

    monkeypatch.setattr(api.models, "import_model", lambda *a, **k: pytest.fail("nothing may be imported"))
    signed_in_as(monkeypatch, iss="https://id.example", sub="alice")
    ws_a = actions.workspace()
    run = ws_a.new_artifact_dir()
    secret = matmul_model(run / "model.onnx")
    signed_in_as(monkeypatch, iss="https://id.example", sub="bob")
    ws_b = actions.workspace()
    import streamlit as st
    monkeypatch.setattr(st, "get_option", lambda name: "127.0.0.1" if name == "server.address" else None)
    assert actions.local_imports_allowed() is False  # sign-in on, app on loopback behind a proxy
    with pytest.raises(ModelLoadError, match="only possible when the app runs on this machine for one person"):
        actions.import_local_model(str(secret))

    # Even when the roots would include ortlab's home (a careless setting), nothing inside it is importable.
    monkeypatch.setenv("ORTLAB_IMPORT_ROOTS", str(home.parent))
    outside = tmp_path_factory.mktemp("elsewhere")
    messages = set()
    for path in (secret, ws_a.db_path, "/etc/passwd", home.parent / "missing.onnx", outside / "gone.onnx",
                 ws_b.root / ".." / ws_a.root.name / "artifacts" / run.name / "model.onnx", "model.onnx"):
        with pytest.raises(ModelLoadError) as err:
            api.workspaces.importable_path(str(path))
        messages.add(err.value.message)
    assert len(messages) == 1 and "ORTLAB_IMPORT_ROOTS" in messages.pop()
    assert not list(ws_b.models_dir.iterdir())


def test_a_path_import_reads_only_from_the_configured_folders(home, monkeypatch, tmp_path_factory):
    from ortlab import api
    from ortlab.core.errors import ModelLoadError
    from tests.support.models import matmul_model

    mine, other = tmp_path_factory.mktemp("mine"), tmp_path_factory.mktemp("other")
    model, elsewhere = matmul_model(mine / "m.onnx"), matmul_model(other / "m.onnx")
    monkeypatch.delenv("ORTLAB_IMPORT_ROOTS", raising=False)
    with pytest.raises(ModelLoadError):  # default: no folders at all
        api.workspaces.importable_path(str(model))
    monkeypatch.setenv("ORTLAB_IMPORT_ROOTS", f"{mine}:/nonexistent-folder")
    assert api.workspaces.import_roots() == [mine.resolve()]
    assert api.workspaces.importable_path(f" {model} ") == model.resolve()
    (mine / "link.onnx").symlink_to(elsewhere)  # a link out of the folder is followed before the check
    for path in (elsewhere, mine / "link.onnx", mine / ".." / other.name / "m.onnx"):
        with pytest.raises(ModelLoadError):
            api.workspaces.importable_path(str(path))


def test_the_report_download_is_built_from_the_signed_in_users_workspace_outside_the_session(home, monkeypatch,
                                                                                           tmp_path_factory):
    """Streamlit builds a deferred download outside the user's session (no st.user, no session state): the
    report callable must carry the user's workspace and cache, not look them up when clicked."""
    from ortlab.runs.runspec import RunSpec
    from ortlab.settings.config import OptLevel, Recipe
    from ortlab.ui.session import state
    from tests.support.models import conv_bn_model

    src = conv_bn_model(tmp_path_factory.mktemp("rep") / "conv.onnx")
    signed_in_as(monkeypatch, iss="https://id.example", sub="alice")
    ws = actions.workspace()
    handle = prepare.start_recipe(RunSpec(str(src), Recipe(opt_level=OptLevel.BASIC)), workspace=ws)
    handle.wait(120)
    run = handle.result
    cache: dict = {}
    monkeypatch.setattr(state, "cache", lambda: cache)
    build = actions.report_download(run)
    # the click: no signed-in user and no session state any more
    signed_in_as(monkeypatch)
    monkeypatch.setattr(state, "cache", lambda: pytest.fail("session state is not reachable from a download"))
    html = build()
    assert html.lstrip().lower().startswith("<!doctype html") and f"run #{run.run_id} · " in html
    with pytest.raises(auth.NotSignedIn):  # what the old deferred lambda met
        actions.run_report(run)
