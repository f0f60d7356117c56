"""A private Ray node for ortlab (``ortlab cluster start`` / ``ortlab cluster stop``): ``ray start`` with token
authentication, every port fixed and listed, no dashboard, no usage statistics and no outbound call.

What a plain ``ray start`` does that this one does not (Ray 2.60, measured with strace and ``ss -ltnp``):
- it turns ``--node-ip-address 127.0.0.1`` into the machine's LAN address (found by a UDP ``connect()`` to
  8.8.8.8:53) and then listens on every interface; here the probe aims at the head
  (:mod:`ortlab.runtime.ray_quiet`), so a node on 127.0.0.1 keeps that address and its GCS, raylet and agents
  listen on 127.0.0.1 alone;
- its head's dashboard process asks the cloud metadata address (169.254.169.254, ``metadata.google.internal``) and
  posts a "usage statistics disabled" report to Ray's server even with ``--disable-usage-stats``: not here;
- anyone who reaches its ports can run code on it (no authentication): here Ray's token authentication is on
  (``RAY_AUTH_MODE=token``), with the token file of :func:`ortlab.runtime.cluster_setting.token_path`.

On an address other than loopback, Ray 2.60's C++ servers (GCS, the raylet's node and object managers, the
workers) still listen on every interface — Ray has no setting for their bind address — so :meth:`NodePlan.ports`
lists each port for the firewall, and the token keeps out whoever reaches them without it.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ortlab import NO_TELEMETRY_ENV
from ortlab.core.errors import OrtlabError
from ortlab.runtime.cluster_setting import auth_env, token_path
from ortlab.runtime.ray_quiet import QUIET_ENV, ROUTE_ENV, site_path

__all__ = ["NodePlan", "NodeSettingError", "NodeStartFailed", "ensure_token", "plan_node", "start_node", "stop_node"]

DEFAULT_PORT = 6379
WORKER_PORTS_FROM = 100  # the workers' ports: PORT+100 … PORT+199
WORKER_PORTS = 100
_FIXED = (("node manager (raylet)", 1, "--node-manager-port"), ("object manager (raylet)", 2, "--object-manager-port"),
          ("dashboard agent gRPC", 3, "--dashboard-agent-grpc-port"),
          ("dashboard agent HTTP", 4, "--dashboard-agent-listen-port"),
          ("runtime-env agent", 5, "--runtime-env-agent-port"), ("metrics export", 6, "--metrics-export-port"))
_DASHBOARD = 7  # the head's headless dashboard process binds it on 127.0.0.1 (no dashboard is served)
_CLIENT_SERVER = 8  # Ray Client's server, only where ray[client] is installed (it cannot be turned off then)


class NodeSettingError(OrtlabError):
    """A setting of the node that cannot work (an address, a port); the message says what to give."""


class NodeStartFailed(OrtlabError):
    """``ray start`` or ``ray stop`` failed; the message has Ray's last lines."""


