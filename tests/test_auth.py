"""Sign-in and per-user workspaces (ortlab.ui.auth); the real sign-in flow is in tests/browser/test_sharing.py."""

from __future__ import annotations

import types

import pytest

from ortlab.ui import actions, auth


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
