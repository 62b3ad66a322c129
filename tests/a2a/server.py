"""A small A2A agent server (official Python SDK a2a-sdk 1.3.0, protocol 1.0
with the SDK's 0.3 compatibility) for the A2A end-to-end tests.

Usage: server.py (--port-file FILE | --port N) [--no-v03] [--dump] [--record FILE]
Binds 127.0.0.1: with --port-file on a port of its own choosing, written to
FILE once listening (tests); with --port on N. Serves until killed:
  GET  /.well-known/agent-card.json   the agent card
  POST /                              JSON-RPC (SendMessage, ... and, unless
                                      --no-v03, message/send, ...)
  /rest/...                           HTTP+JSON (POST /rest/message:send,
                                      GET /rest/tasks/{id}, ...; 0.3 under
                                      /rest/v1/... unless --no-v03)
The card names the server's own address (http://127.0.0.1:PORT/ and
http://127.0.0.1:PORT/rest), skills echo, summarize, admin_reset; the
extended card (GetExtendedAgentCard, GET /rest/extendedAgentCard) adds
internal_audit. The agent makes a task per message: a text starting with
"slow" gets 5 status updates ("step 1".."step 5", state working) 400 ms
apart (the first 400 ms after the task), then 400 ms later the artifact
"done: <text>"; any other text the artifact
"echo: <text>" at once. A message naming a skill (metadata {"skill": S})
gets " [skill=S]" appended to the artifact text. Tasks and push configs are
kept in memory; push notifications are stored, never delivered.

With --record, appends one JSON line to FILE for everything the agent acts
on, as the SDK parsed it (its own objects, whatever version and binding
carried them): {"event": "execute", "task_id", "message_id", "message_task_id",
"reference_task_ids", "texts", "data", "file_urls", "file_names", "skill"}
per message the executor runs, and {"event": "push_config", "task_id",
"url"} per push-notification config stored. The parser-parity harness
(tests/a2a/parity.py) reads it.

Prints one JSON line per request to stdout:
  {"method": "POST", "path": "/", "a2a_version": "1.0" or null}
With --dump also the request's headers and body, the response's status and
headers, and each response body chunk (t_ms since the request began).
"""

import argparse
import asyncio
import json
import os
import socket
import time

import uvicorn
from a2a.helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)
from starlette.applications import Starlette


def out(obj) -> None:
    print(json.dumps(obj), flush=True)


RECORD = None


def record(obj) -> None:
    """One line of what the agent acts on (--record)."""
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps(obj) + "\n")


def record_message(msg, task_id) -> None:
    from google.protobuf.json_format import MessageToDict

    texts, data, urls, names = [], [], [], []
    for p in msg.parts:
        kind = p.WhichOneof("content")
        if kind == "text":
            texts.append(p.text)
        elif kind == "data":
            data.append(MessageToDict(p)["data"])
        elif kind == "url":
            urls.append(p.url)
        if p.filename:
            names.append(p.filename)
    record({
        "event": "execute",
        "message_id": msg.message_id,
        "task_id": task_id,
        "message_task_id": msg.task_id,
        "reference_task_ids": list(msg.reference_task_ids),
        "texts": texts,
        "data": data,
        "file_urls": urls,
        "file_names": names,
        "skill": msg.metadata["skill"] if "skill" in msg.metadata else None,
        "metadata": MessageToDict(msg).get("metadata", {}),
    })


class RecordingPushStore(InMemoryPushNotificationConfigStore):
    """The in-memory push config store, recording each config it keeps."""

    async def set_info(self, task_id, notification_config, *args, **kwargs):
        record({"event": "push_config", "task_id": task_id, "url": notification_config.url})
        return await super().set_info(task_id, notification_config, *args, **kwargs)


