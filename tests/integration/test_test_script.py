"""scripts/test.sh runs every step after the environment is built, even when one fails (a failing pytest used to
stop the script before the cluster tests, which then silently did not run), and exits with the first failure's
status."""

from __future__ import annotations

import re
import subprocess

from tests.support.doc_examples import ROOT

SCRIPT = (ROOT / "scripts" / "test.sh").read_text()


def _step_function() -> str:
    m = re.search(r"^STATUS=0\n.*?^step\(\) \{.*?^\}\n", SCRIPT, re.S | re.M)
    assert m, "scripts/test.sh defines step()"
    return m.group(0)


def test_a_failed_step_does_not_stop_the_next_and_the_script_exits_with_its_status():
    body = _step_function() + (
        "set -euo pipefail\n"
        "inner() { false; echo not-reached; }\n"  # -e holds inside a step: the function stops at its first failure
        "step first sh -c 'exit 3'\n"
        "step second inner\n"
        "step third echo third-ran\n"
        'echo "status=$STATUS failed=${FAILED[*]}"\n'
        'exit "$STATUS"\n')
    run = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=30)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "third-ran" in run.stdout and "not-reached" not in run.stdout
    assert "status=3 failed=first second" in run.stdout
    assert "first FAILED (exit 3)" in run.stderr and "third passed" in run.stderr


def test_the_suite_and_the_cluster_tests_are_steps_and_the_script_ends_with_their_status():
    lines = [ln.strip() for ln in SCRIPT.splitlines()]
    assert any(ln.startswith("step pytest ") for ln in lines)
    assert any(ln.startswith('step "cluster tests" ') for ln in lines)
    assert any(ln.startswith("step ruff ") for ln in lines) and any(ln.startswith("step mypy ") for ln in lines)
    assert lines[-1] == 'exit "$STATUS"'
