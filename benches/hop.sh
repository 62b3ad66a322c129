#!/usr/bin/env bash
# The cost of one agent hop, as a new user meets it: every scenario through
# one Envoy 1.40 (--concurrency 1), Envoy and the ext_proc server (and its
# agent) pinned to core 0, the load on core 1: h2load, 16 connections, one
# stream each, closed loop, N requests (default 20,000) per run, ROUNDS
# rounds (default 3) of every scenario in turn; the table gives the medians.
# Envoy sends request and response headers to ext_proc (two messages per
# stream). The kernel's configuration is the shipped default: only its
# sockets, its two agents and two routes are set (log level info, worker
# threads from the CPUs it may use).
#   E0   Envoy without ext_proc
#   F    pk-floor: a do-nothing ext_proc server (CONTINUE to both messages)
#   FH   the floor plus one agent hop: pk-floor calls example-agent once per
#        request (K1's policy and params, on its call stream) before it
#        answers the request headers (--hop-agent): the limit of any
#        processor that calls a separate agent process; K1 - FH is the
#        kernel's own work
#   K0   the kernel, a route it does not know (no agent call)
#   K1   the kernel and the Rust SDK's example-agent, addHeader (one request
#        header set) on the route; the calls go on the agent's call stream
#   K1u  the same with `call_stream: false`: one unary gRPC call per policy
#        call (the transport before the call stream, and what spec-only
#        agents get)
#   K1q  K1 with the kernel's log level at warn: what the per-request log
#        line (§10.2, at info) costs
#   K1py the kernel and the Python example agent, blockUserAgents (passes
#        and sets one request header) on the route
#   K1c  the kernel and example-agent, pathAllowList on the route: a policy
#        that declares its outcome cacheable on the path; every request has
#        the same path, so after the warm-up the kernel answers from its
#        decision cache (a warm cache)
#   K1h  the same route, every other request on a path never seen before:
#        half the requests are hits, half call the agent (and add an entry)
#   Ft, K0t, K1t  F, K0 and K1 with Envoy reaching the ext_proc server over
#        TCP on loopback instead of its Unix socket (the agent stays on its
#        socket); their ratios are to Ft
# CPU per request is each process's utime+stime over the run, divided by
# the requests; "ext_proc" is the server plus its agent; ratios are to F of
# the same round, the table shows their medians.
#
# PK_HOP_CALLGRIND=1 runs the ext_proc server and the agent under valgrind's
# callgrind instead (still pinned), zeroes their counters after the warm-up
# and adds their instructions per request over the measured requests to
# each JSON line (server_ir, agent_ir): the hop's own traffic, counted
# without the machine's noise. Use a small PK_HOP_REQUESTS (2000).
#
# PK_HOP_PAIRS=P measures in sets instead: F and the scenarios of
# PK_HOP_PAIR_WITH (default K1; one or more of K0, K1, K1q, K1c and FH; or
# K0t or K1t, then against Ft, every Envoy reaching its ext_proc server
# over TCP) run side by side, each with an Envoy of its own, every stack up
# at once (the idle ones wait in epoll), and the load goes to each in turn
# in bursts of N requests (default 10,000; each after a warm-up of 500),
# each set starting one scenario later than the last (F K1, K1 F, ...), for
# P sets. CPU is read from /proc/PID/task/*/schedstat (ns) around each
# burst. Each set's ratios compare bursts run seconds apart, so a change in
# the host's speed between rounds, which moves the sequential rounds'
# ratios by a third, cancels out; the table gives the median ratio and its
# quartiles. With FH in the set (PK_HOP_PAIR_WITH="FH K1") it also gives
# (K1 - FH) / F per set: the kernel's own work, in floors, measured in the
# same minute as the limit.
#
# Usage: bash benches/hop.sh [BIN_DIR]   (default target/release; make bench
#        runs it; PK_HOP_REQUESTS, PK_HOP_ROUNDS, PK_HOP_SCENARIOS override,
#        PK_HOP_STREAMS sets h2load's streams per connection (default 1),
#        RUN=DIR keeps the logs and hop.md, the table, in DIR)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
BIN=${1:-$ROOT/target/release}
N=${PK_HOP_REQUESTS:-20000}
ROUNDS=${PK_HOP_ROUNDS:-3}
SCENARIOS=${PK_HOP_SCENARIOS:-E0 F FH K0 K1 K1u K1q K1py K1c K1h Ft K0t K1t}
# h2load streams per connection (-m): 1 as in issue 20's setup.
STREAMS=${PK_HOP_STREAMS:-1}
RUN=${RUN:-$(mktemp -d /tmp/pk-hop.XXXXXX)}
mkdir -p "$RUN"
SUT_CPU=0 LG_CPU=1
[ "$(nproc)" -ge 2 ] || LG_CPU=0
CLK_TCK=$(getconf CLK_TCK)
ENVOY=${ENVOY_BIN:-$(venv_envoy)}
PY="$ROOT/.venv/bin/python"
trap cleanup EXIT
for need in "$ENVOY" "$BIN/policy-kernel" "$BIN/example-agent" "$BIN/pk-floor"; do
  [ -x "$need" ] || { echo "hop.sh: $need missing (make setup; cargo build --release --workspace)" >&2; exit 1; }
