"""AppTest of the cluster setting on the Benchmark and Tune pages: the address typed there reaches the engine call
the command line makes (``--ray``), and an unreachable cluster is a message on the page, not a traceback.

``RayCluster.connect`` records the address it was given; an unreachable one goes on to the real connect, a
reachable one is stood in for by a cluster that runs its tasks in this process (a real local cluster is
tests/cluster/'s)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

pytest.importorskip("streamlit")

from ortlab.runtime import ray_cluster
from ortlab.runtime.machine import this_machine
from tests.support.app_session import started_app

pytestmark = pytest.mark.slow  # AppTest of the app on the bundled sample

TIMEOUT = 120
UNREACHABLE = "127.0.0.1:9"  # nothing listens there: refused at once, nothing leaves the machine


@pytest.fixture
def app(home, monkeypatch):
    return started_app(monkeypatch, TIMEOUT)


@dataclass
class _Node:
    node_id: str
    address: str
    resources: dict
    machine: object = None


@dataclass
class _InProcessCluster:
    """Runs each task at once in this process, on two node kinds."""

    calls: list = field(default_factory=list)

    def nodes(self):
        return [_Node("n1", "127.0.0.1:1", {"CPU": 1.0, "cpu_lab": 1.0}),
                _Node("n2", "127.0.0.1:2", {"CPU": 1.0, "cpu_target": 1.0})]

    def put(self, blob):
        return blob

    def submit(self, fn, *args, resources=None, node_id=None, retries=1, num_cpus=1):
        self.calls.append(node_id)
        return fn(*args)

    def wait(self, tasks, *, cancelled=None, timeout_s=None):
        return list(tasks)

    def cancel(self, tasks):
        pass

    def close(self):
        pass


def _connect_recording(monkeypatch, outcome=None):
    seen: list[str] = []
    real = ray_cluster.RayCluster.connect

    def connect(cls, address):
        seen.append(address)
        return real(address) if outcome is None else outcome

    monkeypatch.setattr(ray_cluster.RayCluster, "connect", classmethod(connect))
    return seen


def _quick_benchmark(at) -> None:
    at.switch_page("pages/benchmark.py").run()
    at.number_input(key="bench.duration_s").set_value(0.0).run()
    at.number_input(key="bench.runs").set_value(12)
    at.number_input(key="bench.warmup").set_value(1)
    at.toggle(key="bench.memory").set_value(False)


def test_benchmark_page_an_unreachable_cluster_is_a_message_not_a_traceback(app, monkeypatch):
    seen = _connect_recording(monkeypatch)
    at = app
    _quick_benchmark(at)
    at.text_input(key="bench.cluster").set_value(f" {UNREACHABLE} ")
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert seen == [UNREACHABLE]
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")  # as drawn: Markdown escapes taken out
    assert shown.startswith("Benchmarking failed: ") and UNREACHABLE in shown and "ray start --head" in shown
    assert "Traceback" not in shown


def test_benchmark_page_times_on_every_node_kind_of_the_cluster_it_names(app, monkeypatch):
    cluster = _InProcessCluster()
    seen = _connect_recording(monkeypatch, cluster)
    at = app
    _quick_benchmark(at)
    at.text_input(key="bench.cluster").set_value("auto")
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert seen == ["auto"] and cluster.calls == ["n1", "n2"]
    table = at.dataframe[-1].value
    assert list(table["node kind"]) == ["cpu_lab", "cpu_target"]
    assert list(table["speedup (p50, same node)"]) == ["baseline", "baseline"]
    cpu = this_machine().cpu
    assert all(m.startswith(cpu + " · ") and "thread" in m for m in table["machine"])  # the node's machine
    assert list(table["runs"]) == [12, 12]


def _start_tune(at, cluster: str, timing_resource: str) -> None:
    at.switch_page("pages/tune.py").run()
    at.number_input(key="tune.budget").set_value(60)
    at.number_input(key="tune.max_trials").set_value(1)
    at.text_input(key="tune.cluster").set_value(cluster)
    at.text_input(key="tune.timing_resource").set_value(timing_resource)
    next(b for b in at.button if "Start tuning" in b.label).click()
    at.run()


def test_tune_page_passes_the_cluster_and_timing_resource_to_the_engine_and_says_when_unreachable(app, monkeypatch):
    from ortlab import api

    seen = _connect_recording(monkeypatch)
    settings = []
    real_start_tune = api.start_tune

    def start_tune(model, calibration, evaluation, s, policy, **kwargs):
        settings.append(s)
        return real_start_tune(model, calibration, evaluation, s, policy, **kwargs)

    monkeypatch.setattr(api, "start_tune", start_tune)
    at = app
    _start_tune(at, f" {UNREACHABLE} ", "cpu_epyc")
    assert not at.exception, [e.value for e in at.exception]
    assert [(s.ray, s.timing_resource) for s in settings] == [(UNREACHABLE, "cpu_epyc")]  # the CLI's --ray, --timing-resource
    assert seen == [UNREACHABLE]
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")
    assert shown.startswith("Tuning failed: ") and UNREACHABLE in shown and "Traceback" not in shown


def test_tune_page_a_timing_resource_without_a_cluster_is_a_message(app, monkeypatch):
    seen = _connect_recording(monkeypatch)
    at = app
    _start_tune(at, "", "cpu_epyc")
    assert not at.exception, [e.value for e in at.exception]
    assert seen == []
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")
    assert "The timing resource names a node of a Ray cluster: give the cluster's address too." in shown
