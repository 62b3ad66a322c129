"""An A2A client (official Python SDK a2a-sdk 1.3.0, protocol 1.0, httpx)
for the A2A end-to-end tests.

Usage: client.py CARD_BASE_URL HEADERS_JSON STEPS_JSON [--binding jsonrpc|rest] [--v03]
Fetches the agent card from CARD_BASE_URL/.well-known/agent-card.json and
sends every later call to the interface the card names for the binding
(default jsonrpc; with --v03 only the card's protocolVersion 0.3 interfaces,
so the SDK's 0.3 transports: message/send, /v1/message:send, ...). HEADERS_JSON: extra HTTP headers for every request, e.g.
{"authorization": "Bearer ..."}. STEPS_JSON: a list of steps, each printing
JSON lines to stdout ("$last" as a task id: the task of the latest send or
stream; a message's skill goes in its metadata {"skill": ...}):
  {"op":"card"}           -> {"step":"card","skills":[ids],"interfaces":[urls]}
  {"op":"extended_card"}  -> {"step":"extended_card","skills":[...],"interfaces":[...]}
  {"op":"send","text":T,"skill":S?,"task_id":ID?,"context_id":C?,"nowait":bool?}
                          -> {"step":"send","task_id","context_id","state","artifact_text"}
                             ("context_id": the task's, as the agent answered;
                             the message carries "context_id" only when given)
  {"op":"stream","text":T,"skill":S?,"context_id":C?}
                          -> per event {"step":"event","t_ms","kind","state","text","task_id"}
                             ("kind": task|status_update|artifact_update|message),
                             then {"step":"stream_end","events":N}
  {"op":"get","task_id":ID}    -> {"step":"get","task_id","context_id","state","artifact_text"}
  {"op":"cancel","task_id":ID} -> {"step":"cancel","task_id","context_id","state","artifact_text"}
  {"op":"list"}                -> {"step":"list","task_ids":[...]}
  {"op":"push_set","task_id":ID,"url":U}
                          -> {"step":"push_set","task_id","config_id","url"}
A state is the short lowercase name ("completed", "working", ...). A failed
step prints {"step", "error": str(e), "error_type": exception class,
"code": HTTP status if the step got an HTTP error, else the JSON-RPC error
code if known, "http_status" when known}; the run goes on. A step with
"wire": true adds to its error line "wire": {"status": HTTP status, "body":
the JSON body, or its text} of the last HTTP response the SDK received (what
the SDK's error leaves out, e.g. an ErrorInfo's metadata).
"""

import argparse
import asyncio
import json
import re
import time
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP

BINDINGS = {"jsonrpc": TransportProtocol.JSONRPC, "rest": TransportProtocol.HTTP_JSON}


def out(obj) -> None:
    print(json.dumps(obj), flush=True)


def state_name(state) -> str | None:
    if not state:
        return None
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def parts_text(parts) -> str:
    return "\n".join(p.text for p in parts if p.HasField("text"))


def task_summary(task) -> dict:
    return {
        "task_id": task.id,
        "context_id": task.context_id or None,
        "state": state_name(task.status.state),
        "artifact_text": "\n".join(parts_text(a.parts) for a in task.artifacts) or None,
    }


def card_summary(step: str, card) -> dict:
    return {
        "step": step,
        "skills": [s.id for s in card.skills],
        "interfaces": [i.url for i in card.supported_interfaces],
    }


def error_line(step: str, e: BaseException) -> dict:
    """The error of a step: its type, message, HTTP status or JSON-RPC code."""
    http_status = getattr(e, "status_code", None)
    seen, stack = set(), [e]
    while stack and http_status is None:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        resp = getattr(x, "response", None)
        if isinstance(resp, httpx.Response):
            http_status = resp.status_code
        stack.extend(n for n in (x.__cause__, x.__context__) if n is not None)
    code = http_status
    if code is None:
        code = JSON_RPC_ERROR_CODE_MAP.get(type(e))
    if code is None:
        m = re.search(r"JSON-RPC Error (-?\d+)", str(e))
        code = int(m.group(1)) if m else None
    line = {"step": step, "error": str(e), "error_type": type(e).__name__, "code": code}
    if http_status is not None:
        line["http_status"] = http_status
    return line


class LastResponse:
    """The last HTTP response the SDK received (an httpx response hook; the
    body is not read here, so streams are not held back)."""

    def __init__(self):
        self.response = None

    async def hook(self, response: httpx.Response) -> None:
        self.response = response

    def wire(self) -> dict | None:
        r = self.response
        if r is None:
            return None
        try:
            text = r.content.decode("utf-8", "replace")
        except httpx.ResponseNotRead:
            return {"status": r.status_code, "body": None}
        try:
            body = json.loads(text)
        except ValueError:
            body = text
        return {"status": r.status_code, "body": body}


