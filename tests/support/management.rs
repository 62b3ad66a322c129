//! Helpers of the management API tests: a tokens file, the `management:`
//! section, and a JSON client of the API on the kernel's loopback listener.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::stack::{Stack, StackBuilder};
use super::KernelProc;

/// The write token (its hash is in the tokens file).
pub const WRITE: &str = "write-token-1";
/// The read-only token.
pub const READ: &str = "read-token-1";

/// Writes `dir/tokens` (a `ci` write token, a `viewer` read token) and
/// returns the `management:` section with a loopback listener on port 0
/// and `extra` lines (4-space indented).
pub fn section(dir: &Path, extra: &str) -> String {
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "ci write {}\nviewer read {}\n",
            policy_kernel::management::auth::token_hash(WRITE),
            policy_kernel::management::auth::token_hash(READ)
        ),
    )
    .expect("tokens file");
    format!(
        "  management:\n    listen: 127.0.0.1:0\n    tokens_file: {}\n    state_path: {}\n{extra}",
        tokens.display(),
        dir.join("state.json").display()
    )
}

/// Starts `b` with `config` then the `management:` section (no extra
/// lines) in its kernel config; the stack and its management API.
pub async fn start(b: StackBuilder, config: &str) -> (Stack, Api) {
    let management = section(b.dir(), "");
    let s = b.config(&format!("{config}{management}")).start().await;
    let api = Api::of(&s.kernel);
    (s, api)
}

/// A client of one kernel's management API.
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
}

/// Percent-encodes a route name for a path.
pub fn enc(name: &str) -> String {
    policy_kernel::management::client::encode_name(name)
}

impl Api {
    /// The API of `kernel`, at the address its log gives.
    pub fn of(kernel: &KernelProc) -> Self {
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = loop {
            let found = kernel
                .log()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["message"] == "management API listening" && l["address"].is_string())
                .and_then(|l| l["address"].as_str().map(String::from));
            if let Some(a) = found {
                break a;
            }
            assert!(Instant::now() < deadline, "no management address:\n{}", kernel.log());
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
        }
    }

    /// One request: (status, JSON body).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        if_match: Option<u64>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut req = self.client.request(
            reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
            format!("{}{path}", self.base),
        );
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(v) = if_match {
            req = req.header("if-match", v.to_string());
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// GET with the read token; panics unless 200.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, Some(READ), None, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// The current version.
    pub async fn version(&self) -> u64 {
        self.get("/v1/config").await["version"].as_u64().expect("version")
    }

    /// PUT of `route` (with its `route_name`) at the current version.
    pub async fn put(&self, route: &Value) -> (u16, Value) {
        let name = route["route_name"].as_str().expect("route_name");
        let v = self.version().await;
        self.call(
            "PUT",
            &format!("/v1/routes/{}", enc(name)),
            Some(WRITE),
            Some(v),
            Some(route),
        )
        .await
    }

    /// `POST /v1/rollback` to `version` with `token` at `if_match`.
    pub async fn rollback(&self, token: &str, if_match: u64, version: u64) -> (u16, Value) {
        let body = serde_json::json!({ "version": version });
        self.call("POST", "/v1/rollback", Some(token), Some(if_match), Some(&body))
            .await
    }

    /// The names of the routes in force.
    pub async fn route_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.get("/v1/routes").await["routes"]
            .as_array()
            .expect("routes")
            .iter()
            .map(|r| r["route_name"].as_str().unwrap_or("").to_string())
            .collect();
        names.sort();
        names
    }
}
