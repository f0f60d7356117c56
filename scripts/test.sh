#!/usr/bin/env bash
# Builds a fresh virtual environment from the requirement files alone, then runs the linters and the whole
# suite in it, real-browser test included: a dependency missing from the requirement files fails here
# instead of hiding behind the machine's Python. Installs Debian's Chromium when it is missing.
# Extra arguments go to pytest (`bash scripts/test.sh -k quantize`).
# Building the environment must succeed (nothing else can run without it); after that every step runs even when an
# earlier one failed (a failing pytest must not hide the cluster tests), each says its time, and the script exits
# with the first failed step's status (0 when all passed).
set -euo pipefail
cd "$(dirname "$0")/.."

STATUS=0
FAILED=()
step() {  # step NAME COMMAND...: runs COMMAND in a subshell with -e, records a failure and goes on
  local name=$1 rc=0 began=$SECONDS
  shift
  set +e
  ( set -e; "$@" )
  rc=$?
  set -e
  echo "scripts/test.sh: $name $([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in $((SECONDS - began)) s" >&2
  if [ "$rc" -ne 0 ]; then
    FAILED+=("$name")
    [ "$STATUS" -ne 0 ] || STATUS=$rc
  fi
}

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

VENV="${ORTLAB_TEST_VENV:-.venv-test}"
python3 -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
step ruff "$VENV/bin/python" -m ruff check .
step mypy "$VENV/bin/python" -m mypy

# The CPU-only install (requirements-cpu.txt: onnxruntime instead of onnxruntime-gpu, every other pin the same) in
# a second venv. Installing its 800 MB from scratch took 2-3 min on the loaded 2-core machine, so the venv starts
# as a hard-linked copy of the one above (no second download or unpack), loses the GPU wheel through pip (never
# both wheels in one venv: they overwrite each other's files), then pip installs requirements-cpu.txt (the CPU
# wheel; it must find every other pin already satisfied) and the project with --no-deps, as the README says.
# It must import the api and run one int8 recipe. 13-30 s here (the from-scratch install: 135-180 s).
cpu_only_install() {
CPU_VENV="$VENV-cpu"
rm -rf "$CPU_VENV"
python3 -m venv --without-pip "$CPU_VENV"
CPU_VENV=$(cd "$CPU_VENV" && pwd)
SITE_TEST=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
SITE_CPU=$("$CPU_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
cp -al "$SITE_TEST/." "$SITE_CPU/" 2>/dev/null || { rm -rf "$SITE_CPU"; mkdir -p "$SITE_CPU"; cp -a "$SITE_TEST/." "$SITE_CPU/"; }
"$CPU_VENV/bin/python" -m pip uninstall -q -y onnxruntime-gpu
"$CPU_VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-cpu.txt
"$CPU_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
CPU_TMP=$(mktemp -d)
(cd "$CPU_TMP" && ORTLAB_HOME="$CPU_TMP/home" "$CPU_VENV/bin/python" - <<'PY'
import importlib.metadata as md
import subprocess
import sys

import ortlab.api  # noqa: F401  (first: it sets ORT_DISABLE_TELEMETRY before ONNX Runtime loads)
import onnxruntime

names = {d.metadata["Name"] for d in md.distributions()}
assert "onnxruntime-gpu" not in names and md.version("onnxruntime") == "1.31.1", sorted(n for n in names if "onnx" in n)
assert "CUDAExecutionProvider" not in onnxruntime.get_available_providers(), onnxruntime.get_available_providers()
run = subprocess.run([sys.executable, "-m", "ortlab", "optimize", "digits_cnn", "x.onnx", "--precision", "int8"],
                     capture_output=True, text=True, timeout=300)
assert run.returncode == 0 and "CPUExecutionProvider" in run.stdout, run.stdout + run.stderr
print("CPU-only install (requirements-cpu.txt): ortlab.api imports,", run.stdout.splitlines()[0])
PY
)
rm -rf "$CPU_TMP" "$CPU_VENV"
}
step "CPU-only install" cpu_only_install

# The whole suite; tests/cluster/ is skipped here (it says why) and runs in the step below.
step pytest "$VENV/bin/python" -m pytest "$@"

# The cluster tests (tests/cluster/) start a real two-node Ray cluster on 127.0.0.1 (the extra ortlab[ray], in
# requirements-dev.txt). Ray's driver probes a route with a UDP connect() to 8.8.8.8:53, so they run in a network
# namespace of their own with only the loopback interface: nothing can leave the machine, and every connect stays
# on 127.0.0.1 (their strace test checks it). ORTLAB_CLUSTER_TESTS=1 makes them fail, not skip, when that
# namespace or Ray is missing. `unshare -n` needs root (CI runs as root); otherwise a user namespace (-r).
# With pytest arguments (a narrowed run) they are left out unless ORTLAB_CLUSTER_TESTS=1 is set.
if [ "$#" -eq 0 ] || [ "${ORTLAB_CLUSTER_TESTS:-}" = "1" ]; then
  UNSHARE="unshare -n"
  if [ "$(id -u)" != "0" ]; then UNSHARE="unshare -rn"; fi
  step "cluster tests" $UNSHARE env ORTLAB_CLUSTER_TESTS=1 sh -c \
    'ip link set lo up && exec "$0" -m pytest tests/cluster -p no:cacheprovider' "$VENV/bin/python"
fi

if [ "$STATUS" -ne 0 ]; then
  echo "scripts/test.sh: failed: ${FAILED[*]} (exit $STATUS; total $SECONDS s)" >&2
else
  echo "scripts/test.sh: every step passed in $SECONDS s" >&2
fi
exit "$STATUS"
