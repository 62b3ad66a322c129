#!/usr/bin/env python3
"""Starts agent.py on a socket in a temp dir and checks it from Python:
GetAgentConfig, HealthCheck, ExecutePolicyRequest (pass and deny),
the socket's mode, and a clean exit on SIGTERM. Exit status 0 when all pass.

Usage: python check.py
"""

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


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "agents", "python.sock")
        agent = subprocess.Popen([sys.executable, str(HERE / "agent.py"), "--socket", sock])
        try:
            for _ in range(100):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            channel = grpc.insecure_channel(f"unix:{sock}")
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = pb_grpc.PolicyAgentStub(channel)

            config = stub.GetAgentConfig(pb.GetAgentConfigRequest(), timeout=5)
            check("GetAgentConfig names the agent", config.agent_name == "python-agent", config)
            names = [p.name for p in config.supported_policies]
            check("GetAgentConfig lists blockUserAgents", names == ["blockUserAgents"], names)
            check("param_schema", list(config.supported_policies[0].param_schema) == ["blocked"])

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

            mode = stat.S_IMODE(os.stat(sock).st_mode)
            check("socket mode is 0660", mode == 0o660, oct(mode))
            channel.close()
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                code = agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                agent.kill()
                code = None
        check("clean exit on SIGTERM", code == 0, code)
        check("socket removed on exit", not os.path.exists(sock))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
