// The fixture server of the official MCP conformance suite's 2026-07-28
// server scenarios (tests/mcp_conformance_2026.rs), written with the
// official TypeScript SDK v2 (`@modelcontextprotocol/server`): the tools,
// resources and prompts the required scenarios call, each answering as the
// scenario's description asks, and the tools two pending ones look for (a
// 2020-12 input schema, an `x-mcp-header` argument); not the tasks
// extension (not scored; the SDK has none). The SDK does the protocol (`server/discover`,
// the per-request `_meta`, -32020/-32021/-32022, `subscriptions/listen`,
// caching hints); this file only registers the fixtures and serves them on
// node:http.
//
// node server.mjs --port-file FILE   (listens on 127.0.0.1, a free port)

import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';

import {
    McpServer,
    ResourceTemplate,
    acceptedContent,
    completable,
    createMcpHandler,
    createRequestStateCodec,
    fromJsonSchema,
    hostHeaderValidationResponse,
    inputRequired,
    inputResponse,
    localhostAllowedHostnames,
    localhostAllowedOrigins,
    originValidationResponse
} from '@modelcontextprotocol/server';
import { z } from 'zod';

const args = process.argv.slice(2);
const portFile = args[args.indexOf('--port-file') + 1];

// A 1x1 PNG and a silent 16-sample WAV, made for these fixtures.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';
const WAV = 'UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA';

// requestState is sealed (HMAC, the SDK's codec) with the tool it was minted
// for; a tampered or foreign state is refused by the SDK with -32602 before
// the handler runs.
const codec = createRequestStateCodec({ key: randomBytes(32), ttlSeconds: 600 });

// The input schema the json-schema-2020-12 scenario's description gives.
const SCHEMA_2020_12 = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: { address: { $anchor: 'addressDef', type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
    properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contactMethod: { type: 'string', enum: ['phone', 'email'] },
        phone: { type: 'string' },
        email: { type: 'string' }
    },
    allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
    if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
    then: { required: ['phone'] },
    else: { required: ['email'] },
    additionalProperties: false
};

const text = t => ({ content: [{ type: 'text', text: t }] });
const sleep = ms => new Promise(r => setTimeout(r, ms));
const noArgs = z.object({});
const nameForm = (message, field) =>
    inputRequired.elicit({
        message,
        requestedSchema: { type: 'object', properties: { [field]: { type: 'string' } }, required: [field] }
    });

/** The verified state of the retry, if it was minted for `tool`. */
function stateOf(ctx, tool) {
    const s = ctx.mcpReq.requestState();
    return s && typeof s === 'object' && s.tool === tool ? s : undefined;
}

