//! The decision cache through a real Envoy, the kernel binary and real
//! agents: a cached outcome answers exactly as a call would (instructions,
//! metadata seen by later policies, denials), and is never used once it may
//! be wrong: after a JWT's `exp`, after the agent restarted on a key file
//! without the key, after a params change by SIGHUP. The bounds on entries
//! are unit tests of `src/decisions`.

mod support;

use std::time::Duration;

use sha2::{Digest, Sha256};
use support::stack::AgentSpec;
use support::*;

/// `who` (cacheable on `x-user`) tags the request and sets metadata
/// `user`; `x-deny` makes it refuse. `see` (not cacheable, another agent)
/// copies that metadata into a header the upstream echoes.
const WHO: &str = r#"policies:
  - name: who
    phases: request
    params: [k]
    rules:
      - when: {header_present: x-deny}
        request: [{immediate: {status: 403, body: "refused ${header:x-user}", reason: denied}}]
    request:
      - set_header: {name: x-who, value: "${header:x-user}|${param:k}"}
      - set_metadata: {key: user, value: "${header:x-user}"}
    cache: {max_age_ms: 60000, headers: [x-user, x-deny]}
"#;
const SEE: &str = r#"policies:
  - name: see
    phases: request
    request:
      - set_header: {name: x-seen, value: "${meta:user}"}
"#;

fn routes(k: &str) -> String {
    format!(
        "  route_policies:\n    - route_name: users\n      request_policy_chain: [{{policy: who, params: {{k: {k}}}}}, {{policy: see}}]\n    - route_name: admin\n      decision_cache: false\n      request_policy_chain: [{{policy: who, params: {{k: {k}}}}}]\n"
    )
}

/// `whoagent` and `seeagent` behind Envoy, with `routes("v1")`.
async fn who_and_see() -> Stack {
    Stack::builder()
        .test_agent("whoagent", WHO)
        .test_agent("seeagent", SEE)
        .config(&routes("v1"))
        .start()
        .await
}

/// Calls the agent `name` received (one "start" event per call).
fn calls(s: &Stack, name: &str) -> usize {
    s.test_agent(name)
        .events()
        .iter()
        .filter(|e| e.starts_with("start"))
        .count()
}

