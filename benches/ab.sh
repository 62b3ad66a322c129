#!/usr/bin/env bash
# A/B comparison of kernel (and agent) binaries on the K1 closed loop, the
# figure behind the "K1 >= 10,000 streams/s on one core" target: the kernel
# alone on core 0, the no-op agents and pk-loadgen on core 1, 32 streams in
# flight, PK_BENCH_DURATION s (default 5) after a 2 s warm-up. The variants
# run interleaved, RUNS rounds, and the medians are printed, so that a noisy
# shared machine affects each variant alike.
#
# Usage: bash benches/ab.sh RUNS NAME=KERNEL_BIN[:AGENT_BIN] ...
#   e.g. git stash; cargo build --release; cp target/release/policy-kernel /tmp/before
#        git stash pop; cargo build --release
#        bash benches/ab.sh 4 before=/tmp/before after=target/release/policy-kernel
# AGENT_BIN defaults to target/release/policy-test-agent; pk-loadgen comes
# from target/release (cargo build --release --workspace).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RUNS=${1:?usage: bash benches/ab.sh RUNS NAME=KERNEL_BIN[:AGENT_BIN] ...}
shift
[ $# -ge 1 ] || { echo "give at least one NAME=KERNEL_BIN" >&2; exit 2; }
DUR=${PK_BENCH_DURATION:-5}
if [ "$(id -u)" = 0 ]; then NICE=${PK_BENCH_NICE:--10}; else NICE=${PK_BENCH_NICE:-0}; fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/pk-ab.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap cleanup EXIT

one_run() { # one_run NAME KERNEL AGENT
  local name=$1 kernel=$2 agent=$3 run a k i
  run=$(mktemp -d "$OUT/run.XXXX")
  sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
  for a in a b body; do
    taskset -c 1 nice -n "$NICE" "$agent" --socket "$run/agent-$a.sock" \
      --script "$ROOT/benches/configs/agent-$a.yaml" >"$run/agent-$a.log" 2>&1 &
    PIDS+=($!)
  done
  local agent_a=${PIDS[0]}
  for a in a b body; do
    for i in $(seq 200); do [ -S "$run/agent-$a.sock" ] && break; sleep 0.05; done
  done
  taskset -c 0 nice -n "$NICE" "$kernel" --config="$run/kernel.yaml" >"$run/kernel.log" 2>&1 &
  k=$!
  PIDS+=("$k")
  for i in $(seq 200); do
    [ -S "$run/kernel.sock" ] && [ "$(grep -c 'agent discovered' "$run/kernel.log")" -ge 3 ] && break
    sleep 0.05
  done
  sleep 0.5
  taskset -c 1 nice -n "$NICE" "$BIN/pk-loadgen" --target "unix:$run/kernel.sock" --route k1 --concurrency 32 \
    --duration "$DUR" --warmup 2 --pid "$k" --aux-pid "agent-a=$agent_a" --label "$name" \
    --json-out "$OUT/results.jsonl" >/dev/null 2>>"$OUT/loadgen.err"
  cleanup
}

for r in $(seq "$RUNS"); do
  for spec in "$@"; do
    name=${spec%%=*} bins=${spec#*=}
    kernel=${bins%%:*} agent=$BIN/policy-test-agent
    [[ "$bins" == *:* ]] && agent=${bins#*:}
    echo "[ab] round $r/$RUNS: $name" >&2
    one_run "$name" "$kernel" "$agent"
  done
done

python3 - "$OUT/results.jsonl" "$@" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
names = [s.split('=', 1)[0] for s in sys.argv[2:]]
print("| variant | kernel CPU µs/stream (median) | streams/s (median) | agent-a CPU µs/stream (median) | runs: kernel µs/stream |")
print("|---|---:|---:|---:|---|")
for n in names:
    rs = [r for r in rows if r["label"] == n]
    if not rs:
        continue
    cpu = [round(r["cpu_us_per_stream"], 1) for r in rs]
    rate = [r["streams_per_s"] for r in rs]
    agent = [r["aux"]["agent-a"]["cpu_us_per_stream"] for r in rs if "agent-a" in r.get("aux", {})]
    print("| %s | %.1f | %.0f | %s | %s |" % (n, statistics.median(cpu), statistics.median(rate),
          "%.1f" % statistics.median(agent) if agent else "-", ", ".join(map(str, cpu))))
EOF
echo "[ab] raw results: $OUT/results.jsonl" >&2
