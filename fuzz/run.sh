#!/usr/bin/env bash
# Coverage-guided fuzzing of the seven targets, in parallel, for
# FUZZ_SECONDS each (default 1800). Prints executions, corpus size and
# crashes per target; crash inputs land in fuzz/artifacts/<target>/.
# Usage: bash fuzz/run.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-${FUZZ_SECONDS:-1800}}
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo fuzz build -O || exit 1
cargo run --quiet --release --bin make_seeds
mkdir -p corpus/config_loader logs
cp ../config/*.yaml corpus/config_loader/
# JSON-RPC bodies and argument strings of the tool agent's tests.
mkdir -p corpus/mcp_jsonrpc corpus/tool_args
cp seeds/mcp_jsonrpc/* corpus/mcp_jsonrpc/
cp seeds/tool_args/* corpus/tool_args/
# Route bodies and a state file of the management API.
mkdir -p corpus/management_json
cp seeds/management_json/* corpus/management_json/
# Streamed tool-call events (one per line) of the planner's tests.
mkdir -p corpus/plan_assembler
cp seeds/plan_assembler/* corpus/plan_assembler/
# Every crash input ever fixed is replayed first (fuzz/regressions/<target>/).
for t in config_loader reply_to_mutation stream sse_framer mcp_jsonrpc tool_args management_json plan_assembler; do
  if [ -d "regressions/$t" ]; then
    cargo fuzz run -O "$t" "regressions/$t" -- -runs=0 > "logs/$t.regressions.log" 2>&1 \
      || { echo "regression input of $t fails again: see fuzz/logs/$t.regressions.log"; exit 1; }
  fi
done
targets=${FUZZ_TARGETS:-"config_loader reply_to_mutation stream sse_framer mcp_jsonrpc tool_args management_json plan_assembler"}
pids=()
for t in $targets; do
  mkdir -p "corpus/$t" "artifacts/$t"
  nice -n 10 cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" > "logs/$t.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
printf '%-18s %14s %8s %8s\n' target executions corpus crashes
for t in $targets; do
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "logs/$t.log" | awk '{print $2}')
  corpus=$(ls "corpus/$t" | wc -l)
  crashes=$(ls "artifacts/$t" 2>/dev/null | wc -l)
  printf '%-18s %14s %8s %8s\n' "$t" "${execs:-?}" "$corpus" "$crashes"
done
exit $status
