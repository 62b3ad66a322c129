#!/usr/bin/env bash
# Streamed responses through Envoy: what the streaming policies add to the
# time to first byte and to each event's latency, against the same route with
# ext_proc off (E0) and with the response buffered (today's behaviour for a
# chain with a body policy that cannot stream).
#
#   bash benches/stream.sh [BIN_DIR]     # default target/release
#
# One Envoy 1.40 (1 worker), the kernel, the real guardrail-agent and a
# policy-test-agent on core 0; the SSE upstream (stream_load.py, EVENTS
# events GAP_MS apart per stream) and the client (CONCURRENCY connections
# requesting streams back to back for SECONDS) on core 1. Routes:
#   SE0  ext_proc disabled on the route;
#   SK   piiRedaction (phases: response): the response streams through it;
#   SKB  piiRedaction plus a body policy that cannot stream: buffered.
# Prints a markdown table (also to $RUN/stream.md when RUN is set) with time
# to first byte and event latency p50/p99, and the kernel's and the agents'
# CPU per event. Environment: PK_STREAM_SECONDS (10), PK_STREAM_CONCURRENCY
# (100), PK_STREAM_EVENTS (20), PK_STREAM_GAP_MS (50), PK_STREAM_ROUTES (the
# rows to run, e.g. "SE0s SKs"; default all), PK_STREAM_ROUNDS (5: how many
# times the staggered pair runs, alternating), PK_STREAM_CALL_STREAM (false:
# the guardrail agent's calls unary; default true, as shipped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${1:-$ROOT/target/release}
SECONDS_RUN=${PK_STREAM_SECONDS:-10}
CONC=${PK_STREAM_CONCURRENCY:-100}
EVENTS=${PK_STREAM_EVENTS:-20}
GAP=${PK_STREAM_GAP_MS:-50}
ROUNDS=${PK_STREAM_ROUNDS:-5}
OUT=${RUN:-}
RUN=$(mktemp -d /tmp/pk-stream.XXXXXX)
trap 'cleanup; rm -rf "$RUN"' EXIT
ENVOY=$(venv_envoy)
[ -n "$ENVOY" ] || { echo "no Envoy: run make setup" >&2; exit 1; }
for b in policy-kernel policy-test-agent guardrail-agent; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (cargo build --release -p policy-kernel -p reference-agents --bins)" >&2; exit 1; }
done
read -r P_ENVOY P_ADMIN P_UP P_METRICS <<<"$(free_ports 4)"
SUT="taskset -c 0"
LG="taskset -c $(( $(nproc) > 1 ? 1 : 0 ))"

cat >"$RUN/agent.yaml" <<'EOF'
name: buffered-agent
policies:
  - {name: bufferedNoop, phases: response, requires_body: true}
EOF
$SUT "$BIN/guardrail-agent" --socket "$RUN/guardrail.sock" --audit-path "$RUN/audit.jsonl" >"$RUN/guardrail.log" 2>&1 &
PIDS+=($!); G_PID=$!
$SUT "$BIN/policy-test-agent" --socket "$RUN/agent.sock" --script "$RUN/agent.yaml" >"$RUN/agent.log" 2>&1 &
PIDS+=($!); A_PID=$!
wait_for 10 test -S "$RUN/guardrail.sock"
wait_for 10 test -S "$RUN/agent.sock"
cat >"$RUN/kernel.yaml" <<EOF
policy_kernel:
  server: {port: 0, socket_path: "$RUN/kernel.sock"}
  agents:
    - {name: guardrail, socket_path: "$RUN/guardrail.sock", health_check_interval_ms: 200, call_stream: ${PK_STREAM_CALL_STREAM:-true}}
    - {name: buffered, socket_path: "$RUN/agent.sock", health_check_interval_ms: 200}
  route_policies:
    - route_name: streamed
      response_policy_chain: [{policy: piiRedaction, params: {phases: [response]}}]
    - route_name: buffered
      response_policy_chain: [{policy: piiRedaction, params: {phases: [response]}}, {policy: bufferedNoop}]
  observability: {metrics_port: $P_METRICS, log_level: warn}
EOF
$SUT "$BIN/policy-kernel" --config="$RUN/kernel.yaml" >"$RUN/kernel.log" 2>&1 &
PIDS+=($!); K_PID=$!
wait_for 20 test -S "$RUN/kernel.sock"
wait_for 20 bash -c "curl -fsS http://127.0.0.1:$P_METRICS/config | grep -q '\"healthy\":true.*\"healthy\":true'"

route() { # route NAME PREFIX [disabled]
  printf '              - name: %s\n                match: {prefix: "%s"}\n                route: {cluster: upstream, timeout: 0s}\n' "$1" "$2"
  if [ "${3:-}" = disabled ]; then
    printf '                typed_per_filter_config:\n                  envoy.filters.http.ext_proc:\n                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                    disabled: true\n'
  fi
}
streaming_envoy_config "$RUN/envoy.yaml" "$P_ENVOY" "$P_ADMIN" "$RUN/kernel.sock" "$P_UP" \
  "$(route e0 /e0 disabled; route streamed /streamed; route buffered /buffered)"
$SUT "$ENVOY" -c "$RUN/envoy.yaml" --concurrency 1 --disable-hot-restart -l warning >"$RUN/envoy.log" 2>&1 &
PIDS+=($!)
$LG python3 "$ROOT/benches/stream_load.py" upstream "$P_UP" "$EVENTS" "$GAP" >"$RUN/upstream.log" 2>&1 &
PIDS+=($!)
wait_for 20 curl -fsS "http://127.0.0.1:$P_ADMIN/ready"
wait_for 10 curl -fsS -o /dev/null "http://127.0.0.1:$P_ENVOY/e0"

