//! End to end for `upstreamCredential`: the upstream gets the user's own
//! token, given with consent on the connect page, never the caller's.
//!
//! Through a real Envoy, the kernel binary, `auth-agent` (jwtValidation by
//! OIDC discovery) and `tool-agent` (credentials in a real Redis, sealed
//! with a key file). npm `oidc-provider` plays the identity provider
//! (`tests/idp/provider.mjs --interactive`: the callers' tokens, and the
//! connect page's sign-in) and, in a second process, the upstream's own
//! authorization server (`--role upstream`: authorization code with PKCE,
//! refresh tokens, 6 s access tokens). The MCP server is the official Python
//! SDK's (`tests/mcp/credential_server.py`, recording the `authorization`
//! it gets); the callers are the SDK's client (`tests/mcp/mrtr_client.py`,
//! both revisions); the person is headless Chromium
//! (`tests/approvals/connect.mjs`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::envoy::{self, EnvoyConfig, KernelAt};
use support::idp::NodeIdp;
use support::python::{python, McpServer};
use support::redis::Redis;
use support::stack::AgentSpec;
use support::*;

/// The audience of the callers' tokens (the gateway's MCP endpoint).
const API: &str = "https://api.test/mcp";
/// The upstream's resource at its authorization server.
const RESOURCE: &str = "https://upstream-mcp.test/";

fn routes(iss: &str, up: &str) -> String {
    let jwt = format!(r#"{{issuer: "{iss}", oidc_discovery: true, audience: "{API}"}}"#);
    format!(
        r#"  route_policies:
    - route_name: mcp
      request_policy_chain:
        - policy: jwtValidation
          params: {jwt}
        - policy: upstreamCredential
          params: {{upstream: github, login_issuer: "{iss}", login_client_id: gateway-connect, login_client_secret_env: CONNECT_SECRET, issuer: "{up}", client_id: gateway-upstream, client_secret_env: UPSTREAM_SECRET, scope: "openid repo:read", resource: "{RESOURCE}", refresh_margin_s: "3"}}
      response_policy_chain:
        - policy: upstreamCredentialOutcome
          params: {{upstream: github, login_issuer: "{iss}"}}
    - route_name: mcp-key
      request_policy_chain:
        - policy: jwtValidation
          params: {jwt}
        - policy: upstreamCredential
          params: {{upstream: notes, source: api_key, login_issuer: "{iss}", login_client_id: gateway-connect, login_client_secret_env: CONNECT_SECRET}}
    - route_name: connect
      request_policy_chain:
        - policy: upstreamConnect
    - route_name: connections-page
      request_policy_chain:
        - policy: upstreamConnections
          params: {{login_issuer: "{iss}"}}
    - route_name: connections
      request_policy_chain:
        - policy: jwtValidation
          params: {jwt}
        - policy: upstreamConnections
          params: {{login_issuer: "{iss}"}}
"#
    )
}

fn envoy_config(kernel: &Path, upstream: u16) -> String {
    let routes = [
        envoy::route("mcp-key", "/mcp-key", ", timeout: 30s, prefix_rewrite: \"/mcp\""),
        envoy::route("mcp", "/mcp", ", timeout: 30s"),
        envoy::route("connect", "/connect/", ""),
        envoy::route("connections-page", "/connections/page", ""),
        envoy::route("connections", "/connections", ""),
    ]
    .concat();
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream,
        access_log: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DYNAMIC_METADATA(policy_kernel)%",
        routes,
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: true,
        extra_clusters: vec![],
    }
    .render()
}

struct Env {
    s: Stack,
    idp: NodeIdp,
    up: NodeIdp,
    redis: Redis,
    dir: PathBuf,
    _server: McpServer,
}

async fn start() -> Env {
    let redis = Redis::start();
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let idp = NodeIdp::start_with(&dir, "idp", &["--interactive"]);
    let up = NodeIdp::start_with(
        &dir,
        "upstream-as",
        &["--role", "upstream", "--access-ttl", "6", "--resource", RESOURCE],
    );
    let server = McpServer::start_script(
        &dir,
        "tests/mcp/credential_server.py",
        &["--json", "--reject-file", &dir.join("reject").to_string_lossy()],
    );
    let key_file = dir.join("credentials.key");
    std::fs::write(&key_file, "0123456789abcdef".repeat(4)).unwrap();
    let key_arg = format!("--credentials-key-file={}", key_file.display());
    let port = server.port;
    let s = b
        .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).entry("      timeout_ms: 3000\n"))
        .agent(
            AgentSpec::bin("tool-agent", "tool-agent", &["--redis-url", &redis.url, &key_arg])
                .env("CONNECT_SECRET", "connect-secret")
                .env("UPSTREAM_SECRET", "upstream-secret")
                .entry("      timeout_ms: 4000\n"),
        )
        .config("  route_policies: []\n")
        .envoy_config(move |kernel, _| envoy_config(kernel, port))
        .start()
        .await;
    s.reload(&s.kernel_body(&routes(&idp.issuer(), &up.issuer()))).await;
    Env {
        s,
        idp,
        up,
        redis,
        dir,
        _server: server,
    }
}

