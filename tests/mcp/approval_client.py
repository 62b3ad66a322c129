"""An MCP client session (official Python SDK, mcp 2.x) for the approvals
end-to-end tests: a call that needs a person's approval, then the same call
retried in the same session.

Usage: approval_client.py URL HEADERS_JSON OPTIONS_JSON
OPTIONS_JSON = {"url_elicitation": bool, "mode": "legacy"|"auto", "tool": name,
"arguments": {...}}. mode (default legacy) is the SDK's Client mode: legacy is
the initialize handshake (protocol 2025-11-25), auto probes server/discover
(2026-07-28) and falls back to it. With url_elicitation the client has an
elicitation callback, so the SDK declares `capabilities.elicitation =
{form: {}, url: {}}`; without it, no elicitation capability at all (the SDK
declares both modes or neither).

It calls the tool once, then reads commands from stdin, one a line:
  retry                                   the same call again (same session)
  call {"tool": ..., "arguments": {...}}  another call (same session)
  quit                                    close the session and exit 0
(end of input is a quit). Each call prints ONE JSON line:
  {"result": text, "is_error": bool}                              success
  {"elicitation": {elicitationId, url, message, mode}, "code": -32042}
                                    a -32042 (URL elicitation required) error
  {"error": {"code", "message", "data"}}                          JSON-RPC error
  {"http_status": N, "error": text}                               HTTP failure
each with "status": the HTTP status of the call's last POST, if any. (The SDK
turns a non-2xx reply whose body is a JSON-RPC error into that error: it
prints as {"error": ...} with its "status".)
A notifications/elicitation/complete from the server, at any time (in legacy
mode it comes on the session's GET stream), prints
  {"notification": "notifications/elicitation/complete", "params": {...}}
An elicitation/create request from the server is declined (logged on stderr).
If the session cannot be opened, the outcome is printed like a call's and the
next command tries to open it again.
"""

import asyncio
import json
import sys
from contextlib import AsyncExitStack

import anyio
import anyio.to_thread
import httpx2
from mcp import Client, MCPError, UrlElicitationRequiredError, types
from mcp.client.streamable_http import streamable_http_client

# The same walk over an error's causes as the plain client's.
from client import http_status

URL_ELICITATION_REQUIRED = -32042
COMPLETE = "notifications/elicitation/complete"

# The errors the SDK's transport makes up for a non-2xx reply without a
# JSON-RPC error body (the HTTP status is then the real outcome).
SYNTHESIZED = {
    (types.INTERNAL_ERROR, "Server returned an error response"),
    (types.METHOD_NOT_FOUND, "Not Found"),
    (types.INVALID_REQUEST, "Session terminated"),
}


def out(obj) -> None:
    print(json.dumps(obj), flush=True)


def diag(obj) -> None:
    print(json.dumps(obj, default=str), file=sys.stderr, flush=True)


def describe(exc: BaseException) -> str:
    """The innermost cause of an error (exception groups unwrapped)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


async def on_message(message) -> None:
    """Server notifications (and transport faults) the session surfaces."""
    if isinstance(message, Exception):
        diag({"transport_error": f"{type(message).__name__}: {message}"})
        return
    method = getattr(message, "method", None)
    if method == COMPLETE:
        params = message.params.model_dump(by_alias=True, mode="json", exclude_none=True)
        out({"notification": COMPLETE, "params": params})
    else:
        diag({"notification": method})


async def on_elicit(context, params):
    """A server's elicitation/create: declined (this client has no user)."""
    diag({"elicitation_request": params.model_dump(by_alias=True, mode="json", exclude_none=True), "answer": "decline"})
    return types.ElicitResult(action="decline")


