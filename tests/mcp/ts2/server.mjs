// An MCP server (official TypeScript SDK v2, `@modelcontextprotocol/server`)
// whose tools and prompts ask the client for input (form and URL elicitation,
// sampling, roots), for the tool-agent's end-to-end tests: the twin of
// tests/mcp/mrtr_server.py (same CLI, tools, prompts, answers and record lines).
//
// Each handler is written once, the v2 SDK's way: it returns
// `inputRequired(...)` (an `input_required` result with `inputRequests` and a
// `requestState` sealed by the SDK's `createRequestStateCodec`, checked by the
// `requestState.verify` hook before the handler runs) and reads the retry's
// `inputResponses`. To a 2026-07-28 client that result goes on the wire; to a
// 2025-11-25 client (initialize handshake) the SDK's legacy shim asks the same
// questions as server-to-client requests on the call's SSE stream and
// re-enters the handler with the answers.
//
// Usage: server.mjs (--port-file FILE | --port N) [--json] [--stateless]
//                   [--record FILE]
// Binds 127.0.0.1 and serves `/mcp` until killed: with --port-file on a port of
// its own choosing, written to FILE; with --port on N. 2026-07-28 requests are
// served per request by `createMcpHandler` (`legacy: 'reject'`); with --json
// its replies are application/json (`responseMode: 'json'`), otherwise a call
// or prompt that carries a progress token gets a progress event first, so its
// reply really is an SSE stream, the result or error last (`responseMode:
// 'auto'` upgrades on the first related message). 2025-11-25 requests
// (`isLegacyRequest`) go to a sessionful `WebStandardStreamableHTTPServerTransport`
// (`Mcp-Session-Id`), which the shim needs to send requests; --stateless uses
// the SDK's `legacyStatelessFallback` instead (no session, so no asks on that
// path; nor with --json). With --record, each tool call or prompt rendering run
// to completion appends one JSON line to FILE:
// {"kind": "tool"|"prompt", "tool": name, "args", "answers", "protocol"} (given
// twice, the last --record counts, as with argparse).
//
// Tools: ask_form(kind), ask_url(url), summarise(text), list_roots(),
// read_file(path), delete_file(path). Prompts: greet, greet_secret.

import { createHash, randomUUID } from 'node:crypto';
import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import {
    McpServer,
    PROTOCOL_VERSION_META_KEY,
    WebStandardStreamableHTTPServerTransport,
    acceptedContent,
    createMcpHandler,
    createRequestStateCodec,
    inputRequired,
    inputResponse,
    isInitializeRequest,
    isLegacyRequest,
    legacyStatelessFallback
} from '@modelcontextprotocol/server';
import * as z from 'zod';

const { values: opts } = parseArgs({
    options: {
        'port-file': { type: 'string' },
        port: { type: 'string' },
        json: { type: 'boolean', default: false },
        stateless: { type: 'boolean', default: false },
        record: { type: 'string', multiple: true }
    }
});
if ((opts['port-file'] === undefined) === (opts.port === undefined)) {
    console.error('usage: server.mjs (--port-file FILE | --port N) [--json] [--stateless] [--record FILE]');
    process.exit(2);
}
const RECORD = opts.record?.at(-1);
const SSE_PROGRESS = !opts.json;

/** JSON as Python's `json.dumps` writes it (", " and ": "), so answers match mrtr_server.py's. */
function pyDumps(v) {
    if (Array.isArray(v)) return `[${v.map(pyDumps).join(', ')}]`;
    if (v !== null && typeof v === 'object') {
        return `{${Object.entries(v)
            .map(([k, x]) => `${JSON.stringify(k)}: ${pyDumps(x)}`)
            .join(', ')}}`;
    }
    return JSON.stringify(v);
}

// --- Forms ---------------------------------------------------------------------

const NameForm = z.object({ name: z.string().meta({ title: 'Name' }) });
const PasswordForm = z.object({ password: z.string().meta({ title: 'Password' }) });
const ApiKeyForm = z.object({ api_key: z.string().meta({ title: 'Api Key' }) });

const FORMS = {
    plain: ['What is your name?', NameForm],
    secret: ['Enter your password', PasswordForm],
    apikey: ['Enter your API key', ApiKeyForm]
};

// --- requestState: the SDK's HMAC codec, bound to the method ------------------------

const codec = createRequestStateCodec({
    key: crypto.getRandomValues(new Uint8Array(32)),
    ttlSeconds: 600,
    bind: ctx => ctx.mcpReq.method
});

/** What a question's state names: its key and a digest of the target and what was shown. */
function digest(target, key, request) {
    return createHash('sha256')
        .update(JSON.stringify([target, key, request]))
        .digest('hex')
        .slice(0, 32);
}