function tools(server, notify) {
    server.registerTool('test_simple_text', { description: 'Returns simple text', inputSchema: noArgs }, async () =>
        text('This is a simple text response for testing.')
    );
    server.registerTool('test_image_content', { description: 'Returns an image', inputSchema: noArgs }, async () => ({
        content: [{ type: 'image', data: PNG, mimeType: 'image/png' }]
    }));
    server.registerTool('test_audio_content', { description: 'Returns audio', inputSchema: noArgs }, async () => ({
        content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }]
    }));
    server.registerTool('test_embedded_resource', { description: 'Returns an embedded resource', inputSchema: noArgs }, async () => ({
        content: [
            {
                type: 'resource',
                resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' }
            }
        ]
    }));
    server.registerTool('test_multiple_content_types', { description: 'Returns text, an image and a resource', inputSchema: noArgs }, async () => ({
        content: [
            { type: 'text', text: 'Multiple content types test:' },
            { type: 'image', data: PNG, mimeType: 'image/png' },
            {
                type: 'resource',
                resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' }
            }
        ]
    }));
    server.registerTool('test_tool_with_progress', { description: 'Reports progress', inputSchema: noArgs }, async (_args, ctx) => {
        const token = ctx.mcpReq._meta?.progressToken;
        for (const progress of [0, 50, 100]) {
            if (token !== undefined) {
                await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
            }
            if (progress < 100) await sleep(50);
        }
        return text('Progress reported');
    });
    server.registerTool('test_error_handling', { description: 'Always fails', inputSchema: noArgs }, async () => ({
        isError: true,
        content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }]
    }));
    // Asks the model; the SDK answers -32021 naming `sampling` (HTTP 400)
    // when the request did not declare it.
    server.registerTool('test_missing_capability', { description: 'Needs the sampling capability', inputSchema: noArgs }, async (_args, ctx) => {
        if (inputResponse(ctx.mcpReq.inputResponses, 'sample').kind === 'sampling') return text('Success');
        return inputRequired({
            inputRequests: {
                sample: inputRequired.createMessage({
                    messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
                    maxTokens: 20
                })
            }
        });
    });
    server.registerTool('test_streaming_elicitation', { description: 'A streamed reply: a notification, then the result', inputSchema: noArgs }, async (_args, ctx) => {
        await ctx.mcpReq.notify({ method: 'notifications/message', params: { level: 'info', data: 'streaming' } });
        return text('Streaming complete');
    });
    server.registerTool('test_logging_tool', { description: 'Logs only when the request set a log level', inputSchema: noArgs }, async (_args, ctx) => {
        if (ctx.mcpReq.envelope?.['io.modelcontextprotocol/logLevel']) {
            await ctx.mcpReq.notify({ method: 'notifications/message', params: { level: 'info', data: 'logging evaluated' } });
        }
        return text('Logging evaluated');
    });
    server.registerTool('test_trigger_tool_change', { description: 'Announces a tools list change', inputSchema: noArgs }, async () => {
        notify().toolsChanged();
        return text('Mutation triggered');
    });
    server.registerTool('test_trigger_prompt_change', { description: 'Announces a prompts list change', inputSchema: noArgs }, async () => {
        notify().promptsChanged();
        return text('Mutation triggered');
    });
    // The pending scenarios': a 2020-12 schema listed as written, and an
    // argument mirrored in an `Mcp-Param-Region` header.
    server.registerTool(
        'json_schema_2020_12_tool',
        { description: 'Tool with JSON Schema 2020-12 features', inputSchema: fromJsonSchema(SCHEMA_2020_12) },
        async args => text(`contact: ${args.contactMethod ?? 'none'}`)
    );
    server.registerTool(
        'test_header_param',
        {
            description: 'Echoes an argument that is also sent as a header',
            inputSchema: fromJsonSchema({
                type: 'object',
                properties: { region: { type: 'string', 'x-mcp-header': 'Region' } },
                required: ['region']
            })
        },
        async ({ region }) => text(`region: ${region}`)
    );
    mrtrTools(server);
}

