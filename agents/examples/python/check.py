#!/usr/bin/env python3
"""Starts agent.py on a socket in a temp dir and checks it from Python:
GetAgentConfig, HealthCheck, ExecutePolicyRequest (pass and deny),
ExecutePolicyResponseChunk (tagEvents across the calls of a stream, raw
chunks, bad params under each on_failure), ExecutePolicyResponse (a buffered
event stream), the socket's mode, and a clean exit on SIGTERM. Then starts it again with its
stderr on a pipe nobody reads and checks that calls that each log a warning
are still answered, and once more to check that a SIGTERM delivered to one
of its other threads stops it too. Exit status 0 when all pass.

Usage: python check.py
"""

import ctypes
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

import stubs

HERE = Path(__file__).resolve().parent
pb, pb_grpc = stubs.load()

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def call(stub, user_agent, blocked='["curl","sqlmap"]'):
    headers = pb.HttpHeaders(headers=[pb.HeaderValue(key="user-agent", value=user_agent)])
    request = pb.PolicyRequestPhase(
        request_id="py-1",
        policies=[pb.Policy(name="blockUserAgents", params={"blocked": blocked})],
        request_data=pb.RequestData(method="GET", path="/", headers=headers),
        deadline_ms=1000,
    )
    return stub.ExecutePolicyRequest(request, timeout=5)


def chunk(stub, events, sequence, state=b"", end=False, params=None, framing=None, on_failure=""):
    """One ExecutePolicyResponseChunk call of tagEvents."""
    request = pb.PolicyResponseChunk(
        request_id="py-stream",
        policies=[pb.Policy(name="tagEvents", params=params or {}, on_failure=on_failure)],
        sequence=sequence,
        framing=pb.SSE_EVENT if framing is None else framing,
        events=events,
        end_of_stream=end,
        policy_state=[state] if state else [],
        deadline_ms=1000,
    )
    return stub.ExecutePolicyResponseChunk(request, timeout=5)


def replaced(reply):
    """The events of the reply's replace_events instruction, or None."""
    for i in reply.instructions:
        if i.WhichOneof("instruction") == "replace_events":
            return list(i.replace_events.events)
    return None


def streaming(stub):
    """tagEvents on a stream of three calls, on raw chunks, with bad params,
    and on a buffered body."""
    params = {"tag": "py", "upper": "true"}
    # Non-ASCII text stays as it is: only ASCII letters are upper-cased.
    first = chunk(stub, [b"data: hello\n\n", "event: x\ndata: w\u00f6rld\n\n".encode()], 0, params=params)
    check("stream: request_id echoed", first.request_id == "py-stream", first)
    out = replaced(first)
    check("stream: events tagged and upper-cased",
          out == [b": py 1\ndata: HELLO\n\n", ": py 2\nevent: x\ndata: W\u00f6RLD\n\n".encode()], out)
    check("stream: one state entry", len(first.policy_state) == 1, first)
    second = chunk(stub, [b"data: again\n\n"], 1, state=first.policy_state[0], params=params)
    check("stream: the count goes on with the state", replaced(second) == [b": py 3\ndata: AGAIN\n\n"], second)
    last = chunk(stub, [], 2, state=second.policy_state[0], end=True, params=params)
    check("stream: a summary event at the end",
          replaced(last) == [b'event: py\ndata: {"events": 3}\n\n'], last)
    check("stream: metadata events_tagged", dict(last.policy_metadata) == {"events_tagged": "3"}, last)

    raw = chunk(stub, [b"{\"a\":", b"1}"], 0, end=True, framing=pb.RAW)
    check("raw chunks pass unchanged", replaced(raw) is None, raw)
    check("raw chunks are counted", dict(raw.policy_metadata) == {"events_tagged": "2"}, raw)

    bad = {"tag": "two\nlines"}
    denied = chunk(stub, [b"data: x\n\n"], 0, params=bad)
    ends = [i.end_stream for i in denied.instructions if i.WhichOneof("instruction") == "end_stream"]
    check("bad param, on_failure deny: the stream ends",
          len(ends) == 1 and ends[0].reason == "policy_failed" and replaced(denied) == [], denied)
    passed_on = chunk(stub, [b"data: x\n\n"], 0, params=bad, on_failure="continue")
    check("bad param, on_failure continue: the events pass", list(passed_on.instructions) == [], passed_on)
    garbled = chunk(stub, [b"data: x\n\n"], 1, state=b"not json", on_failure="continue")
    check("unreadable state: the policy fails, state kept", list(garbled.policy_state) == [b"not json"], garbled)

    ct = pb.HttpHeaders(headers=[pb.HeaderValue(key="content-type", value="text/event-stream")])
    buffered = stub.ExecutePolicyResponse(pb.PolicyResponsePhase(
        request_id="py-buffered",
        policies=[pb.Policy(name="tagEvents")],
        response_data=pb.ResponseData(status_code=200, headers=ct, body=b"data: a\n\ndata: b\n\n", body_included=True),
        deadline_ms=1000,
    ), timeout=5)
    bodies = [i.set_body.body for i in buffered.instructions if i.WhichOneof("instruction") == "set_body"]
    expected = b': python-agent 1\ndata: a\n\n: python-agent 2\ndata: b\n\nevent: python-agent\ndata: {"events": 2}\n\n'
    check("a buffered event stream is tagged whole", bodies == [expected], buffered)


