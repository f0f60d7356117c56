"""``ortlab bench --ray`` on a real local Ray cluster (tests/cluster/conftest.py: a head with the resource "lab"
and a worker with "cpu_target", one CPU each); each node kind times every variant in one task pinned to its node,
with the one clock, and the table has one row per variant × node kind, each stamped with its node's machine."""

from __future__ import annotations

import json

import pytest

from ortlab.cli import main as cli
from ortlab.runs.history import History

QUICK = ["--duration", "0", "--runs", "20", "--warmup", "2", "--threads", "1"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _bench(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["bench", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bench_ray_gives_one_row_per_variant_and_node_kind_each_timed_on_its_own_node(ray_cluster, home, capsys):
    code, out, err = _bench(capsys, "digits_cnn", "digits_attention", "--ray", ray_cluster.address, *QUICK, "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["rows"]
    assert sorted((r["variant"].split("/")[0], r["kind"]) for r in rows) == [
        ("digits_attention", "cpu_target"), ("digits_attention", "lab"),
        ("digits_cnn", "cpu_target"), ("digits_cnn", "lab")]
    nodes = {n["kind"]: n for n in doc["nodes"]}
    assert set(nodes) == {"lab", "cpu_target"}
    assert nodes["lab"]["node_id"] != nodes["cpu_target"]["node_id"]
    for n in nodes.values():  # the task that timed a kind ran on the node that carries its resource
        assert n["ran_on"] == n["node_id"] and n["error"] is None
        assert n["machine"]["cpu"] and n["machine"]["isa"] is not None and n["machine"]["threads"] == 1
    for r in rows:
        assert r["summary"]["n"] == 20 and r["machine"]["threads"] == 1
        if r["variant"].startswith("digits_cnn"):
            assert r["speedup"] == 1.0  # the baseline on its own node
        else:  # timed interleaved with the baseline on the same node: a paired speed-up with its interval
            assert r["interleaved"] and r["low"] <= r["speedup"] <= r["high"]
    stored = History(home / "history.sqlite").list_benchmarks()
    assert sorted(int(b.id or 0) for b in stored) == sorted(n["bench_id"] for n in nodes.values())
    assert all(b.machine is not None and b.machine.threads == 1 for b in stored)

    code, out, err = _bench(capsys, "digits_cnn", "digits_attention", "--ray", ray_cluster.address, *QUICK)
    assert code == 0, err
    table = [ln for ln in out.splitlines() if ln.startswith(("digits_cnn", "digits_attention"))]
    assert len(table) == 4 and sum("cpu_target" in ln for ln in table) == 2
    assert all(" · AVX" in ln or " · no SIMD flags read" in ln for ln in table)  # each row stamped with its machine
    assert "node       lab: " in out and "node       cpu_target: " in out


def test_bench_ray_on_named_nodes_times_only_there_and_an_unknown_resource_says_what_there_is(ray_cluster, home, capsys):
    code, out, err = _bench(capsys, "digits_cnn", "--ray", ray_cluster.address, "--nodes", "cpu_target", *QUICK, "--json")
    assert code == 0, err
    assert [r["kind"] for r in json.loads(out)["rows"]] == ["cpu_target"]
    code, out, err = _bench(capsys, "digits_cnn", "--ray", ray_cluster.address, "--nodes", "cpu_arm", *QUICK)
    said = [ln for ln in err.splitlines() if ln.startswith("ortlab")]  # (Ray's own loggers may write there too)
    assert code == 1 and len(said) == 1 and said[0].startswith("ortlab: error: ")
    assert "'cpu_arm'" in said[0] and "cpu_target, lab" in said[0]
