"""RayCluster against a real two-node cluster: nodes with their machine, the object store by hash, tasks placed
by resource or node, a task's own error and a time limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ortlab.core.errors import Cancelled
from ortlab.runtime.machine import Machine, this_machine
from ortlab.runtime.ray_cluster import ClusterError, ClusterTaskFailed, RayCluster

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


def where_and_size(blob: bytes) -> int:
    return len(blob)


def raises() -> None:
    raise ValueError("the recipe cannot run")


def sleeps(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def session_threads() -> int:
    from ortlab.runtime.providers import create_session

    sess, _ = create_session(DIGITS)
    return sess.get_session_options().intra_op_num_threads


@pytest.fixture(scope="module")
def rc(ray_cluster):
    cluster = RayCluster.connect(ray_cluster.address)
    yield cluster
    cluster.close()


def test_nodes_have_their_resources_and_machine(rc):
    nodes = rc.nodes()
    assert len(nodes) == 2
    by_kind = {("lab" if "lab" in n.resources else "cpu_target"): n for n in nodes}
    assert set(by_kind) == {"lab", "cpu_target"} and all(n.resources["CPU"] == 1 for n in nodes)
    here = this_machine()
    for n in nodes:
        assert isinstance(n.machine, Machine) and n.machine.same_hardware(here)  # both nodes are this machine
        assert n.address.startswith("127.0.0.1:") and n.node_id[:8] in n.name()


def test_the_same_bytes_go_to_the_object_store_once_and_arrive_as_bytes(rc):
    blob = b"model" * 1000
    ref = rc.put(blob)
    assert rc.put(bytes(blob)) is ref and rc.put(blob + b"!") is not ref
    assert rc.wait([rc.submit(where_and_size, ref)]) == [len(blob)]


def test_a_resource_or_a_node_decides_where_a_task_runs(rc):
    worker = next(n for n in rc.nodes() if "cpu_target" in n.resources)
    head = next(n for n in rc.nodes() if "lab" in n.resources)
    tasks = [rc.submit(sleeps, 0, resources={"cpu_target": 0.01}) for _ in range(3)]
    tasks += [rc.submit(sleeps, 0, node_id=head.node_id)]
    assert rc.wait(tasks) == ["woke"] * 4
    assert [t.ran_on for t in tasks] == [worker.node_id] * 3 + [head.node_id]


def test_a_task_runs_onnx_runtime_on_the_cpus_ray_gave_it(rc):
    # each node has one CPU: a session of a task uses one thread, not every core of the host the nodes share
    assert rc.wait([rc.submit(session_threads, node_id=n.node_id) for n in rc.nodes()]) == [1, 1]


def test_a_resource_no_node_has_is_refused_at_once(rc):
    with pytest.raises(ClusterError, match="no alive node of the cluster has CPU=1, gpu_xeon=0.01"):
        rc.submit(sleeps, 0, resources={"gpu_xeon": 0.01})


def test_a_task_that_raises_comes_back_failed_with_its_error_and_node(rc):
    [failed] = rc.wait([rc.submit(raises)])
    assert isinstance(failed, ClusterTaskFailed) and not failed.lost
    assert isinstance(failed.cause, ValueError) and "the recipe cannot run" in failed.message
    assert "127.0.0.1:" in failed.node


def test_a_time_limit_and_cancel_stop_the_ray_tasks(rc):
    t0 = time.monotonic()
    [late] = rc.wait([rc.submit(sleeps, 60)], timeout_s=1)
    assert isinstance(late, ClusterTaskFailed) and late.timed_out and "within 1 s" in late.message
    calls: list[int] = []

    def cancelled() -> bool:  # Cancel pressed after a few looks
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled):
        rc.wait([rc.submit(sleeps, 60)], cancelled=cancelled)
    assert time.monotonic() - t0 < 30
    # the cancelled tasks freed their CPUs: two new tasks finish at once
    assert rc.wait([rc.submit(sleeps, 0) for _ in range(2)], timeout_s=60) == ["woke", "woke"]
