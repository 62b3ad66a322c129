#!/usr/bin/env python3
"""A policy agent in Python: two policies, ``blockUserAgents`` and ``tagEvents``.

``blockUserAgents`` (param ``blocked``: a list, as a JSON array or
comma-separated) answers 403 when the request's user-agent contains one of
the blocked strings, and otherwise tags the request with
``x-checked-by: python-agent`` and the metadata ``user_agent_checked=true``.

``tagEvents`` (params ``tag``, default ``python-agent``; ``upper``, default
false) streams response bodies (``streams_response_body``): each server-sent
event gets a comment line ``: <tag> <n>`` (n counts the events of the
stream, from 1), its data upper-cased (ASCII letters) with ``upper: true``;
at the end of the stream an event ``event: <tag>`` with data
``{"events": N}`` follows, and the metadata ``events_tagged`` is N. The count
travels between the calls of a stream in the kernel-carried policy state.
Other bodies pass unchanged (their chunks are counted). A buffered
``text/event-stream`` body (a chain that does not stream) is tagged the same
way, whole.

Usage: python agent.py --socket /var/run/policy-engine/agents/python.sock
"""

import argparse
import json
import logging
import logging.handlers
import os
import queue
import re
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
STREAM_POLICY = "tagEvents"
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


class PolicyFailure(Exception):
    """A policy could not run (bad params, bad state): on_failure decides."""


def tag_params(params):
    """``tagEvents``'s params: (tag, upper); bad values raise PolicyFailure."""
    tag = (params.get("tag") or "python-agent").strip()
    if not tag or any(c in tag for c in "\r\n\0"):
        raise PolicyFailure(f"param tag: {tag!r} must be one non-empty line")
    upper = (params.get("upper") or "false").strip().lower()
    if upper not in ("true", "false"):
        raise PolicyFailure(f"param upper: {upper!r} must be true or false")
    return tag.encode(), upper == "true"


DATA_LINE = re.compile(rb"(?m)^data:(.*)$")


def tag_events(params, events, state, end_of_stream, sse):
    """Runs ``tagEvents`` on one call of a stream: returns (the events to send
    instead, or None to pass them unchanged; the state for the next call;
    metadata)."""
    tag, upper = tag_params(params)
    try:
        count = json.loads(state)["events"] if state else 0
    except (ValueError, KeyError, TypeError) as e:
        raise PolicyFailure(f"unreadable stream state: {e}") from e
    out = []
    for event in events:
        count += 1
        if sse:
            if upper:
                event = DATA_LINE.sub(lambda m: b"data:" + m.group(1).upper(), event)
            out.append(b": " + tag + b" " + str(count).encode() + b"\n" + event)
    metadata = {}
    if end_of_stream:
        metadata["events_tagged"] = str(count)
        if sse:
            out.append(b"event: " + tag + b"\ndata: " + json.dumps({"events": count}).encode() + b"\n\n")
    new_state = json.dumps({"events": count}).encode()
    return (out if sse else None), new_state, metadata


EVENT = re.compile(rb".*?(?:\r\n\r\n|\n\n|\r\r)", re.S)


def split_events(body):
    """A whole event-stream body cut into events (an unfinished last one kept)."""
    events = EVENT.findall(body)
    rest = body[sum(len(e) for e in events):]
    return events + ([rest] if rest else [])


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
        streaming = pb.PolicyInfo(
            name=STREAM_POLICY,
            version=VERSION,
            param_schema=["tag", "upper"],
            supported_phases=pb.RESPONSE,
            requires_body=True,
            streams_response_body=True,
        )
        return pb.GetAgentConfigResponse(
            agent_name=AGENT_NAME, agent_version=VERSION, supported_policies=[info, streaming]
        )

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
        """``tagEvents`` on a buffered event stream; nothing else."""
        reply = pb.PolicyResponseResponse(request_id=request.request_id)
        data = request.response_data
        content_type = next((h.value for h in data.headers.headers if h.key.lower() == "content-type"), "")
        sse = content_type.split(";")[0].strip().lower() == "text/event-stream"
        for policy in request.policies:
            if policy.name != STREAM_POLICY or not data.body_included or not sse:
                continue
            try:
                events, _, metadata = tag_events(dict(policy.params), split_events(data.body), b"", True, True)
            except PolicyFailure as e:
                log.warning("%s failed: %s (on_failure=%s)", policy.name, e, policy.on_failure or "deny")
                continue
            reply.instructions.append(pb.ResponseInstruction(set_body=pb.SetBody(body=b"".join(events))))
            reply.policy_metadata.update(metadata)
        return reply

    def ExecutePolicyResponseChunk(self, request, context):
        """The streaming policies of one call, in order: each sees the events
        as the previous one left them and gets back its own state."""
        reply = pb.PolicyResponseChunkReply(request_id=request.request_id)
        events = list(request.events)
        sse = request.framing == pb.SSE_EVENT
        changed = False
        end = None
        for i, policy in enumerate(request.policies):
            state = request.policy_state[i] if i < len(request.policy_state) else b""
            try:
                if policy.name != STREAM_POLICY:
                    raise PolicyFailure("policy is not supported by this agent")
                out, new_state, metadata = tag_events(
                    dict(policy.params), events, state, request.end_of_stream, sse
                )
            except PolicyFailure as e:
                mode = policy.on_failure or "deny"
                log.warning("%s failed on a streamed body: %s (on_failure=%s)", policy.name, e, mode)
                reply.policy_state.append(state)
                if mode == "continue":
                    continue
                if mode == "skip_remaining":
                    break
                events, changed = [], True
                end = pb.EndStream(reason="policy_failed", message=f"{policy.name} failed")
                break
            reply.policy_state.append(new_state)
            for key, value in metadata.items():
                reply.policy_metadata[key] = value
                reply.instructions.append(pb.ChunkInstruction(set_metadata=pb.SetMetadata(key=key, value=value)))
            if out is not None:
                events, changed = out, True
        if changed:
            reply.instructions.append(pb.ChunkInstruction(replace_events=pb.ReplaceEvents(events=events)))
        if end is not None:
            reply.instructions.append(pb.ChunkInstruction(end_stream=end))
        return reply


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
    # Python runs a signal handler in the main thread only, when it next runs
    # Python code. The OS may hand the signal to one of gRPC's threads, and
    # that does not wake a wait without a timeout: the agent would sleep
    # through SIGTERM. So the main thread wakes twice a second.
    while not stop.wait(0.5):
        pass
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
