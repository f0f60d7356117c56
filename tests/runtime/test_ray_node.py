"""The private Ray node of ``ortlab cluster start`` (ortlab.runtime.ray_node), the operator's cluster setting
(ortlab.runtime.cluster_setting) and the replacement of Ray's outbound calls (ortlab.runtime.ray_quiet), without
starting Ray (a real cluster started this way: tests/cluster/test_private_cluster.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ortlab.runtime import cluster_setting, ray_node, ray_quiet

REPO = Path(__file__).resolve().parents[2]
ray = pytest.importorskip("ray")


@pytest.fixture
def token_home(tmp_path, monkeypatch):
    monkeypatch.delenv(cluster_setting.TOKEN_ENV_VAR, raising=False)
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_a_head_on_loopback_fixes_every_port_and_turns_the_dashboard_off(token_home):
    plan = ray_node.plan_node(port=7000, num_cpus=2, resources={"cpu_epyc": 1})
    cmd = plan.command()
    assert cmd[:4] == [sys.executable, "-m", "ray.scripts.scripts", "start"]
    assert _flag(cmd, "--node-ip-address") == "127.0.0.1" and _flag(cmd, "--port") == "7000" and "--head" in cmd
    assert _flag(cmd, "--include-dashboard") == "false" and _flag(cmd, "--dashboard-host") == "127.0.0.1"
    assert "--disable-usage-stats" in cmd
    assert [_flag(cmd, f) for f in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-grpc-port",
                                    "--dashboard-agent-listen-port", "--runtime-env-agent-port",
                                    "--metrics-export-port", "--dashboard-port")] == [str(p) for p in range(7001, 7008)]
    assert (_flag(cmd, "--min-worker-port"), _flag(cmd, "--max-worker-port")) == ("7100", "7199")
    assert json.loads(_flag(cmd, "--resources")) == {"cpu_epyc": 1.0} and _flag(cmd, "--num-cpus") == "2"
    listed = dict((port, name) for name, port in plan.ports())
    flagged = {int(cmd[i + 1]) for i, a in enumerate(cmd) if a.endswith("-port") or a == "--port"}
    assert flagged - {7199} <= set(listed), "every port the command fixes is listed"
    assert listed[7000].startswith("GCS") and "loopback" in plan.listens_on()


def test_a_joining_node_has_no_head_flags_and_says_it_listens_everywhere_off_loopback(token_home):
    plan = ray_node.plan_node(ip="10.0.0.6", join="10.0.0.5:6379", port=6379)
    cmd = plan.command()
    assert _flag(cmd, "--address") == "10.0.0.5:6379" and "--head" not in cmd and "--include-dashboard" not in cmd
    assert not plan.head and all(not name.startswith("GCS") for name, _ in plan.ports())
    assert "every interface" in plan.listens_on() and "token" in plan.listens_on()


def test_the_node_environment_turns_token_auth_on_and_quiets_ray(token_home):
    env = ray_node.plan_node(ip="10.0.0.6", join="10.0.0.5:6379").env({"PYTHONPATH": "/elsewhere", "HOME": "/h"})
    assert env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN_PATH"] == str(token_home / "cluster" / "auth_token")
    assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env["ORT_DISABLE_TELEMETRY"] == "1"
    assert env[ray_quiet.QUIET_ENV] == "1" and env[ray_quiet.ROUTE_ENV] == "10.0.0.5"  # probes aim at the head
    assert env["PYTHONPATH"].split(os.pathsep) == [ray_quiet.site_path(), "/elsewhere"]
    assert (Path(ray_quiet.site_path()) / "sitecustomize.py").is_file()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ip": "my-laptop"}, "--ip 'my-laptop' is not an IP address"),
    ({"port": 80}, "--port 80 is out of range: give 1024 to 65335"),
    ({"join": "10.0.0.5"}, "--join '10.0.0.5' is not HOST:PORT of the head"),
])
def test_a_setting_that_cannot_work_is_one_line_saying_what_to_give(token_home, kwargs, message):
    with pytest.raises(ray_node.NodeSettingError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        ray_node.plan_node(**kwargs)


def test_the_head_writes_a_private_token_once_and_a_joining_node_needs_a_copy(token_home):
    with pytest.raises(Exception, match="No cluster token at .*auth_token: copy the token file of the cluster's head"):
        ray_node.ensure_token(create=False)
    path, made = ray_node.ensure_token(create=True)
    assert made and path == token_home / "cluster" / "auth_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text()) == 64
    first = path.read_text()
    assert ray_node.ensure_token(create=True) == (path, False) and path.read_text() == first  # never replaced


def test_the_configured_cluster_and_token_come_from_where_the_server_starts(monkeypatch, tmp_path):
    monkeypatch.delenv(cluster_setting.CLUSTER_ENV_VAR, raising=False)
    assert cluster_setting.configured_cluster() is None
    monkeypatch.setenv(cluster_setting.CLUSTER_ENV_VAR, "  10.0.0.5:6379 ")
    assert cluster_setting.configured_cluster() == "10.0.0.5:6379"
    monkeypatch.setenv(cluster_setting.TOKEN_ENV_VAR, str(tmp_path / "t"))
    assert cluster_setting.auth_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "t")}


def test_quiet_ray_aims_the_address_probe_at_the_head_and_sends_no_report(monkeypatch):
    from ray._common import network_utils
    from ray._common.usage import usage_lib
    from ray._private import services

    asked: list[object] = []

    def probe(address=None):
        asked.append(address)
        return "x"

    monkeypatch.setattr(services, "node_ip_address_from_perspective", probe)
    monkeypatch.setattr(network_utils, "node_ip_address_from_perspective", services.node_ip_address_from_perspective)
    monkeypatch.setattr(usage_lib, "get_cloud_from_metadata_requests", lambda: pytest.fail("a metadata request"))
    monkeypatch.setattr(usage_lib.UsageReportClient, "report_usage_data", lambda *a: pytest.fail("a usage report"))
    done = ray_quiet.quiet_ray("10.0.0.5")
    assert len(done) == 3
    assert services.get_node_ip_address() == "x" and asked == ["10.0.0.5:53"]  # never 8.8.8.8
    assert network_utils.node_ip_address_from_perspective("10.0.0.9:6379") == "x" and asked[-1] == "10.0.0.9:6379"
    ray_quiet.quiet_ray("10.0.0.7")  # again: the route changes, the probe is not wrapped twice
    services.node_ip_address_from_perspective()
    assert asked[-1] == "10.0.0.7:53"
    assert usage_lib.get_cloud_from_metadata_requests() == "unknown"
    usage_lib.UsageReportClient().report_usage_data("https://example.invalid/", None)  # type: ignore[arg-type]


def test_the_node_sitecustomize_quiets_ray_in_a_fresh_interpreter():
    """What each Python process of a node runs first: with the node's environment, Ray's probe is replaced."""
    code = ("from ray._private import services; from ray._common.usage import usage_lib; "
            "print(services.node_ip_address_from_perspective.__name__, usage_lib.get_cloud_from_metadata_requests())")
    env = {**os.environ, ray_quiet.QUIET_ENV: "1", ray_quiet.ROUTE_ENV: "127.0.0.1",
           "PYTHONPATH": os.pathsep.join([ray_quiet.site_path(), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["from_the_head", "unknown"]
    env.pop(ray_quiet.QUIET_ENV)
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert plain.stdout.split()[0] == "node_ip_address_from_perspective"  # only a node's processes are changed


def test_cli_cluster_start_refuses_a_bad_setting_in_one_line(token_home):
    for args, said in ((["--head", "--ip", "my-laptop"], "is not an IP address"),
                       (["--head", "--resources", "[1]"], "is not a JSON object of numbers"),
                       (["--join", "10.0.0.5"], "is not HOST:PORT of the head")):
        run = subprocess.run([sys.executable, "-m", "ortlab", "cluster", "start", *args], capture_output=True,
                             text=True, timeout=120, cwd=REPO)
        assert run.returncode == 2 and said in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "Traceback" not in run.stderr
    assert not (token_home / "cluster").exists()  # nothing was written before the settings were checked
