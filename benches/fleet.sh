#!/usr/bin/env bash
# Fleet mode (management.store.etcd): how fast a route change made through
# one kernel's management API is in force on every kernel of the fleet, and
# what 10,000 routes in the store cost one kernel.
#
#   bash benches/fleet.sh [BIN_DIR]     # default target/release
#
# A real 3-member etcd cluster on loopback (Debian's etcd-server, as
# tests/support/etcd.rs starts it: 50 ms heartbeats, 500 ms elections) and
# one shared example-agent (pathAllowList); the driver is benches/fleet.py.
#   1. Three kernels on one prefix. PK_FLEET_WRITES (100) sequential PUTs of
#      routes /b0, /b1, ... round-robin over the kernels' APIs, each at the
#      version the previous answer gave. Write-to-enforced: from just before
#      the PUT is sent to the last of the three kernels' "configuration store
#      change applied" log lines for that version; p50, p99 and max, and the
#      PUT's own round trip.
#   2. A fresh prefix holding PK_FLEET_ROUTES (10,000) route keys, written
#      straight into etcd (transactions of 100 puts through its JSON
#      gateway), then one kernel on it: start time (spawn until GET
#      /v1/config answers 200 with every route), VmRSS, and the round trip of
#      a PUT through its API (answered once applied: the cost of applying one
#      change), median of PK_FLEET_PUTS (5); the same for a kernel on a
#      prefix with no routes.
# Prints a markdown table (also to $RUN/fleet.md when RUN is set). The
# kernels' logs, etcd's and the per-write rows stay in /tmp/pk-fleet.* when
# the run fails or with PK_FLEET_KEEP=1. Skips (exit 0) when there is no
# etcd binary (/usr/bin/etcd, or ETCD_BIN): make test installs Debian's
# etcd-server.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${1:-$ROOT/target/release}
case "$BIN" in /*) ;; *) BIN=$PWD/$BIN ;; esac
WRITES=${PK_FLEET_WRITES:-100}
ROUTES=${PK_FLEET_ROUTES:-10000}
PUTS=${PK_FLEET_PUTS:-5}
ETCD=${ETCD_BIN:-/usr/bin/etcd}
OUT=${RUN:-}
if [ ! -x "$ETCD" ]; then
  echo "fleet: skipped ($ETCD not found: make test installs Debian's etcd-server, or set ETCD_BIN)" >&2
  exit 0
fi
for b in policy-kernel example-agent; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (cargo build --release -p policy-kernel -p reference-agents --bins)" >&2; exit 1; }
done
RUN=$(mktemp -d /tmp/pk-fleet.XXXXXX)
# The kernels are fleet.py's (it stops them); kernel.pids lists those still
# running, in case it was killed first.
PY_PID=""
fleet_cleanup() {
  local rc=$? p
  if [ -n "$PY_PID" ]; then kill "$PY_PID" 2>/dev/null || true; wait "$PY_PID" 2>/dev/null || true; fi
  if [ -f "$RUN/kernel.pids" ]; then
    while read -r p; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done <"$RUN/kernel.pids"
  fi
  cleanup
  if [ "$rc" = 0 ] && [ "${PK_FLEET_KEEP:-0}" = 0 ]; then
    rm -rf "$RUN"
  else
    rm -rf "$RUN"/etcd-m?/ # the logs stay
    echo "fleet: exit $rc; logs kept in $RUN" >&2
  fi
}
trap fleet_cleanup EXIT
trap 'exit 130' INT TERM
# fleet.py in the background and waited for, so that a signal ends the run
# at once (bash runs its traps only once a foreground child has exited).
driver() {
  local rc=0
  python3 "$ROOT/benches/fleet.py" "$@" &
  PY_PID=$!
  wait "$PY_PID" || rc=$?
  PY_PID=""
  return "$rc"
}

read -r C0 C1 C2 P0 P1 P2 <<<"$(free_ports 6)"
CLIENTS=("$C0" "$C1" "$C2") PEERS=("$P0" "$P1" "$P2")
INITIAL="m0=http://127.0.0.1:$P0,m1=http://127.0.0.1:$P1,m2=http://127.0.0.1:$P2"
for i in 0 1 2; do
  "$ETCD" --name "m$i" --data-dir "$RUN/etcd-m$i" \
    --listen-client-urls "http://127.0.0.1:${CLIENTS[$i]}" --advertise-client-urls "http://127.0.0.1:${CLIENTS[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${PEERS[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${PEERS[$i]}" \
    --initial-cluster "$INITIAL" --initial-cluster-state new --initial-cluster-token pk-bench-fleet \
    --heartbeat-interval 50 --election-timeout 500 --log-level warn >"$RUN/etcd-m$i.log" 2>&1 &
  PIDS+=($!)
done
ENDPOINTS="http://127.0.0.1:$C0,http://127.0.0.1:$C1,http://127.0.0.1:$C2"
"$BIN/example-agent" --socket "$RUN/ex.sock" >"$RUN/agent.log" 2>&1 &
PIDS+=($!)
driver health "http://127.0.0.1:$C0" "http://127.0.0.1:$C1" "http://127.0.0.1:$C2" \
  || { tail -20 "$RUN"/etcd-m*.log >&2; exit 1; }
wait_for 10 test -S "$RUN/ex.sock" || { echo "example-agent did not start: $(cat "$RUN/agent.log")" >&2; exit 1; }

ARGS=(--bin "$BIN" --run "$RUN" --endpoints "$ENDPOINTS" --agent "$RUN/ex.sock")
echo "fleet: $WRITES writes through 3 kernels" >&2
driver writes "${ARGS[@]}" --writes "$WRITES" >"$RUN/writes.json"
echo "fleet: one kernel on $ROUTES routes, and on 0" >&2
driver routes "${ARGS[@]}" --routes "$ROUTES" --puts "$PUTS" >"$RUN/routes.jsonl"
driver table "$RUN/writes.json" "$RUN/routes.jsonl" \
  --bin "${BIN#$ROOT/}" --load "$(cut -d' ' -f1-3 /proc/loadavg)" >"$RUN/fleet.md"
cat "$RUN/fleet.md"
[ -z "$OUT" ] || cp "$RUN/fleet.md" "$OUT/fleet.md"
