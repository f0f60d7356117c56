"""``ortlab bench --ray`` usage: what a wrong cluster flag says before anything is timed (the benchmark on a real
cluster: tests/cluster/test_bench_cluster.py)."""

from __future__ import annotations

import pytest

from ortlab.cli import main as cli


def test_nodes_without_a_cluster_is_a_usage_error(capsys):
    assert cli.main(["bench", "digits_cnn", "--nodes", "cpu_epyc"]) == 2
    assert "--nodes names the cluster's nodes to time on: give the cluster with --ray ADDRESS." in capsys.readouterr().err


def test_an_unreachable_cluster_is_one_line_naming_it(capsys, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    assert cli.main(["bench", "digits_cnn", "--ray", "127.0.0.1:9", "--runs", "3", "--duration", "0"]) == 1
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
