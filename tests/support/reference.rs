//! What the end-to-end tests of the reference agents share: HS256 JWTs for
//! `auth-agent`, `contextBudget`'s verdict on an answer, and the audit
//! journal's own check.

use std::path::Path;
use std::process::{Command, Output};

use super::{agent_bin, Got};

/// Base64url without padding.
fn b64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An HS256 JWT with `claims`, signed with `secret` by `python3`'s hmac, to
/// stay independent of the agent's JWT library.
pub fn jwt(secret: &str, claims: &serde_json::Value) -> String {
    let head = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let signing = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let out = Command::new("python3")
        .args(["-c", "import hmac,hashlib,base64,sys; print(base64.urlsafe_b64encode(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).digest()).rstrip(b'=').decode())", secret, &signing])
        .output()
        .expect("python3");
    format!("{signing}.{}", String::from_utf8_lossy(&out.stdout).trim())
}

/// `guardrail-agent verify-audit JOURNAL`: its exit status and output.
pub fn verify_audit(journal: &Path) -> Output {
    Command::new(agent_bin("guardrail-agent"))
        .arg("verify-audit")
        .arg(journal)
        .output()
        .expect("guardrail-agent verify-audit")
}

/// `contextBudget`'s verdict on one answer: its `x-context-budget` header
/// on a 200, `"429"` on the hard limit (whose reason it checks); any other
/// status fails the test with `diag`.
pub fn budget_verdict(got: &Got, diag: impl FnOnce() -> String) -> String {
    match got.status {
        200 => got.header("x-context-budget").unwrap_or("-").to_string(),
        429 => {
            assert_eq!(got.json()["reason"], "context_budget_exceeded", "{}", got.body);
            "429".to_string()
        }
        other => panic!("{other}: {}\n{}", got.body, diag()),
    }
}
