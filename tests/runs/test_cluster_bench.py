"""Which nodes of a cluster a benchmark times on, and how their timings become one row per variant × machine (the
timing itself on a real cluster: tests/cluster/test_bench_cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ortlab.core.errors import BenchmarkError
from ortlab.runs.cluster_bench import (ClusterBenchmark, KindResult, NodeKind, NodeTiming, custom_resources,
                                       node_kinds, waves)
from ortlab.runs.history import BenchVariant
from ortlab.runtime.ray_cluster import NodeId
from ortlab.runtime.machine import Machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySample, summarize
from ortlab.timing.compare import compare_benchmarks


@dataclass
class Node:
    node_id: str
    address: str
    resources: dict = field(default_factory=dict)
    machine: Machine | None = None


EPYC = Machine("AMD EPYC 7B13", "x86_64", "AVX2", 2, 1, ("onnxruntime 1.23.0",))
XEON = Machine("Intel Xeon Platinum 8481C", "x86_64", "AVX2, AVX-512, VNNI, AMX", 8, 1, ("onnxruntime 1.23.0",))


def _ray_resources(cpus: float, **custom: float) -> dict:
    return {"CPU": cpus, "memory": 1e9, "object_store_memory": 1e8, "node:10.0.0.1": 1.0, **custom}


def test_custom_resources_leave_out_rays_own():
    assert custom_resources(_ray_resources(2, cpu_epyc=1, **{"accelerator_type:A100": 1, "node:__internal_head__": 1,
                                                             "GPU": 1})) == ["cpu_epyc"]


def test_one_kind_per_set_of_custom_resources_and_one_per_cpu_without_any():
    nodes = [Node("b", "10.0.0.2:1", _ray_resources(4, cpu_xeon=1), XEON),
             Node("a", "10.0.0.1:1", _ray_resources(2, cpu_epyc=1), EPYC),
             Node("c", "10.0.0.3:1", _ray_resources(2, cpu_epyc=1), EPYC),     # a second epyc: same kind
             Node("d", "10.0.0.4:1", _ray_resources(8), XEON),                 # no label: its CPU names it
             Node("e", "10.0.0.5:1", _ray_resources(8), XEON)]
    kinds = node_kinds(nodes)
    assert [(k.label, k.node_id, k.cpus) for k in kinds] == [
        ("cpu_epyc", "a", 2.0), ("cpu_xeon", "b", 4.0), ("Intel Xeon Platinum 8481C", "d", 8.0)]


def test_named_resources_pick_one_node_each_and_an_unknown_one_says_what_there_is():
    nodes = [Node("a", "10.0.0.1:1", _ray_resources(2, cpu_epyc=1)), Node("b", "10.0.0.2:1", _ray_resources(4, cpu_xeon=1))]
    assert [(k.label, k.node_id) for k in node_kinds(nodes, ["cpu_xeon"])] == [("cpu_xeon", "b")]
    with pytest.raises(BenchmarkError, match=r"'cpu_arm'.*cpu_epyc, cpu_xeon"):
        node_kinds(nodes, ["cpu_arm"])


def test_nodes_of_one_host_time_one_after_the_other():
    kinds = [NodeKind("a", NodeId("1"), "127.0.0.1:10"), NodeKind("b", NodeId("2"), "127.0.0.1:11"),
             NodeKind("c", NodeId("3"), "10.0.0.9:10")]
    assert [[k.label for k in w] for w in waves(kinds)] == [["a", "c"], ["b"]]


def _summary(variant: str, rounds: list[float]):
    return summarize([LatencySample(variant, 1, i, ms, float(i), i) for i, ms in enumerate(rounds)])


def test_rows_are_one_per_variant_and_machine_each_speed_up_taken_on_its_own_node():
    variants = [BenchVariant("fp32", "fp32 model", "a.onnx"), BenchVariant("int8", "int8 model", "b.onnx")]
    epyc = [_summary("fp32", [10.0] * 12), _summary("int8", [5.0] * 12)]     # 2× on the EPYC
    xeon = [_summary("fp32", [4.0] * 12), _summary("int8", [4.0] * 12)]      # no gain on the Xeon
    kinds = [KindResult(NodeKind("cpu_epyc", NodeId("a"), "10.0.0.1:1"), NodeTiming(EPYC, epyc, 3.0),
                        compare_benchmarks(epyc, baseline="fp32")),
             KindResult(NodeKind("cpu_xeon", NodeId("b"), "10.0.0.2:1"), NodeTiming(XEON, xeon, 3.0),
                        compare_benchmarks(xeon, baseline="fp32")),
             KindResult(NodeKind("cpu_arm", NodeId("c"), "10.0.0.3:1"), error="the node was lost")]
    bench = ClusterBenchmark("10.0.0.1:6379", variants, BenchConfig(), kinds)
    rows = bench.rows()
    assert [(r.name, r.kind, r.is_baseline) for r in rows] == [
        ("fp32 model", "cpu_epyc", True), ("fp32 model", "cpu_xeon", True),
        ("int8 model", "cpu_epyc", False), ("int8 model", "cpu_xeon", False)]
    assert rows[2].comparison.speedup == pytest.approx(2.0) and rows[3].comparison.speedup == pytest.approx(1.0)
    assert rows[2].comparison.paired and rows[2].comparison.clear and not rows[3].comparison.clear
    assert rows[2].stamp == "AMD EPYC 7B13 · AVX2 · 2 cores · 1 thread"
    assert "AMX" in rows[3].stamp
    assert bench.failures == ["cpu_arm: the node was lost"]
