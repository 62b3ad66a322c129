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
#
# PK_AB_ENVOY=1 runs each variant through Envoy 1.40 instead (benches/
# configs/envoy.yaml, route /k1/users): Envoy, the kernel and the agents on
# core 0, pk-http on core 1 at PK_AB_RATE req/s (default 1000) over 8
# connections; latency is pk-http's, per request. Besides KERNEL_BIN a
# variant may be `none` (E0: the same Envoy without the ext_proc filter) or
# `floor1` / `floor2` (pk-floor, with streams of one or two
# messages: EF and EF2, the floors of K0 and K1 through Envoy). The table then
# has Envoy's CPU per request too, and the steal of core 0 in each run (time
# the hypervisor took the core away): a stall of the shared core, not the
# code, is what puts most requests into the p99 at this rate.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RUNS=${1:?usage: bash benches/ab.sh RUNS NAME=KERNEL_BIN[:AGENT_BIN] ...}
shift
[ $# -ge 1 ] || { echo "give at least one NAME=KERNEL_BIN" >&2; exit 2; }
DUR=${PK_BENCH_DURATION:-5}
RATE=${PK_AB_RATE:-0}
AGENT_CPU=${PK_AB_AGENT_CPU:-1}
ENVOY_AB=${PK_AB_ENVOY:-0}
if [ "$ENVOY_AB" = 1 ]; then
  [ "$RATE" = 0 ] && RATE=1000
  AGENT_CPU=${PK_AB_AGENT_CPU:-0}
  ENVOY=$(venv_envoy)
  [ -x "$ENVOY" ] || { echo "Envoy not found: run make setup" >&2; exit 2; }
fi
if [ "$RATE" = 0 ]; then LOAD=(--concurrency 32); else LOAD=(--rate "$RATE" --concurrency 1024); fi
# This script and the helpers it starts (the reads of /proc at the start and
# end of each measured window) run on core 1 with the load generator;
# everything measured is started with its own taskset. The helpers used to
# be python3, unpinned: their start-up at the start of each window, on core
# 0 or in pk-http's way on core 1, put a burst of slow requests into the
# p99 of the Envoy runs.
taskset -cp 1 $$ >/dev/null
if [ "$(id -u)" = 0 ]; then NICE=${PK_BENCH_NICE:--10}; else NICE=${PK_BENCH_NICE:-0}; fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/pk-ab.XXXXXX")
trap cleanup EXIT

CLK_TCK=$(getconf CLK_TCK)
cpu_ctx() { # cpu_ctx PID: "CPU_µs context_switches" of the process (all threads)
  # awk, not a python3: it runs at the start and end of each measured window.
  awk -v t="$CLK_TCK" '
    FNR == 1 && FILENAME ~ /stat$/ { s = $0; sub(/^.*\) /, "", s); split(s, f, " "); cpu = (f[12] + f[13]) * 1000000 / t; next }
    /ctxt_switches/ { cs += $2 }
    END { printf "%d %d\n", cpu, cs }' "/proc/$1/stat" /proc/"$1"/task/*/status 2>/dev/null
}

envoy_run() { # envoy_run NAME RUN_DIR KERNEL_PID AGENT_PID: Envoy + pk-http
  local name=$1 run=$2 k=$3 agent_a=$4 port admin up filter e before=() after=() p pids
  read -r port admin up <<<"$(free_ports 3)"
  [ -n "$k" ] && filter=with || filter=without # no kernel or floor: E0
  envoy_config "$run/envoy.yaml" "$port" "$admin" "$up" "$run/kernel.sock" "$filter"
  taskset -c 0 nice -n "$NICE" "$ENVOY" -c "$run/envoy.yaml" --concurrency 1 --disable-hot-restart -l warning \
    --base-id "$port" >"$run/envoy.log" 2>&1 &
  e=$!
  PIDS+=("$e")
  wait_for 10 envoy_live "$admin" || { echo "envoy did not start: $run/envoy.log" >&2; return 1; }
  pids="$e ${k:-} ${agent_a:-}"
  taskset -c 1 nice -n "$NICE" "$BIN/pk-http" --rate "$RATE" --connections 8 --duration "$DUR" --warmup 2 \
    --log-file "$run/http.log" "http://127.0.0.1:$port/k1/users" >"$run/http.txt" 2>>"$OUT/loadgen.err" &
  local lg=$!
  sleep 2
  local s0 s1
  s0=$(steal_us 0)
  for p in $pids; do before+=("$(cpu_ctx "$p")"); done
  sleep "$DUR"
  for p in $pids; do after+=("$(cpu_ctx "$p")"); done
  s1=$(steal_us 0)
  wait "$lg" || true
  python3 - "$name" "$run/http.log" "$DUR" "$RATE" "${before[*]}" "${after[*]}" "$pids" "$s0 $s1" <<'EOF' >>"$OUT/results.jsonl"
import json, sys
name, log, dur, rate, before, after, pids, steal = sys.argv[1:9]
reqs = float(rate) * float(dur)
rows = [l.split() for l in open(log) if l.strip()]
lat = sorted(int(r[2]) for r in rows)
ok = sum(1 for r in rows if r[1].startswith("2"))
b, a = list(map(int, before.split())), list(map(int, after.split()))
roles = ["envoy", "kernel", "agent-a"][: len(b) // 2]
per = {r: {"cpu_us_per_stream": (a[2 * i] - b[2 * i]) / reqs,
           "context_switches_per_stream": (a[2 * i + 1] - b[2 * i + 1]) / reqs} for i, r in enumerate(roles)}
pick = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))] if lat else None
row = {"label": name, "streams_per_s": len(lat) / float(dur), "p50_us": pick(0.5), "p99_us": pick(0.99),
       "failed": len(lat) - ok, "aux": {r: v for r, v in per.items() if r != "kernel"},
       "steal_ms": (int(steal.split()[1]) - int(steal.split()[0])) / 1000}
