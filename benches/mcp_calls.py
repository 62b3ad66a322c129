#!/usr/bin/env python3
"""Latency of MCP tools/call through Envoy and the kernel's MCP policies,
against the same MCP server called directly: one real client session (the
official Python SDK, as tests/mcp/client.py) per target, N calls of
`read_file` back to back after a warm-up, one JSON line per target with the
per-call p50 / p99 / mean in ms.

Usage (with `make run`'s stack up): benches/mcp_calls.py N JWT
  targets: http://127.0.0.1:8090/mcp (direct) and http://127.0.0.1:10000/mcp
  (Envoy -> kernel: jwtValidation, mcpToolAuthorization, toolArgumentGuard,
  toolSchemaValidation on the request; mcpToolFilter, toolSchemaValidation on
  the response).
"""
import asyncio
import json
import sys
import time

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def run(url, headers, n):
    http = httpx2.AsyncClient(headers=headers, timeout=20)
    async with Client(streamable_http_client(url, http_client=http), mode="auto", cache=None) as client:
        await client.list_tools()
        args = {"path": "/srv/data/report.txt"}
        for _ in range(20):
            await client.call_tool("read_file", args)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            res = await client.call_tool("read_file", args)
            times.append((time.perf_counter() - t) * 1000)
            assert not res.is_error, res
    await http.aclose()
    times.sort()
    return {"p50_ms": round(times[len(times) // 2], 3), "p99_ms": round(times[int(len(times) * 0.99)], 3),
            "mean_ms": round(sum(times) / len(times), 3), "calls": n}


async def main():
    n, jwt = int(sys.argv[1]), sys.argv[2]
    for label, url in [("direct", "http://127.0.0.1:8090/mcp"), ("envoy+kernel", "http://127.0.0.1:10000/mcp")]:
        r = await run(url, {"authorization": "Bearer " + jwt}, n)
        print(json.dumps(dict(label=label, **r)))


asyncio.run(main())
