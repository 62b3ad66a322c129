#!/usr/bin/env bash
# `make observe` and `make stop`: a Prometheus with the rules of this folder,
# scraping the kernel of `make run` (127.0.0.1:9090).
#
#   deploy/observability/observe.sh start   # UI on 127.0.0.1:$OBSERVE_PORT (default 9095)
#   deploy/observability/observe.sh stop    # stops it, by the pid it wrote
#
# Data and log live under run/ (run/prometheus, run/logs/prometheus.log), so
# graphs survive a restart of either side.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
run=${PE_RUN:-$root/run}
port=${OBSERVE_PORT:-9095}
pidfile=$run/prometheus.pid
log=$run/logs/prometheus.log

# The pid of the Prometheus this script started, if it is still running.
running() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = prometheus ] || return 1
  echo "$pid"
}

case ${1:-} in
start)
  if pid=$(running); then
    echo "Prometheus is already running (pid $pid): http://127.0.0.1:$port"
    exit 0
  fi
  mkdir -p "$run/logs" "$run/prometheus"
  prometheus \
    --config.file="$root/deploy/observability/prometheus.yml" \
    --storage.tsdb.path="$run/prometheus" \
    --storage.tsdb.retention.time=2d \
    --web.listen-address="127.0.0.1:$port" >"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break
    if ! running >/dev/null; then break; fi
    sleep 0.1
  done
  if ! curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
    echo "Prometheus did not start (is port $port free? set OBSERVE_PORT); its log, $log:" >&2
    tail -n 20 "$log" >&2
    if pid=$(running); then kill "$pid"; fi
    rm -f "$pidfile"
    exit 1
  fi
  echo "Prometheus (pid $(cat "$pidfile")) with deploy/observability/policy-kernel.rules.yml:"
  echo "  UI:      http://127.0.0.1:$port/graph"
  echo "  alerts:  http://127.0.0.1:$port/alerts"
  echo "  targets: http://127.0.0.1:$port/targets"
  echo "Grafana: import deploy/observability/grafana-dashboard.json with this Prometheus as data source."
  if ! curl -sf http://127.0.0.1:9090/healthz >/dev/null 2>&1; then
    echo "No kernel on 127.0.0.1:9090 yet: start it with \`make run\` (graphs fill once it is up)."
  fi
  ;;
stop)
  if pid=$(running); then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
  ;;
*)
  echo "usage: $0 start|stop" >&2
  exit 2
  ;;
esac
