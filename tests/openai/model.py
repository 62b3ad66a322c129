"""A stand-in for an OpenAI-compatible model server, for the parser-parity
harness (tests/openai/parity.py): it reads each request the way the OpenAI
API documents its fields and records the text the model would be given.

Usage: model.py --port-file FILE --record FILE

POST /v1/chat/completions: every message's `content` (a string, or parts:
`text` parts' text, `refusal` parts' refusal), tool messages alike, and the
`arguments` of an assistant's `tool_calls` (and legacy `function_call`).
POST /v1/responses: `instructions`, and `input` as a string or as items:
messages' `content` (a string, or `input_text` / `output_text` parts'
text, `refusal` parts), `function_call_output.output` (a string or parts),
`function_call.arguments`, reasoning summaries' text.
POST /v1/completions: `prompt`, a string or a list of strings.
POST /v1beta/models/M:generateContent (Gemini): `systemInstruction` and
`contents`, each content's `parts`: `text`, `functionCall.args` and
`functionResponse.response` as JSON (keys too), `executableCode.code`,
`codeExecutionResult.output`. Every field name in either spelling
(`system_instruction`, `function_response`, ...), as a protobuf JSON
parser takes them.
POST /model/M/converse (Bedrock Converse): `system` blocks' `text`, and
`messages`' content blocks: `text`, `toolUse.input` as JSON,
`toolResult.content`'s `text` and `json` blocks.
Every request's tool declarations are recorded too, as the model is given
them: `tools[].function` and `functions[]` (chat), `tools[]` (Responses),
Gemini's `functionDeclarations`, Converse's `toolConfig.tools[].toolSpec`:
each one's description and schema as JSON.
Bodies are read with Python's json (a repeated key: the last one). Each
request appends {"path", "texts": [...]} to the record and is answered with
a minimal completion.
"""

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORD = None


def parts_text(content, out, kinds=("text", "input_text", "output_text")):
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, list):
        for p in content:
            if isinstance(p, dict):
                if p.get("type") in kinds and isinstance(p.get("text"), str):
                    out.append(p["text"])
                elif p.get("type") == "refusal" and isinstance(p.get("refusal"), str):
                    out.append(p["refusal"])


def chat(doc, out):
    for m in doc.get("messages") or []:
        if not isinstance(m, dict):
            continue
        parts_text(m.get("content"), out)
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                out.append(fn["arguments"])
        fc = m.get("function_call")
        if isinstance(fc, dict) and isinstance(fc.get("arguments"), str):
            out.append(fc["arguments"])


def responses(doc, out):
    if isinstance(doc.get("instructions"), str):
        out.append(doc["instructions"])
    items = doc.get("input")
    if isinstance(items, str):
        out.append(items)
        return
    for it in items or []:
        if not isinstance(it, dict):
            continue
        kind = it.get("type", "message")
        if kind == "message":
            parts_text(it.get("content"), out)
        elif kind == "function_call_output":
            parts_text(it.get("output"), out, kinds=("input_text", "text", "output_text"))
        elif kind == "function_call" and isinstance(it.get("arguments"), str):
            out.append(it["arguments"])
        elif kind == "reasoning":
            for s in it.get("summary") or []:
                if isinstance(s, dict) and isinstance(s.get("text"), str):
                    out.append(s["text"])


def completions(doc, out):
    p = doc.get("prompt")
    if isinstance(p, str):
        out.append(p)
    elif isinstance(p, list):
        out.extend(x for x in p if isinstance(x, str))


def field(obj, name):
    """A protobuf JSON field: its lowerCamelCase name or its proto name."""
    snake = "".join("_" + c.lower() if c.isupper() else c for c in name)
    return obj.get(name, obj.get(snake))


def gemini(doc, out):
    contents = [field(doc, "systemInstruction")] + list(doc.get("contents") or [])
    for content in contents:
        if not isinstance(content, dict):
            continue
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                out.append(part["text"])
            call = field(part, "functionCall")
            if isinstance(call, dict) and "args" in call:
                out.append(json.dumps(call["args"]))
            response = field(part, "functionResponse")
            if isinstance(response, dict) and "response" in response:
                out.append(json.dumps(response["response"]))
            code = field(part, "executableCode")
            if isinstance(code, dict) and isinstance(code.get("code"), str):
                out.append(code["code"])
            result = field(part, "codeExecutionResult")
            if isinstance(result, dict) and isinstance(result.get("output"), str):
                out.append(result["output"])


def converse(doc, out):
    for block in doc.get("system") or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            out.append(block["text"])
    for m in doc.get("messages") or []:
        for block in (m.get("content") or []) if isinstance(m, dict) else []:
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("text"), str):
                out.append(block["text"])
            use = block.get("toolUse")
            if isinstance(use, dict) and "input" in use:
                out.append(json.dumps(use["input"]))
            result = block.get("toolResult")
            for c in (result.get("content") or []) if isinstance(result, dict) else []:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    out.append(c["text"])
                if isinstance(c, dict) and "json" in c:
                    out.append(json.dumps(c["json"]))


def declarations(doc, out):
    tools = list(doc.get("tools") or []) + list(doc.get("functions") or [])
    config = doc.get("toolConfig")
    if isinstance(config, dict):
        tools += list(config.get("tools") or [])
    for t in tools:
        if not isinstance(t, dict):
            continue
        decls = field(t, "functionDeclarations")
        inner = decls if isinstance(decls, list) else [t.get("function") or t.get("toolSpec") or t]
        for d in inner:
            if isinstance(d, dict):
                out.append(json.dumps({k: v for k, v in d.items() if k != "name"}))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        texts = []
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            if self.path.endswith("/chat/completions"):
                chat(doc, texts)
            elif self.path.endswith("/responses"):
                responses(doc, texts)
            elif self.path.endswith("/completions"):
                completions(doc, texts)
            elif self.path.endswith(":generateContent"):
                gemini(doc, texts)
            elif self.path.endswith("/converse"):
                converse(doc, texts)
            declarations(doc, texts)
        with open(RECORD, "a") as f:
            f.write(json.dumps({"path": self.path, "texts": texts}) + "\n")
        reply = json.dumps({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main():
    global RECORD
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--record", required=True)
    args = ap.parse_args()
    RECORD = args.record
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
