#!/usr/bin/env bash
# Builds a fresh virtual environment from the requirement files alone, then runs the linters and the whole
# suite in it, real-browser test included: a dependency missing from the requirement files fails here
# instead of hiding behind the machine's Python. Installs Debian's Chromium when it is missing.
# Extra arguments go to pytest (`bash scripts/test.sh -k quantize`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

VENV="${ORTLAB_TEST_VENV:-.venv-test}"
python3 -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
"$VENV/bin/python" -m ruff check .
"$VENV/bin/python" -m mypy
"$VENV/bin/python" -m pytest "$@"
