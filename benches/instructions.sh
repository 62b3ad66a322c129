#!/usr/bin/env bash
# Instructions per stream (valgrind callgrind, user space) of the floor and
# of the kernel, per scenario: a measure that does not move with the load of
# a shared machine, where CPU time does. Each target runs under callgrind
# (agents natively) and gets pk-loadgen streams at a fixed rate for a short
# and a long run; instructions per stream = (Ir_long - Ir_short) /
# (streams_long - streams_short), which removes start-up, discovery and
# shutdown. The target's kernel-mode time (syscalls, wake-ups) is not
# counted: this is the code's own cost, the part the kernel controls.
#
# Scenario A1 counts the other side of K1's calls: the no-op agent
# (policy-test-agent, agent-a) under callgrind, the kernel native; per K1
# stream, that is per two agent calls.
#
# Usage: bash benches/instructions.sh [SCENARIO...]   (default: F K0 K1 K3 A1)
#   PK_IR_RATE (default 200 streams/s), PK_IR_SHORT / PK_IR_LONG (2 / 6 s),
#   PK_IR_KERNEL (default target/release/policy-kernel).
# Needs valgrind (apt-get install valgrind) and release binaries
# (cargo build --release --workspace). Prints a markdown table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RATE=${PK_IR_RATE:-200}
SHORT=${PK_IR_SHORT:-2}
LONG=${PK_IR_LONG:-6}
KERNEL=${PK_IR_KERNEL:-$BIN/policy-kernel}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 2; }
for b in "$KERNEL" "$BIN/pk-floor" "$BIN/pk-loadgen" "$BIN/policy-test-agent"; do
  [ -x "$b" ] || { echo "missing $b: cargo build --release --workspace" >&2; exit 2; }
done
[ $# -gt 0 ] || set -- F K0 K1 K3 A1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/pk-ir.XXXXXX")
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
trap cleanup EXIT

route_of() {
  case $1 in
    F | K1 | A1) echo k1 ;;
    K0) echo k0-unknown ;;
    K3) echo k3 ;;
    *) echo "unknown scenario $1 (F K0 K1 K3 A1)" >&2; exit 2 ;;
  esac
}

# measure SCENARIO SECONDS: prints "STREAMS IR"
measure() {
  local label=$1 secs=$2 run target
  run=$(mktemp -d "$OUT/$label.XXXX")
  if [ "$label" = F ]; then
    valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" "$BIN/pk-floor" --socket "$run/kernel.sock" \
      >"$run/target.log" 2>&1 &
    target=$!
    PIDS+=("$target")
    wait_for 60 test -S "$run/kernel.sock" || { echo "pk-floor did not start under valgrind" >&2; return 1; }
  elif [ "$label" = A1 ]; then
    # All three agents under callgrind (agent-a is the one K1 calls), the
    # kernel native.
    sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
    local first=${#PIDS[@]}
    spawn_agents "$run" "$BIN/policy-test-agent" valgrind --tool=callgrind --callgrind-out-file="$run/agent.%p.cg"
    target=${PIDS[$first]}
    "$KERNEL" --config="$run/kernel.yaml" >"$run/kernel.log" 2>&1 &
    PIDS+=($!)
    wait_kernel "$run" "$run/kernel.log" 60
  else
    sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
    spawn_agents "$run" "$BIN/policy-test-agent"
    valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" "$KERNEL" --config="$run/kernel.yaml" \
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

echo "| scenario | instructions per stream | x F | streams (short / long run) |"
echo "|---|---:|---:|---|"
F_IR=""
for s in "$@"; do
  route_of "$s" >/dev/null
  echo "[ir] $s: ${SHORT} s and ${LONG} s at $RATE streams/s under callgrind" >&2
  read -r n1 ir1 <<<"$(measure "$s" "$SHORT")"
  read -r n2 ir2 <<<"$(measure "$s" "$LONG")"
  per=$(( (ir2 - ir1) / (n2 - n1) ))
  [ "$s" = F ] && F_IR=$per
  x="-"
  [ -n "$F_IR" ] && x=$(python3 -c "print('%.2f' % ($per / $F_IR))")
  echo "| $s | $per | $x | $n1 / $n2 |"
done
rm -rf "$OUT"
