#!/usr/bin/env python3
"""Demo upstream for policy-kernel: echoes what it received as JSON.

POST /v1/chat/completions answers like an OpenAI-style chat completion (with
`usage.total_tokens`, which the token rate limiter charges) and echoes the
request it received under "echo", so the effect of policies (redacted PII,
added headers) is visible to the client. Standard library only.

Usage: demo_upstream.py [--host 127.0.0.1] [--port 8080]
"""
import argparse
import json
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
        if self.path.startswith("/v1/chat/completions"):
            try:
                messages = json.loads(body).get("messages", [])
            except ValueError:
                messages = []
            last = messages[-1].get("content", "") if messages else ""
            prompt_tokens = max(1, len(body) // 4)
            answer = {
                "id": "chatcmpl-demo",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "You said: " + str(last)}}],
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
