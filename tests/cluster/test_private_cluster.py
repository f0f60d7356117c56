"""The private cluster of ``ortlab cluster start`` on a real two-node cluster: its nodes listen on 127.0.0.1 alone,
a process without the cluster's token is refused, starting a node opens no connection outside the cluster's own
addresses, and two jobs of one process (a tune and a benchmark of the app's server) share one driver connection
that the last of them closes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ortlab.runtime.ray_cluster import ClusterError, RayCluster
from tests.integration.test_no_telemetry import _strace_works
from tests.support.ray_cluster import MARKER_ENV, REPO, free_base_port, kill_marked, marked_pids

LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def _listening(pids: list[int]) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) of the TCP sockets these processes listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                found.append(cols[1])
    return found


def test_the_nodes_listen_on_loopback_alone(ray_cluster):
    listening = _listening(marked_pids(ray_cluster.head_marker) + marked_pids(ray_cluster.worker_marker))
    assert len(listening) >= 4  # the GCS, each raylet's node and object managers, at least
    assert [a for a in listening if a.rsplit(":", 1)[0] not in LOOPBACK_HEX] == []


def test_a_process_with_another_token_is_refused(ray_cluster, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text("0" * 64)
    code = ("from ortlab.runtime.ray_cluster import RayCluster, ClusterError\n"
            f"try:\n    RayCluster.connect({ray_cluster.address!r})\n"
            "except ClusterError as e:\n    print('REFUSED', e)\nelse:\n    print('CONNECTED')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "ORTLAB_CLUSTER_TOKEN": str(wrong), "PYTHONPATH": str(REPO)})
    assert run.stdout.startswith("REFUSED"), run.stdout + run.stderr[-2000:]
    assert "InvalidAuthToken" in run.stderr or "token" in run.stdout.lower()


def test_starting_a_node_opens_no_connection_outside_the_clusters_addresses(tmp_path):
    """`ortlab cluster start --head` under strace: every connect() of every process it starts (the GCS, the
    raylet, the dashboard process, the agents) goes to 127.0.0.1, none to 8.8.8.8, 169.254.169.254 or DNS."""
    why = _strace_works()
    if why:
        pytest.skip(why)
    trace, marker = tmp_path / "trace.txt", f"traced-{os.getpid()}"
    env = {**os.environ, "ORTLAB_HOME": str(tmp_path / "home"), MARKER_ENV: marker, "PYTHONPATH": str(REPO),
           "RAY_raylet_start_wait_time_s": "180"}
    env.pop("ORTLAB_CLUSTER_TOKEN", None)
    cmd = ["strace", "-f", "-qq", "-e", "trace=connect,sendto", "-o", str(trace), sys.executable, "-m", "ortlab",
           "cluster", "start", "--head", "--port", str(free_base_port()), "--num-cpus", "1"]
    out = tmp_path / "out.txt"
    # strace -f lives as long as the node it traces, and the node's daemons hold inherited pipes open: the output
    # goes to a file, and the test waits for the command's last line instead of for strace
    with out.open("w") as sink:
        tracer = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 240
        while "Use it:" not in out.read_text() and tracer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        said = out.read_text()
        assert "token authentication on" in said and "127.0.0.1 only" in said, said[-3000:]
        time.sleep(8)  # the dashboard process asks the cloud's metadata some seconds after its start
    finally:
        kill_marked(marker)
        tracer.kill()
        tracer.wait(30)
    lines = trace.read_text(encoding="utf-8", errors="replace").splitlines()
    connects = [ln for ln in lines if "connect(" in ln and re.search(r"AF_INET6?\b", ln)]
    outside = [ln for ln in connects if not re.search(r'127\.0\.0\.1|"::1"|::ffff:127\.', ln)]
    assert connects and outside == [], "\n".join(outside[:10])
    assert (tmp_path / "home" / "cluster" / "auth_token").stat().st_mode & 0o077 == 0


def test_two_jobs_of_one_process_share_the_connection_and_the_last_closes_it(ray_cluster):
    import ray

    first = RayCluster.connect(ray_cluster.address)
    second = RayCluster.connect(ray_cluster.address)
    with pytest.raises(ClusterError, match="already works with the Ray cluster at"):
        RayCluster.connect("auto")  # another address while these run: refused, not a cut-off of both
    results: dict[str, object] = {}

    def job(name: str, cluster: RayCluster) -> None:
        tasks = [cluster.submit(pow, 2, k) for k in range(4)]
        results[name] = cluster.wait(tasks, timeout_s=120)

    threads = [threading.Thread(target=job, args=(n, c)) for n, c in (("a", first), ("b", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert results == {"a": [1, 2, 4, 8], "b": [1, 2, 4, 8]}
    first.close()
    first.close()  # twice: still one use ended
    assert ray.is_initialized()
    assert second.wait([second.submit(pow, 3, 2)], timeout_s=120) == [9]  # the other job goes on
    second.close()
    assert not ray.is_initialized()
