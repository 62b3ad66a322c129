"""An MCP client (official Python SDK, `Client`) that answers every question a
server asks: form and URL elicitation, sampling, roots. By default it speaks
2026-07-28 (`server/discover`; questions arrive as `input_required` results and
the SDK retries with `inputResponses`); with --legacy it uses the 2025-11-25
initialize handshake (questions arrive as server-to-client requests).

Usage: mrtr_client.py --url URL --steps JSON [--header K=V]... [--legacy]
                      [--no-url-elicitation] [--no-sampling] [--no-progress]
STEPS is a JSON list of {"op": "call", "name", "args"}, {"op": "prompt",
"name", "args"} or {"op": "list"}. Prints one JSON document: a list with, per
step, {"text", "is_error"} (call), {"text"} (prompt), {"tools", "prompts"}
(list), or {"error": {"code", "message", "data"}} (a JSON-RPC error) or
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
(an SSE-mode server then answers JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import FileUrl

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


class FormOnlyClient(Client):
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


async def run_step(client: Client, step: dict[str, Any], answerer: Answerer, progress: bool) -> dict[str, Any]:
    op = step.get("op")
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
    client_class = FormOnlyClient if args.no_url_elicitation else Client
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
    out: list[dict[str, Any]] = []
    try:
        async with http, client:
            for step in steps:
                answerer.asked, answerer.progress = [], 0
                statuses.clear()
                try:
                    entry = await run_step(client, step, answerer, not args.no_progress)
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
