"""An MCP client (official Python SDK, `Client`) that answers every question a
server asks: form and URL elicitation, sampling, roots. By default it speaks
2026-07-28 (`server/discover`; questions arrive as `input_required` results and
the SDK retries with `inputResponses`); with --legacy it uses the 2025-11-25
initialize handshake (questions arrive as server-to-client requests).

Usage: mrtr_client.py --url URL --steps JSON [--header K=V]... [--legacy]
                      [--no-url-elicitation] [--no-sampling] [--no-progress]
STEPS is a JSON list of {"op": "call", "name", "args"}, {"op": "prompt",
"name", "args"} or {"op": "list"}, and in 2026-07-28 mode the tasks extension
(io.modelcontextprotocol/tasks) steps {"op": "task_call", "name", "args"}
(a tools/call declaring the extension), {"op": "task_get", "task_id"},
{"op": "task_update", "task_id", "responses"} and {"op": "task_cancel",
"task_id"}. A task_id of "$last" is the id the last task_call returned;
"responses" is sent as the `inputResponses` verbatim, or "$asked": answer
every input request the last task_get showed through the callbacks below.
Prints one JSON document: a list with, per step, {"text", "is_error"} (call),
{"text"} (prompt), {"tools", "prompts"} (list), {"task_id", "task_status",
"result_type"} (task_call; "task_status" is the task's status, as "status" is
taken; a call answered without a task has task_id null and its result under
"result"), {"result"} (task_get, task_update, task_cancel: the raw result),
or {"error": {"code", "message", "data"}} (a JSON-RPC error) or
{"exception": "Type: message"}; each with "callbacks" (every question the
client answered during the step: method, mode, url, message, fields, prompt),
"progress" (progress events seen) and "status" (the HTTP status of the step's
last response).

Answers: a form gets "Ada" in each string field ("hunter2" for `password` and
`api_key`); a URL is accepted; sampling replies "sampled: <prompt>"; roots are
[file:///srv]; with --url-wait DIR, a URL elicitation is written to
DIR/urls.jsonl and the callback returns when DIR/go appears (the user went
there and is done: an approval decided). --no-url-elicitation declares form elicitation only,
--no-sampling no sampling; --no-progress sends calls without a progress token
(an SSE-mode server then answers JSON); that goes for task steps too.

Only a task step declares the tasks extension (in the `_meta` client
capabilities of its own request); every other request's capabilities stay as
they were. Task requests go through the SDK's session (`send_request`), so
they carry the headers and `_meta` it stamps on every request, with `Mcp-Name`
set to the task id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, FileUrl, TypeAdapter

SECRET_FIELDS = {"password", "api_key"}


class Answerer:
    """The client's callbacks; each logs what it was asked into `asked`."""

    def __init__(self, url_wait: str | None = None) -> None:
        self.asked: list[dict[str, Any]] = []
        self.progress = 0
        self.url_wait = url_wait

    async def wait_for_user(self, url: str) -> None:
        """--url-wait DIR: the user opens `url` (a line in DIR/urls.jsonl) and
        says they are done (the file DIR/go, which this removes), within 60 s."""
        if not self.url_wait:
            return
        with open(os.path.join(self.url_wait, "urls.jsonl"), "a") as f:
            f.write(json.dumps({"url": url}) + "\n")
        go = os.path.join(self.url_wait, "go")
        for _ in range(1200):
            if os.path.exists(go):
                os.remove(go)
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"nobody said the page at {url} was done")

    async def elicit(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if isinstance(params, types.ElicitRequestURLParams):
            self.asked.append(
                {"method": "elicitation/create", "mode": "url", "url": params.url, "message": params.message}
            )
            await self.wait_for_user(params.url)
            return types.ElicitResult(action="accept")
        properties: dict[str, Any] = params.requested_schema.get("properties", {})
        self.asked.append(
            {"method": "elicitation/create", "mode": "form", "message": params.message, "fields": list(properties)}
        )
        content: dict[str, Any] = {
            name: ("hunter2" if name in SECRET_FIELDS else "Ada")
            for name, schema in properties.items()
            if schema.get("type") == "string"
        }
        return types.ElicitResult(action="accept", content=content)

    async def sample(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        prompt = " ".join(
            block.text
            for message in params.messages
            for block in (message.content if isinstance(message.content, list) else [message.content])
            if isinstance(block, types.TextContent)
        )
        self.asked.append({"method": "sampling/createMessage", "prompt": prompt})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled: {prompt}"),
            model="mrtr-client",
            stop_reason="endTurn",
        )

    async def roots(self, ctx: ClientRequestContext) -> types.ListRootsResult:
        self.asked.append({"method": "roots/list"})
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///srv"))])

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress += 1


# --- Tasks (extension io.modelcontextprotocol/tasks) ---------------------------

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


class CreateTaskResult(types.Result):
    """A `tools/call` answered with a task (`resultType: "task"`)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


RawResult: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
InputRequests: TypeAdapter[types.InputRequests] = TypeAdapter(types.InputRequests)
InputResponses: TypeAdapter[types.InputResponses] = TypeAdapter(types.InputResponses)


async def unpolled(result: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    raise RuntimeError(f"task {result.task_id} returned to a plain call; use the task_* steps")


class TasksExtension(ClientExtension):
    """The claim that lets the session parse a `resultType: "task"` tools/call result."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=unpolled)]


DECLARE_TASKS: ContextVar[bool] = ContextVar("DECLARE_TASKS", default=False)


@contextmanager
def declaring_tasks() -> Iterator[None]:
    """Requests sent inside this block declare the tasks extension."""
    token = DECLARE_TASKS.set(True)
    try:
        yield
    finally:
        DECLARE_TASKS.reset(token)


class TasksClient(Client):
    """A `Client` that declares the tasks extension on task steps' requests only.

    The SDK stamps one capability ad on every request of a session, with each
    constructed extension in it. The session ad is built here without the tasks
    extension (its claim stays active, so a task result still parses), and the
    session's stamp puts the extension back into the `_meta` client capabilities
    of the requests sent inside `declaring_tasks()`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, extensions=[TasksExtension()], **kwargs)

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        build, adopt = session._build_capabilities, session.adopt

        def without_tasks(version: str) -> types.ClientCapabilities:
            capabilities = build(version)
            extensions = {k: v for k, v in (capabilities.extensions or {}).items() if k != TASKS_EXTENSION}
            return capabilities.model_copy(update={"extensions": extensions or None})

        def adopt_declaring(result: types.InitializeResult | types.DiscoverResult) -> None:
            adopt(result)
            stamp = session._stamp

            def declaring_stamp(data: dict[str, Any], opts: Any) -> None:
                stamp(data, opts)
                meta = data.get("params", {}).get("_meta", {})
                if DECLARE_TASKS.get() and isinstance(meta.get(types.CLIENT_CAPABILITIES_META_KEY), dict):
                    capabilities = dict(meta[types.CLIENT_CAPABILITIES_META_KEY])
                    capabilities["extensions"] = {**capabilities.get("extensions", {}), TASKS_EXTENSION: {}}
                    meta[types.CLIENT_CAPABILITIES_META_KEY] = capabilities

            session._stamp = declaring_stamp  # type: ignore[method-assign]

        session._build_capabilities = without_tasks  # type: ignore[method-assign]
        session.adopt = adopt_declaring  # type: ignore[method-assign]
        return session


class TaskSteps:
    """What task steps remember: the last task_call's id, the last task_get's questions."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.asked: dict[str, Any] = {}

    def task_id(self, step: dict[str, Any]) -> str:
        task_id = step.get("task_id")
        if task_id == "$last":
            if self.last_id is None:
                raise ValueError("no task_call has returned a task id yet")
            return self.last_id
        if not isinstance(task_id, str):
            raise ValueError("task_id must be a string")
        return task_id

    async def answer_asked(self, session: ClientSession) -> dict[str, Any]:
        """Answer every input request the last task_get showed, through the callbacks."""
        responses: types.InputResponses = {}
        for key, request in InputRequests.validate_python(self.asked).items():
            # As the SDK's own input_required driver dispatches them (Client._drive_input_required).
            meta = request.params.meta if request.params else None
            ctx = ClientRequestContext(session=session, request_id=key, meta=meta)
            answer = await session.dispatch_input_request(ctx, request)
            if isinstance(answer, types.ErrorData):
                raise MCPError.from_error_data(answer)
            responses[key] = answer
        return InputResponses.dump_python(responses, by_alias=True, mode="json", exclude_none=True)


async def run_task_step(
    client: Client, step: dict[str, Any], answerer: Answerer, progress: bool, tasks: TaskSteps
) -> dict[str, Any]:
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise ValueError(f"{step['op']} needs the 2026-07-28 mode (this session speaks {client.protocol_version})")
    session = client.session
    on_progress = answerer.on_progress if progress else None
    op = step["op"]
    with declaring_tasks():
        if op == "task_call":
            result = await session.call_tool(
                step["name"], step.get("args") or {}, progress_callback=on_progress, allow_claimed=True
            )
            if isinstance(result, CreateTaskResult):
                tasks.last_id = result.task_id
                return {"task_id": result.task_id, "task_status": result.status, "result_type": "task"}
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            return {"task_id": None, "task_status": None, "result_type": dumped.get("resultType"), "result": dumped}
        task_id = tasks.task_id(step)
        request: GetTaskRequest | UpdateTaskRequest | CancelTaskRequest
        if op == "task_get":
            request = GetTaskRequest(params=TaskParams(task_id=task_id))
        elif op == "task_update":
            responses = step.get("responses")
            if responses == "$asked":
                responses = await tasks.answer_asked(session)
            request = UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses or {}))
        else:
            request = CancelTaskRequest(params=TaskParams(task_id=task_id))
        raw = await session.send_request(request, RawResult, progress_callback=on_progress)
    if op == "task_get":
        asked = raw.get("inputRequests")
        tasks.asked = asked if raw.get("status") == "input_required" and isinstance(asked, dict) else {}
    return {"result": raw}


