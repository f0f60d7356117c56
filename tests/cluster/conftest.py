"""The cluster tests start a real two-node Ray cluster on 127.0.0.1 (tests/support/ray_cluster.py).

Ray's driver probes a route with a UDP connect to 8.8.8.8:53, so these tests run only inside a loopback-only
network namespace, where nothing can leave the machine: scripts/test.sh runs them as a step of their own,
``unshare -n sh -c 'ip link set lo up && pytest tests/cluster'``. Outside one they are skipped, saying so; with
``ORTLAB_CLUSTER_TESTS=1`` (set by that step) a missing namespace or a missing Ray fails them instead.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.support.ray_cluster import in_loopback_namespace, local_ray_cluster

REQUIRED = os.environ.get("ORTLAB_CLUSTER_TESTS") == "1"


def _why_not() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'ortlab[ray]')"
    if not in_loopback_namespace():
        return ("not inside a loopback-only network namespace: Ray's driver would probe 8.8.8.8:53; scripts/test.sh "
                "runs them under `unshare -n` (see tests/cluster/conftest.py)")
    return None


def pytest_collection_modifyitems(config, items):
    why = _why_not()
    if why is None or REQUIRED:  # required: the fixture fails instead
        return
    for item in items:
        if "tests/cluster/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.skip(reason=f"cluster test: {why}"))


@pytest.fixture(scope="session")
def ray_cluster():
    """A head (resource "lab") and a worker node (resource "cpu_target"), one CPU each, for the whole session;
    the test that kills the worker runs last (tests/cluster/test_worker_lost.py)."""
    if REQUIRED and _why_not():
        pytest.fail(f"ORTLAB_CLUSTER_TESTS=1 but {_why_not()}")
    with local_ray_cluster({"lab": 1}, {"cpu_target": 1}) as cluster:
        yield cluster
