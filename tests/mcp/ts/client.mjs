// An MCP client session on the official TypeScript SDK (protocol
// 2025-11-25), for tests/mcp_bidirectional.rs and benches/mcp_progress.sh.
// It answers elicitations (accept, name "Ada") and sampling requests
// ("sampled: <first words>"), and records list_changed notifications.
// Usage: node client.mjs URL HEADERS_JSON STEPS_JSON
// Prints one JSON line per step:
//   {"op":"list"}                               -> {"tools":[names]}
//   {"op":"call","name":N,"args":{}}            -> {"text":...} or {"error":...,"code":...,"ms":...}
//   {"op":"progress","count":N,"interval_ms":M} -> {"delays":[ms],"text":...}
//     (each delay: receive time - the server's send time, same host clock)
//   {"op":"list_changed","timeout_ms":M}        -> {"arrived":bool,"ms":since add_tool}
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [url, headersJson, stepsJson] = process.argv.slice(2);
const now = () => performance.timeOrigin + performance.now();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const client = new Client(
  { name: "ts-bidi-client", version: "1.0.0" },
  { capabilities: { elicitation: { form: {}, url: {} }, sampling: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { name: "Ada" } }));
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  const first = req.params.messages[0]?.content;
  const t = first?.type === "text" ? first.text : "";
  return { role: "assistant", model: "test-model", content: { type: "text", text: `sampled: ${t.slice(0, 24)}` } };
});
let listChangedAt = null;
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  listChangedAt = now();
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: JSON.parse(headersJson) },
});
const errors = [];
client.onerror = (e) => errors.push(String(e));
try {
  await client.connect(transport);
} catch (e) {
  out({ fatal: String(e) });
  process.exit(1);
}
await sleep(100); // the GET stream opens after initialized

let addedAt = null;
for (const step of JSON.parse(stepsJson)) {
  const t0 = now();
  try {
    if (step.op === "list") {
      const r = await client.listTools();
      out({ tools: r.tools.map((t) => t.name) });
    } else if (step.op === "call") {
      if (step.name === "add_tool") addedAt = now();
      const r = await client.callTool({ name: step.name, arguments: step.args ?? {} }, undefined, { timeout: step.timeout_ms ?? 10000 });
      out({ text: r.content?.[0]?.text, isError: r.isError ?? false, ms: now() - t0 });
    } else if (step.op === "progress") {
      const delays = [];
      const r = await client.callTool(
        { name: "progress", arguments: { count: step.count, interval_ms: step.interval_ms } },
        undefined,
        {
          timeout: 20000,
          onprogress: (p) => {
            const sentAt = JSON.parse(p.message ?? "{}").sentAt;
            delays.push(now() - sentAt);
          },
        },
      );
      out({ delays, text: r.content?.[0]?.text });
    } else if (step.op === "list_changed") {
      const deadline = now() + (step.timeout_ms ?? 3000);
      while (listChangedAt === null && now() < deadline) await sleep(10);
      out({ arrived: listChangedAt !== null, ms: listChangedAt && addedAt ? listChangedAt - addedAt : null });
    } else {
      out({ error: `unknown op ${step.op}` });
    }
  } catch (e) {
    out({ error: String(e.message ?? e), code: e.code ?? null, ms: now() - t0 });
  }
}
if (errors.length) process.stderr.write(JSON.stringify({ transport_errors: errors }) + "\n");
await transport.terminateSession().catch(() => {});
await client.close();
process.exit(0);
