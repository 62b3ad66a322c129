// The official MCP TypeScript SDK client with its ClientCredentialsProvider,
// for tests/identity.rs. It starts without a token: the server's 401 names
// the protected resource metadata, which names the provider; the SDK gets a
// token by client credentials and retries.
//
//   node mcp-client.mjs URL CLIENT_ID CLIENT_SECRET SCOPE TOOL [TOOL ...]
//
// Prints one JSON line per HTTP exchange ({"fetch": "METHOD URL", "status"})
// and one per tool call ({"tool", "text"} or {"tool", "error"}).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const [url, clientId, clientSecret, scope, ...tools] = process.argv.slice(2);
const out = (v) => console.log(JSON.stringify(v));

const logged = async (input, init) => {
  const resp = await fetch(input, init);
  const method = init?.method ?? 'GET';
  let body;
  if (method === 'POST' && typeof init?.body === 'string' && !init.body.startsWith('{')) body = init.body;
  if (method === 'POST' && init?.body instanceof URLSearchParams) body = init.body.toString();
  out({ fetch: `${method} ${String(input)}`, status: resp.status, body, www: resp.headers.get('www-authenticate') ?? undefined });
  return resp;
};

// EXPECTED_ISSUER (optional): the only authorization server the client
// sends its credentials to.
const expectedIssuer = process.env.EXPECTED_ISSUER || undefined;
const authProvider = new ClientCredentialsProvider({ clientId, clientSecret, scope, expectedIssuer });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider, fetch: logged });
const client = new Client({ name: 'identity-test-client', version: '1.0.0' });
try {
  await client.connect(transport);
  out({ connected: true });
  for (const tool of tools) {
    try {
      const r = await client.callTool({ name: tool, arguments: {} });
      out({ tool, text: r.content?.[0]?.text, isError: r.isError ?? false });
    } catch (e) {
      out({ tool, error: String(e?.message ?? e), code: e?.code });
    }
  }
} catch (e) {
  out({ connected: false, error: String(e?.message ?? e) });
}
await client.close().catch(() => {});
process.exit(0);
