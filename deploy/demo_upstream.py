#!/usr/bin/env python3
"""Demo upstream for policy-kernel: echoes what it received as JSON.

POST /v1/chat/completions answers like an OpenAI-style chat completion (with
`usage.total_tokens`, which the token rate limiter charges) and echoes the
request it received under "echo", so the effect of policies (redacted PII,
added headers) is visible to the client. With `"stream": true` it streams the
answer instead, as server-sent events 0.4 s apart (OpenAI's
`chat.completion.chunk` shape, then a usage chunk when
`stream_options.include_usage` is set, then `data: [DONE]`); the answer
carries an e-mail address and a phone number split across events, for the
streaming redaction to catch. A request that declares `tools` (the agent
runtime's route, /agent/v1/chat/completions) gets a planned tool call
instead: the first declared tool, called with `{"path": <the last user
message>}`, for planCritic to check. Standard library only.

Usage: demo_upstream.py [--host 127.0.0.1] [--port 8080]
"""
import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _handle(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        echo = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        if self.path.split("?")[0].endswith("/v1/chat/completions"):
            try:
                request = json.loads(body)
            except ValueError:
                request = {}
            if not isinstance(request, dict):
                request = {}
            messages = request.get("messages", [])
            if request.get("stream") is True:
                return self._stream(request, max(1, len(body) // 4))
            last = messages[-1].get("content", "") if messages else ""
            prompt_tokens = max(1, len(body) // 4)
            message = {"role": "assistant", "content": "You said: " + str(last)}
            finish = "stop"
            planned = self._planned_call(request, messages)
            if planned:
                message = {"role": "assistant", "content": None, "tool_calls": [planned]}
                finish = "tool_calls"
            answer = {
                "id": "chatcmpl-demo",
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 8, "total_tokens": prompt_tokens + 8},
                "echo": echo,
            }
        else:
            answer = echo
        out = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    @staticmethod
    def _planned_call(request, messages):
        """The tool call a model would plan: the first declared tool, on the
        path the last user message names; None without declared tools."""
        tools = request.get("tools")
        if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
            return None
        name = (tools[0].get("function") or {}).get("name") or tools[0].get("name")
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        path = users[-1].get("content", "") if users else ""
        return {"id": "call_demo", "type": "function",
                "function": {"name": str(name), "arguments": json.dumps({"path": str(path)})}}

    # The streamed answer, cut so that values straddle events.
    STREAMED = ["Sure! Write to help.desk@exa", "mple.com or call +1 555-867-", "5309. Anything else?"]

    def _stream(self, request, prompt_tokens):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def event(doc):
            data = ("data: " + (doc if isinstance(doc, str) else json.dumps(doc)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk = {"id": "chatcmpl-demo", "object": "chat.completion.chunk", "model": "demo"}
        event(dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]))
        for text in self.STREAMED:
            time.sleep(0.4)
            event(dict(chunk, choices=[{"index": 0, "delta": {"content": text}, "finish_reason": None}]))
        event(dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        options = request.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 24, "total_tokens": prompt_tokens + 24}
            event(dict(chunk, choices=[], usage=usage))
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def log_message(self, fmt, *args):
        print("upstream: " + fmt % args, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    ThreadingHTTPServer((args.host, args.port), Echo).serve_forever()


if __name__ == "__main__":
    main()