/** The `input_required` result asking `request` under `key`, with its sealed state. */
async function ask(ctx, target, key, request) {
    const requestState = await codec.mint({ asked: key, q: digest(target, key, request) }, ctx);
    return inputRequired({ inputRequests: { [key]: request }, requestState });
}

/**
 * The client's answer to `request` (`inputResponse`'s view, of `kind`) when
 * this round is its retry: the verified state names this very question.
 */
function answered(ctx, target, key, request, kind) {
    const state = ctx.mcpReq.requestState();
    const view = inputResponse(ctx.mcpReq.inputResponses, key);
    const same = state?.asked === key && state?.q === digest(target, key, request);
    return same && view.kind === kind ? view : undefined;
}

// --- The server ------------------------------------------------------------------

/** The request's revision: its `_meta` (2026-07-28), the session's handshake, or (stateless 2025) its header. */
function protocolOf(server, ctx) {
    return (
        ctx.mcpReq.envelope?.[PROTOCOL_VERSION_META_KEY] ??
        server.server.getNegotiatedProtocolVersion() ??
        ctx.http?.req?.headers.get('mcp-protocol-version') ??
        null
    );
}

function record(server, ctx, kind, name, args, answers) {
    if (RECORD) {
        const line = { kind, tool: name, args, answers, protocol: protocolOf(server, ctx) };
        appendFileSync(RECORD, pyDumps(line) + '\n');
    }
}

/**
 * SSE mode: one progress event before the call's result, when the request
 * asked for progress. Once per request: the legacy shim's re-entries (which
 * carry the answers) are the same request.
 */
async function progressFirst(ctx) {
    const token = ctx.mcpReq._meta?.progressToken;
    const reentry = ctx.mcpReq.envelope === undefined && ctx.mcpReq.inputResponses !== undefined;
    if (SSE_PROGRESS && token !== undefined && !reentry) {
        await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken: token, progress: 0, total: 1, message: 'working' }
        });
    }
}

const text = t => ({ content: [{ type: 'text', text: t }] });

function buildServer() {
    const server = new McpServer(
        { name: 'tool-agent-mrtr', version: '1.0.0' },
        { capabilities: { tools: {}, prompts: {} }, requestState: { verify: codec.verify } }
    );

    server.registerTool(
        'ask_form',
        {
            description: 'Ask the user a form (plain: name, secret: password, apikey: api_key); answer with the reply.',
            inputSchema: z.object({ kind: z.enum(['plain', 'secret', 'apikey']) })
        },
        async ({ kind }, ctx) => {
            await progressFirst(ctx);
            const [message, schema] = FORMS[kind];
            const request = inputRequired.elicit({ message, requestedSchema: schema });
            const target = `ask_form:${kind}`;
            const view = answered(ctx, target, 'form', request, 'elicit');
            if (!view) return ask(ctx, target, 'form', request);
            const reply = { action: view.action };
            if (view.action === 'accept') {
                // Validated against the form's schema; an answer that does not fit is asked again.
                reply.content = acceptedContent(ctx.mcpReq.inputResponses, 'form', schema);
                if (reply.content === undefined) return ask(ctx, target, 'form', request);
            }
            record(server, ctx, 'tool', 'ask_form', { kind }, reply);
            return text(pyDumps(reply));
        }
    );

    server.registerTool(
        'summarise',
        { description: "Summarise a text with the client's model (sampling).", inputSchema: z.object({ text: z.string() }) },
        async (args, ctx) => {
            await progressFirst(ctx);
            const request = inputRequired.createMessage({
                messages: [{ role: 'user', content: { type: 'text', text: args.text } }],
                maxTokens: 200,
                systemPrompt: "Summarise the user's text in one sentence."
            });
            const view = answered(ctx, 'summarise', 'summary', request, 'sampling');
            if (!view) return ask(ctx, 'summarise', 'summary', request);
            const content = view.result.content;
            const sampled = !Array.isArray(content) && content?.type === 'text' ? content.text : '';
            record(server, ctx, 'tool', 'summarise', { text: args.text }, view.result);
            return text(sampled);
        }
    );

    server.registerTool('list_roots', { description: "List the client's roots." }, async ctx => {
        await progressFirst(ctx);
        const request = inputRequired.listRoots();
        const view = answered(ctx, 'list_roots', 'roots', request, 'roots');
        if (!view) return ask(ctx, 'list_roots', 'roots', request);
        const uris = view.roots.map(r => r.uri);
        record(server, ctx, 'tool', 'list_roots', {}, uris);
        return text(pyDumps(uris));
    });

    server.registerTool(
        'ask_url',
        { description: 'Send the user to a URL (URL-mode elicitation); answer with the action.', inputSchema: z.object({ url: z.string() }) },
        async ({ url }, ctx) => {
            await progressFirst(ctx);
            // The SDK answers -32021 itself when the request did not declare URL elicitation.
            const request = inputRequired.elicitUrl({ message: `Open ${url} to continue`, url });
            const view = answered(ctx, 'ask_url', 'open_url', request, 'elicit');
            if (!view) return ask(ctx, 'ask_url', 'open_url', request);
            record(server, ctx, 'tool', 'ask_url', { url }, { action: view.action });
            return text(view.action);
        }
    );

    async function greeting(ctx, prompt, key, schema, message) {
        await progressFirst(ctx);
        const request = inputRequired.elicit({ message, requestedSchema: schema });
        const view = answered(ctx, prompt, key, request, 'elicit');
        if (!view) return ask(ctx, prompt, key, request);
        const answer = { action: view.action };
        if (view.action === 'accept') answer.content = acceptedContent(ctx.mcpReq.inputResponses, key, schema) ?? {};
        record(server, ctx, 'prompt', prompt, {}, answer);
        const field = Object.keys(schema.shape)[0];
        const said =
            answer.action !== 'accept'
                ? `The user chose ${answer.action}.`
                : `Greet the user; they gave a ${field} of ${String(answer.content[field] ?? '').length} characters.`;
        return { messages: [{ role: 'user', content: { type: 'text', text: said } }] };
    }

    server.registerPrompt('greet', { description: "A greeting; asks the user's name first." }, ctx =>
        greeting(ctx, 'greet', 'name', NameForm, 'What is your name?')
    );
    server.registerPrompt('greet_secret', { description: "A greeting; asks the user's password first." }, ctx =>
        greeting(ctx, 'greet_secret', 'password', PasswordForm, 'Enter your password')
    );

    // --- Tools that ask nothing (approval routes) ---
    server.registerTool(
        'read_file',
        { description: 'Read a file (answers with the path only).', inputSchema: z.object({ path: z.string() }) },
        async ({ path }, ctx) => {
            await progressFirst(ctx);
            record(server, ctx, 'tool', 'read_file', { path }, null);
            return text(`read ${path}`);
        }
    );
    server.registerTool(
        'delete_file',
        { description: 'Delete a file (answers with the path only).', inputSchema: z.object({ path: z.string() }) },
        async ({ path }, ctx) => {
            await progressFirst(ctx);
            record(server, ctx, 'tool', 'delete_file', { path }, null);
            return text(`deleted ${path}`);
        }
    );
    return server;
}

