// An MCP client (official TypeScript SDK v2, `@modelcontextprotocol/client`)
// that answers every question a server asks: form and URL elicitation,
// sampling, roots. The twin of tests/mcp/mrtr_client.py (same CLI, answers and
// JSON output). By default it speaks 2026-07-28 (`versionNegotiation: {mode:
// 'auto'}`: `server/discover`, questions arrive as `input_required` results and
// the SDK retries with `inputResponses`); with --legacy it uses the 2025-11-25
// initialize handshake (`mode: 'legacy'`, the SDK's default; questions arrive
// as server-to-client requests).
//
// Usage: client.mjs --url URL --steps JSON [--header K=V]... [--legacy]
//                   [--no-url-elicitation] [--no-sampling] [--no-progress]
//                   [--url-wait DIR]
// STEPS is a JSON list of {"op": "call", "name", "args"}, {"op": "prompt",
// "name", "args"} or {"op": "list"}. Prints one JSON document: a list with, per
// step, {"text", "is_error"} (call), {"text"} (prompt), {"tools", "prompts"}
// (list), or {"error": {"code", "message", "data"}} (a JSON-RPC error) or
// {"exception": "Type: message"}; each with "callbacks" (every question the
// client answered during the step: method, mode, url, message, fields, prompt),
// "progress" (progress events seen) and "status" (the HTTP status of the step's
// last response).
//
// Answers: a form gets "Ada" in each string field ("hunter2" for `password` and
// `api_key`); a URL is accepted; sampling replies "sampled: <prompt>"; roots are
// [file:///srv]; with --url-wait DIR, a URL elicitation is written to
// DIR/urls.jsonl and the callback returns when DIR/go appears (the user went
// there and is done: an approval decided). --no-url-elicitation declares form
// elicitation only, --no-sampling no sampling; --no-progress sends calls
// without a progress token (an SSE-mode server then answers JSON).

import { appendFileSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const { values: args } = parseArgs({
    options: {
        url: { type: 'string' },
        steps: { type: 'string' },
        header: { type: 'string', multiple: true, default: [] },
        legacy: { type: 'boolean', default: false },
        'no-url-elicitation': { type: 'boolean', default: false },
        'no-sampling': { type: 'boolean', default: false },
        'no-progress': { type: 'boolean', default: false },
        'url-wait': { type: 'string' }
    }
});
if (!args.url || !args.steps) {
    console.error('usage: client.mjs --url URL --steps JSON [--header K=V]... [--legacy] [--no-url-elicitation] [--no-sampling] [--no-progress] [--url-wait DIR]');
    process.exit(2);
}
const steps = JSON.parse(args.steps);
const headers = Object.fromEntries(args.header.map(h => [h.slice(0, h.indexOf('=')), h.slice(h.indexOf('=') + 1)]));
const progress = !args['no-progress'];
const SECRET_FIELDS = new Set(['password', 'api_key']);
/** Long enough for a user at an approval page (--url-wait waits up to 60 s). */
const TIMEOUT_MS = 120_000;

// --- The callbacks; each logs what it was asked into `asked` ---------------------

let asked = [];
let progressSeen = 0;

/** --url-wait DIR: the user opens `url` (a line in DIR/urls.jsonl) and says they
 * are done (the file DIR/go, which this removes), within 60 s. */
async function waitForUser(url) {
    const dir = args['url-wait'];
    if (!dir) return;
    appendFileSync(join(dir, 'urls.jsonl'), JSON.stringify({ url }) + '\n');
    const go = join(dir, 'go');
    for (let i = 0; i < 1200; i++) {
        if (existsSync(go)) {
            rmSync(go);
            return;
        }
        await sleep(50);
    }
    throw new Error(`nobody said the page at ${url} was done`);
}

const capabilities = {
    elicitation: args['no-url-elicitation'] ? { form: {} } : { form: {}, url: {} },
    roots: {},
    ...(args['no-sampling'] ? {} : { sampling: {} })
};
const client = new Client(
    { name: 'mrtr-client', version: '1.0.0' },
    { capabilities, versionNegotiation: { mode: args.legacy ? 'legacy' : 'auto' } }
);

client.setRequestHandler('elicitation/create', async request => {
    const params = request.params;
    if (params.mode === 'url') {
        asked.push({ method: 'elicitation/create', mode: 'url', url: params.url, message: params.message });
        await waitForUser(params.url);
        return { action: 'accept' };
    }
    const properties = params.requestedSchema?.properties ?? {};
    asked.push({ method: 'elicitation/create', mode: 'form', message: params.message, fields: Object.keys(properties) });
    const content = Object.fromEntries(
        Object.entries(properties)
            .filter(([, schema]) => schema.type === 'string')
            .map(([name]) => [name, SECRET_FIELDS.has(name) ? 'hunter2' : 'Ada'])
    );
    return { action: 'accept', content };
});

if (!args['no-sampling']) {
    client.setRequestHandler('sampling/createMessage', async request => {
        const prompt = request.params.messages
            .flatMap(m => (Array.isArray(m.content) ? m.content : [m.content]))
            .filter(b => b.type === 'text')
            .map(b => b.text)
            .join(' ');
        asked.push({ method: 'sampling/createMessage', prompt });
        return { role: 'assistant', content: { type: 'text', text: `sampled: ${prompt}` }, model: 'mrtr-client', stopReason: 'endTurn' };
    });
}

client.setRequestHandler('roots/list', async () => {
    asked.push({ method: 'roots/list' });
    return { roots: [{ uri: 'file:///srv' }] };
});

// --- The steps -------------------------------------------------------------------

const statuses = [];
const transport = new StreamableHTTPClientTransport(new URL(args.url), {
    requestInit: { headers },
    fetch: async (input, init) => {
        const response = await fetch(input, init);
        statuses.push(response.status);
        return response;
    }
});

/** A progress event of the server's. The SDK's own input-required driver also
 * calls `onprogress` once per round ("Fulfilling input required by ..."), with
 * nothing from the wire behind it: those are not counted. */
function counted(p) {
    if (!String(p.message ?? '').startsWith('Fulfilling input required by ')) progressSeen += 1;
}

const textOf = blocks => blocks.map(b => b.text ?? '').join('');

/** A step's failure: the JSON-RPC error, or the exception's type and text. */
function describe(e) {
    if (e instanceof ProtocolError) return { error: { code: e.code, message: e.message, data: e.data ?? null } };
    return { exception: `${e?.name ?? typeof e}: ${e?.message ?? e}` };
}

async function runStep(step) {
    const options = { timeout: TIMEOUT_MS };
    if (step.op === 'call') {
        if (progress) options.onprogress = counted;
        const result = await client.callTool({ name: step.name, arguments: step.args ?? {} }, options);
        return { text: textOf(result.content), is_error: Boolean(result.isError) };
    }
    if (step.op === 'prompt') {
        // As the Python client: a prompt asks for progress (a token in `_meta`)
        // but its events reach no counter.
        if (progress) options.onprogress = () => {};
        const prompt = await client.getPrompt({ name: step.name, arguments: step.args ?? undefined }, options);
        return { text: prompt.messages.map(m => textOf([m.content])).join('') };
    }
    if (step.op === 'list') {
        const tools = await client.listTools(undefined, options);
        const prompts = await client.listPrompts(undefined, options);
        return { tools: tools.tools.map(t => t.name).sort(), prompts: prompts.prompts.map(p => p.name).sort() };
    }
    throw new Error(`unknown op ${JSON.stringify(step.op)}`);
}

const out = [];
try {
    await client.connect(transport, { timeout: TIMEOUT_MS });
    for (const step of steps) {
        asked = [];
        progressSeen = 0;
        statuses.length = 0;
        let entry;
        try {
            entry = await runStep(step);
        } catch (e) {
            entry = describe(e);
        }
        entry.callbacks = asked;
        entry.progress = progressSeen;
        entry.status = statuses.at(-1) ?? null;
        out.push(entry);
    }
    await client.close();
} catch (e) {
    // The connection failed to open or to close.
    const failure = { ...describe(e), status: statuses.at(-1) ?? null };
    while (out.length < steps.length) out.push({ ...failure, callbacks: [], progress: 0 });
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);
