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
// https://forbidden.test/ is refused with invalid_target; a subject whose `sub`
// is `revoked-user` is refused with invalid_grant (as for a revoked grant).
//
// Signing keys live in FILE (a private JWK set), created on first start and
// read on every start, so a restart keeps them. Test-only endpoints:
//   POST /test/rotate   a new RS256 key signs from now on; the old key stays
//                       published after it (staged rotation)
//   GET  /test/hits     requests served so far, by path (all paths; /token
//                       counts every token request, failed ones too)
//   POST /test/token    JSON {"sub", "resource", "scope"} -> {"access_token"}:
//                       a JWT access token signed by the current key (RS256,
//                       header typ at+jwt and kid; claims iss, sub, aud =
//                       resource, scope, iat, exp = now+600, jti, client_id
//                       mcp-client). For handing MCP callers (alice, bob)
//                       tokens without a login. 400 without sub or resource.
//                       Verifiable at /jwks like the provider's own tokens.
// oidc-provider reads its keys only when it is built, so rotation builds a
// new Provider with the new key set and swaps it in.
//
// Interactive mode (new flags; without them nothing above changes):
//
//   node provider.mjs --port PORT --keys FILE --port-file FILE --interactive
//        [--role idp|upstream] [--redirect-uri URI]... [--resource URI]
//        [--access-ttl SECONDS] [--rotate-refresh]
//
//   --interactive       enables oidc-provider's devInteractions: its built-in
//                       login form at /interaction/:uid (input name=login: any
//                       login name; the password is ignored; the account id,
//                       and so the `sub`, is the login name), then its consent
//                       page (one submit button, "Continue"). Sessions and
//                       grants live in memory: a restart forgets them.
//   --role idp          (default) adds client gateway-connect / connect-secret:
//                       authorization_code, response_type code,
//                       client_secret_basic, scope openid, PKCE S256 required.
//                       Its ID tokens: RS256, sub = the login name, aud =
//                       gateway-connect, nonce echoed.
//   --role upstream     plays a third-party authorization server (implies
//                       --interactive). Adds client gateway-upstream /
//                       upstream-secret: authorization_code + refresh_token,
//                       response_type code, client_secret_basic, PKCE S256
//                       required; scopes openid offline_access repo:read.
//                       Every code exchange and refresh of this client returns
//                       a refresh_token (the issueRefreshToken hook says yes
//                       for it, offline_access or not, prompt=consent or not).
//                       Access tokens are JWTs (RS256, typ at+jwt): aud = the
//                       request's `resource` if it sent one, else --resource;
//                       scope = the granted resource scopes (repo:read);
//                       sub = the login name; lifetime --access-ttl. A
//                       refresh_token grant returns a new access token; the
//                       refresh token is rotated only once 70% of its life
//                       (14 days) has passed, i.e. in a test it stays the same.
//                       Its cookies are named _up_session, _up_interaction and
//                       _up_interaction_resume, so that it and an IdP on the
//                       same host (cookies ignore ports) do not clobber each
//                       other's _session cookie in one browser.
//                       It also enables revocation (RFC 7009) at
//                       POST /token/revocation (client_secret_basic;
//                       token=<refresh token>): afterwards a refresh_token
//                       grant with it answers 400 invalid_grant.
//   --redirect-uri URI  a redirect URI registered for the interactive client;
//                       may be repeated; default http://127.0.0.1/connect/callback.
//                       The client is registered with application_type
//                       'native', for which oidc-provider 9 accepts a loopback
//                       http redirect URI (127.0.0.1, [::1], localhost) on ANY
//                       port when the rest of it (scheme, host, path, query)
//                       equals a registered one (RFC 8252 section 7.3). So the
//                       gateway sends e.g.
//                       redirect_uri=http://127.0.0.1:<envoy port>/connect/callback
//                       and the same value again in the token request.
//                       The host must be the registered one (with the
//                       default, http://localhost:P/connect/callback is
//                       refused: invalid_redirect_uri on the provider's own
//                       error page, no redirect). The redirect back carries
//                       code, state and iss (RFC 9207). A nonce is refused
//                       unless scope has openid.
//   --resource URI      (upstream) the default resource indicator, used when
//                       the authorization request names none; default
//                       https://upstream-mcp.test/.
//   --access-ttl N      (upstream) access token lifetime in seconds (default 600).
//   --rotate-refresh    (upstream) every refresh_token grant answers a NEW
//                       refresh token and consumes the old one; presenting a
//                       consumed one again is invalid_grant AND (oidc-provider's
//                       reuse detection) revokes the whole grant, so the new
//                       one dies too. Without the flag the refresh token stays
//                       the same (rotated only after 70% of its 14 days).
//
// One process plays one role: an IdP and an upstream authorization server are
// two processes (two ports, two key files). The existing clients (mcp-client,
// gateway), token exchange and the test endpoints stay in every mode. In the
// upstream role GET /test/hits's "/token" is the number of code exchanges plus
// refresh_token grants (plus anything else sent to /token).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import Provider, { errors } from 'oidc-provider';
import { createLocalJWKSet, importJWK, jwtVerify, SignJWT } from 'jose';

