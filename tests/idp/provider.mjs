// A real OpenID provider (npm oidc-provider) for the end-to-end tests of
// tests/identity.rs, on 127.0.0.1:PORT (plain http: loopback only).
//
//   node provider.mjs --port PORT --keys FILE --port-file FILE
//
// Clients (client_secret_basic):
//   mcp-client / mcp-secret   client_credentials; scopes tools:read tools:write
//   gateway / gateway-secret  for the introspection endpoint, and token
//                             exchange (RFC 8693, registered below)
// A token request with `resource=<url>` gets a JWT access token (RS256,
// audience = the resource, scope = the granted scopes); without it, an
// opaque token (introspect it at /token/introspection).
//
// Token exchange (grant urn:ietf:params:oauth:grant-type:token-exchange): the
// subject token must be one of this provider's JWT access tokens (verified
// against its keys); the answer is a JWT access token for `resource` (its
// `aud`), `sub` the subject's, `client_id` the gateway. A resource under
// https://forbidden.test/ is refused with invalid_target.
//
// Signing keys live in FILE (a private JWK set), created on first start and
// read on every start, so a restart keeps them. Test-only endpoints:
//   POST /test/rotate   a new RS256 key signs from now on; the old key stays
//                       published after it (staged rotation)
//   GET  /test/hits     requests served so far, by path
// oidc-provider reads its keys only when it is built, so rotation builds a
// new Provider with the new key set and swaps it in.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import Provider, { errors } from 'oidc-provider';
import { createLocalJWKSet, jwtVerify } from 'jose';

const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const port = Number(arg('port'));
const keysFile = arg('keys');
const portFile = arg('port-file');
const issuer = `http://127.0.0.1:${port}`;

function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

let keys = existsSync(keysFile) ? JSON.parse(readFileSync(keysFile, 'utf8')).keys : [newKey()];
writeFileSync(keysFile, JSON.stringify({ keys }));

function build() {
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: 'mcp-client',
        client_secret: 'mcp-secret',
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: 'client_secret_basic',
        scope: 'tools:read tools:write',
      },
      {
        client_id: 'gateway',
        client_secret: 'gateway-secret',
        grant_types: [TOKEN_EXCHANGE],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: 'client_secret_basic',
        scope: 'tools:read tools:write',
      },
    ],
    jwks: { keys },
    scopes: ['tools:read', 'tools:write'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => undefined,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, resource) => ({
          scope: 'tools:read tools:write',
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    ttl: { ClientCredentials: 600 },
  });
  provider.on('server_error', (_ctx, err) => console.error('server_error', err));
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    (ctx) => exchange(provider, ctx),
    ['subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'audience', 'resource', 'scope', 'requested_token_type'],
    ['audience', 'resource'],
  );
  return provider;
}

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';

const publicKeys = () => ({
  keys: keys.map(({ d, p, q, dp, dq, qi, ...pub }) => pub),
});

async function exchange(provider, ctx) {
  const { params, client } = ctx.oidc;
  let subject;
  try {
    ({ payload: subject } = await jwtVerify(params.subject_token, createLocalJWKSet(publicKeys()), { issuer }));
  } catch (e) {
    throw new errors.InvalidGrant(`subject_token: ${e.code || e.message}`);
  }
  const resources = [params.resource].flat().filter(Boolean);
  if (resources.length !== 1) {
    throw new errors.InvalidTarget('exactly one resource');
  }
  const [resource] = resources;
  if (resource.startsWith('https://forbidden.test/')) {
    throw new errors.InvalidTarget('not for this resource');
  }
  const token = new provider.AccessToken({
    accountId: subject.sub,
    client,
    gty: 'token-exchange',
    scope: params.scope || undefined,
    expiresIn: 600,
  });
  token.resourceServer = new provider.ResourceServer(resource, {
    audience: resource,
    scope: 'tools:read tools:write',
    accessTokenTTL: 600,
    accessTokenFormat: 'jwt',
    jwt: { sign: { alg: 'RS256' } },
  });
  const value = await token.save();
  ctx.body = {
    access_token: value,
    issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
    token_type: 'Bearer',
    expires_in: 600,
  };
}

let provider = build();
const hits = {};

const server = http.createServer((req, res) => {
  const path = new URL(req.url, issuer).pathname;
  hits[path] = (hits[path] || 0) + 1;
  console.log(`${new Date().toISOString()} ${req.method} ${req.url}`);
  if (path === '/test/hits') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(hits));
    return;
  }
  if (path === '/test/rotate' && req.method === 'POST') {
    const key = newKey();
    keys = [key, ...keys];
    writeFileSync(keysFile, JSON.stringify({ keys }));
    provider = build();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ kid: key.kid }));
    return;
  }
  provider.callback()(req, res);
});

server.listen(port, '127.0.0.1', () => {
  if (portFile) writeFileSync(portFile, String(port));
  console.log(`oidc-provider listening on ${issuer}`);
});
process.on('SIGTERM', () => process.exit(0));
