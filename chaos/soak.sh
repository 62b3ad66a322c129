#!/usr/bin/env bash
# make soak: SOAK_MINUTES (default 30) at 100 rps through Envoy, a SIGHUP reload
# every SOAK_RELOAD_S (60) s, an agent SIGKILL + restart every SOAK_RESTART_S
# (300) s; the kernel's RSS and open fds sampled every 10 s into
# target/chaos/soak.csv and plotted into chaos/soak.png (matplotlib, installed
# into the project venv when missing). Not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/chaos
mkdir -p "$out/results"
minutes=${SOAK_MINUTES:-30}
profile=()
[ "${CHAOS_PROFILE:-release}" = release ] && profile=(--release)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cargo test "${profile[@]}" --test reliability_soak --no-run
set +e
SOAK_MINUTES=$minutes SOAK_CSV="$PWD/$out/soak.csv" CHAOS_RESULTS="$PWD/$out/results" \
  timeout $(( minutes * 60 + 600 )) \
  cargo test "${profile[@]}" --test reliability_soak soak -- --ignored --nocapture 2>&1 | tee "$out/soak.log"
rc=${PIPESTATUS[0]}
set -e
py=.venv/bin/python
[ -x "$py" ] || { python3 -m venv .venv; }
"$py" -c 'import matplotlib' 2>/dev/null || .venv/bin/pip install --quiet --disable-pip-version-check matplotlib
"$py" chaos/plot_soak.py "$out/soak.csv" chaos/soak.png "soak: ${minutes} min, $(date -u +%Y-%m-%d)"
python3 chaos/summarize.py --command "SOAK_MINUTES=$minutes SOAK_RELOAD_S=${SOAK_RELOAD_S:-60} SOAK_RESTART_S=${SOAK_RESTART_S:-300} make soak" --started "$started" --only 8_soak "$out/results" > "$out/soak-summary.md"
echo "plot: chaos/soak.png  summary: $out/soak-summary.md"
exit "$rc"
