"""A real MCP client session (official Python SDK) for the tool-agent
end-to-end test.

Usage: client.py URL MODE HEADERS_JSON STEPS_JSON
MODE is `auto` (2026-07-28: server/discover) or `legacy` (initialize).
STEPS_JSON is a list of ["list"] or ["call", tool, {arguments}]. Prints one
JSON line per step: {"tools": [...]}, {"result": text} or
{"error": {"code", "message", "data"}} / {"http_status": N, "error": text},
each with "status": the HTTP status of the step's last response.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client


def http_status(exc: BaseException):
    """The HTTP status behind a transport error, if any."""
    seen = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        resp = getattr(e, "response", None)
        if resp is not None and getattr(resp, "status_code", None):
            return resp.status_code
        stack.extend(getattr(e, "exceptions", []) or [])
        for nxt in (e.__cause__, e.__context__):
            if nxt is not None:
                stack.append(nxt)
    return None


async def main() -> None:
    url, mode, headers, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    statuses = []

    async def record(response):
        statuses.append(response.status_code)

    http = httpx2.AsyncClient(headers=headers, timeout=20, event_hooks={"response": [record]})
    done = 0
    try:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client:
            for step in steps:
                statuses.clear()
                try:
                    if step[0] == "list":
                        tools = await client.list_tools()
                        out = {"tools": sorted(t.name for t in tools.tools)}
                    else:
                        res = await client.call_tool(step[1], step[2])
                        text = "".join(getattr(c, "text", "") for c in res.content)
                        out = {"result": text, "is_error": bool(res.is_error)}
                except MCPError as e:
                    out = {"error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}}
                except Exception as e:  # transport errors
                    out = {"http_status": http_status(e), "error": f"{type(e).__name__}: {e}"}
                # The HTTP status of the step's last POST, as the SDK's transport saw it.
                out["status"] = statuses[-1] if statuses else None
                print(json.dumps(out), flush=True)
                done += 1
    except Exception as e:  # the session could not be opened (or closed)
        if done == 0:
            status = statuses[-1] if statuses else None
            for _ in steps:
                print(json.dumps({"connect_error": f"{type(e).__name__}: {e}", "status": status}), flush=True)

if __name__ == "__main__":
    asyncio.run(main())