class Session:
    def __init__(self, url: str, headers: dict, options: dict):
        self.url = url
        self.headers = headers
        self.url_elicitation = bool(options.get("url_elicitation"))
        self.mode = options.get("mode") or "legacy"
        self.statuses: list[int] = []
        self.stack: AsyncExitStack | None = None
        self.client: Client | None = None

    async def _record(self, response) -> None:
        if response.request.method == "POST":
            self.statuses.append(response.status_code)

    async def connect(self) -> None:
        stack = AsyncExitStack()
        try:
            http = httpx2.AsyncClient(headers=self.headers, timeout=30, event_hooks={"response": [self._record]})
            await stack.enter_async_context(http)
            client = Client(
                streamable_http_client(self.url, http_client=http),
                mode=self.mode,
                cache=None,
                message_handler=on_message,
                elicitation_callback=on_elicit if self.url_elicitation else None,
            )
            self.client = await stack.enter_async_context(client)
        except BaseException:
            self.client = None
            await self._close(stack)
            raise
        self.stack = stack
        session = self.client.session
        diag({"connected": True, "mode": self.mode, "initialize": bool(session.initialize_result),
              "discover": bool(getattr(session, "discover_result", None))})

    @staticmethod
    async def _close(stack: AsyncExitStack) -> None:
        try:
            await stack.aclose()
        except BaseException as e:  # noqa: BLE001 - a teardown fault is not the outcome
            diag({"close_error": f"{type(e).__name__}: {e}"})

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.client = self.stack, None, None
            await self._close(stack)

    def _failure(self, e: BaseException) -> dict:
        status = self.statuses[-1] if self.statuses else None
        if isinstance(e, MCPError):
            err = e.error
            if err.code == URL_ELICITATION_REQUIRED:
                data = err.data if isinstance(err.data, dict) else {}
                first = (data.get("elicitations") or [{}])[0]
                try:  # the SDK's own reading of it, as a check
                    UrlElicitationRequiredError.from_error(err)
                except Exception as bad:  # noqa: BLE001
                    diag({"elicitations_unparsed_by_sdk": f"{type(bad).__name__}: {bad}"})
                keys = ("elicitationId", "url", "message", "mode")
                return {"elicitation": {k: first.get(k) for k in keys}, "code": URL_ELICITATION_REQUIRED}
            if status is not None and status >= 400 and (err.code, err.message) in SYNTHESIZED:
                return {"http_status": status, "error": f"{err.code}: {err.message}"}
            return {"error": {"code": err.code, "message": err.message, "data": err.data}}
        return {"http_status": http_status(e) or (status if status and status >= 400 else None), "error": describe(e)}

    async def call(self, tool: str, arguments: dict) -> None:
        self.statuses.clear()
        try:
            if self.client is None:
                await self.connect()
            res = await self.client.call_tool(tool, arguments)
            text = "".join(getattr(c, "text", "") or "" for c in res.content)
            obj = {"result": text, "is_error": bool(res.is_error)}
        except Exception as e:  # noqa: BLE001 - every outcome is printed
            diag({"call_failed": describe(e)})
            obj = self._failure(e)
            if not isinstance(e, MCPError):
                await self.close()  # a transport fault: open a fresh session next time
        obj["status"] = self.statuses[-1] if self.statuses else None
        out(obj)


async def main() -> None:
    url, headers, options = sys.argv[1], json.loads(sys.argv[2] or "{}"), json.loads(sys.argv[3] or "{}")
    session = Session(url, headers, options)
    last = (options.get("tool"), options.get("arguments") or {})
    try:
        await session.call(*last)
        while True:
            line = (await anyio.to_thread.run_sync(sys.stdin.readline))
            if not line:
                break
            line = line.strip()
            if not line:
                continue
            cmd = line.split(None, 1)[0]
            if cmd == "quit":
                break
            if cmd == "retry":
                await session.call(*last)
            elif cmd == "call":
                try:
                    spec = json.loads(line[4:].strip())
                except ValueError as e:
                    out({"error": {"code": None, "message": f"bad call command: {e}", "data": None}})
                    continue
                last = (spec.get("tool"), spec.get("arguments") or {})
                await session.call(*last)
            else:
                out({"error": {"code": None, "message": f"unknown command {cmd}", "data": None}})
    finally:
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
