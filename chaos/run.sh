#!/usr/bin/env bash
# make chaos: the full versions of the reliability suite (tests/reliability*.rs,
# then the upgrade and restart tests of tests/upgrade.rs: upgrades under load,
# a generation SIGKILLed, two kernels behind Envoy) under CHAOS_FULL=1,
# release build, one test at a time, bounded in time.
# Traffic goes to loopback only. Prints every figure ("[chaos] ..." lines) and
# writes:
#   target/chaos/chaos.log           the whole output
#   target/chaos/results/<test>.json figures and checks of each test
#   target/chaos/summary.md          the table for RELIABILITY.md
# The kernel-SIGKILL test runs the kernel under supervisord
# (chaos/supervisord-kernel.conf); supervisor is installed into .venv when
# missing (as `make run` does).
# Knobs: CHAOS_PROFILE=debug (default release), CHAOS_TIMEOUT=seconds (1800),
#        CHAOS_STRICT=1 (known issues fail the run), CHAOS_FILTER=name,
#        CHAOS_SUPERVISORD=0 (the harness restarts the kernel itself),
#        CHAOS_SUITES="reliability reliability_overload reliability_limits
#        upgrade" (the test files to run, e.g. only
#        CHAOS_SUITES=upgrade).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/chaos
mkdir -p "$out/results"
[ -n "${CHAOS_FILTER:-}" ] || rm -f "$out"/results/[0-7]_*.json "$out"/results/9_*.json "$out"/results/1[0-2]_*.json
suites=(${CHAOS_SUITES:-reliability reliability_overload reliability_limits upgrade})
tests=()
for s in "${suites[@]}"; do tests+=(--test "$s"); done
profile=()
[ "${CHAOS_PROFILE:-release}" = release ] && profile=(--release)
export CHAOS_SUPERVISORD=${CHAOS_SUPERVISORD:-1}
if [ "$CHAOS_SUPERVISORD" = 1 ] && [ ! -x .venv/bin/supervisord ]; then
  [ -x .venv/bin/pip ] || python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check supervisor
fi
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cargo test "${profile[@]}" "${tests[@]}" --no-run
set +e
: > "$out/chaos.log"
rc=0
deadline=$(( $(date +%s) + ${CHAOS_TIMEOUT:-1800} ))
for s in "${suites[@]}"; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 0 ] || { echo "CHAOS_TIMEOUT reached before $s" | tee -a "$out/chaos.log"; rc=124; break; }
  CHAOS_FULL=1 CHAOS_RESULTS="$PWD/$out/results" timeout "$left" \
    cargo test "${profile[@]}" --test "$s" -- --test-threads=1 --nocapture ${CHAOS_FILTER:-} 2>&1 | tee -a "$out/chaos.log"
  r=${PIPESTATUS[0]}
  [ "$r" = 0 ] || rc=$r
done
set -e
python3 chaos/summarize.py --command "make chaos" --started "$started" "$out/results" > "$out/summary.md"
echo "summary: $out/summary.md"
exit "$rc"
