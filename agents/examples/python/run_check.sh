#!/usr/bin/env bash
# Installs grpcio + grpcio-tools in a virtualenv (once), then runs check.py,
# which generates the stubs from ../../../proto and drives agent.py.
# Usage: agents/examples/python/run_check.sh [VENV_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${here}/.venv}"
if [ ! -x "${venv}/bin/python" ]; then
    python3 -m venv "${venv}"
    "${venv}/bin/pip" install --quiet -r "${here}/requirements.txt"
fi
exec "${venv}/bin/python" "${here}/check.py"
