// An MCP server on the official TypeScript SDK (protocol 2025-11-25):
// sessions (Mcp-Session-Id), SSE replies, and a GET stream per session.
// Tools of tests/mcp_bidirectional.rs and benches/mcp_progress.sh:
//   read_file, delete_file       plain tools (for mcpToolFilter)
//   progress {count, interval_ms} progress notifications, each carrying its
//                                 send time (`sentAt`, ms, performance clock)
//   ask {kind: form|secret|url}   an elicitation (form, a form asking a
//                                 password, URL mode); returns the answer
//   summarise {text}              a sampling request with `text`
//   add_tool                      registers a tool: the SDK sends
//                                 notifications/tools/list_changed on the
//                                 session's GET stream
// Usage: node server.mjs [--port N] [--port-file FILE] [--record FILE]
// (127.0.0.1; port 0 by default: the port it got is written to FILE). With
// --record, read_file and delete_file append {"server": "ts", "tool", "args"}
// to FILE, as the SDK parsed them (tests/mcp/parity.py reads it).
import { randomUUID } from "node:crypto";
import { appendFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CreateMessageResultSchema, ElicitResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const now = () => performance.timeOrigin + performance.now();
const log = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ content: [{ type: "text", text: t }] });
const arg = (name) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined);
const recordFile = arg("--record");
const record = (tool, args) => recordFile && appendFileSync(recordFile, JSON.stringify({ server: "ts", tool, args }) + "\n");

function build() {
  const server = new McpServer({ name: "ts-bidi", version: "1.0.0" });
  server.registerTool("read_file", { inputSchema: { path: z.string() } }, async ({ path }) => {
    record("read_file", { path });
    return text(`read ${path}`);
  });
  server.registerTool("delete_file", { inputSchema: { path: z.string() } }, async ({ path }) => {
    record("delete_file", { path });
    return text(`deleted ${path}`);
  });
  server.registerTool(
    "progress",
    { inputSchema: { count: z.number().int(), interval_ms: z.number().int() } },
    async ({ count, interval_ms }, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= count; i++) {
        if (token !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress: i, total: count, message: JSON.stringify({ sentAt: now() }) },
          });
        }
        await sleep(interval_ms);
      }
      return text(`done ${count}`);
    },
  );
  // Server requests go through `extra.sendRequest`: on the call's own SSE
  // reply, as the SDK does for requests related to a call.
  server.registerTool("ask", { inputSchema: { kind: z.enum(["form", "secret", "url"]) } }, async ({ kind }, extra) => {
    const params =
      kind === "url"
        ? { mode: "url", message: "Sign in", url: "https://login.example.com/start", elicitationId: randomUUID() }
        : {
            mode: "form",
            message: "Who are you?",
            requestedSchema: {
              type: "object",
              properties: kind === "secret" ? { password: { type: "string" } } : { name: { type: "string" } },
            },
          };
    try {
      const answer = await extra.sendRequest({ method: "elicitation/create", params }, ElicitResultSchema, { timeout: 8000 });
      log({ event: "elicitation_answered", kind, action: answer.action });
      return text(JSON.stringify(answer));
    } catch (e) {
      log({ event: "elicitation_failed", kind, error: String(e) });
      throw e;
    }
  });
  server.registerTool("summarise", { inputSchema: { text: z.string() } }, async ({ text: t }, extra) => {
    const r = await extra.sendRequest(
      {
        method: "sampling/createMessage",
        params: { messages: [{ role: "user", content: { type: "text", text: t } }], maxTokens: 50 },
      },
      CreateMessageResultSchema,
      { timeout: 8000 },
    );
    log({ event: "sampled", model: r.model });
    return text(r.content.type === "text" ? r.content.text : "?");
  });
  server.registerTool("add_tool", {}, async () => {
    server.registerTool(`extra_${randomUUID().slice(0, 8)}`, {}, async () => text("extra"));
    log({ event: "tool_added", at: now() });
    return text("added");
  });
  return server;
}

const sessions = new Map();

async function handle(req, res) {
  const sid = req.headers["mcp-session-id"];
  let transport = sid ? sessions.get(sid) : undefined;
  if (!transport) {
    if (req.method !== "POST" || sid) {
      res.writeHead(sid ? 404 : 400).end();
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await build().connect(transport);
  }
  await transport.handleRequest(req, res);
}

const portFile = arg("--port-file");
const srv = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    log({ event: "error", error: String(e) });
    if (!res.headersSent) res.writeHead(500).end();
  });
});
srv.listen(Number(arg("--port") ?? 0), "127.0.0.1", () => {
  if (portFile) writeFileSync(portFile, String(srv.address().port));
  log({ event: "listening", port: srv.address().port });
});