cpu_us() { # cpu_us PID: utime + stime in µs
  awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000000 / t}' "/proc/$1/stat"
}
: >"$RUN/results.jsonl"
STAGGER=$(( EVENTS * GAP ))
# Lockstep (every stream starts at once), then staggered arrivals (each
# connection first waits a random time within one stream's duration).
# The staggered pair runs ROUNDS times, alternating, so that both rows of a
# round share the machine's state of that minute (the baseline alone moves
# 0.8-1.5 ms between sittings); the added time is taken per round.
RUNS=("SE0 /e0 0" "SK /streamed 0" "SKB /buffered 0")
for r in $(seq "$ROUNDS"); do RUNS+=("SE0s /e0 $STAGGER .$r" "SKs /streamed $STAGGER .$r"); done
for run in "${RUNS[@]}"; do
  set -- $run
  case " ${PK_STREAM_ROUTES:-$1} " in *" $1 "*) ;; *) continue ;; esac
  label=$1${4:-}
  # A short warm-up, then the measured window.
  $LG python3 "$ROOT/benches/stream_load.py" client "http://127.0.0.1:$P_ENVOY$2" 10 1 warmup >/dev/null
  k0=$(cpu_us "$K_PID"); g0=$(cpu_us "$G_PID"); a0=$(cpu_us "$A_PID")
  line=$($LG python3 "$ROOT/benches/stream_load.py" client "http://127.0.0.1:$P_ENVOY$2" "$CONC" "$SECONDS_RUN" "$label" "$3")
  k1=$(cpu_us "$K_PID"); g1=$(cpu_us "$G_PID"); a1=$(cpu_us "$A_PID")
  python3 - "$line" "$k0" "$k1" "$g0" "$g1" "$a0" "$a1" >>"$RUN/results.jsonl" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
k0, k1, g0, g1, a0, a1 = map(float, sys.argv[2:])
ev = max(1, r["events_all"])
r["kernel_us_per_event"] = round((k1 - k0) / ev, 2)
r["agents_us_per_event"] = round((g1 - g0 + a1 - a0) / ev, 2)
print(json.dumps(r))
PY
  tail -1 "$RUN/results.jsonl" >&2
done

python3 - "$RUN/results.jsonl" "$CONC" "$EVENTS" "$GAP" "$SECONDS_RUN" >"$RUN/stream.md" <<'PY'
import json, statistics, sys
rows = {r["label"]: r for r in map(json.loads, open(sys.argv[1]))}
conc, events, gap, secs = sys.argv[2:]
def add(r, base, k):
    a, b = r.get(k), base.get(k)
    return "-" if a is None or b is None or r is base else "%+.2f" % (a - b)
print("### Streamed responses through Envoy (benches/stream.sh)\n")
print("%s concurrent streams of %s events %s ms apart, for %s s per route; SE0: ext_proc off on the route; "
      "SK: `piiRedaction` on the response, streamed; SKB: the same plus a body policy that cannot stream, "
      "so the response is buffered. Lockstep: every stream starts at once, so each message arrives in a burst "
      "of one per stream (the worst case); staggered (`s`): each connection starts at a random time within one "
      "stream's duration, measured once all run; the staggered pair runs in alternating rounds (`.1`, `.2`, ...) "
      "and each round's SKs is compared with that round's SE0s. Time to first byte: request sent to the first "
      "body byte. Event latency: the upstream's send time (in the event) to the client's receipt. CPU per event: "
      "kernel, and guardrail-agent + policy-test-agent.\n" % (conc, events, gap, secs))
print("| route | arrivals | streams | events | errors | TTFB p50 / p99 ms | added p50 / p99 | event latency p50 / p99 ms | added p50 / p99 | kernel µs/event | agents µs/event |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
pairs = []
for label in rows:
    r = rows[label]
    name, _, rnd = label.partition(".")
    base_label = {"SK": "SE0", "SKB": "SE0", "SKs": "SE0s" + (".%s" % rnd if rnd else "")}.get(name, label)
    b = rows.get(base_label, {})
    if name in ("SK", "SKs") and r.get("ttfb_p50_ms") is not None and b.get("ttfb_p50_ms") is not None:
        pairs.append((name, r["ttfb_p50_ms"] - b["ttfb_p50_ms"], r["event_p50_ms"] - b["event_p50_ms"]))
    print("| %s | %s | %d | %d | %d | %s / %s | %s / %s | %s / %s | %s / %s | %s | %s |" % (
        label, "staggered" if name.endswith("s") else "lockstep", r["streams"], r["events"], r["errors"],
        r["ttfb_p50_ms"], r["ttfb_p99_ms"], add(r, b, "ttfb_p50_ms"), add(r, b, "ttfb_p99_ms"),
        r["event_p50_ms"], r["event_p99_ms"], add(r, b, "event_p50_ms"), add(r, b, "event_p99_ms"),
        r["kernel_us_per_event"] if r is not b else "-", r["agents_us_per_event"] if r is not b else "-"))
for sk, name in [("SK", "lockstep"), ("SKs", "staggered")]:
    added = [p[1] for p in pairs if p[0] == sk]
    if not added:
        continue
    ev = [p[2] for p in pairs if p[0] == sk]
    med = statistics.median(added)
    rounds = "" if len(added) == 1 else " (median of %d rounds: %s; event latency added %s)" % (
        len(added), ", ".join("%+.2f" % a for a in added), ", ".join("%+.2f" % e for e in ev))
    print("\nTarget, %s: streaming adds <= 1 ms to the time to first byte at p50: %+.2f ms%s, %s." % (
        name, med, rounds, "met" if med <= 1 else "**not met**"))
PY
cat "$RUN/stream.md"
if [ -n "$OUT" ]; then cp "$RUN/stream.md" "$OUT/stream.md"; fi