@dataclass(frozen=True)
class NodePlan:
    """How one node starts: the head (``head_address`` is its own) or a node that joins ``head_address``."""

    head: bool
    ip: str
    port: int
    head_address: str
    num_cpus: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    client_server: bool = False

    def ports(self) -> list[tuple[str, int]]:
        """Every TCP port the node may listen on, named (the worker range as its first port)."""
        named = [("GCS (the cluster's address)", self.port)] if self.head else []
        named += [(name, self.port + offset) for name, offset, _ in _FIXED]
        if self.head:
            named.append(("dashboard process (127.0.0.1 only, serves no dashboard)", self.port + _DASHBOARD))
        if self.client_server and self.head:
            named.append(("Ray Client server (runs any code sent to it: firewall it)", self.port + _CLIENT_SERVER))
        first = self.port + WORKER_PORTS_FROM
        named.append((f"workers ({first}–{first + WORKER_PORTS - 1})", first))
        return named

    def command(self) -> list[str]:
        """The ``ray start`` command line (run with :meth:`env`)."""
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--node-ip-address", self.ip,
               "--disable-usage-stats"]
        if self.head:
            cmd += ["--head", "--port", str(self.port), "--include-dashboard", "false", "--dashboard-host", "127.0.0.1",
                    "--dashboard-port", str(self.port + _DASHBOARD)]
        else:
            cmd += ["--address", self.head_address]
        for _, offset, flag in _FIXED:
            cmd += [flag, str(self.port + offset)]
        if self.client_server and self.head:
            cmd += ["--ray-client-server-port", str(self.port + _CLIENT_SERVER)]
        first = self.port + WORKER_PORTS_FROM
        cmd += ["--min-worker-port", str(first), "--max-worker-port", str(first + WORKER_PORTS - 1)]
        if self.num_cpus is not None:
            cmd += ["--num-cpus", str(self.num_cpus)]
        if self.resources:
            import json

            cmd += ["--resources", json.dumps(dict(self.resources))]
        return cmd

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The node's environment: token authentication, telemetry and usage statistics off, and Ray's outbound
        calls replaced in each of its Python processes (``sitecustomize`` on ``PYTHONPATH``)."""
        env = dict(os.environ if base is None else base)
        env.update(NO_TELEMETRY_ENV)
        env.update(auth_env())
        env.update({"RAY_USAGE_STATS_ENABLED": "0", QUIET_ENV: "1",
                    ROUTE_ENV: self.head_address.rpartition(":")[0]})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site_path(), env.get("PYTHONPATH", "")) if p)
        return env

    def listens_on(self) -> str:
        """Which interfaces its ports are on, in words."""
        if ipaddress.ip_address(self.ip).is_loopback:
            return f"{self.ip} only (loopback: nothing else on the network can reach them)"
        return (f"every interface of this machine (Ray 2.60 cannot bind its servers to {self.ip} alone): let only "
                "the cluster's machines reach these ports; without the token they cannot use them")


def plan_node(*, ip: str = "127.0.0.1", join: str | None = None, port: int = DEFAULT_PORT,
              num_cpus: int | None = None, resources: Mapping[str, float] | None = None) -> NodePlan:
    """The plan of a head (``join`` None, its GCS on ``ip:port``) or of a node joining the head at ``join``
    (HOST:PORT); its other ports follow ``port`` (see :meth:`NodePlan.ports`). :class:`NodeSettingError` for an
    address or port that cannot work."""
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise NodeSettingError(f"--ip {ip!r} is not an IP address: give this machine's address on the cluster's "
                          "network (127.0.0.1 for a cluster on this machine alone).") from None
    if not 1024 <= port <= 65535 - WORKER_PORTS_FROM - WORKER_PORTS:
        raise NodeSettingError(f"--port {port} is out of range: give 1024 to {65535 - WORKER_PORTS_FROM - WORKER_PORTS} "
                          f"(the node also takes the {WORKER_PORTS_FROM + WORKER_PORTS} ports after it).")
    if join is not None:
        host, _, head_port = join.strip().rpartition(":")
        if not host or not head_port.isdigit():
            raise NodeSettingError(f"--join {join!r} is not HOST:PORT of the head, e.g. 10.0.0.5:6379.")
    from ortlab.runtime.ray_driver import ray_module

    ray_module()  # RayUnavailable, with the install line, before anything starts
    from ray._private.utils import get_ray_client_dependency_error

    return NodePlan(head=join is None, ip=ip, port=port, head_address=join.strip() if join else f"{ip}:{port}",
                    num_cpus=num_cpus, resources=dict(resources or {}),
                    client_server=get_ray_client_dependency_error() is None)


def ensure_token(create: bool) -> tuple[Path, bool]:
    """The token file's path and whether it was made now: a head makes one (0600, 256 random bits) when there is
    none; a joining node needs the head's copy (:class:`OrtlabError` naming the path)."""
    path = token_path()
    if path.is_file() and path.read_text().strip():
        return path, False
    if not create:
        raise OrtlabError(f"No cluster token at {path}: copy the token file of the cluster's head (its "
                          f"`ortlab cluster start --head` printed where) to this path, readable by you alone.")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path, True


def start_node(plan: NodePlan, timeout_s: float = 180) -> str:
    """Runs ``ray start`` for ``plan`` (it returns once the node's processes run in the background); Ray's
    output. :class:`NodeStartFailed` with its last lines when it fails."""
    return _ray(plan.command(), plan.env(), timeout_s, "start")


def stop_node(timeout_s: float = 120) -> str:
    """Stops every Ray node of this user on this machine (``ray stop``); Ray's output."""
    return _ray([sys.executable, "-m", "ray.scripts.scripts", "stop"], dict(os.environ), timeout_s, "stop")


_RAY_CLI = "import sys\nfrom ray.scripts.scripts import main\nsys.argv = ['ray', *sys.argv[1:-1]]\nmain()\n"


def _ray(cmd: list[str], env: dict[str, str], timeout_s: float, what: str) -> str:
    """Runs Ray's command line (``cmd`` after ``python -m ray.scripts.scripts``) in a child process of ortlab's
    child runner (:class:`ortlab.runtime.child.Child`); its output, or :class:`NodeStartFailed` with its last
    lines."""
    from ortlab.runtime.child import Child

    child = Child(_RAY_CLI, *cmd[3:], env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while child.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        timed_out = child.running()
        code = child.finish(grace=1.0)
        text = child.log_text()
    finally:
        child.close()
    if timed_out:
        raise NodeStartFailed(f"`ray {what}` did not finish within {timeout_s:g} s.")
    if code != 0:
        tail = " / ".join(line.strip() for line in text.strip().splitlines()[-3:])
        raise NodeStartFailed(f"`ray {what}` failed (exit {code}): {tail}")
    return text