class FormOnlyClient(TasksClient):
    """A `Client` whose capability ad declares form elicitation only.

    The SDK declares `elicitation: {form, url}` whenever an elicitation callback
    is set and has no public switch for the URL mode, so the session's ad is
    narrowed here, before the handshake stamps it on every request.
    """

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        build = session._build_capabilities

        def form_only(version: str) -> types.ClientCapabilities:
            capabilities = build(version)
            if capabilities.elicitation is not None:
                form = types.ElicitationCapability(form=types.FormElicitationCapability())
                capabilities = capabilities.model_copy(update={"elicitation": form})
            return capabilities

        session._build_capabilities = form_only  # type: ignore[method-assign]
        return session


def text_of(blocks: list[Any]) -> str:
    return "".join(getattr(block, "text", "") for block in blocks)


def describe(exc: BaseException) -> dict[str, Any]:
    """A step's failure: the JSON-RPC error, or the exception's type and text."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return {"error": {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}}
    return {"exception": f"{type(exc).__name__}: {exc}"}


async def run_step(
    client: Client, step: dict[str, Any], answerer: Answerer, progress: bool, tasks: TaskSteps
) -> dict[str, Any]:
    op = step.get("op")
    if op in ("task_call", "task_get", "task_update", "task_cancel"):
        return await run_task_step(client, step, answerer, progress, tasks)
    if op == "call":
        result = await client.call_tool(
            step["name"], step.get("args") or {}, progress_callback=answerer.on_progress if progress else None
        )
        return {"text": text_of(result.content), "is_error": bool(result.is_error)}
    if op == "prompt":
        # `get_prompt` takes no progress callback; a token in `_meta` still asks for
        # progress (the events reach no callback and are dropped).
        meta: Any = {"progressToken": f"prompt-{step['name']}"} if progress else None
        prompt = await client.get_prompt(step["name"], step.get("args"), meta=meta)
        return {"text": "".join(text_of([m.content]) for m in prompt.messages)}
    if op == "list":
        tools = await client.list_tools()
        prompts = await client.list_prompts()
        return {"tools": sorted(t.name for t in tools.tools), "prompts": sorted(p.name for p in prompts.prompts)}
    raise ValueError(f"unknown op {op!r}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--steps", required=True, help="JSON list of steps")
    parser.add_argument("--header", action="append", default=[], metavar="K=V", help="extra HTTP header (repeatable)")
    parser.add_argument("--legacy", action="store_true", help="2025-11-25 initialize handshake")
    parser.add_argument("--no-url-elicitation", action="store_true", help="declare form elicitation only")
    parser.add_argument("--no-sampling", action="store_true", help="declare no sampling capability")
    parser.add_argument("--no-progress", action="store_true", help="send calls without a progress token")
    parser.add_argument("--url-wait", metavar="DIR", help="a URL elicitation waits for DIR/go (URLs in DIR/urls.jsonl)")
    args = parser.parse_args()
    steps = json.loads(args.steps)
    headers = dict(h.split("=", 1) for h in args.header)

    statuses: list[int] = []

    async def seen(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    answerer = Answerer(args.url_wait)
    client_class = FormOnlyClient if args.no_url_elicitation else TasksClient
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [seen]})
    client = client_class(
        streamable_http_client(args.url, http_client=http),
        mode="legacy" if args.legacy else "auto",
        elicitation_callback=answerer.elicit,
        sampling_callback=None if args.no_sampling else answerer.sample,
        list_roots_callback=answerer.roots,
        read_timeout_seconds=30,
        cache=None,
    )
    tasks = TaskSteps()
    out: list[dict[str, Any]] = []
    try:
        async with http, client:
            for step in steps:
                answerer.asked, answerer.progress = [], 0
                statuses.clear()
                try:
                    entry = await run_step(client, step, answerer, not args.no_progress, tasks)
                except Exception as exc:
                    entry = describe(exc)
                entry["callbacks"] = answerer.asked
                entry["progress"] = answerer.progress
                entry["status"] = statuses[-1] if statuses else None
                out.append(entry)
    except Exception as exc:  # the connection failed to open or to close
        failure = describe(exc)
        failure["status"] = statuses[-1] if statuses else None
        out += [dict(failure, callbacks=[], progress=0) for _ in steps[len(out) :]]
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
