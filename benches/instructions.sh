#!/usr/bin/env bash
# Instructions per stream (valgrind callgrind, user space) of the floor and
# of the kernel, per scenario: a measure that does not move with the load of
# a shared machine, where CPU time does. Each target runs under callgrind
# (agents natively) and gets pk-loadgen streams at a fixed rate for a short
# and a long run; instructions per stream = (Ir_long - Ir_short) /
# (streams_long - streams_short), which removes start-up, discovery and
# shutdown. The target's kernel-mode time (syscalls, wake-ups) is not
# counted: this is the code's own cost, the part the kernel controls.
# The target runs on one CPU (taskset -c 0), as in hop.sh and run.sh: the
# runtime a process builds depends on the CPUs it may use (one CPU: a
# current-thread runtime, see net/src/runtime.rs), so an unpinned target
# would count a multi-thread runtime the measured set-ups never run.
#
# Scenario A1 counts the other side of K1's calls: the no-op agent
# (policy-test-agent, agent-a) under callgrind, the kernel native; per K1
# stream, that is per two agent calls.
#
# Scenarios E0, EF2 and EK1 count Envoy's side instead: Envoy 1.40 under
# callgrind (benches/configs/envoy.yaml, one worker), everything else native,
# pk-http at PK_IR_ENVOY_RATE (default 100) req/s to /k1/users, instructions
# per request: E0 without the ext_proc filter, EF2 with ext_proc to pk-floor
# (two messages per stream, nothing else), EK1 with ext_proc to the kernel
# and its no-op agent (K1). EF2 - E0 is what two ext_proc messages cost Envoy;
# EK1 - EF2 what the kernel's answers cost it beyond that. Not run by
# default (about 80 s each; Envoy needs `make setup`).
#
# Scenario K1x is hop.sh's K1, the shipped transport: one request policy
# (addHeader) on the Rust SDK's example-agent, which serves the call stream
# (policy-test-agent, the agent of K1 and K3, serves unary calls only).
#
# Scenario A1x is the other side of K1x: example-agent under callgrind, the
# kernel native; per K1x stream, that is per call on the call stream.
#
# Scenario K1c is a route whose one request policy declares its outcome
# cacheable (benches/configs/kernel.yaml): every stream after the first is
# answered from the decision cache.
#
# Usage: bash benches/instructions.sh [SCENARIO...]   (default: F K0 K1 K3 A1)
#   PK_IR_RATE (default 200 streams/s), PK_IR_SHORT / PK_IR_LONG (2 / 6 s),
#   PK_IR_KERNEL (default target/release/policy-kernel).
# Needs valgrind (apt-get install valgrind) and release binaries
# (cargo build --release --workspace). Prints a markdown table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RATE=${PK_IR_RATE:-200}
SHORT=${PK_IR_SHORT:-2}
LONG=${PK_IR_LONG:-6}
KERNEL=${PK_IR_KERNEL:-$BIN/policy-kernel}
ENVOY_RATE=${PK_IR_ENVOY_RATE:-100}
ENVOY=$(venv_envoy)
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 2; }
for b in "$KERNEL" "$BIN/pk-floor" "$BIN/pk-loadgen" "$BIN/pk-http" "$BIN/policy-test-agent" "$BIN/example-agent"; do
  [ -x "$b" ] || { echo "missing $b: cargo build --release --workspace" >&2; exit 2; }
done
[ $# -gt 0 ] || set -- F K0 K1 K3 A1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/pk-ir.XXXXXX")
# The measured target, on one CPU (see above).
CALLGRIND=(taskset -c 0 valgrind --tool=callgrind)
trap cleanup EXIT

route_of() {
  case $1 in
    F | K1 | A1 | E0 | EF2 | EK1) echo k1 ;;
    K0) echo k0-unknown ;;
    K3) echo k3 ;;
    K1c) echo kc ;;
    K1x | A1x) echo kx ;;
    *) echo "unknown scenario $1 (F K0 K1 K3 K1c K1x A1 A1x E0 EF2 EK1)" >&2; exit 2 ;;
  esac
}