function mrtrTools(server) {
    server.registerTool('test_input_required_result_elicitation', { description: 'Asks the user for a name', inputSchema: noArgs }, async (_args, ctx) => {
        const got = acceptedContent(ctx.mcpReq.inputResponses, 'user_name');
        if (typeof got?.name !== 'string') {
            return inputRequired({ inputRequests: { user_name: nameForm('What is your name?', 'name') } });
        }
        return text(`Hello, ${got.name}!`);
    });
    server.registerTool('test_input_required_result_sampling', { description: 'Asks the model a question', inputSchema: noArgs }, async (_args, ctx) => {
        const got = inputResponse(ctx.mcpReq.inputResponses, 'capital_question');
        if (got.kind !== 'sampling') {
            return inputRequired({
                inputRequests: {
                    capital_question: inputRequired.createMessage({
                        messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }],
                        maxTokens: 100
                    })
                }
            });
        }
        return text(`Model said: ${got.result.content?.text ?? ''}`);
    });
    server.registerTool('test_input_required_result_list_roots', { description: "Asks for the client's roots", inputSchema: noArgs }, async (_args, ctx) => {
        const got = inputResponse(ctx.mcpReq.inputResponses, 'client_roots');
        if (got.kind !== 'roots') {
            return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
        }
        return text(`Roots: ${got.roots.map(r => r.uri).join(', ')}`);
    });
    server.registerTool('test_input_required_result_request_state', { description: 'Asks for a confirmation with state', inputSchema: noArgs }, async (_args, ctx) => {
        const tool = 'test_input_required_result_request_state';
        const ok = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
        if (stateOf(ctx, tool) && ok) return text(`state-ok: confirmed ${ok.ok}`);
        return inputRequired({
            inputRequests: {
                confirm: inputRequired.elicit({
                    message: 'Please confirm',
                    requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }
                })
            },
            requestState: await codec.mint({ tool })
        });
    });
    server.registerTool('test_input_required_result_multiple_inputs', { description: 'Asks the user, the model and for roots', inputSchema: noArgs }, async (_args, ctx) => {
        const tool = 'test_input_required_result_multiple_inputs';
        const r = ctx.mcpReq.inputResponses;
        const name = acceptedContent(r, 'user_name');
        const greeting = inputResponse(r, 'greeting');
        const roots = inputResponse(r, 'client_roots');
        if (stateOf(ctx, tool) && name && greeting.kind === 'sampling' && roots.kind === 'roots') {
            return text(`Hello ${name.name}, ${roots.roots.length} root(s)`);
        }
        return inputRequired({
            inputRequests: {
                user_name: nameForm('What is your name?', 'name'),
                greeting: inputRequired.createMessage({
                    messages: [{ role: 'user', content: { type: 'text', text: 'Generate a greeting' } }],
                    maxTokens: 50
                }),
                client_roots: inputRequired.listRoots()
            },
            requestState: await codec.mint({ tool })
        });
    });
    server.registerTool('test_input_required_result_multi_round', { description: 'Asks twice', inputSchema: noArgs }, async (_args, ctx) => {
        const tool = 'test_input_required_result_multi_round';
        const state = stateOf(ctx, tool);
        const r = ctx.mcpReq.inputResponses;
        if (state?.round === 2 && acceptedContent(r, 'step2')) {
            return text(`Done: ${state.name} likes ${acceptedContent(r, 'step2').color}`);
        }
        const step1 = acceptedContent(r, 'step1');
        if (state?.round === 1 && step1) {
            return inputRequired({
                inputRequests: { step2: nameForm('Step 2: What is your favorite color?', 'color') },
                requestState: await codec.mint({ tool, round: 2, name: step1.name })
            });
        }
        return inputRequired({
            inputRequests: { step1: nameForm('Step 1: What is your name?', 'name') },
            requestState: await codec.mint({ tool, round: 1 })
        });
    });
    server.registerTool('test_input_required_result_tampered_state', { description: 'Seals its state', inputSchema: noArgs }, async (_args, ctx) => {
        const tool = 'test_input_required_result_tampered_state';
        if (stateOf(ctx, tool) && acceptedContent(ctx.mcpReq.inputResponses, 'confirm')) return text('state-ok');
        return inputRequired({
            inputRequests: {
                confirm: inputRequired.elicit({
                    message: 'Please confirm',
                    requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }
                })
            },
            requestState: await codec.mint({ tool })
        });
    });
    server.registerTool('test_input_required_result_capabilities', { description: 'Asks only what the client can answer', inputSchema: noArgs }, async (_args, ctx) => {
        const caps = ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'] ?? {};
        const r = ctx.mcpReq.inputResponses;
        if (acceptedContent(r, 'elicit_input') || inputResponse(r, 'sample_input').kind === 'sampling') return text('Answered');
        const inputRequests = {};
        if (caps.elicitation) inputRequests.elicit_input = nameForm('What is your name?', 'name');
        if (caps.sampling) {
            inputRequests.sample_input = inputRequired.createMessage({
                messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
                maxTokens: 50
            });
        }
        // Neither declared: ask the model anyway, and the SDK answers -32021.
        if (Object.keys(inputRequests).length === 0) {
            inputRequests.sample_input = inputRequired.createMessage({
                messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
                maxTokens: 50
            });
        }
        return inputRequired({ inputRequests });
    });
}