def start(sock, **popen):
    agent = subprocess.Popen([sys.executable, str(HERE / "agent.py"), "--socket", sock], **popen)
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    channel = grpc.insecure_channel(f"unix:{sock}")
    grpc.channel_ready_future(channel).result(timeout=10)
    return agent, channel


def stop(agent):
    agent.send_signal(signal.SIGTERM)
    try:
        return agent.wait(timeout=15)
    except subprocess.TimeoutExpired:
        agent.kill()
        return None


# Calls with an unknown policy: each logs one warning line (about 90 bytes),
# several times what a pipe buffer and the agent's log backlog hold.
STALLED_CALLS = 4000


def stalled_stderr(tmp):
    """The agent's stderr is a pipe that is read only after STALLED_CALLS
    calls: every call must still be answered, and every line is either
    written or counted in the "dropped" note."""
    sock = os.path.join(tmp, "stalled", "python.sock")
    agent, channel = start(sock, stderr=subprocess.PIPE)
    stub = pb_grpc.PolicyAgentStub(channel)
    request = pb.PolicyRequestPhase(
        request_id="py-stalled",
        policies=[pb.Policy(name="notAPolicy", on_failure="continue")],
        request_data=pb.RequestData(method="GET", path="/"),
        deadline_ms=1000,
    )
    answered = 0
    try:
        for _ in range(STALLED_CALLS):
            stub.ExecutePolicyRequest(request, timeout=10)
            answered += 1
    except grpc.RpcError as e:
        print(f"call {answered + 1} with stderr unread: {e.code()}")
    finally:
        channel.close()
    check(f"{STALLED_CALLS} logging calls answered with stderr unread", answered == STALLED_CALLS, answered)
    agent.send_signal(signal.SIGTERM)
    try:
        _, err = agent.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        agent.kill()
        _, err = agent.communicate()
    lines = err.decode(errors="replace").splitlines()
    notes = [l for l in lines if " log lines dropped: " in l]
    dropped = sum(int(l.split(" log lines dropped")[0].split()[-1]) for l in notes)
    written = len(lines) - len(notes)
    # Besides the calls' warnings, the agent logs "serving on" and "draining".
    check("lines written + dropped = lines logged", written + dropped == STALLED_CALLS + 2, (written, dropped))
    check("some lines were dropped, and noted", dropped > 0, dropped)
    check("clean exit on SIGTERM with stderr stalled", agent.returncode == 0, agent.returncode)


def sigterm_to_another_thread(tmp):
    """A SIGTERM that the OS hands to one of the agent's other threads (gRPC's,
    the log writer's) stops it too: Python runs a signal handler only in the
    main thread, so the main thread must not sleep through it."""
    sock = os.path.join(tmp, "threads", "python.sock")
    agent, channel = start(sock)
    channel.close()
    tids = [int(t) for t in os.listdir(f"/proc/{agent.pid}/task") if int(t) != agent.pid]
    libc = ctypes.CDLL(None, use_errno=True)
    sent = bool(tids) and libc.tgkill(agent.pid, tids[-1], signal.SIGTERM) == 0
    try:
        code = agent.wait(timeout=10)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
        code = None
    check("clean exit on a SIGTERM to a thread other than the main one", sent and code == 0, (len(tids), sent, code))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "agents", "python.sock")
        agent, channel = start(sock)
        try:
            stub = pb_grpc.PolicyAgentStub(channel)

            config = stub.GetAgentConfig(pb.GetAgentConfigRequest(), timeout=5)
            check("GetAgentConfig names the agent", config.agent_name == "python-agent", config)
            names = [p.name for p in config.supported_policies]
            check("GetAgentConfig lists both policies", names == ["blockUserAgents", "tagEvents"], names)
            check("param_schema", list(config.supported_policies[0].param_schema) == ["blocked"])
            streams = [p.streams_response_body for p in config.supported_policies]
            check("only tagEvents streams response bodies", streams == [False, True], streams)
            tag_info = config.supported_policies[1]
            check("tagEvents: response phase, needs the body",
                  tag_info.supported_phases == pb.RESPONSE and tag_info.requires_body, tag_info)

            health = stub.HealthCheck(pb.HealthCheckRequest(), timeout=5)
            check("HealthCheck is SERVING", health.status == pb.HealthCheckResponse.SERVING, health)

            reply = call(stub, "Mozilla/5.0")
            check("request_id echoed", reply.request_id == "py-1", reply)
            kinds = [i.WhichOneof("instruction") for i in reply.instructions]
            check("allowed request is tagged", kinds == ["set_header", "set_metadata"], kinds)

            reply = call(stub, "curl/8.5.0")
            deny = reply.instructions[0].immediate_response if reply.instructions else None
            check("blocked user-agent gets 403", deny is not None and deny.status_code == 403, reply)

            reply = call(stub, "curl/8.5.0", blocked="sqlmap, nikto")
            check("comma-separated list accepted", reply.instructions[0].WhichOneof("instruction") == "set_header")

            streaming(stub)

            mode = stat.S_IMODE(os.stat(sock).st_mode)
            check("socket mode is 0660", mode == 0o660, oct(mode))
            channel.close()
        finally:
            code = stop(agent)
        check("clean exit on SIGTERM", code == 0, code)
        check("socket removed on exit", not os.path.exists(sock))
        stalled_stderr(tmp)
        sigterm_to_another_thread(tmp)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