# start_stack RUN_DIR SECONDS [AGENT_WRAPPER...]: the scenarios' kernel
# config in RUN_DIR, the three no-op agents (under AGENT_WRAPPER, if any) and
# the kernel, native; returns once the kernel has discovered the agents
# (waiting at most SECONDS).
start_stack() {
  local run=$1 secs=$2
  shift 2
  sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
  spawn_agents "$run" "$BIN/policy-test-agent" "$@"
  "$KERNEL" --config="$run/kernel.yaml" >"$run/kernel.log" 2>&1 &
  PIDS+=($!)
  wait_kernel "$run" "$run/kernel.log" "$secs"
}

# measure_envoy SCENARIO SECONDS: Envoy under callgrind; prints "REQUESTS IR"
measure_envoy() {
  local label=$1 secs=$2 run filter=with port admin up e
  run=$(mktemp -d "$OUT/$label.XXXX")
  case $label in
    E0) filter=without ;;
    EF2) spawn_floor "$run" "$BIN/pk-floor" 2 ;;
    EK1) start_stack "$run" 20 ;;
  esac
  read -r port admin up <<<"$(free_ports 3)"
  envoy_config "$run/envoy.yaml" "$port" "$admin" "$up" "$run/kernel.sock" "$filter"
  valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" "$ENVOY" -c "$run/envoy.yaml" --concurrency 1 \
    --disable-hot-restart -l warning --base-id "$port" >"$run/envoy.log" 2>&1 &
  e=$!
  PIDS+=("$e")
  wait_for 120 envoy_live "$admin" || { echo "Envoy did not start under valgrind: $run/envoy.log" >&2; return 1; }
  # Warm up (connections, first-use paths), then the measured requests.
  "$BIN/pk-http" --rate 50 --connections 8 --duration 1 --warmup 0 "http://127.0.0.1:$port/k1/users" \
    >/dev/null 2>"$run/warm.err" || true
  "$BIN/pk-http" --rate "$ENVOY_RATE" --connections 8 --duration "$secs" --warmup 0 --log-file "$run/http.log" \
    "http://127.0.0.1:$port/k1/users" >"$run/http.txt" 2>"$run/http.err" || true
  sleep 1
  kill -INT "$e"
  wait "$e" 2>/dev/null || true
  cleanup
  python3 - "$run/http.log" "$run/cg.out" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
bad = sum(1 for r in rows if r[1] != "200")
if bad:
    sys.exit("%d requests failed" % bad)
ir = next(int(l.split()[1]) for l in open(sys.argv[2]) if l.startswith("summary:"))
print(len(rows), ir)
EOF
}

# with_example_agent RUN_DIR [WRAPPER...]: starts example-agent (under
# WRAPPER, if any) on RUN_DIR/example.sock and adds it, and route kx
# (addHeader on it), to RUN_DIR/kernel.yaml.
with_example_agent() {
  local run=$1
  shift
  "$@" "$BIN/example-agent" --socket "$run/example.sock" >"$run/example.log" 2>&1 &
  PIDS+=($!)
  wait_for 60 test -S "$run/example.sock" || { echo "example-agent did not start: $run/example.log" >&2; return 1; }
  sed -i -e "/^  agents:\$/a\\    - name: example\\n      socket_path: \"$run/example.sock\"" \
    -e '/^  route_policies:$/a\    - route_name: kx\n      request_policy_chain:\n        - policy: addHeader\n          agent: example\n          params: {name: x-hop, value: "1"}' \
    "$run/kernel.yaml"
}

