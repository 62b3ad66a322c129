// An MCP server (the official TypeScript SDK, streamable HTTP, stateless,
// JSON replies) for tests/identity.rs, on 127.0.0.1 at a port it picks.
//
//   node mcp-server.mjs --port-file FILE   (a port it picks, written to FILE)
//   node mcp-server.mjs --port N           (the make run demo)
//
// Tools: read_data, write_data, admin_data; each answers with its name and
// the `authorization` header it received ("none" when absent), so a test
// sees that the token travelled through Envoy and the kernel.
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const portFile = arg('port-file');
const listenPort = Number(arg('port') ?? 0);

function server(auth) {
  const s = new McpServer({ name: 'identity-test-server', version: '1.0.0' });
  for (const name of ['read_data', 'write_data', 'admin_data']) {
    s.tool(name, `the ${name} tool`, async () => ({
      content: [{ type: 'text', text: `${name} ok (${auth ? 'bearer' : 'none'})` }],
    }));
  }
  return s;
}

const httpServer = http.createServer(async (req, res) => {
  console.log(`${new Date().toISOString()} ${req.method} ${req.url} auth=${req.headers.authorization ? 'yes' : 'no'}`);
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const text = Buffer.concat(chunks).toString();
  const body = text ? JSON.parse(text) : undefined;
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  const s = server(req.headers.authorization);
  res.on('close', () => { transport.close(); s.close(); });
  await s.connect(transport);
  await transport.handleRequest(req, res, body);
});

httpServer.listen(listenPort, '127.0.0.1', () => {
  const { port } = httpServer.address();
  if (portFile) writeFileSync(portFile, String(port));
  console.log(`MCP server on http://127.0.0.1:${port}/mcp`);
});
process.on('SIGTERM', () => process.exit(0));