class Runner:
    def __init__(self, base: str, http: httpx.AsyncClient, binding: str, v03: bool):
        self.base = base
        self.v03 = v03
        self.http = http
        self.binding = BINDINGS[binding]
        # One factory for blocking calls (SendMessage), one for streaming
        # (SendStreamingMessage). Making them sets `A2A-Version: 1.0` on the
        # shared httpx client, as ClientFactory.create_from_url does before
        # it fetches the card.
        self.factories = [
            ClientFactory(
                ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[self.binding])
            )
            for streaming in (False, True)
        ]
        self.clients = None  # (blocking client, streaming client)
        self.last = None

    async def fetch_card(self):
        card = await A2ACardResolver(self.http, self.base).get_agent_card()
        use = card
        if self.v03:  # only the card's 0.3 interfaces: the SDK's 0.3 transports
            use = type(card)()
            use.CopyFrom(card)
            keep = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del use.supported_interfaces[:]
            use.supported_interfaces.extend(keep)
        self.clients = tuple(f.create(use) for f in self.factories)
        return card

    async def client(self, streaming: bool):
        if self.clients is None:
            await self.fetch_card()
        return self.clients[1 if streaming else 0]

    def task_id(self, step) -> str:
        tid = step.get("task_id")
        return self.last if tid == "$last" else tid

    def request(self, step) -> SendMessageRequest:
        msg = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[Part(text=step.get("text", "hi"))],
        )
        if step.get("skill"):
            msg.metadata.update({"skill": step["skill"]})
        if step.get("task_id"):
            msg.task_id = self.task_id(step)
        if step.get("context_id"):
            msg.context_id = step["context_id"]
        req = SendMessageRequest(message=msg)
        if step.get("nowait"):
            req.configuration.return_immediately = True
        return req

    async def run(self, step) -> None:
        op = step["op"]
        if op == "card":
            out(card_summary("card", await self.fetch_card()))
        elif op == "extended_card":
            c = await self.client(False)
            out(card_summary("extended_card", await c.get_extended_agent_card(GetExtendedAgentCardRequest())))
        elif op == "send":
            c = await self.client(False)
            line = {"step": "send", "task_id": None, "context_id": None, "state": None, "artifact_text": None}
            async for ev in c.send_message(self.request(step)):
                if ev.HasField("task"):
                    line.update(task_summary(ev.task))
                    self.last = ev.task.id
                elif ev.HasField("message"):
                    line["message_text"] = parts_text(ev.message.parts)
            out(line)
        elif op == "stream":
            c = await self.client(True)
            t0 = time.monotonic()
            n = 0
            async for ev in c.send_message(self.request(step)):
                n += 1
                line = {"step": "event", "t_ms": round((time.monotonic() - t0) * 1000)}
                kind = ev.WhichOneof("payload")
                if kind == "task":
                    line.update(kind="task", state=state_name(ev.task.status.state),
                                text=parts_text(ev.task.status.message.parts) or None, task_id=ev.task.id)
                elif kind == "status_update":
                    u = ev.status_update
                    line.update(kind="status_update", state=state_name(u.status.state),
                                text=parts_text(u.status.message.parts) or None, task_id=u.task_id)
                elif kind == "artifact_update":
                    u = ev.artifact_update
                    line.update(kind="artifact_update", state=None,
                                text=parts_text(u.artifact.parts) or None, task_id=u.task_id)
                else:
                    line.update(kind="message", state=None,
                                text=parts_text(ev.message.parts) or None, task_id=ev.message.task_id or None)
                if line.get("task_id"):
                    self.last = line["task_id"]
                out(line)
            out({"step": "stream_end", "events": n})
        elif op in ("get", "cancel"):
            c = await self.client(False)
            if op == "get":
                task = await c.get_task(GetTaskRequest(id=self.task_id(step)))
            else:
                task = await c.cancel_task(CancelTaskRequest(id=self.task_id(step)))
            out({"step": op, **task_summary(task)})
        elif op == "list":
            c = await self.client(False)
            res = await c.list_tasks(ListTasksRequest())
            out({"step": "list", "task_ids": [t.id for t in res.tasks]})
        elif op == "push_set":
            c = await self.client(False)
            cfg = await c.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=self.task_id(step), url=step["url"], token=step.get("token", ""))
            )
            out({"step": "push_set", "task_id": cfg.task_id, "config_id": cfg.id, "url": cfg.url})
        else:
            out({"step": op, "error": f"unknown op {op!r}", "error_type": "ValueError", "code": None})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("headers")
    parser.add_argument("steps")
    parser.add_argument("--binding", choices=sorted(BINDINGS), default="jsonrpc")
    parser.add_argument("--v03", action="store_true", help="use only the card's protocol 0.3 interfaces")
    args = parser.parse_args()
    last = LastResponse()
    http = httpx.AsyncClient(headers=json.loads(args.headers), timeout=30, event_hooks={"response": [last.hook]})
    runner = Runner(args.base, http, args.binding, args.v03)
    try:
        for step in json.loads(args.steps):
            try:
                await runner.run(step)
            except Exception as e:  # every failure is one line, never a crash
                line = error_line(step.get("op", "?"), e)
                if step.get("wire"):
                    line["wire"] = last.wire()
                out(line)
    finally:
        await http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
