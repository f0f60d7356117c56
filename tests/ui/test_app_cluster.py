"""AppTest of the cluster on the Benchmark and Tune pages: the cluster is the server operator's (``$ORTLAB_CLUSTER``),
never typed on a page — signed in or not, no page has a field to name one, and a job a page starts on "the server's
cluster" reaches that address alone (the engine call the command line makes with ``--ray``); an unreachable cluster
is a message on the page, not a traceback.

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
    monkeypatch.delenv("ORTLAB_CLUSTER", raising=False)
    return started_app(monkeypatch, TIMEOUT)


def _configure(monkeypatch, address: str) -> None:
    """The operator's setting, where the server starts."""
    monkeypatch.setenv("ORTLAB_CLUSTER", address)


def _signed_in(monkeypatch) -> None:
    """A shared app with sign-in, and a signed-in user (the real sign-in flow is tests/browser/test_sharing.py)."""
    from ortlab.ui.session import auth

    monkeypatch.setattr(auth, "sign_in_configured", lambda: True)
    monkeypatch.setattr(auth, "signed_in", lambda: True)
    monkeypatch.setattr(auth, "current_user_key", lambda: "a" * 32)


def _fields(at) -> list[str]:
    """Every free-text field on the page: keys and labels."""
    return [f"{w.key} {w.label}".lower() for w in [*at.text_input, *at.text_area]]


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



def test_without_a_configured_cluster_no_page_offers_one(app):
    at = app
    for page, key in (("pages/benchmark.py", "bench.on_cluster"), ("pages/tune.py", "tune.on_cluster")):
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        assert key not in [t.key for t in at.toggle]
        assert not [f for f in _fields(at) if "cluster" in f or "address" in f or "ray" in f.split()]


def test_signed_in_a_page_has_no_field_for_an_address_and_reaches_only_the_configured_cluster(app, monkeypatch):
    """The attack of issue 34: a signed-in user types the address of a Ray head they started; there is nowhere to
    type it, and what a page starts goes to the operator's cluster."""
    cluster = _InProcessCluster()
    seen = _connect_recording(monkeypatch, cluster)
    _configure(monkeypatch, "10.0.0.5:6379")
    _signed_in(monkeypatch)
    at = app
    _quick_benchmark(at)
    assert not at.exception, [e.value for e in at.exception]
    assert not [f for f in _fields(at) if "cluster" in f or "address" in f or ":" in str(f)]
    at.toggle(key="bench.on_cluster").set_value(True)
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert seen == ["10.0.0.5:6379"] and cluster.calls == ["n1", "n2"]
    page = " ".join(str(c.value) for c in at.caption)
    assert "Timed on the server's Ray cluster" in page and "10.0.0.5" not in page  # a page never names it

    at.switch_page("pages/tune.py").run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [t.key for t in at.text_input]
    assert texts == ["tune.timing_resource"]  # a resource name of the operator's nodes, never an address
    assert [t.key for t in at.toggle if "cluster" in (t.key or "")] == ["tune.on_cluster"]


def test_benchmark_page_an_unreachable_configured_cluster_is_a_message_not_a_traceback(app, monkeypatch):
    seen = _connect_recording(monkeypatch)
    _configure(monkeypatch, f" {UNREACHABLE} ")
    at = app
    _quick_benchmark(at)
    at.toggle(key="bench.on_cluster").set_value(True)
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert seen == [UNREACHABLE]
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")  # as drawn: Markdown escapes taken out
    assert shown.startswith("Benchmarking failed: ") and "ortlab cluster start" in shown
    assert "Traceback" not in shown


def test_benchmark_page_times_on_every_node_kind_of_the_configured_cluster(app, monkeypatch):
    cluster = _InProcessCluster()
    seen = _connect_recording(monkeypatch, cluster)
    _configure(monkeypatch, "auto")
    at = app
    _quick_benchmark(at)
    at.toggle(key="bench.on_cluster").set_value(True)
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


def _start_tune(at, on_cluster: bool, timing_resource: str) -> None:
    at.switch_page("pages/tune.py").run()
    at.number_input(key="tune.budget").set_value(60)
    at.number_input(key="tune.max_trials").set_value(1)
    at.toggle(key="tune.on_cluster").set_value(on_cluster)
    at.text_input(key="tune.timing_resource").set_value(timing_resource)
    next(b for b in at.button if "Start tuning" in b.label).click()
    at.run()


def test_tune_page_passes_the_configured_cluster_and_timing_resource_to_the_engine_and_says_when_unreachable(
        app, monkeypatch):
    from ortlab import api

    seen = _connect_recording(monkeypatch)
    _configure(monkeypatch, UNREACHABLE)
    settings = []
    real_start_tune = api.tuning.start_tune

    def start_tune(model, calibration, evaluation, s, policy, **kwargs):
        settings.append(s)
        return real_start_tune(model, calibration, evaluation, s, policy, **kwargs)

    monkeypatch.setattr(api.tuning, "start_tune", start_tune)
    at = app
    _start_tune(at, True, "cpu_epyc")
    assert not at.exception, [e.value for e in at.exception]
    assert [(s.ray, s.timing_resource) for s in settings] == [(UNREACHABLE, "cpu_epyc")]  # the CLI's --ray, --timing-resource
    assert [(s.budget_s, s.budget_cpu_s) for s in settings] == [(60.0, None)]  # a cluster's budget: wall seconds
    assert seen == [UNREACHABLE]
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")
    assert shown.startswith("Tuning failed: ") and "Traceback" not in shown


def test_tune_page_a_timing_resource_without_the_cluster_is_a_message(app, monkeypatch):
    seen = _connect_recording(monkeypatch)
    _configure(monkeypatch, "auto")
    at = app
    _start_tune(at, False, "cpu_epyc")
    assert not at.exception, [e.value for e in at.exception]
    assert seen == []
    shown = " ".join(str(e.value) for e in at.error).replace("\\", "")
    assert "The timing resource names a node of a Ray cluster: turn on the server's cluster too." in shown
