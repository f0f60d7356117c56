"""A real two-node Ray cluster on this machine for tests: a head and a second worker node, started as ``ortlab
cluster start`` starts them (one CPU each, on 127.0.0.1, token authentication on, dashboard off, usage statistics
off, Ray's outbound calls replaced), each with its own custom resources.

It never touches another cluster on the machine: its own temporary folder and free ports, and it stops its
nodes by process id — every process of a node (GCS, raylet, workers…) carries a marker in its environment
(``ORTLAB_TEST_RAY_NODE``), inherited from the ``ray start`` that began it; ``ray stop`` would stop every Ray
on the machine and is never called.

Ray's driver probes a route with a UDP connect to 8.8.8.8:53; run these tests inside a loopback-only network
namespace (``unshare -n sh -c 'ip link set lo up && pytest tests/cluster'``, see scripts/test.sh).
"""

from __future__ import annotations

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


def _ray_start(plan, extra: list[str], marker: str, env: dict[str, str]) -> str:
    """``ortlab cluster start``'s ``ray start`` (:meth:`ortlab.runtime.ray_node.NodePlan.command`, with its
    environment: token authentication, Ray's outbound calls replaced) plus this test cluster's ``extra`` flags."""
    proc = subprocess.run([*plan.command(), *extra], capture_output=True, text=True, timeout=START_TIMEOUT_S,
                          env=plan.env({**env, MARKER_ENV: marker}), cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(extra)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def free_base_port() -> int:
    """A port P with P … P+199 free on 127.0.0.1 now (a node's ports: ortlab.runtime.ray_node)."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base > 65535 - 200:
            continue
        try:
            socks = []
            for port in range(base, base + 200):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no 200 free ports in a row on 127.0.0.1")


@contextmanager
def local_ray_cluster(head_resources: dict[str, float] | None = None,
                      worker_resources: dict[str, float] | None = None,
                      num_cpus: int = 1) -> Iterator[LocalCluster]:
    """Starts a head (``head_resources``, default ``{"lab": 1}``) and a worker node (``worker_resources``,
    default ``{"cpu_target": 1}``) as ``ortlab cluster start`` does (token authentication on: the token is
    written to a file of this cluster, named in ``$ORTLAB_CLUSTER_TOKEN`` while it runs, so the test process
    connects as the app's server does) and yields the :class:`LocalCluster`; stops both at the end, by process
    id."""
    from ortlab.runtime.cluster_setting import TOKEN_ENV_VAR
    from ortlab.runtime.ray_node import ensure_token, plan_node

    head_resources = {"lab": 1} if head_resources is None else head_resources
    worker_resources = {"cpu_target": 1} if worker_resources is None else worker_resources
    temp_dir = tempfile.mkdtemp(prefix="ortray-", dir="/tmp")  # short: Ray's unix sockets live under it
    tag = uuid.uuid4().hex[:12]
    cluster = LocalCluster("", temp_dir, f"{tag}-head", f"{tag}-worker")
    token_before = os.environ.get(TOKEN_ENV_VAR)
    os.environ[TOKEN_ENV_VAR] = str(Path(temp_dir) / "auth_token")
    ensure_token(create=True)
    # RAY_raylet_start_wait_time_s: under a load of 15-25 on 2 cores `ray start` gave up at Ray's default 60 s
    env = {**os.environ, **FAST_LOSS_ENV, "RAY_raylet_start_wait_time_s": "180",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    env.pop("RAY_ADDRESS", None)
    store = ["--object-store-memory", str(OBJECT_STORE_BYTES)]
    t0 = time.monotonic()
    try:
        head = plan_node(ip="127.0.0.1", port=free_base_port(), num_cpus=num_cpus, resources=head_resources)
        cluster.log.append(_ray_start(head, [*store, "--temp-dir", temp_dir], cluster.head_marker, env))
        cluster.address = head.head_address
        worker = plan_node(ip="127.0.0.1", join=cluster.address, port=free_base_port(), num_cpus=num_cpus,
                           resources=worker_resources)
        cluster.log.append(_ray_start(worker, store, cluster.worker_marker, env))
        cluster.startup_s = time.monotonic() - t0
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if token_before is None:
            os.environ.pop(TOKEN_ENV_VAR, None)
        else:
            os.environ[TOKEN_ENV_VAR] = token_before
