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
# PK_AB_RATE=N runs at N streams/s (paced) instead of the closed loop;
# PK_AB_AGENT_CPU=0 puts the agents on core 0 with the kernel (the layout of
# the fixed-rate runs of run.sh) instead of core 1. Besides CPU, the table
# gives context switches per stream (voluntary + involuntary, all threads):
# each is a sleep and a wake-up on the request path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RUNS=${1:?usage: bash benches/ab.sh RUNS NAME=KERNEL_BIN[:AGENT_BIN] ...}
shift
[ $# -ge 1 ] || { echo "give at least one NAME=KERNEL_BIN" >&2; exit 2; }
DUR=${PK_BENCH_DURATION:-5}
RATE=${PK_AB_RATE:-0}
AGENT_CPU=${PK_AB_AGENT_CPU:-1}
if [ "$RATE" = 0 ]; then LOAD=(--concurrency 32); else LOAD=(--rate "$RATE" --concurrency 1024); fi
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
    taskset -c "$AGENT_CPU" nice -n "$NICE" "$agent" --socket "$run/agent-$a.sock" \
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
  taskset -c 1 nice -n "$NICE" "$BIN/pk-loadgen" --target "unix:$run/kernel.sock" --route k1 "${LOAD[@]}" \
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
print("| variant | kernel CPU µs/stream (median) | streams/s (median) | p50 / p99 ms (median) | kernel context switches/stream (median) | agent-a CPU µs/stream (median) | agent-a context switches/stream (median) | runs: kernel µs/stream |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
def med(xs, fmt="%.1f"):
    xs = [x for x in xs if x is not None]
    return fmt % statistics.median(xs) if xs else "-"
for n in names:
    rs = [r for r in rows if r["label"] == n]
    if not rs:
        continue
    cpu = [round(r["cpu_us_per_stream"], 1) for r in rs]
    agent = [r.get("aux", {}).get("agent-a", {}) for r in rs]
    print("| %s | %s | %s | %s / %s | %s | %s | %s | %s |" % (
        n, med(cpu), med([r["streams_per_s"] for r in rs], "%.0f"),
        med([r["p50_us"] / 1000 for r in rs], "%.2f"), med([r["p99_us"] / 1000 for r in rs], "%.2f"),
        med([r.get("context_switches_per_stream") for r in rs], "%.2f"),
        med([a.get("cpu_us_per_stream") for a in agent]),
        med([a.get("context_switches_per_stream") for a in agent], "%.2f"),
        ", ".join(map(str, cpu))))
EOF
echo "[ab] raw results: $OUT/results.jsonl" >&2
