"""An MCP server (official Python SDK, `MCPServer`) that shows which bearer
token reached it, for the tool agent's upstream-credential end-to-end tests
(per-user tokens for MCP upstreams).

Usage: credential_server.py (--port-file FILE | --port N) [--json]
                            [--record FILE] [--reject-file FILE]
Binds 127.0.0.1 and serves Streamable HTTP at `/mcp`, stateless (no
`Mcp-Session-Id`), until killed: with --port-file on a port of its own
choosing, written to FILE (atomically); with --port on N. It speaks both
revisions the SDK does: 2025-11-25 (initialize handshake) and 2026-07-28
(`server/discover`, no handshake). With --json, replies are
application/json; otherwise text/event-stream.

Tool `whoami` (no arguments): its text is JSON. With a JWT bearer token:
{"sub", "aud", "iss", "scope", "jti"} from the token's payload (decoded, its
signature NOT checked; a claim the token lacks is null). Without an
Authorization header, or with one that is not `Bearer <token>`:
{"token": null}. With a bearer token that is not a JWT: {"token": "opaque"}.

--record FILE: every HTTP request that reaches `/mcp` (POST, GET, DELETE;
initialize and notifications included, rejected ones too) appends one JSON
line to FILE before the SDK sees it:
  {"jsonrpc_method": "tools/call" (a batch: the list of methods; no JSON-RPC
   body, or a response: null), "authorization": the full Authorization header
   or null, "claims": the decoded JWT payload (all claims) or null,
   "http_method": "POST", "rejected": false}

--reject-file FILE: when FILE exists and one of its lines (stripped) equals
the bearer token's `jti` or `sub` claim, the request is answered HTTP 401 with
`WWW-Authenticate: Bearer error="invalid_token"` and a JSON body
{"error": "invalid_token"}, and never reaches the SDK (the upstream revoked
that token). FILE is read on every request, so a test can add a jti at any
time.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import socket
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MCP_PATH = "/mcp"

server = MCPServer("credential-server")


def bearer(authorization: str | None) -> str | None:
    """The token of a `Bearer <token>` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def jwt_claims(token: str | None) -> dict[str, Any] | None:
    """The payload of a JWT (not verified), or None if `token` is not one."""
    if not token or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


@server.tool()
def whoami(ctx: Context) -> str:
    """The claims of the bearer token this call arrived with."""
    headers = ctx.headers or {}
    token = bearer(headers.get("authorization"))
    if token is None:
        return json.dumps({"token": None})
    claims = jwt_claims(token)
    if claims is None:
        return json.dumps({"token": "opaque"})
    return json.dumps({k: claims.get(k) for k in ("sub", "aud", "iss", "scope", "jti")})


def jsonrpc_methods(body: bytes) -> Any:
    """The JSON-RPC method of a request body (a list for a batch), or None."""
    try:
        msg = json.loads(body) if body else None
    except ValueError:
        return None
    if isinstance(msg, dict):
        return msg.get("method")
    if isinstance(msg, list):
        return [m.get("method") if isinstance(m, dict) else None for m in msg]
    return None


class RecordAndReject:
    """ASGI middleware in front of the SDK's app: records each request to
    `/mcp` (--record) and refuses tokens whose jti is listed (--reject-file)."""

    def __init__(self, app: ASGIApp, record: str | None, reject_file: str | None) -> None:
        self.app = app
        self.record = record
        self.reject_file = reject_file

    def rejected(self, claims: dict[str, Any] | None) -> bool:
        if not self.reject_file or not claims:
            return False
        names = {claims.get(k) for k in ("jti", "sub") if isinstance(claims.get(k), str)}
        try:
            with open(self.reject_file) as f:
                return any(line.strip() in names for line in f)
        except FileNotFoundError:
            return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        # Read the whole body, then hand it to the SDK as if it came now.
        chunks: list[bytes] = []
        disconnected: Message | None = None
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = message
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        authorization = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k.decode("latin-1").lower() == "authorization"),
            None,
        )
        claims = jwt_claims(bearer(authorization))
        refuse = self.rejected(claims)
        if self.record:
            line = {
                "jsonrpc_method": jsonrpc_methods(body),
                "authorization": authorization,
                "claims": claims,
                "http_method": scope["method"],
                "rejected": refuse,
            }
            with open(self.record, "a") as f:
                f.write(json.dumps(line) + "\n")
        if refuse:
            payload = json.dumps({"error": "invalid_token", "error_description": "the token was revoked"}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if disconnected is not None:
                    return disconnected
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port-file", help="bind a free port and write its number to this file")
    where.add_argument("--port", type=int)
    parser.add_argument("--json", action="store_true", help="application/json replies (default: SSE)")
    parser.add_argument("--record", help="append one JSON line per HTTP request to /mcp to this file")
    parser.add_argument("--reject-file", help="answer 401 invalid_token to tokens whose jti or sub is a line of this file")
    args = parser.parse_args()
    app = server.streamable_http_app(
        json_response=args.json,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    wrapped = RecordAndReject(app, args.record, args.reject_file)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port or 0))
    sock.listen(64)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(sock.getsockname()[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    uvicorn.Server(uvicorn.Config(wrapped, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
