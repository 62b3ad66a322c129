"""A notification receiver for tests/approvals_notify.rs.

Listens on 127.0.0.1 (a free port, written to --port-file) and writes one
JSON line per POST to --log: its path, the status it answered, the event
and delivery headers, whether the signature held, and the body.

* `/hook`: a signed webhook. The `x-policy-kernel-signature` header
  (`t=<unix>,v1=<hex>`) must be HMAC-SHA256 of `<t>.<body>` with the
  secret in --secret-file, and `t` within five minutes; else 401. The
  first --fail-first POSTs are answered 503.
* `/slack`: a Slack message: `text` and `blocks`, each block parsed by the
  official slack_sdk's Block Kit models, checked by their own
  `validate_json`, and unchanged by the round trip; else 400.
* `/teams`: a Teams message carrying an Adaptive Card; else 400.
"""

import argparse
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slack_sdk.models.blocks import Block

p = argparse.ArgumentParser()
p.add_argument("--port-file", required=True)
p.add_argument("--log", required=True)
p.add_argument("--secret-file", required=True)
p.add_argument("--fail-first", type=int, default=0)
args = p.parse_args()

secret = open(args.secret_file, "rb").read().strip()
lock = threading.Lock()
posts = {"n": 0}


def signed(header, body):
    try:
        parts = dict(kv.split("=", 1) for kv in header.split(","))
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - t) > 300:
        return False
    want = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts.get("v1", ""))


def slack_ok(msg):
    if not isinstance(msg.get("text"), str) or not isinstance(msg.get("blocks"), list):
        return "no text or blocks"
    for raw in msg["blocks"]:
        b = Block.parse(raw)
        if b is None or type(b) is Block:
            return f"unknown block {raw.get('type')}"
        b.validate_json()
        if b.to_dict() != raw:
            return f"block changed by the round trip: {raw} -> {b.to_dict()}"
    return None


def teams_ok(msg):
    try:
        att = msg["attachments"][0]
        card = att["content"]
        assert msg["type"] == "message"
        assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert card["type"] == "AdaptiveCard" and card["version"]
        assert all(isinstance(b, dict) and b.get("type") for b in card["body"])
        assert all(a["type"] == "Action.OpenUrl" and a["url"] for a in card["actions"])
    except (KeyError, IndexError, TypeError, AssertionError) as e:
        return f"not a Teams Adaptive Card message: {e!r}"
    return None


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        status, why = 200, None
        sig_ok = None
        try:
            msg = json.loads(body)
        except ValueError:
            msg, status, why = None, 400, "not JSON"
        if status == 200 and self.path == "/hook":
            with lock:
                posts["n"] += 1
                n = posts["n"]
            sig_ok = signed(self.headers.get("x-policy-kernel-signature", ""), body)
            if n <= args.fail_first:
                status, why = 503, "failing on purpose"
            elif not sig_ok:
                status, why = 401, "bad signature"
        elif status == 200 and self.path == "/slack":
            try:
                why = slack_ok(msg)
            except Exception as e:  # the SDK's validation errors
                why = f"Block Kit: {e}"
            status = 400 if why else 200
        elif status == 200 and self.path == "/teams":
            why = teams_ok(msg)
            status = 400 if why else 200
        line = {
            "path": self.path,
            "status": status,
            "why": why,
            "event": self.headers.get("x-policy-kernel-event"),
            "delivery": self.headers.get("x-policy-kernel-delivery"),
            "signed": sig_ok,
            "body": msg,
        }
        with lock, open(args.log, "a") as f:
            f.write(json.dumps(line) + "\n")
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os

os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