impl Env {
    fn diag(&self) -> String {
        format!(
            "{}\n--- tool-agent ---\n{}\n--- idp ---\n{}\n--- upstream AS ---\n{}\n--- server ---\n{}",
            self.s.diag(),
            self.s.agent("tool-agent").log(),
            self.idp.log(),
            self.up.log(),
            std::fs::read_to_string(self.dir.join("mcp-server.log")).unwrap_or_default()
        )
    }

    /// The SDK client calling `whoami` as the bearer of `token`.
    fn client(&self, token: &str, flags: &[&str]) -> Command {
        self.client_at("/mcp", token, flags)
    }

    /// [`Env::client`] on `path`.
    fn client_at(&self, path: &str, token: &str, flags: &[&str]) -> Command {
        let mut cmd = Command::new(python());
        cmd.arg(root().join("tests/mcp/mrtr_client.py"))
            .args(["--url", &self.s.url(path)])
            .args([
                "--steps",
                &json!([{"op": "call", "name": "whoami", "args": {}}]).to_string(),
            ])
            .arg(format!("--header=authorization=Bearer {token}"))
            .args(flags);
        cmd
    }

    /// One `whoami` call: the step's outcome.
    fn whoami(&self, token: &str, flags: &[&str]) -> Value {
        let out = self.client(token, flags).output().expect("run the MCP client");
        let steps = json!([{"op": "call"}]);
        support::mcp_2026::parse(&out.stdout, &out.stderr, &steps, &self.diag()).remove(0)
    }