# measure SCENARIO SECONDS: prints "STREAMS IR"
measure() {
  local label=$1 secs=$2 run target
  run=$(mktemp -d "$OUT/$label.XXXX")
  if [ "$label" = F ]; then
    "${CALLGRIND[@]}" --callgrind-out-file="$run/cg.out" "$BIN/pk-floor" --socket "$run/kernel.sock" \
      >"$run/target.log" 2>&1 &
    target=$!
    PIDS+=("$target")
    wait_for 60 test -S "$run/kernel.sock" || { echo "pk-floor did not start under valgrind" >&2; return 1; }
  elif [ "$label" = A1 ]; then
    # All three agents under callgrind (agent-a is the one K1 calls), the
    # kernel native.
    local first=${#PIDS[@]}
    start_stack "$run" 60 "${CALLGRIND[@]}" --callgrind-out-file="$run/agent.%p.cg"
    target=${PIDS[$first]}
  elif [ "$label" = A1x ]; then
    # example-agent under callgrind, the kernel native.
    sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
    spawn_agents "$run" "$BIN/policy-test-agent"
    with_example_agent "$run" "${CALLGRIND[@]}" --callgrind-out-file="$run/cg.out"
    target=${PIDS[${#PIDS[@]} - 1]}
    "$KERNEL" --config="$run/kernel.yaml" >"$run/kernel.log" 2>&1 &
    PIDS+=($!)
    wait_kernel "$run" "$run/kernel.log" 60
  else
    sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
    spawn_agents "$run" "$BIN/policy-test-agent"
    [ "$label" = K1x ] && with_example_agent "$run"
    "${CALLGRIND[@]}" --callgrind-out-file="$run/cg.out" "$KERNEL" --config="$run/kernel.yaml" \
      >"$run/target.log" 2>&1 &
    target=$!
    PIDS+=("$target")
    wait_kernel "$run" "$run/target.log" 60
  fi
  sleep 1
  "$BIN/pk-loadgen" --target "unix:$run/kernel.sock" --route "$(route_of "$label")" --rate "$RATE" \
    --duration "$secs" --warmup 0 >"$run/loadgen.json" 2>"$run/loadgen.err"
  sleep 0.5
  kill "$target"
  wait "$target" 2>/dev/null || true
  cleanup
  [ "$label" = A1 ] && mv "$run/agent.$target.cg" "$run/cg.out"
  python3 - "$run/loadgen.json" "$run/cg.out" <<'EOF'
import json, sys
row = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
if row["errors"]:
    sys.exit("pk-loadgen saw %d errors" % row["errors"])
ir = next(int(l.split()[1]) for l in open(sys.argv[2]) if l.startswith("summary:"))
print(row["streams"], ir)
EOF
}

echo "| scenario | instructions per stream (E*: Envoy's, per request) | x F (E*: x E0) | streams (short / long run) |"
echo "|---|---:|---:|---|"
F_IR="" E0_IR=""
for s in "$@"; do
  route_of "$s" >/dev/null
  if [[ "$s" == E* ]]; then
    [ -x "$ENVOY" ] || { echo "Envoy not found: make setup" >&2; exit 2; }
    echo "[ir] $s: Envoy under callgrind, ${SHORT} s and ${LONG} s at $ENVOY_RATE req/s" >&2
    read -r n1 ir1 <<<"$(measure_envoy "$s" "$SHORT")"
    read -r n2 ir2 <<<"$(measure_envoy "$s" "$LONG")"
  else
    echo "[ir] $s: ${SHORT} s and ${LONG} s at $RATE streams/s under callgrind" >&2
    read -r n1 ir1 <<<"$(measure "$s" "$SHORT")"
    read -r n2 ir2 <<<"$(measure "$s" "$LONG")"
  fi
  per=$(( (ir2 - ir1) / (n2 - n1) ))
  [ "$s" = F ] && F_IR=$per
  [ "$s" = E0 ] && E0_IR=$per
  x="-" base=$F_IR
  [[ "$s" == E* ]] && base=$E0_IR
  [ -n "$base" ] && x=$(python3 -c "print('%.2f' % ($per / $base))")
  echo "| $s | $per | $x | $n1 / $n2 |"
done
rm -rf "$OUT"
