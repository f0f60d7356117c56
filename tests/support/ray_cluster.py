"""A real two-node Ray cluster on this machine for tests: a head and a second worker node, started with
``ray start`` (one CPU each, on 127.0.0.1, dashboard off, usage statistics off), each with its own custom
resources.

It never touches another cluster on the machine: its own temporary folder and free ports, and it stops its
nodes by process id — every process of a node (GCS, raylet, workers…) carries a marker in its environment
(``ORTLAB_TEST_RAY_NODE``), inherited from the ``ray start`` that began it; ``ray stop`` would stop every Ray
on the machine and is never called.

Ray's driver probes a route with a UDP connect to 8.8.8.8:53; run these tests inside a loopback-only network
namespace (``unshare -n sh -c 'ip link set lo up && pytest tests/cluster'``, see scripts/test.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER_ENV = "ORTLAB_TEST_RAY_NODE"
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node: Ray's minimum is 75 MB; the tests ship a few MB
START_TIMEOUT_S = 90
# A lost node is declared dead after 3 missed health checks 1 s apart (Ray's defaults: 5 of 3 s), so the test
# that kills the worker waits seconds, not half a minute, before the trial runs again.
FAST_LOSS_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                 "RAY_health_check_failure_threshold": "3"}


def ray_bin() -> str:
    """The ``ray`` script of this interpreter's environment."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def in_loopback_namespace() -> bool:
    """True when this process's network has only the loopback interface (``unshare -n``): nothing can leave."""
    try:
        names = [ln.split(":")[0].strip() for ln in Path("/proc/net/dev").read_text().splitlines()[2:]]
    except OSError:
        return False
    return names == ["lo"]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries ``ORTLAB_TEST_RAY_NODE=marker``."""
    want = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_marked(marker: str, grace_s: float = 3.0, sig: int = signal.SIGTERM) -> None:
    """Stops every process of one node: ``sig`` first, SIGKILL to what is left after ``grace_s``."""
    for pid in marked_pids(marker):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while marked_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in marked_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class LocalCluster:
    """Handle of a running test cluster: ``address`` ("127.0.0.1:PORT"), and the worker node to kill."""

    address: str
    temp_dir: str
    head_marker: str
    worker_marker: str
    startup_s: float = 0.0
    log: list[str] = field(default_factory=list)

    def kill_worker(self) -> None:
        """Kills the worker node at once (SIGKILL to all its processes), as when a machine is lost."""
        kill_marked(self.worker_marker, grace_s=0.5, sig=signal.SIGKILL)

    def worker_pids(self) -> list[int]:
        return marked_pids(self.worker_marker)

    def stop(self) -> None:
        kill_marked(self.worker_marker)
        kill_marked(self.head_marker)


def _ray_start(args: list[str], marker: str, env: dict[str, str]) -> str:
    proc = subprocess.run([ray_bin(), "start", *args], capture_output=True, text=True, timeout=START_TIMEOUT_S,
                          env={**env, MARKER_ENV: marker}, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def _node_args(ports: list[int], num_cpus: int, resources: dict[str, float]) -> list[str]:
    node_manager, object_manager, agent_listen, agent_grpc, runtime_env, metrics = ports
    return ["--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus), "--resources", json.dumps(resources),
            "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
            "--node-manager-port", str(node_manager), "--object-manager-port", str(object_manager),
            "--dashboard-agent-listen-port", str(agent_listen), "--dashboard-agent-grpc-port", str(agent_grpc),
            "--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics)]


@contextmanager
def local_ray_cluster(head_resources: dict[str, float] | None = None,
                      worker_resources: dict[str, float] | None = None,
                      num_cpus: int = 1) -> Iterator[LocalCluster]:
    """Starts a head (``head_resources``, default ``{"lab": 1}``) and a worker node (``worker_resources``,
    default ``{"cpu_target": 1}``) and yields the :class:`LocalCluster`; stops both at the end, by process id."""
    head_resources = {"lab": 1} if head_resources is None else head_resources
    worker_resources = {"cpu_target": 1} if worker_resources is None else worker_resources
    temp_dir = tempfile.mkdtemp(prefix="ortray-", dir="/tmp")  # short: Ray's unix sockets live under it
    tag = uuid.uuid4().hex[:12]
    cluster = LocalCluster("", temp_dir, f"{tag}-head", f"{tag}-worker")
    # RAY_raylet_start_wait_time_s: under a load of 15-25 on 2 cores `ray start` gave up at Ray's default 60 s
    env = {**os.environ, **FAST_LOSS_ENV, "RAY_USAGE_STATS_ENABLED": "0", "ORT_DISABLE_TELEMETRY": "1",
           "RAY_raylet_start_wait_time_s": "180",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    try:
        gcs, dashboard, *head_ports = free_ports(8)
        cluster.log.append(_ray_start(  # the head's headless dashboard process still binds a port (8265 by default)
            ["--head", "--port", str(gcs), "--include-dashboard", "false", "--dashboard-host", "127.0.0.1",
             "--dashboard-port", str(dashboard),
             "--temp-dir", temp_dir, *_node_args(head_ports, num_cpus, head_resources)], cluster.head_marker, env))
        cluster.address = f"127.0.0.1:{gcs}"
        cluster.log.append(_ray_start(
            ["--address", cluster.address, *_node_args(free_ports(6), num_cpus, worker_resources)],
            cluster.worker_marker, env))
        cluster.startup_s = time.monotonic() - t0
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