    /// The claims the server saw in a `whoami` that passed.
    fn seen(&self, got: &Value) -> Value {
        let text = got["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no result: {got}\n{}", self.diag()));
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{text}"))
    }

    /// A 2025-11-25 call answered -32042: its connect URL.
    fn asked(&self, got: &Value) -> String {
        assert_eq!(got["error"]["code"], -32042, "{got}\n{}", self.diag());
        assert_eq!(got["error"]["data"]["reason"], "upstream_credential_required", "{got}");
        let url = got["error"]["data"]["elicitations"][0]["url"]
            .as_str()
            .unwrap_or_else(|| panic!("{got}"))
            .to_string();
        assert!(url.starts_with(&self.s.url("/connect/")), "{url}");
        url
    }

    /// Headless Chromium through the connect flow at `url`.
    fn connect(&self, url: &str, login: &str, upstream_login: &str) -> Value {
        self.chromium(json!({"url": url, "login": login, "upstream_login": upstream_login, "timeout_ms": 40000}))
    }

    fn chromium(&self, args: Value) -> Value {
        let out = Command::new("node")
            .arg(root().join("tests/approvals/connect.mjs"))
            .arg(args.to_string())
            .output()
            .expect("node");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| {
                panic!(
                    "connect.mjs: {text}\n{}\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    self.diag()
                )
            })
    }

    /// What the server recorded: one line per request.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("mcp-calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_gets_the_users_own_token_given_with_consent_never_the_callers() {
    let mut e = start().await;
    let alice = e.idp.user_token("alice", API, "tools:read").await;
    let bob = e.idp.user_token("bob", API, "tools:read").await;

    // 1. A 2026-07-28 client: asked by URL elicitation (input_required);
    //    the person connects in Chromium; the SDK's retry passes with the
    //    user's own token.
    let wait = e.dir.join("alice");
    std::fs::create_dir_all(&wait).unwrap();
    let mut child = e
        .client(&alice, &["--no-progress", "--url-wait", &wait.to_string_lossy()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = support::mcp_2026::next_url(&wait, 1, &mut child, &e.diag());
    assert!(url.starts_with(&e.s.url("/connect/")), "{url}");
    let done = e.connect(&url, "alice", "alice-gh");
    assert_eq!(done["status"], 200, "{done}\n{}", e.diag());
    assert!(
        done["text"].as_str().unwrap_or("").contains("Connected to github"),
        "{done}"
    );
    std::fs::write(wait.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let got = support::mcp_2026::parse(&out.stdout, &out.stderr, &json!([{}]), &e.diag()).remove(0);
    let seen = e.seen(&got);
    assert_eq!(seen["aud"], RESOURCE, "{seen}");
    assert_eq!(seen["sub"], "alice-gh", "{seen}");
    assert_eq!(seen["iss"], e.up.issuer(), "{seen}");

    // The link was single-use.
    let again = e.connect(&url, "alice", "alice-gh");
    assert_eq!(again["status"], 410, "{again}");

    // 2. A 2025-11-25 client (bob): -32042 with the link. Alice opening
    //    bob's link is refused; nothing is stored for bob.
    let got = e.whoami(&bob, &["--legacy"]);
    let bobs = e.asked(&got);
    let wrong = e.connect(&bobs, "alice", "alice-gh");
    assert_eq!(wrong["status"], 403, "{wrong}");
    assert!(
        wrong["text"].as_str().unwrap_or("").contains("Not your link"),
        "{wrong}"
    );
    let got = e.whoami(&bob, &["--legacy"]);
    let bobs = e.asked(&got);
    let done = e.connect(&bobs, "bob", "bob-gh");
    assert_eq!(done["status"], 200, "{done}");
    let got = e.whoami(&bob, &["--legacy"]);
    assert_eq!(e.seen(&got)["sub"], "bob-gh", "{got}");

    // 3. What is stored in Redis is sealed: not the token.
    let tokens: Vec<String> = e
        .records()
        .iter()
        .filter_map(|r| {
            r["authorization"]
                .as_str()
                .map(|a| a.trim_start_matches("Bearer ").to_string())
        })
        .collect();
    assert!(!tokens.is_empty());
    let keys = e.redis.cli(&["KEYS", "policy-agents:{credentials}:user:*"]);
    let mut stored = String::new();
    // What names a record: its key and its hash's field names (the values
    // are sealed: random bytes in base64url, which may spell anything).
    let mut names = keys.clone();
    for k in keys.lines().filter(|k| !k.trim().is_empty()) {
        let hash = e.redis.cli(&["HGETALL", k.trim()]);
        for field in hash.lines().step_by(2) {
            names.push_str(field);
            names.push('\n');
        }
        stored.push_str(&hash);
    }
    assert!(stored.contains("github") && stored.contains("v1."), "{stored}");
    for t in &tokens {
        assert!(!stored.contains(t.as_str()), "a token in clear in Redis");
    }
    assert!(
        !names.contains("alice") && !names.contains("bob"),
        "a user name as a key: {names}"
    );

    // 4. Refreshed before expiry (6 s tokens, 3 s margin), one refresh for
    //    20 concurrent calls.
    let exp = e
        .records()
        .iter()
        .rev()
        .find(|r| r["claims"]["sub"] == "alice-gh")
        .and_then(|r| r["claims"]["exp"].as_u64())
        .expect("the upstream saw alice's token, with exp");
    let due = exp.saturating_sub(3);
    while crate_now_s() < due + 1 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = e.up.hits("/token").await;
    // Plain JSON-RPC POSTs (the SDK client's start-up would spread them
    // over more than the token's life).
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let (client, url, auth) = (e.s.client.clone(), e.s.url("/mcp"), format!("Bearer {alice}"));
            tokio::spawn(async move {
                let body = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                    "params": {"name": "whoami", "arguments": {}}});
                let r = client
                    .post(url)
                    .header("authorization", auth)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2025-11-25")
                    .body(body.to_string())
                    .send()
                    .await
                    .expect("call");
                r.text().await.unwrap_or_default()
            })
        })
        .collect();
    let mut jtis = std::collections::BTreeSet::new();
    for c in calls {
        let body = c.await.unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}\n{}", e.diag()));
        let text = v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"));
        let seen: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(seen["sub"], "alice-gh", "{body}");
        jtis.insert(seen["jti"].as_str().unwrap_or("").to_string());
    }
    assert_eq!(jtis.len(), 1, "one refreshed token for all: {jtis:?}");
    assert_eq!(e.up.hits("/token").await, before + 1, "one refresh");
    assert!(!jtis.contains(seen["jti"].as_str().unwrap_or("")), "not refreshed");

    // 5. The agent restarts: the credentials come back from Redis.
    e.s.agent_mut("tool-agent").restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = e.whoami(&alice, &["--legacy"]);
        if got["text"].is_string() {
            assert_eq!(e.seen(&got)["sub"], "alice-gh");
            break;
        }
        assert_ne!(got["error"]["code"], -32042, "asked again after a restart: {got}");
        assert!(Instant::now() < deadline, "{got}\n{}", e.diag());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 6. The upstream answers 401 (it refuses alice-gh's tokens): the
    //    credential is evicted, and the next call asks again.
    std::fs::write(e.dir.join("reject"), "alice-gh\n").unwrap();
    let got = e.whoami(&alice, &["--legacy"]);
    assert!(got["text"].is_null(), "the refused token passed: {got}");
    assert_eq!(got["status"], 403, "{got}");
    std::fs::remove_file(e.dir.join("reject")).unwrap();
    let got = e.whoami(&alice, &["--legacy"]);
    let url = e.asked(&got);
    let done = e.connect(&url, "alice", "alice-gh");
    assert_eq!(done["status"], 200, "{done}");
    assert_eq!(e.seen(&e.whoami(&alice, &["--legacy"]))["sub"], "alice-gh");

    // 7. Listed and revoked on the connections page (Chromium); then asked
    //    again.
    let listed = e.chromium(json!({"manage": e.s.url("/connections/page"), "credential": alice,
        "revoke": "github", "timeout_ms": 30000}));
    assert_eq!(listed["listed"], json!(["github"]), "{listed}\n{}", e.diag());
    assert_eq!(listed["gone"], true, "{listed}");
    e.asked(&e.whoami(&alice, &["--legacy"]));
    // Bob's connection is his own: still there.
    assert_eq!(e.seen(&e.whoami(&bob, &["--legacy"]))["sub"], "bob-gh");

    // 8. An upstream that takes API keys: bob pastes his on the connect
    //    page, after signing in; his calls then carry it.
    let key_call = |e: &Env| {
        let out = e
            .client_at("/mcp-key", &bob, &["--legacy"])
            .output()
            .expect("run the MCP client");
        support::mcp_2026::parse(&out.stdout, &out.stderr, &json!([{}]), &e.diag()).remove(0)
    };
    let url = e.asked(&key_call(&e));
    let done = e.chromium(json!({"url": url, "login": "bob", "api_key": "sk-bob-notes-123", "timeout_ms": 40000}));
    assert_eq!(done["status"], 200, "{done}\n{}", e.diag());
    assert!(
        done["text"].as_str().unwrap_or("").contains("Connected to notes"),
        "{done}"
    );
    let got = key_call(&e);
    assert_eq!(e.seen(&got)["token"], "opaque", "{got}");
    assert!(
        e.records()
            .iter()
            .any(|r| r["authorization"] == "Bearer sk-bob-notes-123"),
        "the key did not reach the upstream"
    );

    // 9. Not JSON-RPC: 403 with the connect URL, the upstream not called.
    //    A sign-in's callback without the browser's cookie is refused
    //    (CSRF), even with the flow's own state.
    let carol = e.idp.user_token("carol", API, "tools:read").await;
    let plain =
        e.s.client
            .get(e.s.url("/mcp-key/report"))
            .header("authorization", format!("Bearer {carol}"))
            .send()
            .await
            .expect("get");
    assert_eq!(plain.status().as_u16(), 403);
    let v: Value = plain.json().await.unwrap_or_default();
    assert_eq!(v["reason"], "upstream_credential_required", "{v}");
    let link = v["connect_url"].as_str().unwrap_or_else(|| panic!("{v}")).to_string();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let opened = no_redirects.get(&link).send().await.expect("open the link");
    assert_eq!(opened.status().as_u16(), 302);
    assert!(
        opened
            .headers()
            .get("set-cookie")
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.contains("HttpOnly") && c.contains("SameSite=Lax")),
        "{:?}",
        opened.headers()
    );
    let to = opened.headers()["location"].to_str().unwrap_or("").to_string();
    assert!(to.starts_with(&e.idp.issuer()), "{to}");
    let state = reqwest::Url::parse(&to)
        .ok()
        .and_then(|u| u.query_pairs().find(|(k, _)| k == "state").map(|(_, v)| v.to_string()))
        .unwrap_or_else(|| panic!("{to}"));
    let forged = no_redirects
        .get(e.s.url(&format!("/connect/callback?code=stolen&state={state}")))
        .send()
        .await
        .expect("callback");
    assert_eq!(forged.status().as_u16(), 403);
    assert!(forged
        .text()
        .await
        .unwrap_or_default()
        .contains("did not start in this browser"));

    // 10. On every path, the upstream never saw a caller's token, nor any
    //    token of the identity provider.
    for r in e.records() {
        let a = r["authorization"].as_str().unwrap_or("");
        assert!(
            !a.contains(&alice) && !a.contains(&bob),
            "a caller's token upstream: {r}"
        );
        if !a.is_empty() && a != "Bearer sk-bob-notes-123" {
            assert_eq!(r["claims"]["iss"], e.up.issuer(), "{r}");
            assert_eq!(r["claims"]["aud"], RESOURCE, "{r}");
        }
    }
}

fn crate_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
