// An A2A agent on the official JavaScript SDK (npm @a2a-js/sdk, its Express
// server with legacyCompat: protocol 1.0 and 0.3 on the same URLs), for the
// parser-parity harness (tests/a2a/parity.py) beside the Python server.
// Usage: node server.mjs --port-file FILE [--record FILE]
// Binds 127.0.0.1 on a port of its own, written to FILE once listening.
// Serves the card at /.well-known/agent-card.json, JSON-RPC at / and
// HTTP+JSON at /rest (0.3 under /rest/v1/...). Skills echo, summarize,
// admin_reset. The agent makes a task per message and answers with the
// artifact "echo: <text> [skill=<skill>]", then completes it.
// With --record, appends one JSON line to FILE for each message the agent
// runs, as the SDK parsed it (the shape of server.py's record):
// {"event":"execute","message_id","task_id","message_task_id",
//  "reference_task_ids","texts","data","file_urls","file_names","skill"},
// and {"event":"push_config","task_id","url"} for each push config stored.
import { randomUUID } from "node:crypto";
import { appendFileSync, renameSync, writeFileSync } from "node:fs";
import express from "express";
import { AGENT_CARD_PATH, TaskState } from "@a2a-js/sdk";
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
} from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from "@a2a-js/sdk/server/express";

const arg = (name) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined);
const portFile = arg("--port-file");
const recordFile = arg("--record");
const record = (o) => recordFile && appendFileSync(recordFile, JSON.stringify(o) + "\n");

const textPart = (t) => ({ content: { $case: "text", value: t }, metadata: undefined, filename: "", mediaType: "text/plain" });

class EchoAgent {
  cancelTask = async () => {};

  async execute(ctx, bus) {
    const msg = ctx.userMessage;
    const texts = [];
    const data = [];
    const urls = [];
    const names = [];
    for (const p of msg.parts ?? []) {
      const c = p.content;
      if (c?.$case === "text") texts.push(c.value);
      else if (c?.$case === "data") data.push(c.value);
      else if (c?.$case === "url") urls.push(c.value);
      if (p.filename) names.push(p.filename);
    }
    const skill = msg.metadata?.skill ?? null;
    record({
      event: "execute",
      message_id: msg.messageId,
      task_id: ctx.taskId,
      message_task_id: msg.taskId,
      reference_task_ids: msg.referenceTaskIds ?? [],
      texts,
      data,
      file_urls: urls,
      file_names: names,
      skill,
      metadata: msg.metadata ?? {},
    });
    const { taskId, contextId } = ctx;
    if (!ctx.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString(), message: undefined },
          artifacts: [],
          history: [msg],
          metadata: undefined,
        }),
      );
    }
    const suffix = skill ? ` [skill=${skill}]` : "";
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: randomUUID(),
          name: "result",
          description: "",
          parts: [textPart(`echo: ${texts.join(" ")}${suffix}`)],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: new Date().toISOString(), message: undefined },
        metadata: undefined,
      }),
    );
  }
}

/** The in-memory push store, recording each config it keeps. */
class RecordingPushStore extends InMemoryPushNotificationStore {
  async save(taskId, context, config) {
    record({ event: "push_config", task_id: taskId, url: config?.url });
    return super.save(taskId, context, config);
  }
}

const app = express();
const srv = app.listen(0, "127.0.0.1", () => {
  const port = srv.address().port;
  const base = `http://127.0.0.1:${port}`;
  const iface = (url, binding, version) => ({ url, protocolBinding: binding, tenant: "", protocolVersion: version });
  const card = {
    name: "a2a-js-parity-agent",
    description: "An echo agent on the A2A JavaScript SDK for the parser-parity tests.",
    supportedInterfaces: [
      iface(`${base}/`, "JSONRPC", "1.0"),
      iface(`${base}/rest`, "HTTP+JSON", "1.0"),
      iface(`${base}/`, "JSONRPC", "0.3"),
      iface(`${base}/rest`, "HTTP+JSON", "0.3"),
    ],
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: ["echo", "summarize", "admin_reset"].map((id) => ({
      id,
      name: id,
      description: id,
      tags: [id],
      examples: [],
      inputModes: [],
      outputModes: [],
      securityRequirements: [],
    })),
    documentationUrl: "",
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new EchoAgent(), undefined, new RecordingPushStore());
  const opts = { requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } };
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
  app.use("/rest", restHandler(opts));
  app.use("/", jsonRpcHandler(opts));
  if (portFile) {
    writeFileSync(portFile + ".tmp", String(port));
    renameSync(portFile + ".tmp", portFile);
  }
  process.stdout.write(JSON.stringify({ event: "listening", port }) + "\n");
});
