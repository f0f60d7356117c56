"""Which Ray cluster a server may use, and the token its nodes and drivers share; both are the operator's, set where
the process starts, never typed on a page.

- ``$ORTLAB_CLUSTER``: the address of the cluster the app's server works with (``HOST:PORT`` of its head, or
  ``auto``); unset, the app offers no cluster at all. The command line takes ``--ray ADDRESS`` (its user is the
  operator) and falls back on nothing.
- ``$ORTLAB_CLUSTER_TOKEN``: the file with the cluster's token for Ray's token authentication; default
  ``$ORTLAB_HOME/cluster/auth_token`` (``~/.ortlab/cluster/auth_token``), which ``ortlab cluster start --head``
  writes (mode 0600) and every other machine of the cluster needs a copy of.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CLUSTER_ENV_VAR", "TOKEN_ENV_VAR", "auth_env", "configured_cluster", "token_path"]

CLUSTER_ENV_VAR = "ORTLAB_CLUSTER"
TOKEN_ENV_VAR = "ORTLAB_CLUSTER_TOKEN"


def configured_cluster() -> str | None:
    """The operator's cluster address (``$ORTLAB_CLUSTER``), None when none is configured."""
    return (os.environ.get(CLUSTER_ENV_VAR) or "").strip() or None


def token_path() -> Path:
    """Where the cluster's token file is (``$ORTLAB_CLUSTER_TOKEN``, else under ``$ORTLAB_HOME``)."""
    given = (os.environ.get(TOKEN_ENV_VAR) or "").strip()
    if given:
        return Path(given).expanduser()
    home = (os.environ.get("ORTLAB_HOME") or "").strip()
    return (Path(home).expanduser() if home else Path.home() / ".ortlab") / "cluster" / "auth_token"


def auth_env() -> dict[str, str]:
    """The environment that turns Ray's token authentication on with :func:`token_path`'s token, for the nodes and
    for a driver."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path())}
