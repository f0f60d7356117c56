"""Netron from a non-loopback address: the app, shared on a network, is opened by that address and Netron (a
component served by the app itself) draws the model, with no request to any other origin.

The test runs the app and chromium in a new network namespace (``unshare --net``, root or unprivileged user
namespaces) that has loopback and a veth pair, one end holding 10.77.0.1/24, so the address is real but nothing
outside the machine can be reached or reach it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("remote_netron_driver.py")
ADDRESS = "10.77.0.1"
# No IPv6 in the namespace, and exec only once v0 is up: a link-local address or a carrier arriving while the page
# loads is a network change to chromium, which then aborts the page's requests (net::ERR_NETWORK_CHANGED).
SETUP = ("for f in all default; do p=/proc/sys/net/ipv6/conf/$f/disable_ipv6; [ ! -e $p ] || echo 1 > $p; done && "
         f"ip link set lo up && ip link add v0 type veth peer name v1 && ip addr add {ADDRESS}/24 dev v0 && "
         "ip link set v1 up && ip link set v0 up && "
         "for i in $(seq 50); do ip -o link show v0 | grep -q 'state UP' && break; sleep 0.1; done && "
         "exec \"$0\" \"$@\"")


def namespace_command() -> list[str]:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    assert unshare and ip, "this test needs unshare (util-linux) and ip (iproute2)"
    root = subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "0"
    return [unshare, "--net"] + ([] if root else ["--map-root-user"]) + ["sh", "-c", SETUP]


@pytest.mark.browser
def test_netron_draws_when_the_app_is_opened_by_a_non_loopback_address():
    cmd = namespace_command() + [sys.executable, str(DRIVER), ADDRESS]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the namespaced run failed ({done.returncode}):\n{done.stderr[-3000:]}"
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["url"].startswith(f"http://{ADDRESS}:"), got
    assert got["netron_frames"] and all(u.startswith(got["url"] + "/component/") for u in got["netron_frames"]), got
    assert got["nodes"] > 0, f"Netron drew no graph from {got['url']}"
    assert got["requests"] > 10 and got["elsewhere"] == [], got
