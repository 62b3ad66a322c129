#!/usr/bin/env bash
# Runs the README's "supervisord by hand" block exactly as written, checks the
# stack it starts with deploy/demo.sh, and stops it. Needs what `make run`
# built and installed; run by .ci/run after `make run` and `make stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
block=$(sed -n '/^<!-- by-hand:start/,/^<!-- by-hand:end/p' README.md | sed -n '/^```sh$/,/^```$/p' | sed '1d;$d')
[ -n "$block" ] || { echo "README.md has no by-hand block" >&2; exit 1; }
bash -euo pipefail -c "
trap '.venv/bin/supervisorctl -c supervisord.conf shutdown >/dev/null 2>&1 || true; make -s stop' EXIT
$block
bash deploy/demo.sh
"
echo "supervisord by hand: OK"