function resources(server) {
    server.registerResource(
        'static-text',
        'test://static-text',
        { description: 'A static text resource', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] })
    );
    server.registerResource(
        'static-binary',
        'test://static-binary',
        { description: 'A static binary resource (a PNG)', mimeType: 'image/png' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }] })
    );
    server.registerResource(
        'watched-resource',
        'test://watched-resource',
        { description: 'A resource whose updates can be watched', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched resource content.' }] })
    );
    server.registerResource(
        'template',
        new ResourceTemplate('test://template/{id}/data', { list: undefined }),
        { description: 'A resource template with an id', mimeType: 'application/json' },
        async (uri, { id }) => ({
            contents: [
                {
                    uri: uri.href,
                    mimeType: 'application/json',
                    text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` })
                }
            ]
        })
    );
}

function prompts(server) {
    const user = t => ({ role: 'user', content: { type: 'text', text: t } });
    server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
        messages: [user('This is a simple prompt for testing.')]
    }));
    server.registerPrompt(
        'test_prompt_with_arguments',
        {
            description: 'A prompt with two arguments',
            argsSchema: z.object({
                arg1: completable(z.string().describe('First test argument'), v =>
                    ['paris', 'park', 'party', 'test'].filter(s => s.startsWith(v))
                ),
                arg2: z.string().describe('Second test argument')
            })
        },
        async ({ arg1, arg2 }) => ({ messages: [user(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`)] })
    );
    server.registerPrompt(
        'test_prompt_with_embedded_resource',
        { description: 'A prompt embedding a resource', argsSchema: z.object({ resourceUri: z.string().describe('URI of the resource to embed') }) },
        async ({ resourceUri }) => ({
            messages: [
                { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
                user('Please process the embedded resource above.')
            ]
        })
    );
    server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
        messages: [{ role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } }, user('Please analyze the image above.')]
    }));
    server.registerPrompt('test_input_required_result_prompt', { description: 'A prompt that asks the user first' }, async (ctx) => {
        const got = acceptedContent(ctx.mcpReq.inputResponses, 'user_context');
        if (typeof got?.context !== 'string') {
            return inputRequired({ inputRequests: { user_context: nameForm('What context should the prompt use?', 'context') } });
        }
        return { messages: [user(`Use this context: ${got.context}`)] };
    });
}

let handler;
const factory = () => {
    const server = new McpServer(
        { name: 'policy-kernel-conformance-fixture', version: '1.0.0' },
        {
            capabilities: { tools: { listChanged: true }, prompts: { listChanged: true }, resources: {}, completions: {} },
            requestState: { verify: (state, ctx) => codec.verify(state, ctx) }
        }
    );
    tools(server, () => handler.notify);
    resources(server);
    prompts(server);
    return server;
};
handler = createMcpHandler(factory, { onerror: e => console.error('mcp:', e.message) });

// node:http in front of the handler's web-standard face; DNS rebinding
// protection: only localhost Host and Origin headers.
const httpServer = http.createServer(async (req, res) => {
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    try {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) {
            headers.set(k, Array.isArray(v) ? v.join(', ') : v);
        }
        const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
        const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
            method: req.method,
            headers,
            body: hasBody ? Buffer.concat(chunks) : undefined,
            signal: abort.signal
        });
        const url = new URL(request.url);
        const response =
            hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
            originValidationResponse(request, localhostAllowedOrigins()) ??
            (url.pathname === '/mcp' ? await handler.fetch(request) : new Response('not found', { status: 404 }));
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (!response.body) return res.end();
        const reader = response.body.getReader();
        res.on('close', () => reader.cancel().catch(() => {}));
        for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            res.write(value);
        }
        res.end();
    } catch (e) {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(String(e));
    }
});
httpServer.listen(0, '127.0.0.1', () => {
    const { port } = httpServer.address();
    if (portFile) writeFileSync(portFile, String(port));
    console.error(`conformance fixture on http://127.0.0.1:${port}/mcp`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