done
command -v h2load >/dev/null || { echo "hop.sh: h2load missing (apt-get install nghttp2-client)" >&2; exit 1; }
if [ -n "${PK_HOP_CALLGRIND:-}" ]; then
  command -v callgrind_control >/dev/null || { echo "hop.sh: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
fi
# cg NAME: the command prefix that runs NAME under callgrind when asked
cg() { [ -n "${PK_HOP_CALLGRIND:-}" ] && echo "valgrind --tool=callgrind --callgrind-out-file=$RUN/cg-$1.%p"; true; }
# cg_total PID: instructions in PID's latest callgrind dump (0 when none)
cg_total() {
  local f
  f=$(ls -t "$RUN"/cg-*."$1".[0-9]* 2>/dev/null | head -1)
  [ -n "$f" ] && sed -n 's/^summary: //p' "$f" || echo 0
}

cpu_us() { local s; s=$(cat "/proc/$1/stat") || return 1; s=${s##*) }; set -- $s; echo $(( (${12} + ${13}) * (1000000 / CLK_TCK) )); }
start() { # start NAME CMD...: on core SUT_CPU, logs in RUN, pid in LAST_PID
  local name=$1; shift
  taskset -c "$SUT_CPU" "$@" >"$RUN/$name.log" 2>&1 &
  LAST_PID=$!; PIDS+=("$LAST_PID")
}

read -r PORT ADMIN UPSTREAM KPORT <<<"$(free_ports 4)"
for mode in with without; do
  envoy_config "$RUN/envoy-$mode.yaml" "$PORT" "$ADMIN" "$UPSTREAM" "$RUN/kernel.sock" "$mode"
  sed -i 's/response_header_mode: SKIP/response_header_mode: SEND/' "$RUN/envoy-$mode.yaml"
done
sed "s#{pipe: {path: \"$RUN/kernel.sock\"}}#{socket_address: {address: 127.0.0.1, port_value: $KPORT}}#" \
  "$RUN/envoy-with.yaml" >"$RUN/envoy-tcp.yaml"
grep -q "port_value: $KPORT" "$RUN/envoy-tcp.yaml" || { echo "hop.sh: no TCP variant of the Envoy config" >&2; exit 1; }
cat >"$RUN/kernel.yaml" <<EOF
# The shipped defaults, but for the sockets, the agents and the routes.
policy_kernel:
  server:
    address: "127.0.0.1"
    port: 0
    socket_path: "$RUN/kernel.sock"
  agents:
    - name: example
      socket_path: "$RUN/example.sock"
    - name: python
      socket_path: "$RUN/python.sock"
    - name: example-unary
      socket_path: "$RUN/example.sock"
      call_stream: false
  route_policies:
    - route_name: k1
      request_policy_chain:
        - policy: addHeader
          agent: example
          params: {name: x-hop, value: "1"}
    - route_name: k3 # K1u (benches/configs/envoy.yaml routes /k3 here)
      request_policy_chain:
        - policy: addHeader
          agent: example-unary
          params: {name: x-hop, value: "1"}
    - route_name: kb # K1py (benches/configs/envoy.yaml routes /kb here)
      request_policy_chain:
        - policy: blockUserAgents
          params: {blocked: "no-such-agent"}
    - route_name: kc # K1c, K1h
      request_policy_chain:
        - policy: pathAllowList
          agent: example
          params: {prefixes: ["/kc/"]}
  observability:
    metrics_port: 0
EOF
sed 's/^    metrics_port: 0$/    metrics_port: 0\n    log_level: warn/' "$RUN/kernel.yaml" >"$RUN/kernel-quiet.yaml"
sed "s/^    port: 0$/    port: $KPORT/" "$RUN/kernel.yaml" >"$RUN/kernel-tcp.yaml"

# FH: pk-floor's call to example-agent, the same policy and params as K1's
HOP_ARGS=(--hop-agent "$RUN/example.sock" --hop-policy addHeader --hop-param name=x-hop --hop-param value=1)

start_envoy() {
  start "envoy-$1" "$ENVOY" -c "$RUN/envoy-$1.yaml" --concurrency 1 --disable-hot-restart -l warning --base-id "$PORT"
  ENVOY_PID=$LAST_PID
  wait_for 30 envoy_live "$ADMIN" || { echo "envoy did not start: $RUN/envoy-$1.log" >&2; exit 1; }
}
# start_agents PREFIX: example-agent (under PREFIX, a callgrind command or
# nothing) and the Python agent, on their sockets; sets EXAMPLE_PID and
# PYTHON_PID, returns once both sockets exist.
start_agents() {
  # shellcheck disable=SC2086 # PREFIX is a command line, split on purpose
  start example $1 "$BIN/example-agent" --socket "$RUN/example.sock"; EXAMPLE_PID=$LAST_PID
  start python "$PY" "$ROOT/agents/examples/python/agent.py" --socket "$RUN/python.sock"; PYTHON_PID=$LAST_PID
  wait_for 30 test -S "$RUN/example.sock"; wait_for 60 test -S "$RUN/python.sock"
}
# scenario_path SCENARIO: the path its requests go to (the route of its
# policies in kernel.yaml; the floors answer any path)
scenario_path() {
  case $1 in K0|K0t) echo /k0/hop ;; K1u) echo /k3/hop ;; K1py) echo /kb/hop ;; K1c|K1h) echo /kc/hop ;; *) echo /k1/hop ;; esac
}
# stack SCENARIO: starts what SCENARIO needs; sets SERVER_PID, AGENT_PID, PATH_
stack() {
  cleanup; rm -f "$RUN"/*.sock
  SERVER_PID="" AGENT_PID=""
  case $1 in
    E0) start_envoy without ;;
    F) start floor $(cg F) "$BIN/pk-floor" --socket "$RUN/kernel.sock" --messages 2; SERVER_PID=$LAST_PID
       wait_for 20 test -S "$RUN/kernel.sock"; start_envoy with ;;
    FH) start_agents "$(cg agent-FH)"
       start floor $(cg FH) "$BIN/pk-floor" --socket "$RUN/kernel.sock" --messages 2 "${HOP_ARGS[@]}"; SERVER_PID=$LAST_PID
       AGENT_PID=$EXAMPLE_PID
       wait_for 20 test -S "$RUN/kernel.sock"; start_envoy with ;;
    Ft) start floor $(cg Ft) "$BIN/pk-floor" --port "$KPORT" --messages 2; SERVER_PID=$LAST_PID
       wait_for 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/$KPORT"; start_envoy tcp ;;
    K0|K1|K1u|K1q|K1py|K1c|K1h|K0t|K1t)
      start_agents "$(cg "agent-$1")"
      local config="$RUN/kernel.yaml"
      [ "$1" = K1q ] && config="$RUN/kernel-quiet.yaml"
      case $1 in K0t|K1t) config="$RUN/kernel-tcp.yaml" ;; esac
      start kernel $(cg "$1") "$BIN/policy-kernel" --config "$config"; SERVER_PID=$LAST_PID
      wait_for 30 test -S "$RUN/kernel.sock"
      case $1 in K0t|K1t) start_envoy tcp ;; *) start_envoy with ;; esac
      case $1 in K1|K1u|K1q|K1c|K1h|K1t) AGENT_PID=$EXAMPLE_PID ;; esac
      [ "$1" = K1py ] && AGENT_PID=$PYTHON_PID ;;
  esac
  PATH_=$(scenario_path "$1")
  # Served (agents discovered and healthy) before the measurement.
  wait_for 30 curl -sf -o /dev/null "http://127.0.0.1:$PORT$PATH_" \
    || { echo "$1: $PATH_ not served: $RUN/kernel.log" >&2; exit 1; }
}
# uris FILE TAG COUNT: COUNT paths of K1h, /kc/hop and a path never used
# elsewhere in turn
uris() {
  python3 -c 'import sys
t, n, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n): print(f"http://127.0.0.1:{port}" + ("/kc/hop" if i % 2 == 0 else f"/kc/u{t}-{i}"))' "$2" "$3" "$PORT" >"$1"
}
# load REQUESTS OUT TAG: h2load on core LG_CPU, 16 connections, one stream
# each. K1h runs 16 h2load of one connection each on a list of paths of its
# own (h2load -i gives every connection the same list, from its start), and
# writes their summed figures to OUT as h2load's summary lines.
load() {
  if [ "$SC" != K1h ]; then
    taskset -c "$LG_CPU" timeout 300 h2load -n "$1" -c 16 -m "$STREAMS" "http://127.0.0.1:$PORT$PATH_" >"$2" 2>&1 || true
    return
  fi
  local i pids=()
  for i in $(seq 1 16); do
    uris "$RUN/uris-$i.txt" "$3-$i" $(( $1 / 16 ))
    taskset -c "$LG_CPU" timeout 300 h2load -n $(( $1 / 16 )) -c 1 -m "$STREAMS" -i "$RUN/uris-$i.txt" >"$2.$i" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  python3 - "$2" <<'PY'
import re, sys
out = sys.argv[1]; rps = ok = done = failed = 0.0
for i in range(1, 17):
    t = open(f"{out}.{i}").read()
    m = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", t); rps += float(m.group(1)) if m else 0
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", t)
    if m: done += int(m.group(1)); failed += int(m.group(3))
    m = re.search(r"status codes: (\d+) 2xx", t); ok += int(m.group(1)) if m else 0
open(out, "w").write(f"finished in 0s, {rps:.2f} req/s\nrequests: {done:.0f} total, {done:.0f} started, {done:.0f} done, {ok:.0f} succeeded, {failed:.0f} failed\nstatus codes: {ok:.0f} 2xx\n")
PY
}
# measure SCENARIO ROUND: one warm-up of N/10 requests, then N; a JSON line
measure() {
  local e0 s0 a0 e1 s1 a1 out="$RUN/h2load-$1-$2.txt"
  SC=$1
  load $((N / 10)) "$RUN/warm.txt" "w$2"
  local p sir=0 air=0
  if [ -n "${PK_HOP_CALLGRIND:-}" ]; then
    for p in $SERVER_PID $AGENT_PID; do callgrind_control -z "$p" >/dev/null; done
  fi
  e0=$(cpu_us "$ENVOY_PID"); s0=${SERVER_PID:+$(cpu_us "$SERVER_PID")}; a0=${AGENT_PID:+$(cpu_us "$AGENT_PID")}
  load "$N" "$out" "$2"
  e1=$(cpu_us "$ENVOY_PID"); s1=${SERVER_PID:+$(cpu_us "$SERVER_PID")}; a1=${AGENT_PID:+$(cpu_us "$AGENT_PID")}
  if [ -n "${PK_HOP_CALLGRIND:-}" ]; then
    for p in $SERVER_PID $AGENT_PID; do callgrind_control -d "$p" >/dev/null; done
    [ -n "$SERVER_PID" ] && sir=$(cg_total "$SERVER_PID")
    [ -n "$AGENT_PID" ] && air=$(cg_total "$AGENT_PID")
  fi
  python3 - "$1" "$2" "$N" "$out" "$e0" "$e1" "${s0:-0}" "${s1:-0}" "${a0:-0}" "${a1:-0}" "$sir" "$air" <<'PY'
import json, re, sys
sc, rnd, n, out, e0, e1, s0, s1, a0, a1, sir, air = sys.argv[1:]
n = int(n); text = open(out).read()
rps = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", text)
ok = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", text)
codes = re.search(r"status codes: (\d+) 2xx", text)
print(json.dumps({"scenario": sc, "round": int(rnd), "rps": float(rps.group(1)) if rps else 0.0,
  "ok": int(codes.group(1)) if codes else 0, "failed": int(ok.group(2)) if ok else n,
  "envoy_us": (int(e1) - int(e0)) / n, "server_us": (int(s1) - int(s0)) / n, "agent_us": (int(a1) - int(a0)) / n,
  **({"server_ir": int(sir) // n, "agent_ir": int(air) // n} if int(sir) or int(air) else {})}))
PY
}

# oncpu_ns PID: nanoseconds PID's threads have run (schedstat).
oncpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }

# pairs: the paired measurement (PK_HOP_PAIRS), F (Ft) against each
# scenario of PK_HOP_PAIR_WITH.
pairs() {
  # shellcheck disable=SC2206 # a list of scenario names, split on purpose
  local others=(${PK_HOP_PAIR_WITH:-K1}) burst=${PK_HOP_REQUESTS:-10000} port_f=$PORT fl=F
  local floor_pid envoy_f i j k o sc e s a e0 s0 a0 out scs
  local port_o o_admin o_up kport_o kernel_config path_f
  local -A port_of envoy_of server_of path_of
  case ${others[0]} in *t) fl=Ft ;; esac
  path_f=$(scenario_path "$fl")
  for o in "${others[@]}"; do
    case $o in K0|K1|K1q|K1c|K0t|K1t|FH) path_of[$o]=$(scenario_path "$o") ;;
      *) echo "hop.sh: PK_HOP_PAIR_WITH names K0, K1, K1q, K1c, K0t, K1t or FH, not $o" >&2; exit 2 ;; esac
    case $o in *t) [ "$fl" = Ft ] ;; *) [ "$fl" = F ] ;; esac \
      || { echo "hop.sh: PK_HOP_PAIR_WITH mixes scenarios over TCP and over the Unix socket: $PK_HOP_PAIR_WITH" >&2; exit 2; }
    [ "$(printf '%s\n' "${others[@]}" | grep -cx "$o")" = 1 ] \
      || { echo "hop.sh: PK_HOP_PAIR_WITH names $o twice" >&2; exit 2; }
  done
  # The floor: how it listens, how to see it up, its Envoy's config.
  local floor_at=(--socket "$RUN/kernel.sock") floor_up=(test -S "$RUN/kernel.sock") envoy_f_config="$RUN/envoy-with.yaml"
  if [ "$fl" = Ft ]; then
    # Over TCP on loopback: the floor on KPORT (envoy-tcp.yaml), each
    # kernel on a port of its own; the agent stays on its socket.
    floor_at=(--port "$KPORT") floor_up=(bash -c "exec 3<>/dev/tcp/127.0.0.1/$KPORT") envoy_f_config="$RUN/envoy-tcp.yaml"
  fi
  rm -f "$RUN"/*.sock
  start floor "$BIN/pk-floor" "${floor_at[@]}" --messages 2; floor_pid=$LAST_PID
  start_agents ""
  wait_for 20 "${floor_up[@]}"
  start envoy-f "$ENVOY" -c "$envoy_f_config" --concurrency 1 --disable-hot-restart -l warning --base-id "$port_f"
  envoy_f=$LAST_PID
  wait_for 30 envoy_live "$ADMIN" || { echo "hop.sh: the floor's Envoy did not start: $RUN" >&2; exit 1; }
  wait_for 30 curl -sf -o /dev/null "http://127.0.0.1:$port_f$path_f" || { echo "$fl not served: $RUN" >&2; exit 1; }
  # Each other scenario: a server (the kernel, or the floor calling the
  # agent) and an Envoy of its own, on sockets and ports of their own.
  j=0
  for o in "${others[@]}"; do
    j=$((j + 1))
    read -r port_o o_admin o_up kport_o <<<"$(free_ports 4)"
    kernel_config="$RUN/kernel.yaml"
    [ "$o" = K1q ] && kernel_config="$RUN/kernel-quiet.yaml"
    envoy_config "$RUN/envoy-o$j.yaml" "$port_o" "$o_admin" "$o_up" "$RUN/kernel-o$j.sock"
    sed -i 's/response_header_mode: SKIP/response_header_mode: SEND/' "$RUN/envoy-o$j.yaml"
    sed "s#socket_path: \"$RUN/kernel.sock\"#socket_path: \"$RUN/kernel-o$j.sock\"#" "$kernel_config" >"$RUN/kernel-o$j.yaml"
    grep -q "kernel-o$j.sock" "$RUN/kernel-o$j.yaml" || { echo "hop.sh: no paired kernel config" >&2; exit 1; }
    if [ "$fl" = Ft ]; then
      sed -i "s#{pipe: {path: \"$RUN/kernel-o$j.sock\"}}#{socket_address: {address: 127.0.0.1, port_value: $kport_o}}#" "$RUN/envoy-o$j.yaml"
      sed -i "s/^    port: 0$/    port: $kport_o/" "$RUN/kernel-o$j.yaml"
      { grep -q "port_value: $kport_o" "$RUN/envoy-o$j.yaml" && grep -q "port: $kport_o" "$RUN/kernel-o$j.yaml"; } \
        || { echo "hop.sh: no TCP variant of the paired configs" >&2; exit 1; }
    fi
    if [ "$o" = FH ]; then
      start "floor-hop" "$BIN/pk-floor" --socket "$RUN/kernel-o$j.sock" --messages 2 "${HOP_ARGS[@]}"
    else
      start "kernel-o$j" "$BIN/policy-kernel" --config "$RUN/kernel-o$j.yaml"
    fi
    server_of[$o]=$LAST_PID
    wait_for 30 test -S "$RUN/kernel-o$j.sock"
    start "envoy-o$j" "$ENVOY" -c "$RUN/envoy-o$j.yaml" --concurrency 1 --disable-hot-restart -l warning --base-id "$port_o"
    envoy_of[$o]=$LAST_PID port_of[$o]=$port_o
    wait_for 30 envoy_live "$o_admin" || { echo "hop.sh: the Envoy of $o did not start: $RUN" >&2; exit 1; }
    wait_for 30 curl -sf -o /dev/null "http://127.0.0.1:$port_o${path_of[$o]}" \
      || { echo "$o not served: $RUN/kernel-o$j.log" >&2; exit 1; }
  done
  : >"$RUN/pairs.jsonl"
  scs=("$fl" "${others[@]}")
  for i in $(seq 1 "$PK_HOP_PAIRS"); do
    # Each set in turn starts one scenario later (F K1, K1 F, ...; with two
    # others F FH K1, FH K1 F, K1 F FH, ...): none is always first or last.
    for k in $(seq 0 $(( ${#scs[@]} - 1 ))); do
      sc=${scs[$(( (i - 1 + k) % ${#scs[@]} ))]}
      out="$RUN/h2load-$sc-$i.txt" SC=$sc a=""
      if [ "$sc" = "$fl" ]; then
        PORT=$port_f PATH_=$path_f e=$envoy_f s=$floor_pid
      else
        PORT=${port_of[$sc]} PATH_=${path_of[$sc]} e=${envoy_of[$sc]} s=${server_of[$sc]}
        case $sc in K0|K0t) ;; *) a=$EXAMPLE_PID ;; esac
      fi
      load 500 "$RUN/warm.txt" "w$i"
      e0=$(oncpu_ns "$e"); s0=$(oncpu_ns "$s"); a0=0
      [ -n "$a" ] && a0=$(oncpu_ns "$a")
      load "$burst" "$out" "$i"
      python3 - "$sc" "$i" "$burst" "$out" "$e0" "$(oncpu_ns "$e")" "$s0" "$(oncpu_ns "$s")" \
        "$a0" "$([ -n "$a" ] && oncpu_ns "$a" || echo 0)" <<'PY' | tee -a "$RUN/pairs.jsonl" >&2
import json, re, sys
sc, i, n, out, e0, e1, s0, s1, a0, a1 = sys.argv[1:]
n = int(n); t = open(out).read()
rps = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", t)
ok = re.search(r"status codes: (\d+) 2xx", t)
us = lambda a, b: (int(b) - int(a)) / n / 1000
print(json.dumps({"scenario": sc, "pair": int(i), "rps": float(rps.group(1)) if rps else 0.0,
  "ok": int(ok.group(1)) if ok else 0, "envoy_us": us(e0, e1), "server_us": us(s0, s1),
  "agent_us": us(a0, a1) if int(a1) else 0.0}))
PY
    done
  done
  PORT=$port_f
  python3 - "$RUN/pairs.jsonl" "$burst" "$PK_HOP_PAIRS" "$fl" "${others[@]}" <<'PY' | tee "$RUN/hop.md"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, pairs, fl, others = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
by = {}
for r in rows:
    r["ext_us"] = r["server_us"] + r["agent_us"]
    by.setdefault(r["pair"], {})[r["scenario"]] = r
def ratios(sc, key):
    return sorted(p[sc][key] / p[fl][key] for p in by.values() if fl in p and sc in p and p[fl][key] > 0)
def q(xs):
    if not xs:
        return [float("nan")] * 3
    return st.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else xs * 3
med = lambda sc, k: st.median([r[k] for r in rows if r["scenario"] == sc])
bad = sum(n - r["ok"] for r in rows)
tcp = ", Envoy reaching each ext_proc server over TCP on loopback" if fl == "Ft" else ""
shown = " and ".join([fl] + others) if len(others) == 1 else ", ".join([fl] + others[:-1]) + " and " + others[-1]
kind = "pairs" if len(others) == 1 else "sets of %d" % (len(others) + 1)
print(f"One agent hop through Envoy, in {kind} (benches/hop.sh, PK_HOP_PAIRS={pairs}, PK_HOP_PAIR_WITH=\"{' '.join(others)}\"): {shown} side by side{tcp}, bursts of {n} requests in turn, h2load -c 16 -m 1; CPU per request in µs (medians); ratios per {'pair' if len(others) == 1 else 'set'}")
print()
print(f"| scenario | req/s | Envoy | server | agent | ext_proc | ext_proc / {fl}: median (quartiles) | req/s / {fl}: median (quartiles) |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for sc in [fl] + others:
    cq, tq = q(ratios(sc, "ext_us")), q(ratios(sc, "rps"))
    c = "1.00x" if sc == fl else "**%.2fx** (%.2f-%.2f)" % (cq[1], cq[0], cq[2])
    t = "1.00" if sc == fl else "%.2f (%.2f-%.2f)" % (tq[1], tq[0], tq[2])
    print(f"| {sc} | {med(sc, 'rps'):,.0f} | {med(sc, 'envoy_us'):.1f} | {med(sc, 'server_us'):.1f} | {med(sc, 'agent_us'):.1f} | {med(sc, 'ext_us'):.1f} | {c} | {t} |")
print()
for sc in others:
    print(f"Per {'pair' if len(others) == 1 else 'set'}, ext_proc of {sc} / {fl}: " + ", ".join("%.2f" % x for x in ratios(sc, "ext_us")) + ".")
# With the limit (FH) in the set: what each kernel scenario costs beyond it,
# in floors, set by set (the kernel's own work, measured in the same minute).
if "FH" in others:
    for sc in others:
        if sc == "FH":
            continue
        own = sorted((p[sc]["ext_us"] - p["FH"]["ext_us"]) / p[fl]["ext_us"]
                     for p in by.values() if fl in p and sc in p and "FH" in p and p[fl]["ext_us"] > 0)
        oq = q(own)
        print()
        print(f"{sc} beyond the limit, ({sc} - FH) / {fl} per set: **{oq[1]:.2f}** of a floor (quartiles {oq[0]:.2f}-{oq[2]:.2f}): " + ", ".join("%.2f" % x for x in own) + ".")
print()
print(f"Requests not answered 2xx: {bad}.")
PY
}
if [ -n "${PK_HOP_PAIRS:-}" ]; then
  pairs
  exit 0
fi

: >"$RUN/hop.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for sc in $SCENARIOS; do
    stack "$sc"
    # An agent that did not answer shows as non-2xx (the kernel's 503).
    measure "$sc" "$round" | tee -a "$RUN/hop.jsonl" >&2
  done
  cleanup
done

python3 - "$RUN/hop.jsonl" "$N" "$ROUNDS" "$STREAMS" <<'PY' | tee "$RUN/hop.md"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, rounds, streams = sys.argv[2], sys.argv[3], sys.argv[4]
by = {}
for r in rows:
    r["ext_us"] = r["server_us"] + r["agent_us"]
    by.setdefault(r["scenario"], []).append(r)
floors = {f: {r["round"]: r for r in by.get(f, [])} for f in ("F", "Ft")}
def med(xs): return st.median(xs) if xs else float("nan")
print(f"One agent hop through Envoy (benches/hop.sh): {n} requests x {rounds} rounds, h2load -c 16 -m {streams}, medians; CPU per request in µs; ratios to F of the same round")
print()
print("| scenario | req/s | Envoy | server | agent | ext_proc (server + agent) | ext_proc / F | req/s / F | non-2xx or failed |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for sc, rs in by.items():
    floor = floors["Ft" if sc.endswith("t") else "F"]
    cpu_ratio = [r["ext_us"] / floor[r["round"]]["ext_us"] for r in rs if r["round"] in floor and floor[r["round"]]["ext_us"] > 0]
    rps_ratio = [r["rps"] / floor[r["round"]]["rps"] for r in rs if r["round"] in floor and floor[r["round"]]["rps"] > 0]
    bad = sum(int(n) - r["ok"] for r in rs)
    cr = f"{med(cpu_ratio):.2f}x" if cpu_ratio and sc not in ("E0",) else "-"
    rr = f"{med(rps_ratio):.2f}" if rps_ratio else "-"
    print(f"| {sc} | {med([r['rps'] for r in rs]):,.0f} | {med([r['envoy_us'] for r in rs]):.1f} | {med([r['server_us'] for r in rs]):.1f} | {med([r['agent_us'] for r in rs]):.1f} | {med([r['ext_us'] for r in rs]):.1f} | {cr} | {rr} | {bad} |")
if any("server_ir" in r for r in rows):
    print()
    print("Instructions per request under callgrind (PK_HOP_CALLGRIND), medians; ratios to F of the same round")
    print()
    print("| scenario | server | agent | server + agent | / F |")
    print("|---|---:|---:|---:|---:|")
    for sc, rs in by.items():
        rs = [r for r in rs if "server_ir" in r]
        if not rs:
            continue
        floor = floors["Ft" if sc.endswith("t") else "F"]
        tot = lambda r: r["server_ir"] + r["agent_ir"]
        ratio = [tot(r) / tot(floor[r["round"]]) for r in rs if "server_ir" in floor.get(r["round"], {}) and tot(floor[r["round"]]) > 0]
        x = f"{med(ratio):.2f}" if ratio else "-"
        print(f"| {sc} | {med([r['server_ir'] for r in rs]):,.0f} | {med([r['agent_ir'] for r in rs]):,.0f} | {med([tot(r) for r in rs]):,.0f} | {x} |")
PY