class EchoAgent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        text = get_message_text(msg, " ")
        skill = msg.metadata["skill"] if "skill" in msg.metadata else None
        suffix = f" [skill={skill}]" if skill else ""
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(msg)
            await event_queue.enqueue_event(task)
        record_message(msg, task.id)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if text.startswith("slow"):
            # 400 ms before step 1 as well: the first SSE response of a fresh
            # server can start ~0.1-0.3 s late, which would otherwise squeeze
            # step 1 and step 2 together.
            for i in range(1, 6):
                await asyncio.sleep(0.4)
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=updater.new_agent_message([new_text_part(f"step {i}")]),
                )
            await asyncio.sleep(0.4)
            await updater.add_artifact([new_text_part(f"done: {text}{suffix}")], name="result")
        else:
            await updater.add_artifact([new_text_part(f"echo: {text}{suffix}")], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id, task.context_id if task else context.context_id)
        await updater.cancel()


SKILLS = [
    ("echo", "Echo", "Answers with the text it was sent."),
    ("summarize", "Summarize", "Summarizes a text (here: echoes it)."),
    ("admin_reset", "Admin reset", "Resets the agent's state (here: echoes; a privileged skill)."),
]
EXTENDED_SKILLS = SKILLS + [
    ("internal_audit", "Internal audit", "Audits internal records (authenticated callers only)."),
]


def make_card(base: str, skills, v03: bool) -> AgentCard:
    interfaces = [
        AgentInterface(url=f"{base}/", protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"),
    ]
    if v03:
        interfaces += [
            AgentInterface(url=f"{base}/", protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="0.3"),
        ]
    return AgentCard(
        name="a2a-e2e-agent",
        description="An echo agent for the policy-kernel A2A end-to-end tests.",
        version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id=i, name=n, description=d, tags=[i], examples=[f"{i} this"]) for i, n, d in skills
        ],
    )


class RequestLog:
    """ASGI middleware: one JSON line per request (and with dump, its bytes)."""

    def __init__(self, app, dump: bool):
        self.app = app
        self.dump = dump

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        version = next((v for k, v in headers if k.lower() == "a2a-version"), None)
        path = scope["path"] + ("?" + scope["query_string"].decode() if scope.get("query_string") else "")
        out({"method": scope["method"], "path": path, "a2a_version": version})
        if not self.dump:
            return await self.app(scope, receive, send)
        t0 = time.monotonic()
        body = bytearray()
        logged = False

        def log_request():
            nonlocal logged
            if not logged:
                logged = True
                out({"dump": "request", "method": scope["method"], "path": path,
                     "headers": headers, "body": body.decode("utf-8", "replace")})

        async def recv():
            m = await receive()
            if m["type"] == "http.request":
                body.extend(m.get("body", b""))
                if not m.get("more_body"):
                    log_request()
            return m

        async def snd(m):
            t_ms = round((time.monotonic() - t0) * 1000)
            if m["type"] == "http.response.start":
                log_request()  # a request whose body was never read (GET)
                out({"dump": "response", "path": path, "status": m["status"], "t_ms": t_ms,
                     "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in m.get("headers", [])]})
            elif m["type"] == "http.response.body" and m.get("body"):
                out({"dump": "chunk", "path": path, "t_ms": t_ms, "body": m["body"].decode("utf-8", "replace")})
            await send(m)

        return await self.app(scope, recv, snd)


def main() -> None:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port-file")
    where.add_argument("--port", type=int)
    parser.add_argument("--no-v03", action="store_true", help="serve protocol 1.0 only")
    parser.add_argument("--dump", action="store_true", help="log request/response headers and bodies")
    parser.add_argument("--record", help="append what the agent acts on to this file (JSON lines)")
    args = parser.parse_args()
    global RECORD
    RECORD = args.record
    v03 = not args.no_v03

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port or 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"

    card = make_card(base, SKILLS, v03)
    handler = DefaultRequestHandler(
        agent_executor=EchoAgent(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=RecordingPushStore(),
        extended_agent_card=make_card(base, EXTENDED_SKILLS, v03),
    )
    routes = (
        create_agent_card_routes(card)
        + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=v03)
        + create_rest_routes(handler, enable_v0_3_compat=v03, path_prefix="/rest")
    )
    app = RequestLog(Starlette(routes=routes), args.dump)

    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
