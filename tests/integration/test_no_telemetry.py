"""No telemetry leaves the machine: ONNX Runtime 1.31 sends DNS lookups for its telemetry host some seconds after a
session starts unless ORT_DISABLE_TELEMETRY=1 is in the environment before it loads. ortlab sets it on import, for
the CLI, the app's server and every child; a real run under strace (when installed) sees no DNS query."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ortlab
from ortlab.runtime.child import child_env

REPO = Path(__file__).resolve().parents[2]
TRACE_S = 35  # longer than ONNX Runtime's first telemetry attempt (10–20 s after the session starts)


def _env_without_the_switch(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def test_the_switch_is_set_in_this_process_and_every_child(monkeypatch):
    assert ortlab.NO_TELEMETRY_ENV == {"ORT_DISABLE_TELEMETRY": "1"}
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "1"
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")  # a value from elsewhere does not reach a child
    env, _ = child_env()
    assert env["ORT_DISABLE_TELEMETRY"] == "1"


def test_the_cli_process_has_it_before_onnxruntime_loads():
    code = ("import sys; import ortlab.cli.main as m; import os; "
            "print(os.environ.get('ORT_DISABLE_TELEMETRY'), 'onnxruntime' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=_env_without_the_switch(ORT_DISABLE_TELEMETRY="0"), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "1"


def test_the_app_imports_ortlab_before_anything_loads_onnxruntime():
    """app.py's first import of ortlab runs ortlab/__init__.py; Streamlit itself never loads onnxruntime."""
    proc = subprocess.run([sys.executable, "-c", "import sys, streamlit; print('onnxruntime' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.stdout.strip() == "False", proc.stderr
    imports = [ln for ln in (REPO / "app.py").read_text(encoding="utf-8").splitlines()
               if re.match(r"(import|from) \w", ln)]
    assert any(ln.startswith("from ortlab") for ln in imports)
    assert not [ln for ln in imports if "onnx" in ln]


def test_the_no_network_claims_are_written_down():
    config = (REPO / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    assert "never calls out to the internet" in config
    assert tomllib.loads(config)["browser"]["gatherUsageStats"] is False
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "ORT_DISABLE_TELEMETRY=1" in readme and "Nothing leaves the machine" in readme


def _strace_works() -> str | None:
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", os.devnull, "true"],
                           capture_output=True, timeout=30)
    return None if probe.returncode == 0 else "strace cannot trace here (ptrace not allowed)"


@pytest.mark.slow
def test_a_cli_benchmark_longer_than_the_first_telemetry_attempt_makes_no_dns_query(tmp_path):
    why = _strace_works()
    if why:
        pytest.skip(why)
    trace = tmp_path / "trace.txt"
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect,sendto", "-o", str(trace), sys.executable,
                           "-m", "ortlab", "bench", "digits_cnn", "--duration", str(TRACE_S)],
                          capture_output=True, text=True, timeout=TRACE_S + 60, cwd=tmp_path,
                          env=_env_without_the_switch(ORTLAB_HOME=str(tmp_path / "home")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = trace.read_text(encoding="utf-8", errors="replace").splitlines()
    dns = [ln for ln in lines if "htons(53)" in ln or "mobile\\6events" in ln]
    inet = [ln for ln in lines if "connect(" in ln and re.search(r"AF_INET6?\b", ln)
            and not re.search(r'127\.0\.0\.1|"::1"|::ffff:127\.', ln)]
    assert dns == [] and inet == [], "\n".join((dns + inet)[:10])
