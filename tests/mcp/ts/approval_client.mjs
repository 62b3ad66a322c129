// An MCP client session on the official TypeScript SDK (1.32.x, protocol
// 2025-11-25) for the approvals end-to-end tests: a call that needs a
// person's approval, then the same call retried in the same session.
//
// Usage: node approval_client.mjs URL HEADERS_JSON OPTIONS_JSON
//   OPTIONS_JSON = {"url_elicitation": bool, "tool": name, "arguments": {...}}
// With url_elicitation the client declares `capabilities.elicitation =
// {form: {}, url: {}}`; without it, `{form: {}}` only (form mode, no URL mode).
//
// It calls the tool once, then reads commands from stdin, one a line:
//   retry                                   the same call again (same session)
//   call {"tool": ..., "arguments": {...}}  another call (same session)
//   quit                                    end the session (DELETE) and exit 0
// (end of input is a quit). Each call prints ONE JSON line:
//   {"result": text, "is_error": bool}                            success
//   {"elicitation": {elicitationId, url, message, mode}, "code": -32042}
//                                   the SDK raised UrlElicitationRequiredError
//   {"error": {"code", "message", "data"}}                        JSON-RPC error
//   {"http_status": N, "error": text[, "jsonrpc_error": {...}]}   HTTP failure
//     (the SDK turns any non-2xx POST into StreamableHTTPError, even when the
//     body is a JSON-RPC error; that body, if any, is in "jsonrpc_error")
// each with "status": the HTTP status of the call's last POST, if any.
// A notifications/elicitation/complete from the server, at any time (it comes
// on the session's GET stream), prints
//   {"notification": "notifications/elicitation/complete", "params": {...}}
// An elicitation/create request from the server is declined (logged on stderr).
// If the session cannot be opened, the outcome is printed like a call's and
// the next command tries to open it again.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitationCompleteNotificationSchema,
  ElicitRequestSchema,
  McpError,
  UrlElicitationRequiredError,
} from "@modelcontextprotocol/sdk/types.js";

const [url, headersJson, optionsJson] = process.argv.slice(2);
const headers = JSON.parse(headersJson || "{}");
const options = JSON.parse(optionsJson || "{}");
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const diag = (o) => process.stderr.write(JSON.stringify(o) + "\n");

// The HTTP status of each POST, as the SDK's transport saw it.
const statuses = [];
const recordingFetch = async (input, init) => {
  const response = await fetch(input, init);
  if ((init?.method ?? "GET") === "POST") statuses.push(response.status);
  return response;
};

let client = null;
let transport = null;

async function connect() {
  const c = new Client(
    { name: "approval-client-ts", version: "1.0.0" },
    { capabilities: { elicitation: options.url_elicitation ? { form: {}, url: {} } : { form: {} } } },
  );
  c.setRequestHandler(ElicitRequestSchema, async (req) => {
    diag({ elicitation_request: req.params, answer: "decline" });
    return { action: "decline" };
  });
  c.setNotificationHandler(ElicitationCompleteNotificationSchema, async (n) => {
    out({ notification: n.method, params: n.params });
  });
  c.onerror = (e) => diag({ transport_error: String(e) });
  const t = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
    fetch: recordingFetch,
  });
  await c.connect(t);
  client = c;
  transport = t;
  diag({ connected: true, session: t.sessionId ?? null, protocol: t.protocolVersion ?? null });
}

// The outcome of a failed call (or connect) as one JSON object.
function failure(e) {
  if (e instanceof UrlElicitationRequiredError) {
    const first = e.elicitations[0] ?? {};
    return {
      elicitation: { elicitationId: first.elicitationId, url: first.url, message: first.message, mode: first.mode },
      code: e.code,
    };
  }
  if (e instanceof McpError) {
    return { error: { code: e.code, message: e.message.replace(/^MCP error -?\d+: /, ""), data: e.data ?? null } };
  }
  if (e instanceof StreamableHTTPError) {
    const o = { http_status: e.code, error: String(e.message) };
    const body = String(e.message).replace(/^(Streamable HTTP error: )?Error POSTing to endpoint: /, "");
    try {
      const parsed = JSON.parse(body);
      if (parsed && parsed.error) o.jsonrpc_error = parsed.error;
    } catch {}
    return o;
  }
  return { http_status: null, error: `${e?.name ?? "Error"}: ${e?.message ?? e}` };
}

async function call(tool, args) {
  statuses.length = 0;
  let o;
  try {
    if (!client) await connect();
    const r = await client.callTool({ name: tool, arguments: args ?? {} }, undefined, { timeout: 30000 });
    const text = (r.content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");
    o = { result: text, is_error: r.isError ?? false };
  } catch (e) {
    diag({ call_failed: String(e), name: e?.name ?? null });
    o = failure(e);
  }
  o.status = statuses.length ? statuses[statuses.length - 1] : null;
  out(o);
}

async function quit(code) {
  if (transport) {
    await transport.terminateSession().catch((e) => diag({ terminate_failed: String(e) }));
  }
  if (client) await client.close().catch(() => {});
  process.exit(code);
}

try {
  let last = { tool: options.tool, arguments: options.arguments ?? {} };
  await call(last.tool, last.arguments);
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const raw of rl) {
    const line = raw.trim();
    if (!line) continue;
    const [cmd, ...rest] = line.split(/\s+/);
    if (cmd === "quit") break;
    if (cmd === "retry") {
      await call(last.tool, last.arguments);
    } else if (cmd === "call") {
      let spec;
      try {
        spec = JSON.parse(line.slice(4).trim());
      } catch (e) {
        out({ error: { code: null, message: `bad call command: ${e.message}`, data: null } });
        continue;
      }
      last = { tool: spec.tool, arguments: spec.arguments ?? {} };
      await call(last.tool, last.arguments);
    } else {
      out({ error: { code: null, message: `unknown command ${cmd}`, data: null } });
    }
  }
  await quit(0);
} catch (e) {
  diag({ crash: String(e?.stack ?? e) });
  process.exit(2);
}