// --- Serving ---------------------------------------------------------------------

const onerror = e => console.error(`[server] ${e?.stack ?? e}`);
const modern = createMcpHandler(buildServer, { legacy: 'reject', responseMode: opts.json ? 'json' : 'auto', onerror });

/** 2025-11-25: one server and transport per session, as a sessionful deployment keeps them. */
const sessions = new Map();
const stateless = opts.stateless ? legacyStatelessFallback(buildServer, onerror) : undefined;

async function legacy(request) {
    if (stateless) return stateless(request);
    const sid = request.headers.get('mcp-session-id');
    if (sid) {
        const transport = sessions.get(sid);
        if (transport) return transport.handleRequest(request);
        return Response.json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }, { status: 404 });
    }
    const body = request.method === 'POST' ? await request.clone().json().catch(() => undefined) : undefined;
    if (!isInitializeRequest(body)) {
        return Response.json({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: Session ID required' }, id: null }, { status: 400 });
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: opts.json,
        onsessioninitialized: id => void sessions.set(id, transport),
        onsessionclosed: id => void sessions.delete(id)
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    const server = buildServer();
    server.server.onerror = onerror;
    await server.connect(transport);
    return transport.handleRequest(request);
}

async function serve(request) {
    if (new URL(request.url).pathname !== '/mcp') return new Response('Not Found', { status: 404 });
    if (request.method !== 'POST' || (await isLegacyRequest(request))) return legacy(request);
    return modern.fetch(request);
}

/** node:http to the web-standard face and back (the SDK's handlers take a `Request`). */
const http = createServer(async (req, res) => {
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    try {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) {
            for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
        }
        const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
            method: req.method,
            headers,
            body: ['GET', 'HEAD'].includes(req.method) ? undefined : Buffer.concat(chunks),
            signal: abort.signal
        });
        const response = await serve(request);
        res.writeHead(response.status, [...response.headers].flat());
        res.flushHeaders();
        if (response.body) {
            for await (const chunk of response.body) res.write(chunk);
        }
        res.end();
    } catch (e) {
        if (!abort.signal.aborted) onerror(e);
        if (!res.headersSent) res.writeHead(500);
        res.end();
    }
});

http.listen(Number(opts.port ?? 0), '127.0.0.1', () => {
    const port = http.address().port;
    if (opts['port-file']) {
        writeFileSync(`${opts['port-file']}.tmp`, String(port));
        renameSync(`${opts['port-file']}.tmp`, opts['port-file']);
    }
});
