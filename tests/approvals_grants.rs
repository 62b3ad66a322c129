//! End to end: a standing grant is bound to the `approve` rule that asked
//! for it, not to the whole route entry. Through a real Envoy, the kernel
//! binary and the real agents, with the official Python SDK 2.3 as MCP
//! server and client (`tests/mcp/mrtr_*.py`, protocol 2026-07-28):
//!
//! * an approver grants `allow_always` on a held `delete_file`;
//! * a SIGHUP that changes another policy's param (the server-request
//!   guard's allowed hosts) keeps the grant: other deletes pass unasked;
//! * a SIGHUP that changes the approve rule (its approvers) voids it: the
//!   next delete is held again.

mod support;

use std::process::Stdio;

use serde_json::{json, Value};
use support::jwt::jwt;
use support::mcp_2026::*;

/// The support's rules with the approve rule's approvers set to `roles`.
fn rules(roles: &[&str]) -> String {
    let mut v: Value = serde_json::from_str(RULES).expect("rules");
    v[0]["approval"]["approvers"] = json!({"roles_any": roles});
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_survives_unrelated_edits_and_dies_with_its_rule() {
    let e = start(Sdk::Python, &["--json"]).await;
    // The same rules as `start` wrote, in the form this test edits.
    e.s.reload(&e.s.kernel_body(&routes_with(&rules(&["approver"]), "example.com")))
        .await;
    let alice = jwt(SECRET, "alice", &["agent"]);
    let bob = jwt(SECRET, "bob", &["approver"]);
    let wait = e.dir.join("user");
    std::fs::create_dir_all(&wait).unwrap();
    let delete = |path: &str| json!([call("delete_file", json!({"path": path}))]);
    let held = |path: &str, n: usize| {
        let mut child = e
            .client(
                Sdk::Python,
                &alice,
                &delete(path),
                &["--no-progress", "--url-wait", &wait.to_string_lossy()],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let url = next_url(&wait, n, &mut child, &e.diag());
        (
            child,
            url.split("#id=").nth(1).unwrap_or_else(|| panic!("{url}")).to_string(),
        )
    };
    // Passes without any question reaching the client.
    let passes = |path: &str| {
        let got = e.run(Sdk::Python, &alice, delete(path), &["--no-progress"]);
        assert_eq!(got[0]["text"], format!("deleted {path}"), "{}\n{}", got[0], e.diag());
        assert_eq!(got[0]["callbacks"], json!([]), "{}", got[0]);
    };

    let (child, id) = held("/srv/a", 1);
    let (status, body) = e
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_always"})),
        )
        .await;
    assert_eq!(status, 200, "{body}\n{}", e.diag());
    std::fs::write(wait.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let got = parse(&out.stdout, &out.stderr, &delete("/srv/a"), &e.diag());
    assert_eq!(got[0]["text"], "deleted /srv/a", "{}", got[0]);
    passes("/srv/b");

    // Another policy's param changes: a new route version, the same rule.
    e.s.reload(&e.s.kernel_body(&routes_with(&rules(&["approver"]), "docs.example.com")))
        .await;
    passes("/srv/c");

    // The approve rule changes: the grant is void, the next delete is held.
    e.s.reload(&e.s.kernel_body(&routes_with(&rules(&["approver", "admin"]), "docs.example.com")))
        .await;
    let (mut child, id2) = held("/srv/d", 2);
    assert_ne!(id2, id);
    let _ = child.kill();
    let _ = child.wait();
    let ran: Vec<String> = e
        .ran()
        .into_iter()
        .filter(|(t, _)| t == "delete_file")
        .map(|(_, a)| a["path"].to_string())
        .collect();
    assert_eq!(ran, ["\"/srv/a\"", "\"/srv/b\"", "\"/srv/c\""], "{}", e.diag());
}
