#!/usr/bin/env bash
# MCP progress notifications through the governed route: what Envoy, the
# kernel and the streaming MCP response policies add to the time from the
# server sending a progress notification to the client receiving it,
# against the same server reached directly.
#
#   bash benches/mcp_progress.sh [BIN_DIR]     # default target/release
#
# The official TypeScript MCP SDK (tests/mcp/ts: server.mjs, client.mjs;
# protocol 2025-11-25, SSE replies) as server and client; Envoy 1.40 (1
# worker), the kernel and the real tool-agent. Route `gov`: request chain
# mcpToolAuthorization + mcpServerRequestGuard, response chain mcpToolFilter
# + mcpServerRequestGuard (the reply streams event by event). Each round runs
# one session direct (D) and one through Envoy (G), alternating, each a
# `progress` call of PK_MCP_COUNT (200) notifications PK_MCP_INTERVAL_MS (5)
# apart; every notification carries its send time (performance clock of the
# same host) and the client records its receipt. Prints a markdown table of
# p50/p99 per route over PK_MCP_ROUNDS (5) rounds and the added p50/p99 (also
# to $RUN/mcp_progress.md when RUN is set). Skips (exit 0) when node or the
# npm packages are missing: `make bench` and `make test` install them
# (npm ci in tests/mcp/ts).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${1:-$ROOT/target/release}
COUNT=${PK_MCP_COUNT:-200}
INTERVAL=${PK_MCP_INTERVAL_MS:-5}
ROUNDS=${PK_MCP_ROUNDS:-5}
TS=$ROOT/tests/mcp/ts
OUT=${RUN:-}
if ! command -v node >/dev/null || [ ! -d "$TS/node_modules/@modelcontextprotocol/sdk" ]; then
  echo "mcp_progress: skipped (no node or no $TS/node_modules: make bench or make test installs them)" >&2
  exit 0
fi
RUN=$(mktemp -d /tmp/pk-mcp.XXXXXX)
trap 'cleanup; rm -rf "$RUN"' EXIT
ENVOY=$(venv_envoy)
[ -n "$ENVOY" ] || { echo "no Envoy: run make setup" >&2; exit 1; }
for b in policy-kernel tool-agent; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (cargo build --release -p policy-kernel -p reference-agents --bins)" >&2; exit 1; }
done
read -r P_ENVOY P_ADMIN P_METRICS <<<"$(free_ports 3)"

(cd "$TS" && exec node server.mjs --port-file "$RUN/server.port") >"$RUN/server.log" 2>&1 &
PIDS+=($!)
"$BIN/tool-agent" --socket "$RUN/tool.sock" >"$RUN/tool.log" 2>&1 &
PIDS+=($!)
wait_for 20 test -s "$RUN/server.port"
wait_for 10 test -S "$RUN/tool.sock"
P_UP=$(cat "$RUN/server.port")
RULES='[{"name": "all", "effect": "allow", "methods": ["*"]}]'
cat >"$RUN/kernel.yaml" <<EOF
policy_kernel:
  server: {port: 0, socket_path: "$RUN/kernel.sock"}
  agents:
    - {name: tool, socket_path: "$RUN/tool.sock", health_check_interval_ms: 200}
  route_policies:
    - route_name: gov
      request_policy_chain:
        - {policy: mcpToolAuthorization, params: {rules: '$RULES'}}
        - {policy: mcpServerRequestGuard, params: {rules: '$RULES'}}
      response_policy_chain:
        - {policy: mcpToolFilter, params: {rules: '$RULES'}}
        - {policy: mcpServerRequestGuard, params: {rules: '$RULES'}}
  observability: {metrics_port: $P_METRICS, log_level: warn}
EOF
"$BIN/policy-kernel" --config="$RUN/kernel.yaml" >"$RUN/kernel.log" 2>&1 &
PIDS+=($!)
wait_for 20 test -S "$RUN/kernel.sock"
wait_for 20 bash -c "curl -fsS http://127.0.0.1:$P_METRICS/config | grep -q '\"healthy\":true'"
ROUTES='              - name: gov
                match: {prefix: "/gov"}
                route: {cluster: upstream, timeout: 0s, prefix_rewrite: "/mcp"}'
streaming_envoy_config "$RUN/envoy.yaml" "$P_ENVOY" "$P_ADMIN" "$RUN/kernel.sock" "$P_UP" "$ROUTES"
"$ENVOY" -c "$RUN/envoy.yaml" --concurrency 1 --disable-hot-restart -l warning >"$RUN/envoy.log" 2>&1 &
PIDS+=($!)
wait_for 20 curl -fsS "http://127.0.0.1:$P_ADMIN/ready"

STEPS="[{\"op\":\"progress\",\"count\":$COUNT,\"interval_ms\":$INTERVAL}]"
session() { # session LABEL URL: one line {"label":..,"delays":[..]}
  (cd "$TS" && node client.mjs "$2" '{}' "$STEPS") | python3 -c '
import json, sys
d = json.loads(sys.stdin.readline())
if "delays" not in d:
    sys.exit("session failed: %s" % d)
print(json.dumps({"label": sys.argv[1], "delays": d["delays"]}))' "$1"
}
: >"$RUN/results.jsonl"
session warmup "http://127.0.0.1:$P_ENVOY/gov/mcp" >/dev/null
for r in $(seq "$ROUNDS"); do
  session D "http://127.0.0.1:$P_UP/mcp" >>"$RUN/results.jsonl"
  session G "http://127.0.0.1:$P_ENVOY/gov/mcp" >>"$RUN/results.jsonl"
done

python3 - "$RUN/results.jsonl" "$COUNT" "$INTERVAL" "$ROUNDS" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$RUN/mcp_progress.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
count, interval, rounds, cores, load = sys.argv[2:]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
by = {l: [d for r in rows if r["label"] == l for d in r["delays"]] for l in ("D", "G")}
print("### MCP progress through the governed route (benches/mcp_progress.sh)\n")
print("%s rounds of one `progress` call of %s notifications %s ms apart, direct to the TypeScript MCP server (D) "
      "and through Envoy + kernel + tool-agent with mcpToolFilter and mcpServerRequestGuard streaming the reply (G). "
      "Latency: the server's send time (in the notification) to the client's receipt. %s cores, load average %s.\n"
      % (rounds, count, interval, cores, load))
print("| route | notifications | p50 ms | p99 ms |")
print("|---|---:|---:|---:|")
for l, name in (("D", "direct"), ("G", "governed")):
    print("| %s | %d | %.3f | %.3f |" % (name, len(by[l]), pct(by[l], 50), pct(by[l], 99)))
print("\nAdded by the governed route: p50 %+.3f ms, p99 %+.3f ms." % (
    pct(by["G"], 50) - pct(by["D"], 50), pct(by["G"], 99) - pct(by["D"], 99)))
PY
cat "$RUN/mcp_progress.md"
[ -z "$OUT" ] || { mkdir -p "$OUT" && cp "$RUN/mcp_progress.md" "$OUT/mcp_progress.md"; }
