"""This process's one Ray driver connection (the optional extra ``ortlab[ray]``), shared by the jobs that use a
cluster (a tune and a benchmark of the app's server): each job :func:`join` s it and :func:`leave` s it; the first
starts it, the last ends it. A second, different cluster is refused while the first is in use, and so is a
connection this module did not open (``ray.init`` elsewhere in the process): no job's join or leave cuts another
off. The connection's address and how many jobs use it are read and changed only under one lock.

``ray`` is imported only inside the functions that need it: without the extra, ortlab works as before and only
asking for a cluster fails, with :class:`RayUnavailable`.

Nothing leaves the machine unasked: usage statistics are off (``RAY_USAGE_STATS_ENABLED=0``) in this process
and in every task (``runtime_env``), as is ONNX Runtime's telemetry, and Ray's probe of this machine's address
aims at the cluster's head instead of 8.8.8.8 (:func:`ortlab.runtime.ray_quiet.quiet_ray`).

**Trust.** Ray hands results between processes with pickle: whatever a node returns is unpickled here, so every
member of a cluster can run code in every driver connected to it, this process included. Connect only to a
cluster whose every node you run (the server connects only to the one its operator configured:
:mod:`ortlab.runtime.cluster_setting`). Connections use Ray's token authentication (``RAY_AUTH_MODE=token``, the
token in :func:`ortlab.runtime.cluster_setting.token_path`), as the nodes ``ortlab cluster start`` starts do.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from ortlab import NO_TELEMETRY_ENV
from ortlab.core.errors import OrtlabError
from ortlab.runtime.cluster_setting import TOKEN_ENV_VAR, auth_env, token_path
from ortlab.runtime.ray_quiet import quiet_ray

__all__ = ["CLUSTER_ENV", "ClusterError", "RayUnavailable", "join", "leave", "ray_module"]

CLUSTER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", **NO_TELEMETRY_ENV}  # in the driver and every task
INSTALL_HINT = "pip install 'ortlab[ray]'"
_PROBE_S = 3.0  # how long join() waits for a TCP answer from host:port


class RayUnavailable(OrtlabError):
    """Ray is not installed here."""

    def __init__(self, message: str | None = None):
        super().__init__(message or f"Running on a cluster needs Ray: install it with {INSTALL_HINT}.")


class ClusterError(OrtlabError):
    """The cluster cannot be reached or has no node that can run the work."""


def ray_module() -> Any:
    """The ``ray`` package, or :class:`RayUnavailable` when the extra is not installed."""
    try:
        import ray
    except ImportError as err:
        raise RayUnavailable() from err
    return ray


class _Driver:
    """The connection's address and how many jobs use it, guarded by ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.address: str | None = None
        self.users = 0

    def join(self, ray: Any, address: str) -> None:
        with self.lock:
            if self.users and self.address != address:
                raise ClusterError(f"This process already works with the Ray cluster at {self.address}: one at a "
                                   "time per process; run the other job when this one has ended.")
            if not self.users:
                if ray.is_initialized():  # ray.init elsewhere in this process: ending it would cut that user off
                    raise ClusterError("This process already has a Ray connection that ortlab did not open "
                                       "(ray.init elsewhere): end it with ray.shutdown() first.")
                _init(ray, address)
                self.address = address
            self.users += 1

    def leave(self) -> None:
        with self.lock:
            if self.users == 0:
                return
            self.users -= 1
            if self.users == 0:
                self.address = None
                ray = ray_module()
                if ray.is_initialized():
                    ray.shutdown()


_DRIVER = _Driver()


def join(address: str) -> str:
    """One more job uses the connection to the cluster at ``address`` ("auto": the one started on this machine, or
    ``RAY_ADDRESS``; "host:port": its head's GCS port), started by the first; the address as given, trimmed.
    :class:`ClusterError` with what to do when nothing answers, the token is missing or another cluster is in use
    here."""
    ray = ray_module()
    address = (address or "").strip()
    if not address:
        raise ClusterError("No cluster address: give HOST:PORT of the head, or 'auto'.")
    if address != "auto":
        _check_listening(address)
    _DRIVER.join(ray, address)
    return address


def leave() -> None:
    """One job less uses the connection; the last one ends it (the cluster keeps running)."""
    _DRIVER.leave()


def _check_listening(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"Cluster address {address!r} is not HOST:PORT (or 'auto'), e.g. 10.0.0.5:6379.")
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_S):
            pass
    except OSError as err:
        raise ClusterError(
            f"Nothing listens at {address} ({err.strerror or err}): start a head there with "
            f"`ortlab cluster start --head --port {port}`, or give the address it printed.") from err


def _init(ray: Any, address: str) -> None:
    """Starts this process's driver: telemetry off, Ray's token authentication on, the address probe aimed at the
    head (``_DRIVER.lock`` held)."""
    token = token_path()
    if not token.is_file():
        raise ClusterError(f"No cluster token at {token}: ortlab connects only to clusters with Ray's token "
                           f"authentication. Start the head with `ortlab cluster start --head` (it writes the token "
                           f"there), or copy the head's token file to this machine (or set ${TOKEN_ENV_VAR}).")
    env = {**CLUSTER_ENV, **auth_env()}
    os.environ.update(env)
    _reload_auth_settings()  # Ray read them from the environment when it was imported
    quiet_ray(address.rpartition(":")[0] if address != "auto" else None)
    try:
        ray.init(address=address, runtime_env={"env_vars": dict(CLUSTER_ENV)}, log_to_driver=False,
                 logging_level="WARNING")
    except ray.exceptions.AuthenticationError as err:
        _end_half_open(ray)
        raise ClusterError(f"The Ray cluster at {address} refused this process's token: copy the token file of the "
                           "cluster's head to this machine (see `ortlab cluster start --help`).") from err
    except (ConnectionError, RuntimeError, ValueError) as err:
        _end_half_open(ray)
        raise ClusterError(f"Cannot connect to the Ray cluster at {address}: {str(err).splitlines()[0]} — start one "
                           "with `ortlab cluster start`, or give HOST:PORT.") from err


def _end_half_open(ray: Any) -> None:
    """What a failed ``ray.init`` left of a connection, ended: the next connect starts afresh (no job uses it)."""
    if ray.is_initialized():
        ray.shutdown()


def _reload_auth_settings() -> None:
    """Makes Ray's C++ side read ``RAY_AUTH_MODE`` and the token again (as ``ray`` itself does when it turns token
    authentication on in a process that imported it before)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