const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const port = Number(arg('port'));
const keysFile = arg('keys');
const portFile = arg('port-file');
const issuer = `http://127.0.0.1:${port}`;
const args = (name) => process.argv.flatMap((a, i) => (a === `--${name}` && i + 1 < process.argv.length ? [process.argv[i + 1]] : []));
const role = arg('role') ?? 'idp';
if (role !== 'idp' && role !== 'upstream') {
  console.error(`--role must be idp or upstream, not ${role}`);
  process.exit(2);
}
const interactive = process.argv.includes('--interactive') || role === 'upstream';
const redirectUris = args('redirect-uri').length ? args('redirect-uri') : ['http://127.0.0.1/connect/callback'];
const upstreamResource = arg('resource') ?? 'https://upstream-mcp.test/';
const accessTtl = Number(arg('access-ttl') ?? 600);
const rotateRefresh = process.argv.includes('--rotate-refresh');
const UPSTREAM_CLIENT = 'gateway-upstream';
const INTERACTIVE_CLIENTS = new Set(['gateway-connect', UPSTREAM_CLIENT]);

function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

let keys = existsSync(keysFile) ? JSON.parse(readFileSync(keysFile, 'utf8')).keys : [newKey()];
writeFileSync(keysFile, JSON.stringify({ keys }));

// The client of interactive mode, and the configuration it needs (merged
// over the default configuration below only with --interactive).
function interactiveClient() {
  const common = {
    application_type: 'native',
    redirect_uris: redirectUris,
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  };
  return role === 'upstream'
    ? {
        ...common,
        client_id: UPSTREAM_CLIENT,
        client_secret: 'upstream-secret',
        grant_types: ['authorization_code', 'refresh_token'],
        scope: 'openid offline_access repo:read',
      }
    : {
        ...common,
        client_id: 'gateway-connect',
        client_secret: 'connect-secret',
        grant_types: ['authorization_code'],
        scope: 'openid',
      };
}

const cookieKeys = [randomUUID()];

function interactiveConfig() {
  const upstream = role === 'upstream';
  return {
    scopes: upstream ? ['tools:read', 'tools:write', 'offline_access', 'repo:read'] : ['tools:read', 'tools:write'],
    cookies: {
      keys: cookieKeys,
      ...(upstream ? { names: { session: '_up_session', interaction: '_up_interaction', resume: '_up_interaction_resume' } } : {}),
    },
    pkce: {
      // The gateway must send code_challenge (S256) for these clients.
      required: (_ctx, client) => INTERACTIVE_CLIENTS.has(client.clientId) || client.clientAuthMethod === 'none',
    },
    ...(upstream
      ? {
          issueRefreshToken: async (_ctx, client, code) =>
            client.clientId === UPSTREAM_CLIENT || (client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access')),
          ...(rotateRefresh ? { rotateRefreshToken: () => true } : {}),
        }
      : {}),
  };
}

function resourceServer(resource) {
  return role === 'upstream'
    ? {
        scope: 'repo:read',
        audience: resource,
        accessTokenTTL: accessTtl,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }
    : {
        scope: 'tools:read tools:write',
        audience: resource,
        accessTokenTTL: 600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      };
}

function build() {
  const provider = new Provider(issuer, {
    clients: [
      ...(interactive ? [interactiveClient()] : []),
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
      devInteractions: { enabled: interactive },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      // upstream role: RFC 7009 revocation at /token/revocation, so a test can
      // kill a stored refresh token (then refreshing it is invalid_grant).
      revocation: { enabled: role === 'upstream' },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => (role === 'upstream' ? upstreamResource : undefined),
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, resource) => resourceServer(resource),
      },
    },
    ttl: { ClientCredentials: 600 },
    ...(interactive ? interactiveConfig() : {}),
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
  if (subject.sub === 'revoked-user') {
    throw new errors.InvalidGrant('the subject\'s grant was revoked');
  }
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

// POST /test/token: a JWT access token for {sub, resource, scope}, signed by
// the current key (keys[0]), without any login.
function testToken(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const reply = (status, body) => {
      res.statusCode = status;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(body));
    };
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
    } catch (e) {
      reply(400, { error: 'invalid_request', error_description: `body: ${e.message}` });
      return;
    }
    const { sub, resource, scope } = body ?? {};
    if (typeof sub !== 'string' || !sub || typeof resource !== 'string' || !resource) {
      reply(400, { error: 'invalid_request', error_description: 'needs "sub" and "resource" (strings)' });
      return;
    }
    try {
      const [key] = keys;
      const now = Math.floor(Date.now() / 1000);
      const claims = { scope: typeof scope === 'string' ? scope : '', client_id: 'mcp-client' };
      const accessToken = await new SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', typ: 'at+jwt', kid: key.kid })
        .setIssuer(issuer)
        .setSubject(sub)
        .setAudience(resource)
        .setIssuedAt(now)
        .setExpirationTime(now + 600)
        .setJti(randomUUID())
        .sign(await importJWK(key, 'RS256'));
      reply(200, { access_token: accessToken, token_type: 'Bearer', expires_in: 600 });
    } catch (e) {
      reply(500, { error: 'server_error', error_description: e.message });
    }
  });
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
  if (path === '/test/token' && req.method === 'POST') {
    testToken(req, res);
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
  console.log(`oidc-provider listening on ${issuer}${interactive ? ` (interactive, role ${role})` : ''}`);
});
process.on('SIGTERM', () => process.exit(0));
