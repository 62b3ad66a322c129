"""An MCP server (official Python SDK, `MCPServer`) whose tools and prompts
ask the client for input (form and URL elicitation, sampling, roots), for the
tool-agent's end-to-end tests.

It asks each question in the shape of the client's protocol revision:
- to a 2026-07-28 client, an `input_required` result (`inputRequests`, with
  the `requestState` the SDK seals), answered by a retry carrying
  `inputResponses`;
- to a 2025-11-25 client (initialize handshake), a server-to-client request on
  the call's SSE stream.

Usage: mrtr_server.py (--port-file FILE | --port N) [--json] [--stateless]
                      [--record FILE]
Binds 127.0.0.1 and serves `/mcp` until killed: with --port-file on a port of
its own choosing, written to FILE; with --port on N. With --json, replies are
application/json; otherwise text/event-stream (a 2026-07-28 request
(tools/call, prompts/get, tasks/*) that carries a progress token gets a
progress event first, so its reply really is an SSE stream, the result or
error last, with HTTP 200). 2025-11-25 clients get a session
(`Mcp-Session-Id`), which the SDK needs to send them requests; --stateless
drops it, and with it every ask on that path (so does --json: a JSON reply has
no room for a server-to-client request). With --record, each tool call,
prompt rendering or task run to completion appends one JSON line to FILE:
{"kind": "tool"|"prompt"|"task", "tool": name, "args", "answers", "protocol"}.

Tools: ask_form(kind), ask_url(url), summarise(text), list_roots(),
read_file(path), delete_file(path), job(kind). Prompts: greet, greet_secret.

Tasks (extension io.modelcontextprotocol/tasks, 2026-07-28 only): a
`tools/call` of `job` whose `_meta` client capabilities declare the extension
is answered with a task (`resultType: "task"`, a random `taskId`, `status:
"working"`). The task then waits for input at once: `tasks/get` shows
`input_required` with `inputRequests` (kind plain: a form asking `name`, key
"name"; kind secret: a form asking `password`, key "password"); `tasks/update`
with `inputResponses` for that key completes it (its `result` is a
CallToolResult whose text is the reply as JSON, as ask_form's; recorded as kind
"task"; responses for other keys are ignored); `tasks/cancel` cancels a task
not yet finished (a finished one is acknowledged and stays as it is). An
unknown task id is -32602; a tasks/* request that does not declare the
extension is -32021. Without the extension, `job` answers "job done".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    ListRoots,
    MCPServer,
    Resolve,
    Sample,
    require_client_extension,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    CreateMessageResult,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    FormElicitationCapability,
    InputRequiredResult,
    ListRootsResult,
    MissingRequiredClientCapabilityErrorData,
    RequestParams,
    SamplingMessage,
    TextContent,
    UrlElicitationCapability,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, ValidationError

MRTR_VERSION = "2026-07-28"
"""First revision that asks through `input_required` results."""

RECORD: str | None = None
SSE_PROGRESS = False


def record(
    kind: str, name: str, args: dict[str, Any], answers: Any, ctx: Context | ServerRequestContext[Any, Any]
) -> None:
    """One line per tool call, prompt rendering or task run to completion (--record)."""
    if RECORD:
        line = {"kind": kind, "tool": name, "args": args, "answers": answers, "protocol": ctx.protocol_version}
        with open(RECORD, "a") as f:
            f.write(json.dumps(line) + "\n")


def uses_input_required(ctx: Context) -> bool:
    """True when this request must ask through an `input_required` result."""
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, MRTR_VERSION)


# --- Forms -------------------------------------------------------------------


class NameForm(BaseModel):
    name: str


class PasswordForm(BaseModel):
    password: str


class ApiKeyForm(BaseModel):
    api_key: str


FORMS: dict[str, tuple[str, type[BaseModel]]] = {
    "plain": ("What is your name?", NameForm),
    "secret": ("Enter your password", PasswordForm),
    "apikey": ("Enter your API key", ApiKeyForm),
}


def elicitation_answer(outcome: ElicitationResult[Any] | ElicitResult) -> dict[str, Any]:
    """What the client answered an elicitation with, as plain JSON."""
    if isinstance(outcome, ElicitResult):
        return outcome.model_dump(mode="json", exclude_none=True)
    answer: dict[str, Any] = {"action": outcome.action}
    if isinstance(outcome, AcceptedElicitation) and isinstance(outcome.data, BaseModel):
        answer["content"] = outcome.data.model_dump(mode="json")
    return answer


# --- Tasks (extension io.modelcontextprotocol/tasks) ---------------------------
# Served through the SDK's extension plumbing: the extension contributes the
# `job` tool, intercepts `tools/call` to answer a declaring caller's `job` with
# a task, and binds tasks/get, tasks/update and tasks/cancel (2026-07-28 only).

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TTL_MS = 3_600_000
TASK_POLL_MS = 100

JOB_FORMS: dict[str, tuple[str, str, type[BaseModel]]] = {
    "plain": ("name", "What is your name?", NameForm),
    "secret": ("password", "Enter your password", PasswordForm),
}
"""kind -> (inputRequests key, message, form) a task of `job` asks."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class JobTask:
    task_id: str
    kind: str
    status: str
    created_at: str
    last_updated_at: str
    input_requests: dict[str, Any] = field(default_factory=lambda: {})
    result: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        """The task as `tasks/get` shows it (a DetailedTask)."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": TASK_TTL_MS,
            "pollIntervalMs": TASK_POLL_MS,
        }
        if self.status == "input_required":
            task["inputRequests"] = self.input_requests
        if self.status == "completed":
            task["result"] = self.result
        return task

    def move(self, status: str) -> None:
        self.status = status
        self.last_updated_at = now_iso()


TASKS: dict[str, JobTask] = {}


class TaskParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when this request's client capabilities (its `_meta`, on 2026-07-28) declare the tasks extension."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def find_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> JobTask:
    """The task a tasks/* request names: -32021 unless it declares the extension, -32602 if unknown."""
    require_client_extension(ctx, TASKS_EXTENSION)
    task = TASKS.get(params.task_id)
    if task is None:
        raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")
    return task


def job_result(reply: dict[str, Any]) -> dict[str, Any]:
    result = CallToolResult(content=[TextContent(type="text", text=json.dumps(reply))], is_error=False)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    return {"resultType": "complete", **find_task(ctx, params).wire()}


async def update_task(ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
    """Record the answers to outstanding questions; all answered completes the task.

    Responses for keys not outstanding are ignored (the spec's SHOULD).
    """
    task = find_task(ctx, params)
    if task.status != "input_required":
        return {"resultType": "complete"}
    answers: dict[str, dict[str, Any]] = {}
    for key in task.input_requests:
        if key not in params.input_responses:
            continue
        try:
            answer = ElicitResult.model_validate(params.input_responses[key])
        except ValidationError:
            raise MCPError(code=INVALID_PARAMS, message=f"inputResponses[{key!r}] is not an elicitation result")
        answers[key] = elicitation_answer(answer)
    if answers and answers.keys() == task.input_requests.keys():
        reply = next(iter(answers.values()))
        task.result = job_result(reply)
        task.input_requests = {}
        task.move("completed")
        record("task", "job", {"kind": task.kind}, reply, ctx)
    return {"resultType": "complete"}


async def cancel_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    task = find_task(ctx, params)
    if task.status in ("working", "input_required"):
        task.input_requests = {}
        task.move("cancelled")
    return {"resultType": "complete"}


async def job(kind: Literal["plain", "secret"], ctx: Context) -> str:
    """Run a job (kind plain or secret); as a task, it asks a form first."""
    record("tool", "job", {"kind": kind}, None, ctx)
    return "job done"


class TasksExtension(Extension):
    identifier = TASKS_EXTENSION

    def tools(self) -> list[ToolBinding]:
        return [ToolBinding(job)]

    def methods(self) -> list[MethodBinding]:
        versions = frozenset({MRTR_VERSION})
        return [
            MethodBinding("tasks/get", TaskParams, get_task, protocol_versions=versions),
            MethodBinding("tasks/update", UpdateTaskParams, update_task, protocol_versions=versions),
            MethodBinding("tasks/cancel", TaskParams, cancel_task, protocol_versions=versions),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        kind = (params.arguments or {}).get("kind")
        version = ctx.protocol_version
        if (
            params.name != "job"
            or kind not in JOB_FORMS
            or version is None
            or not is_version_at_least(version, MRTR_VERSION)
            or not declares_tasks(ctx)
        ):
            return await call_next(ctx)
        key, message, schema = JOB_FORMS[kind]
        question = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=render_elicitation_schema(schema))
        )
        created = now_iso()
        task = JobTask(secrets.token_urlsafe(24), kind, "working", created, created)
        seed = {"resultType": "task", **task.wire()}
        # The job needs its answer at once: the stored task waits for input from here on.
        task.input_requests = {key: question.model_dump(by_alias=True, mode="json", exclude_none=True)}
        task.status = "input_required"
        TASKS[task.task_id] = task
        return seed



server = MCPServer("tool-agent-mrtr", extensions=[TasksExtension()])


# --- Tools asking through the SDK's resolvers ----------------------------------
# A resolver returns a request marker; the SDK asks it as an input request
# (2026-07-28) or as a server-to-client request (2025-11-25) and injects the answer.


async def ask_for_form(kind: str) -> Elicit[BaseModel]:
    message, schema = FORMS[kind]
    return Elicit(message, schema)


async def ask_for_summary(text: str) -> Sample:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    return Sample([message], max_tokens=200, system_prompt="Summarise the user's text in one sentence.")


async def ask_for_roots() -> ListRoots:
    return ListRoots()


@server.tool()
async def ask_form(
    kind: Literal["plain", "secret", "apikey"],
    ctx: Context,
    answer: Annotated[ElicitationResult[BaseModel], Resolve(ask_for_form)],
) -> str:
    """Ask the user a form (plain: name, secret: password, apikey: api_key); answer with the reply."""
    reply = elicitation_answer(answer)
    record("tool", "ask_form", {"kind": kind}, reply, ctx)
    return json.dumps(reply)


@server.tool()
async def summarise(
    text: str,
    ctx: Context,
    summary: Annotated[CreateMessageResult, Resolve(ask_for_summary)],
) -> str:
    """Summarise a text with the client's model (sampling)."""
    sampled = summary.content.text if isinstance(summary.content, TextContent) else ""
    record("tool", "summarise", {"text": text}, summary.model_dump(mode="json", by_alias=True, exclude_none=True), ctx)
    return sampled


@server.tool()
async def list_roots(ctx: Context, roots: Annotated[ListRootsResult, Resolve(ask_for_roots)]) -> str:
    """List the client's roots."""
    uris = [str(root.uri) for root in roots.roots]
    record("tool", "list_roots", {}, uris, ctx)
    return json.dumps(uris)


# --- Asking by hand ------------------------------------------------------------
# The resolvers ask form elicitation, sampling and roots only, and prompts take
# no resolvers: URL elicitation and the prompts build the `input_required`
# result themselves and read the retry's `inputResponses`. The SDK still seals
# and checks `requestState` (its RequestStateBoundary), so the state below is
# plaintext only inside this process.


def missing_capability(required: ClientCapabilities, what: str) -> MCPError:
    data = MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Client did not declare the {what} capability",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def require_elicitation(ctx: Context, mode: Literal["form", "url"]) -> None:
    """-32021 unless the request declares elicitation in `mode` (a bare `{}` means form)."""
    caps = ctx.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    if mode == "form":
        if elicitation is not None and (elicitation.form is not None or elicitation.url is None):
            return
        needed = ElicitationCapability(form=FormElicitationCapability())
    else:
        if elicitation is not None and elicitation.url is not None:
            return
        needed = ElicitationCapability(url=UrlElicitationCapability())
    raise missing_capability(ClientCapabilities(elicitation=needed), f"{mode} elicitation")


def question_state(key: str, request: ElicitRequest) -> str:
    """The state of one asked question: its key and a digest of what was shown."""
    rendered = json.dumps(request.params.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)
    return json.dumps({"asked": key, "q": hashlib.sha256(rendered.encode()).hexdigest()[:32]})


def ask_or_answer(ctx: Context, key: str, request: ElicitRequest) -> ElicitResult | InputRequiredResult:
    """2026-07-28: the answer to `request` if this is its retry, else the question."""
    state = question_state(key, request)
    answer = (ctx.input_responses or {}).get(key)
    if ctx.request_state == state and isinstance(answer, ElicitResult):
        return answer
    return InputRequiredResult(input_requests={key: request}, request_state=state)


@server.tool()
async def ask_url(url: str, ctx: Context) -> str | InputRequiredResult:
    """Send the user to a URL (URL-mode elicitation); answer with the action."""
    require_elicitation(ctx, "url")
    message = f"Open {url} to continue"
    if uses_input_required(ctx):
        request = ElicitRequest(params=ElicitRequestURLParams(message=message, url=url))
        outcome = ask_or_answer(ctx, "open_url", request)
        if isinstance(outcome, InputRequiredResult):
            return outcome
        action = outcome.action
    else:
        action = (await ctx.elicit_url(message, url, elicitation_id=uuid.uuid4().hex)).action
    record("tool", "ask_url", {"url": url}, {"action": action}, ctx)
    return action


async def greeting(
    ctx: Context, prompt: str, key: str, schema: type[BaseModel], message: str
) -> str | InputRequiredResult:
    """Render a prompt after asking the user a form."""
    require_elicitation(ctx, "form")
    if uses_input_required(ctx):
        request = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=render_elicitation_schema(schema))
        )
        outcome = ask_or_answer(ctx, key, request)
        if isinstance(outcome, InputRequiredResult):
            return outcome
    else:
        outcome = await ctx.elicit(message, schema)
    answer = elicitation_answer(outcome)
    record("prompt", prompt, {}, answer, ctx)
    if answer["action"] != "accept":
        return f"The user chose {answer['action']}."
    field = next(iter(schema.model_fields))
    return f"Greet the user; they gave a {field} of {len(str(answer['content'].get(field, '')))} characters."


@server.prompt()
async def greet(ctx: Context) -> str | InputRequiredResult:
    """A greeting; asks the user's name first."""
    return await greeting(ctx, "greet", "name", NameForm, "What is your name?")


@server.prompt()
async def greet_secret(ctx: Context) -> str | InputRequiredResult:
    """A greeting; asks the user's password first."""
    return await greeting(ctx, "greet_secret", "password", PasswordForm, "Enter your password")


# --- Tools that ask nothing (approval routes) ----------------------------------


@server.tool()
def read_file(path: str, ctx: Context) -> str:
    """Read a file (answers with the path only)."""
    record("tool", "read_file", {"path": path}, None, ctx)
    return f"read {path}"


@server.tool()
def delete_file(path: str, ctx: Context) -> str:
    """Delete a file (answers with the path only)."""
    record("tool", "delete_file", {"path": path}, None, ctx)
    return f"deleted {path}"

# --- Serving -------------------------------------------------------------------


PROGRESS_METHODS = ("tools/call", "prompts/get", "tasks/get", "tasks/update", "tasks/cancel")


async def progress_first(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """SSE mode: one progress event before a call's, prompt's or task request's result
    (if the request asked for progress).

    A 2026-07-28 reply is sent as JSON unless the handler emits something first;
    this makes it a real SSE stream whose last event is the result.
    """
    if SSE_PROGRESS and ctx.method in PROGRESS_METHODS and ctx.request_id is not None:
        await ctx.session.report_progress(0, 1, "working")
    return await call_next(ctx)


server.middleware.append(progress_first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port-file", help="bind a free port and write its number to this file")
    where.add_argument("--port", type=int)
    parser.add_argument("--json", action="store_true", help="application/json replies (default: SSE)")
    parser.add_argument("--stateless", action="store_true", help="no sessions for 2025-11-25 clients")
    parser.add_argument("--record", help="append each completed tool call / prompt to this file (JSON lines)")
    args = parser.parse_args()
    global RECORD, SSE_PROGRESS
    RECORD = args.record
    SSE_PROGRESS = not args.json
    app = server.streamable_http_app(
        json_response=args.json,
        stateless_http=args.stateless,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port or 0))
    sock.listen(64)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(sock.getsockname()[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
