"""A small MCP server (official Python SDK, streamable HTTP) for the
tool-agent end-to-end test. Its tools touch nothing: each answers with what
it was asked, so the test sees which calls reached it.

Usage: server.py (--port-file FILE | --port N) [--json] [--record FILE]
Binds 127.0.0.1: with --port-file on a port of its own choosing, written to
FILE (tests); with --port on N (the `make run` demo). Serves `/mcp` until
killed. With --json, replies are application/json; otherwise
text/event-stream (to the initialize handshake; 2026-07-28 clients get JSON).
With --record, each tool call the server runs appends one JSON line to FILE,
its tool and arguments as the SDK parsed them: {"server": "python", "tool",
"args"} (the parser-parity harness, tests/mcp/parity.py, reads it).
"""

import argparse
import os
import socket

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

import json

server = MCPServer("tool-agent-e2e")
RECORD = None


def record(tool: str, **args) -> None:
    """One line per tool call run (--record)."""
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps({"server": "python", "tool": tool, "args": args}) + "\n")


@server.tool()
def read_file(path: str) -> str:
    """Read a file (answers with the path only)."""
    record("read_file", path=path)
    return f"read {path}"


@server.tool()
def delete_file(path: str) -> str:
    """Delete a file (answers with the path only)."""
    record("delete_file", path=path)
    return f"deleted {path}"


@server.tool()
def fetch(url: str) -> str:
    """Fetch a URL (answers with the URL only; no network)."""
    record("fetch", url=url)
    return f"fetched {url}"


@server.tool()
def search(q: str, count: int) -> str:
    """Search (answers with the query)."""
    record("search", q=q, count=count)
    return f"found {count} for {q}"


def main() -> None:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port-file")
    where.add_argument("--port", type=int)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--record", help="append each tool call run to this file (JSON lines)")
    args = parser.parse_args()
    global RECORD
    RECORD = args.record
    json_response = args.json
    app = server.streamable_http_app(
        json_response=json_response,
        stateless_http=True,
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
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
