// An A2A client on the official JavaScript SDK (@a2a-js/sdk 1.3.0, protocol
// 1.0; with --v03 its 0.3 compatibility transports), for the A2A end-to-end
// tests. Same steps and JSON lines as ../client.py, but for "context_id"
// (neither taken on a send nor reported).
// Usage: node client.mjs CARD_BASE_URL HEADERS_JSON STEPS_JSON [--binding jsonrpc|rest] [--v03]
// Fetches CARD_BASE_URL/.well-known/agent-card.json and sends every later
// call to the interface the card names for the binding (default jsonrpc).
// HEADERS_JSON: extra HTTP headers for every request. --v03 uses only the
// card's protocolVersion 0.3 interfaces (0.3 method names, A2A-Version 0.3).
// Steps ("$last": the task of the latest send or stream; a message's skill
// goes in its metadata {"skill": ...}):
//   {"op":"card"} / {"op":"extended_card"} -> {"step","skills":[ids],"interfaces":[urls]}
//   {"op":"send","text":T,"skill":S?,"task_id":ID?,"nowait":bool?}
//                                  -> {"step":"send","task_id","state","artifact_text"}
//   {"op":"stream","text":T,"skill":S?}
//                                  -> per event {"step":"event","t_ms","kind","state","text","task_id"},
//                                     then {"step":"stream_end","events":N}
//   {"op":"get"|"cancel","task_id":ID} -> {"step","task_id","state","artifact_text"}
//   {"op":"list"}                  -> {"step":"list","task_ids":[...]}
//   {"op":"push_set","task_id":ID,"url":U} -> {"step":"push_set","task_id","config_id","url"}
// A failed step prints {"step","error","error_type","code"} (code: HTTP
// status for REST errors, the JSON-RPC code for JSON-RPC errors) and the run
// goes on.
import { randomUUID } from "node:crypto";
import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const binding = flag("--binding") ?? "jsonrpc";
const v03 = args.includes("--v03");
if (v03) args.splice(args.indexOf("--v03"), 1);
const [base, headersJson, stepsJson] = args;
const extra = JSON.parse(headersJson);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// Every request (card fetch included) carries the extra headers.
const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers);
  for (const [k, v] of Object.entries(extra)) headers.set(k, v);
  return fetch(url, { ...init, headers });
};
const legacyCompat = v03 ? { enabled: true } : undefined;
const resolver = new DefaultAgentCardResolver({ fetchImpl, legacyCompat });
const factory = new ClientFactory({
  transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat }), new RestTransportFactory({ fetchImpl, legacyCompat })],
  preferredTransports: [binding === "rest" ? "HTTP+JSON" : "JSONRPC"],
  cardResolver: resolver,
});

const stateName = (s) => (s == null || s === TaskState.TASK_STATE_UNSPECIFIED ? null : TaskState[s].replace(/^TASK_STATE_/, "").toLowerCase());
const partsText = (parts) => (parts ?? []).filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("\n");
const taskSummary = (t) => ({
  task_id: t.id,
  state: stateName(t.status?.state),
  artifact_text: (t.artifacts ?? []).map((a) => partsText(a.parts)).join("\n") || null,
});
const cardSummary = (step, card) => ({
  step,
  skills: (card.skills ?? []).map((s) => s.id),
  interfaces: (card.supportedInterfaces ?? []).map((i) => i.url),
});

let client = null;
let last = null;
async function fetchCard() {
  // The SDK resolves its default card path ("/.well-known/agent-card.json")
  // against the origin, dropping a path prefix such as a gateway's /a2a:
  // the card is named relative to the base instead.
  const card = await resolver.resolve(base.endsWith('/') ? base : `${base}/`, '.well-known/agent-card.json');
  const use = v03
    ? { ...card, supportedInterfaces: card.supportedInterfaces.filter((i) => i.protocolVersion === "0.3") }
    : card;
  client = await factory.createFromAgentCard(use);
  return card;
}
async function getClient() {
  if (!client) await fetchCard();
  return client;
}
const taskId = (step) => (step.task_id === "$last" ? last : step.task_id);
function request(step) {
  const message = {
    messageId: randomUUID(),
    contextId: "",
    taskId: step.task_id ? taskId(step) : "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: step.text ?? "hi" }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: step.skill ? { skill: step.skill } : undefined,
    extensions: [],
    referenceTaskIds: [],
  };
  return {
    tenant: "",
    message,
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: !!step.nowait },
    metadata: undefined,
  };
}

