#!/usr/bin/env python3
"""A policy agent in Python: one policy, ``blockUserAgents``.

``blockUserAgents`` (param ``blocked``: a list, as a JSON array or
comma-separated) answers 403 when the request's user-agent contains one of
the blocked strings, and otherwise tags the request with
``x-checked-by: python-agent`` and the metadata ``user_agent_checked=true``.

Usage: python agent.py --socket /var/run/policy-engine/agents/python.sock
"""

import argparse
import json
import logging
import logging.handlers
import os
import queue
import signal
import stat
import sys
import threading
import time
from concurrent import futures

import grpc

import stubs

pb, pb_grpc = stubs.load()
log = logging.getLogger("python-agent")

AGENT_NAME = "python-agent"
VERSION = "0.1.0"
POLICY = "blockUserAgents"
# Log records held for the writer thread while stderr is not taking them.
LOG_BACKLOG = 1000
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def parse_list(raw):
    """A JSON array (how the kernel sends YAML lists) or a comma-separated string."""
    raw = (raw or "").strip()
    if raw.startswith("["):
        return [str(item).strip() for item in json.loads(raw) if str(item).strip()]
    return [item.strip() for item in raw.split(",") if item.strip()]


def header(request_data, name):
    for h in request_data.headers.headers:
        if h.key.lower() == name:
            return h.value
    return None


def block_user_agents(params, request_data):
    """Runs the policy; returns (instructions, metadata)."""
    blocked = parse_list(params.get("blocked"))
    agent = (header(request_data, "user-agent") or "").lower()
    hit = next((b for b in blocked if b.lower() in agent), None)
    if hit is not None:
        body = json.dumps({"error": "forbidden", "reason": "user_agent_blocked"}).encode()
        deny = pb.ImmediateResponse(
            status_code=403,
            body=body,
            headers=[pb.HeaderValue(key="content-type", value="application/json")],
            reason="user_agent_blocked",
        )
        return [pb.RequestInstruction(immediate_response=deny)], {}
    return [
        pb.RequestInstruction(set_header=pb.SetHeader(name="x-checked-by", value="python-agent")),
        pb.RequestInstruction(set_metadata=pb.SetMetadata(key="user_agent_checked", value="true")),
    ], {"user_agent_checked": "true"}


class Agent(pb_grpc.PolicyAgentServicer):
    def __init__(self):
        self.draining = threading.Event()

    def GetAgentConfig(self, request, context):
        info = pb.PolicyInfo(
            name=POLICY,
            version=VERSION,
            param_schema=["blocked"],
            supported_phases=pb.REQUEST,
            requires_body=False,
        )
        return pb.GetAgentConfigResponse(agent_name=AGENT_NAME, agent_version=VERSION, supported_policies=[info])

    def HealthCheck(self, request, context):
        if self.draining.is_set():
            return pb.HealthCheckResponse(status=pb.HealthCheckResponse.NOT_SERVING, message="draining")
        return pb.HealthCheckResponse(status=pb.HealthCheckResponse.SERVING)

    def ExecutePolicyRequest(self, request, context):
        reply = pb.PolicyRequestResponse(request_id=request.request_id)
        for policy in request.policies:
            if policy.name != POLICY:
                # A failure of the policy: on_failure decides (empty means deny).
                mode = policy.on_failure or "deny"
                log.warning("policy %s not supported (on_failure=%s)", policy.name, mode)
                if mode == "continue":
                    continue
                if mode == "skip_remaining":
                    skip = pb.SkipRemainingPolicies(reason=f"{policy.name} failed")
                    reply.instructions.append(pb.RequestInstruction(skip_remaining_policies=skip))
                    break
                deny = pb.ImmediateResponse(status_code=500, body=b'{"error":"policy_failed"}', reason="policy_failed")
                reply.instructions.append(pb.RequestInstruction(immediate_response=deny))
                break
            instructions, metadata = block_user_agents(dict(policy.params), request.request_data)
            reply.instructions.extend(instructions)
            reply.policy_metadata.update(metadata)
            if any(i.HasField("immediate_response") for i in instructions):
                break
        return reply

    def ExecutePolicyResponse(self, request, context):
        return pb.PolicyResponseResponse(request_id=request.request_id)


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """Hands each record to the log writer thread. When the writer is
    LOG_BACKLOG records behind (nobody reads stderr), the record is dropped
    and counted instead of blocking the call that logged it."""

    def __init__(self, records):
        super().__init__(records)
        self.dropped = 0
        self.dropped_lock = threading.Lock()

    def enqueue(self, record):
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            with self.dropped_lock:
                self.dropped += 1


def start_logging(level):
    """Logs to stderr through a writer thread, so that a stalled stderr
    reader stalls only that thread. Dropped records are reported by a
    warning line once stderr takes lines again (and at exit). Returns
    ``flush(timeout)``, which gives held-back lines up to ``timeout`` seconds
    to go out."""
    records = queue.Queue(maxsize=LOG_BACKLOG)
    handler = DroppingQueueHandler(records)
    out = logging.StreamHandler(sys.stderr)
    out.setFormatter(logging.Formatter(LOG_FORMAT))
    noted = 0

    def note_drops():
        nonlocal noted
        with handler.dropped_lock:
            dropped = handler.dropped
        if dropped > noted:
            msg = "%d log lines dropped: stderr was not read"
            out.handle(logging.makeLogRecord({"name": log.name, "levelno": logging.WARNING,
                                              "levelname": "WARNING", "msg": msg, "args": (dropped - noted,)}))
            noted = dropped

    def write():
        while True:
            record = records.get()
            note_drops()
            if record is None:
                return
            out.handle(record)

    writer = threading.Thread(target=write, name="log-writer", daemon=True)
    writer.start()
    root = logging.getLogger()
    root.setLevel(level)
    root.addHandler(handler)

    def flush(timeout):
        deadline = time.monotonic() + timeout
        try:
            records.put(None, timeout=timeout)
        except queue.Full:
            return
        writer.join(max(0.0, deadline - time.monotonic()))

    return flush


def bind_path(path):
    """Removes a stale socket (never a symlink or another kind of file)."""
    parent = os.path.dirname(path) or "."
    os.makedirs(parent, mode=0o750, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SystemExit(f"{path} exists and is not a socket; refusing to remove it")
    os.unlink(path)


def serve(socket_path, mode, drain_s):
    bind_path(socket_path)
    agent = Agent()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_PolicyAgentServicer_to_server(agent, server)
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    os.chmod(socket_path, mode)
    log.info("%s serving on %s", AGENT_NAME, socket_path)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    agent.draining.set()
    log.info("draining")
    server.stop(grace=drain_s).wait()
    if os.path.exists(socket_path):
        os.unlink(socket_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default="/var/run/policy-engine/agents/python.sock")
    parser.add_argument("--socket-mode", default="660", type=lambda s: int(s, 8))
    parser.add_argument("--drain-timeout-s", default=30, type=float)
    args = parser.parse_args()
    flush_logs = start_logging(logging.INFO)
    try:
        serve(args.socket, args.socket_mode, args.drain_timeout_s)
    finally:
        flush_logs(1.0)


if __name__ == "__main__":
    main()