fn hits(s: &Stack, route: &str, policy: &str) -> f64 {
    s.kernel.metric(&format!(
        "policy_kernel_decision_cache_total{{policy=\"{policy}\",result=\"hit\",route=\"{route}\"}}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_outcome_applies_as_the_call_did_and_later_policies_see_the_same_metadata() {
    let s = who_and_see().await;
    let alice = [("x-user", "alice"), ("x-request-id", "r1")];
    let first = s.get("/users/1", &alice).await;
    assert_eq!(first.status, 200, "{}\n{}", first.body, s.diag_tail(40));
    let second = s.get("/users/2", &[("x-user", "alice"), ("x-request-id", "r2")]).await;
    assert_eq!(second.status, 200, "{}", second.body);
    for h in ["x-who", "x-seen"] {
        assert_eq!(first.echo()["headers"][h], second.echo()["headers"][h], "{h}");
    }
    assert_eq!(second.echo()["headers"]["x-who"], "alice|v1");
    assert_eq!(second.echo()["headers"]["x-seen"], "alice");
    assert_eq!(
        calls(&s, "whoagent"),
        1,
        "the second request was answered from the cache"
    );
    assert_eq!(
        calls(&s, "seeagent"),
        2,
        "a policy that does not declare it is always called"
    );
    assert_eq!(hits(&s, "users", "who"), 1.0);

    // Another value of a declared header is another entry.
    let bob = s.get("/users/3", &[("x-user", "bob")]).await;
    assert_eq!(bob.echo()["headers"]["x-seen"], "bob");
    assert_eq!(calls(&s, "whoagent"), 2);

    // A cached denial stays the same denial.
    let deny = [("x-user", "mallory"), ("x-deny", "1")];
    let refused = s.get("/users/4", &deny).await;
    let again = s.get("/users/5", &deny).await;
    assert_eq!((refused.status, again.status), (403, 403));
    assert_eq!(refused.body, "refused mallory");
    assert_eq!(again.body, refused.body);
    assert_eq!(calls(&s, "whoagent"), 3);
    assert_eq!(calls(&s, "seeagent"), 3, "the denial stopped the chain, cached or not");

    // The route's switch: every request calls.
    for _ in 0..2 {
        assert_eq!(s.get("/admin/1", &alice).await.status, 200);
    }
    assert_eq!(calls(&s, "whoagent"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_params_change_by_sighup_is_never_answered_from_an_old_entry() {
    let s = who_and_see().await;
    let alice = [("x-user", "alice")];
    for _ in 0..2 {
        assert_eq!(s.get("/users/1", &alice).await.echo()["headers"]["x-who"], "alice|v1");
    }
    assert_eq!(calls(&s, "whoagent"), 1);
    s.reload(&s.kernel_body(&routes("v2"))).await;
    let after = s.get("/users/1", &alice).await;
    assert_eq!(after.echo()["headers"]["x-who"], "alice|v2", "{}", s.diag_tail(30));
    assert_eq!(calls(&s, "whoagent"), 2);
}

const SECRET: &str = "decision-cache-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_is_never_accepted_from_the_cache_after_its_exp() {
    let s = Stack::builder()
        .agent(AgentSpec::bin("auth", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
        .config(
            "  route_policies:\n    - route_name: users\n      request_policy_chain:\n        - policy: jwtValidation\n          params: {hs256_secret_env: DEMO_JWT_SECRET, leeway_s: 0}\n",
        )
        .start()
        .await;
    // Expires in 2 to 3 s (exp is in whole seconds).
    let exp = reference::now() + 3;
    let token = reference::jwt(SECRET, &serde_json::json!({"sub": "u1", "exp": exp}));
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    for _ in 0..3 {
        let got = s.get("/users/1", &auth).await;
        assert_eq!(got.status, 200, "{}\n{}", got.body, s.diag_tail(30));
    }
    let cached = hits(&s, "users", "jwtValidation");
    assert!(cached >= 1.0, "accepted from the cache before exp: {cached}");
    // From exp on, no answer may come from the cache. The agent's own check
    // (jsonwebtoken) still accepts during the second of `exp` itself; from
    // the next second on every answer must be a refusal.
    let exp = exp as f64;
    loop {
        let before = hits(&s, "users", "jwtValidation");
        let sent = unix_now();
        let got = s.get("/users/1", &auth).await;
        if sent >= exp {
            assert_eq!(
                hits(&s, "users", "jwtValidation"),
                before,
                "answered from the cache after exp"
            );
        }
        if sent >= exp + 1.0 {
            assert_eq!(got.status, 401, "accepted after exp: {}", got.body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn key_line(key: &str, consumer: &str) -> String {
    format!("{} {consumer}\n", hex::encode(Sha256::digest(key.as_bytes())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_from_the_key_file_is_refused_once_the_agent_restarts() {
    let b = Stack::builder();
    let keys = b.dir().join("api-keys.txt");
    std::fs::write(&keys, key_line("k-alice", "alice") + &key_line("k-bob", "bob")).unwrap();
    let arg = format!("--api-keys={}", keys.display());
    let mut s = b
        .agent(AgentSpec::bin("auth", "auth-agent", &[&arg]))
        .config("  route_policies:\n    - route_name: users\n      request_policy_chain: [{policy: apiKeyAuth}]\n")
        .start()
        .await;
    let bob = [("x-api-key", "k-bob")];
    for _ in 0..2 {
        assert_eq!(s.get("/users/1", &bob).await.status, 200, "{}", s.diag_tail(30));
    }
    assert_eq!(hits(&s, "users", "apiKeyAuth"), 1.0);
    // A refusal is kept too, and stays a refusal.
    for _ in 0..2 {
        assert_eq!(s.get("/users/1", &[("x-api-key", "k-eve")]).await.status, 401);
    }
    assert_eq!(hits(&s, "users", "apiKeyAuth"), 2.0);

    std::fs::write(&keys, key_line("k-alice", "alice")).unwrap();
    // Stopped, and seen gone by the kernel, before it starts again: a restart
    // alone can be answered "healthy" by the kernel before it notices.
    s.agent_mut("auth").kill();
    until("the kernel sees the agent down", Duration::from_secs(20), || async {
        s.kernel.agents_health() == [false]
    })
    .await;
    s.agent_mut("auth").restart();
    s.until_agents_healthy().await;
    let got = s.get("/users/1", &bob).await;
    assert_eq!(
        got.status,
        401,
        "a removed key was accepted: {}\n{}",
        got.body,
        s.diag_tail(30)
    );
    assert_eq!(s.get("/users/1", &[("x-api-key", "k-alice")]).await.status, 200);
}
