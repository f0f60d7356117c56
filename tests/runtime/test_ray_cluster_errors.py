"""What a person sees when Ray is missing or nothing listens at the cluster address (no cluster needed)."""

from __future__ import annotations

import importlib.util
import socket
import sys
import types

import pytest

from ortlab.core.errors import OrtlabError
from ortlab.runtime.ray_cluster import ClusterError, RayCluster, RayUnavailable


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(RayUnavailable) as err:
        RayCluster.connect("127.0.0.1:6379")
    assert isinstance(err.value, OrtlabError)
    assert str(err.value) == "Running on a cluster needs Ray: install it with pip install 'ortlab[ray]'."


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")
def test_an_address_where_nothing_listens_says_how_to_start_a_head():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # free, and nothing listens there
    with pytest.raises(ClusterError, match=rf"Nothing listens at 127.0.0.1:{port} .*ortlab cluster start --head --port {port}"):
        RayCluster.connect(f"127.0.0.1:{port}")
    with pytest.raises(ClusterError, match="not HOST:PORT"):
        RayCluster.connect("my-head")


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")
def test_without_the_clusters_token_nothing_is_sent_and_the_message_says_where_it_goes(monkeypatch, tmp_path):
    """ortlab connects only with Ray's token authentication: no token file, no connection attempt."""
    monkeypatch.setenv("ORTLAB_CLUSTER_TOKEN", str(tmp_path / "missing_token"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(ClusterError, match=f"No cluster token at {tmp_path / 'missing_token'}: ortlab connects "
                                               "only to clusters with Ray's token authentication"):
            RayCluster.connect(f"127.0.0.1:{port}")
    finally:
        listener.close()
    import ray

    assert not ray.is_initialized()


def test_a_ray_connection_ortlab_did_not_open_is_refused_not_ended(monkeypatch):
    """Someone in this process called ray.init: connecting would end their connection, so ortlab refuses."""
    ended: list[str] = []
    theirs = types.SimpleNamespace(is_initialized=lambda: True, shutdown=lambda: ended.append("shutdown"))
    monkeypatch.setitem(sys.modules, "ray", theirs)
    with pytest.raises(ClusterError, match=r"already has a Ray connection that ortlab did not open"):
        RayCluster.connect("auto")
    assert ended == []
