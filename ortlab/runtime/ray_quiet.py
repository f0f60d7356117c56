"""Keeps Ray's own processes from calling out: the node and driver processes of a Ray 2.60 cluster make three
outbound calls that no flag of ``ray start`` stops (strace, ``--disable-usage-stats`` and
``--include-dashboard false`` given):

- every node, and a driver, ``connect()``s a UDP socket to 8.8.8.8:53 to learn its own address
  (``node_ip_address_from_perspective()`` with no address), even when ``--node-ip-address`` is given;
- the head's dashboard process, which starts even without the dashboard to run its usage-statistics module,
  asks the cloud metadata addresses (169.254.169.254, ``metadata.google.internal``) which cloud it is on;
- the same module then posts a "usage statistics are disabled" report to Ray's server.

:func:`quiet_ray` replaces those three in the ``ray`` modules of this process: the address probe aims at the
cluster's own head instead (the kernel picks the interface that reaches it; no packet is sent), the cloud is
"unknown", and no report is sent. ``ortlab cluster start`` runs ``ray start`` with :data:`QUIET_ENV` and
:func:`site_path` on ``PYTHONPATH``, whose ``sitecustomize`` calls it in every Python process of the node (the
dashboard, the agents and the workers, which ``ray start`` starts with its own environment); the ortlab
process calls it before it connects (:meth:`ortlab.runtime.ray_cluster.RayCluster.connect`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["QUIET_ENV", "ROUTE_ENV", "quiet_ray", "site_path"]

QUIET_ENV = "ORTLAB_RAY_QUIET"  # "1": sitecustomize quiets Ray in every Python process of a node
ROUTE_ENV = "ORTLAB_RAY_ROUTE"  # host[:port] the address probe aims at: the cluster's head
_PATCHED = "_ortlab_quiet"


def site_path() -> str:
    """The folder whose ``sitecustomize.py`` quiets Ray in a node's processes (for ``PYTHONPATH``)."""
    return str(Path(__file__).with_name("ray_site"))


def quiet_ray(route: str | None = None) -> list[str]:
    """Replaces Ray's outbound calls in this process (see the module's docstring); ``route`` (host or host:port,
    default ``$ORTLAB_RAY_ROUTE``, else 127.0.0.1) is what the address probe aims at. Returns what it replaced;
    calling it again only changes the route. Nothing happens where Ray is not installed."""
    route = (route or os.environ.get(ROUTE_ENV) or "127.0.0.1").strip()
    try:
        from ray._common import network_utils
        from ray._common.usage import usage_lib
        from ray._private import services
    except ImportError:
        return []
    done = []
    host = route.rsplit(":", 1)[0] if route.count(":") == 1 else route.strip("[]")
    original = getattr(services.node_ip_address_from_perspective, _PATCHED, services.node_ip_address_from_perspective)

    def from_the_head(address: Any = None) -> str:
        return original(address or f"{host}:53")  # the probe's port is never contacted: UDP connect() sends nothing

    setattr(from_the_head, _PATCHED, original)
    for module in (services, network_utils):
        module.node_ip_address_from_perspective = from_the_head  # type: ignore[attr-defined]
    done.append(f"address probe aims at {host}")
    usage_lib.get_cloud_from_metadata_requests = _unknown_cloud
    done.append("no cloud metadata request")
    usage_lib.UsageReportClient.report_usage_data = _no_report  # type: ignore[method-assign]
    done.append("no usage report")
    return done


def _unknown_cloud() -> str:
    return "unknown"


def _no_report(self: Any, url: str, data: Any) -> None:
    return None