row.update(per.get("kernel", {"cpu_us_per_stream": None, "context_switches_per_stream": None}))
print(json.dumps(row))
EOF
}

one_run() { # one_run NAME KERNEL AGENT
  local name=$1 kernel=$2 agent=$3 run k
  run=$(mktemp -d "$OUT/run.XXXX")
  if [ "$ENVOY_AB" = 1 ] && [ "$kernel" = none ]; then
    envoy_run "$name" "$run" "" ""
    cleanup
    return
  fi
  if [ "$ENVOY_AB" = 1 ] && [[ "$kernel" == floor[12] ]]; then
    spawn_floor "$run" "$BIN/pk-floor" "${kernel#floor}" taskset -c 0 nice -n "$NICE"
    envoy_run "$name" "$run" "${PIDS[-1]}" ""
    cleanup
    return
  fi
  sed "s#@RUN@#$run#g" "$ROOT/benches/configs/kernel.yaml" >"$run/kernel.yaml"
  spawn_agents "$run" "$agent" taskset -c "$AGENT_CPU" nice -n "$NICE"
  local agent_a=${PIDS[0]}
  taskset -c 0 nice -n "$NICE" "$kernel" --config="$run/kernel.yaml" >"$run/kernel.log" 2>&1 &
  k=$!
  PIDS+=("$k")
  wait_kernel "$run" "$run/kernel.log" 10
  sleep 0.5
  if [ "$ENVOY_AB" = 1 ]; then
    envoy_run "$name" "$run" "$k" "$agent_a"
    cleanup
    return
  fi
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
envoy = any("envoy" in r.get("aux", {}) for r in rows)
print("| variant | kernel CPU µs/stream (median) | streams/s (median) | p50 / p99 ms (median) | kernel context switches/stream (median) | agent-a CPU µs/stream (median) | agent-a context switches/stream (median) |"
      + (" Envoy CPU µs/request (median) | Envoy context switches/request (median) | failed requests | steal on core 0, ms per run |" if envoy else "") + " runs: kernel µs/stream |")
print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---|" if envoy else "") + "---|")
def med(xs, fmt="%.1f"):
    xs = [x for x in xs if x is not None]
    return fmt % statistics.median(xs) if xs else "-"
for n in names:
    rs = [r for r in rows if r["label"] == n]
    if not rs:
        continue
    cpu = [None if r["cpu_us_per_stream"] is None else round(r["cpu_us_per_stream"], 1) for r in rs]
    agent = [r.get("aux", {}).get("agent-a", {}) for r in rs]
    ev = [r.get("aux", {}).get("envoy", {}) for r in rs]
    extra = ""
    if envoy:
        extra = " %s | %s | %d | %s |" % (med([e.get("cpu_us_per_stream") for e in ev]),
                                          med([e.get("context_switches_per_stream") for e in ev], "%.2f"),
                                          sum(r.get("failed", 0) for r in rs),
                                          ", ".join("%.0f" % r.get("steal_ms", 0) for r in rs))
    print("| %s | %s | %s | %s / %s | %s | %s | %s |%s %s |" % (
        n, med(cpu), med([r["streams_per_s"] for r in rs], "%.0f"),
        med([r["p50_us"] / 1000 for r in rs], "%.2f"), med([r["p99_us"] / 1000 for r in rs], "%.2f"),
        med([r.get("context_switches_per_stream") for r in rs], "%.2f"),
        med([a.get("cpu_us_per_stream") for a in agent]),
        med([a.get("context_switches_per_stream") for a in agent], "%.2f"),
        extra, ", ".join("-" if c is None else str(c) for c in cpu)))
EOF
echo "[ab] raw results: $OUT/results.jsonl" >&2