function errorLine(step, e) {
  let code = e?.statusCode ?? e?.envelopeCode ?? e?.errorResponse?.error?.code ?? e?.code;
  if (typeof code !== "number") {
    const m = /(?:status|HTTP|: )\s*(\d{3})\b/.exec(String(e?.message ?? e));
    code = m ? Number(m[1]) : null;
  }
  return { step, error: String(e?.message ?? e), error_type: e?.constructor?.name ?? typeof e, code };
}

async function run(step) {
  const op = step.op;
  if (op === "card") {
    out(cardSummary("card", await fetchCard()));
  } else if (op === "extended_card") {
    const c = await getClient();
    out(cardSummary("extended_card", await c.getAgentCard()));
  } else if (op === "send") {
    const c = await getClient();
    const res = await c.sendMessage(request(step));
    if ("status" in res && "artifacts" in res) {
      last = res.id;
      out({ step: "send", ...taskSummary(res) });
    } else {
      out({ step: "send", task_id: res.taskId || null, state: null, artifact_text: null, message_text: partsText(res.parts) });
    }
  } else if (op === "stream") {
    const c = await getClient();
    const t0 = performance.now();
    let n = 0;
    for await (const ev of c.sendMessageStream(request(step))) {
      n += 1;
      const line = { step: "event", t_ms: Math.round(performance.now() - t0) };
      const p = ev.payload;
      if (p?.$case === "task") {
        Object.assign(line, { kind: "task", state: stateName(p.value.status?.state), text: partsText(p.value.status?.message?.parts) || null, task_id: p.value.id });
      } else if (p?.$case === "statusUpdate") {
        Object.assign(line, { kind: "status_update", state: stateName(p.value.status?.state), text: partsText(p.value.status?.message?.parts) || null, task_id: p.value.taskId });
      } else if (p?.$case === "artifactUpdate") {
        Object.assign(line, { kind: "artifact_update", state: null, text: partsText(p.value.artifact?.parts) || null, task_id: p.value.taskId });
      } else {
        Object.assign(line, { kind: "message", state: null, text: partsText(p?.value?.parts) || null, task_id: p?.value?.taskId || null });
      }
      if (line.task_id) last = line.task_id;
      out(line);
    }
    out({ step: "stream_end", events: n });
  } else if (op === "get" || op === "cancel") {
    const c = await getClient();
    const task =
      op === "get"
        ? await c.getTask({ tenant: "", id: taskId(step) })
        : await c.cancelTask({ tenant: "", id: taskId(step), metadata: undefined });
    out({ step: op, ...taskSummary(task) });
  } else if (op === "list") {
    const c = await getClient();
    const res = await c.listTasks({ tenant: "", contextId: "", status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: "", statusTimestampAfter: undefined });
    out({ step: "list", task_ids: res.tasks.map((t) => t.id) });
  } else if (op === "push_set") {
    const c = await getClient();
    const cfg = await c.createTaskPushNotificationConfig({
      tenant: "",
      id: "",
      taskId: taskId(step),
      url: step.url,
      token: step.token ?? "",
      authentication: undefined,
    });
    out({ step: "push_set", task_id: cfg.taskId, config_id: cfg.id, url: cfg.url });
  } else {
    out({ step: op, error: `unknown op ${op}`, error_type: "Error", code: null });
  }
}

for (const step of JSON.parse(stepsJson)) {
  try {
    await run(step);
  } catch (e) {
    out(errorLine(step.op ?? "?", e));
  }
}
