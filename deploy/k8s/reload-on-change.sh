#!/bin/sh
# Sends SIGHUP to the kernel whenever its configuration file changes.
# Runs as a small sidecar in a pod with shareProcessNamespace: true, so it can
# see and signal the kernel's process. Kubernetes updates a mounted ConfigMap
# by swapping a symlink; comparing content hashes catches that.
#
#   CONFIG        file to watch (default /etc/policy-engine/container.yaml)
#   INTERVAL      seconds between checks (default 5)
#   KERNEL_PID    signal this pid (tests); default: every process named
#                 policy-kernel, found through /proc (no procps needed)
set -u
CONFIG=${CONFIG:-/etc/policy-engine/container.yaml}
INTERVAL=${INTERVAL:-5}
hash_of() { sha256sum "$CONFIG" 2>/dev/null | cut -d' ' -f1; }
last=$(hash_of)
echo "watching $CONFIG every ${INTERVAL}s"
while :; do
  sleep "$INTERVAL"
  now=$(hash_of)
  if [ -n "$now" ] && [ "$now" != "$last" ]; then
    if [ -n "${KERNEL_PID:-}" ]; then
      kill -HUP "$KERNEL_PID" && echo "config changed: sent SIGHUP to $KERNEL_PID"
    else
      for p in /proc/[0-9]*; do
        if [ "$(cat "$p/comm" 2>/dev/null)" = policy-kernel ]; then
          kill -HUP "${p#/proc/}" && echo "config changed: sent SIGHUP to ${p#/proc/}"
        fi
      done
    fi
    last=$now
  fi
done
