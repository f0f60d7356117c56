"""Sign-in and per-user workspaces when the app is shared.

With an ``[auth]`` section in ``.streamlit/secrets.toml`` (Streamlit's built-in OpenID Connect sign-in:
``st.login``/``st.user``/``st.logout``, which needs Authlib) every page requires sign-in and each signed-in
user works in a private workspace, ``$ORTLAB_HOME/users/<user key>/``: imported models, uploaded data, run
artifacts and the run history. The user key is the first 32 hex digits of sha256 of the ID token's issuer
and subject — stable for a user across sessions and renames, never an e-mail address, and a safe folder name.
Without an ``[auth]`` section (running locally) nothing changes: one workspace in ``$ORTLAB_HOME``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from ortlab.core.errors import OrtlabError
from ortlab import api

USERS_DIR = "users"


class NotSignedIn(OrtlabError):
    """Sign-in is configured but this session has no signed-in user (pages never get this far)."""


def sign_in_configured() -> bool:
    """True when ``.streamlit/secrets.toml`` has an ``[auth]`` section (the app is shared with sign-in)."""
    try:
        from streamlit.auth_util import get_secrets_auth_section

        return bool(get_secrets_auth_section())
    except Exception:  # an unreadable secrets.toml: Streamlit reports it itself; fail closed below
        return True


def signed_in() -> bool:
    return bool(st.user.get("is_logged_in"))


def user_key(issuer: str, subject: str) -> str:
    """The stable folder name of the user ``subject`` at the identity provider ``issuer``."""
    if not subject:
        raise NotSignedIn("The identity provider sent no subject ('sub') for this user.")
    return hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:32]


def current_user_key() -> str | None:
    """The signed-in user's key; None when sign-in is not configured. Raises :class:`NotSignedIn` when it is
    configured but nobody is signed in (fail closed: no shared workspace then)."""
    if not sign_in_configured():
        return None
    if not signed_in():
        raise NotSignedIn("Sign in first: this app is shared and every user has a private workspace.")
    return user_key(str(st.user.get("iss") or ""), str(st.user.get("sub") or ""))


def workspace_root() -> Path:
    """The root of this session's workspace: ``$ORTLAB_HOME`` locally, ``$ORTLAB_HOME/users/<key>`` when shared."""
    key = current_user_key()
    return api.workspaces.default_root() if key is None else api.workspaces.default_root() / USERS_DIR / key


def user_label() -> str:
    """How the signed-in user is named on screen (name, else e-mail, else their subject)."""
    return str(st.user.get("name") or st.user.get("email") or st.user.get("sub") or "signed-in user")


def sign_in_page() -> None:
    """The only page a signed-out visitor of a shared app sees."""
    st.title(":material/lock: ortlab")
    st.write("This ortlab is shared. Sign in to get your own private workspace: your models, data, runs and "
             "history are visible to you only.")
    st.button("Sign in", type="primary", icon=":material/login:", key="auth.login", on_click=st.login)


def account_box() -> None:
    """In the sidebar of a shared app: who is signed in, and a way to sign out."""
    st.caption("Signed in as (private workspace)")
    st.text(user_label())
    st.button("Sign out", key="auth.logout", icon=":material/logout:", on_click=st.logout)
