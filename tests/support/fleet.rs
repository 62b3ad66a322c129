//! A fleet for the configuration-store tests: a real etcd cluster and
//! kernels (each with its own Envoy, agent and upstream) sharing one
//! prefix, with management APIs on fixed loopback ports so that a kernel
//! restarted on its configuration is found again.

use std::time::Duration;

use serde_json::Value;

use super::etcd::{Cut, EtcdCluster};
use super::kernel::restart_kernel;
use super::management::{self, enc, Api, WRITE};
use super::stack::Stack;
use super::{free_port, until};

/// The agent of every kernel: a denying policy and a tagging one.
pub const AGENT: &str = r#"policies:
  - name: denyAll
    phases: request
    request: [{immediate: {status: 403, body: "blocked", reason: fleet}}]
  - name: tag
    params: [v]
    required: [v]
    request:
      - set_header: {name: x-fleet, value: "${param:v}"}
"#;

/// The file's routes on every kernel.
const FILE_ROUTES: &str = "  route_policies:\n    - route_name: users\n      request_policy_chain:\n        - policy: tag\n          params: {v: file}\n";

/// An etcd cluster and the kernels on it.
pub struct Fleet {
    /// The forwarder the last kernel reaches etcd through ([`Fleet::start_cut`]).
    pub cut: Option<Cut>,
    pub stacks: Vec<Stack>,
    pub apis: Vec<Api>,
    pub etcd: EtcdCluster,
    pub dir: tempfile::TempDir,
}

/// The route `name` denying every request.
pub fn deny(name: &str) -> Value {
    serde_json::json!({"route_name": name, "request_policy_chain": [{"policy": "denyAll"}]})
}

/// The route `name` tagging requests `x-fleet: v`.
pub fn tag(name: &str, v: &str) -> Value {
    serde_json::json!({"route_name": name, "request_policy_chain": [{"policy": "tag", "params": {"v": v}}]})
}

/// A kernel (with its Envoy, agent and upstream) on the etcd `endpoints`,
/// `etcd` extra lines under `store.etcd` (8-space indented), its
/// management API on a fixed port.
pub async fn kernel(endpoints: &[String], etcd: &str) -> (Stack, Api) {
    let port = free_port();
    let b = Stack::builder().test_agent("a", AGENT);
    let store = format!(
        "    history: 1000\n    store:\n      etcd:\n        endpoints: [{}]\n        prefix: /fleet-test/\n        request_timeout_ms: 2000\n        connect_timeout_ms: 1000\n{etcd}",
        endpoints.join(", ")
    );
    let section = management::section(b.dir(), &store).replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let s = b.config(&format!("{FILE_ROUTES}{section}")).start().await;
    let api = Api {
        base: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
    };
    (s, api)
}

impl Fleet {
    /// A 3-member etcd cluster and `kernels` kernels on every member.
    pub async fn start(kernels: usize) -> Self {
        Self::launch(kernels, false).await
    }

    /// Like [`Fleet::start`], but the last kernel reaches etcd only through
    /// a forwarder to member 0 ([`Fleet::cut`]).
    pub async fn start_cut(kernels: usize) -> Self {
        Self::launch(kernels, true).await
    }

    async fn launch(kernels: usize, cut: bool) -> Self {
        let dir = super::workdir();
        let etcd = EtcdCluster::start(dir.path(), 3).await;
        let cut = cut.then(|| Cut::start(etcd.client_port(0)));
        let mut stacks = Vec::new();
        let mut apis = Vec::new();
        for i in 0..kernels {
            let mine: Vec<String> = match &cut {
                Some(c) if i == kernels - 1 => vec![c.url()],
                _ => etcd.endpoints(),
            };
            let (s, api) = kernel(&mine, "").await;
            stacks.push(s);
            apis.push(api);
        }
        let f = Self {
            cut,
            stacks,
            apis,
            etcd,
            dir,
        };
        for i in 0..kernels {
            f.until_watching(i).await;
        }
        f
    }

    /// Kernel `i`'s `store` status (from `GET /v1/config`).
    pub async fn store(&self, i: usize) -> Value {
        self.apis[i].get("/v1/config").await["store"].clone()
    }

    /// Waits until kernel `i` watches the store.
    pub async fn until_watching(&self, i: usize) {
        until(
            &format!("kernel {i} watching the store"),
            Duration::from_secs(15),
            || async {
                let (status, body) = self.apis[i]
                    .call("GET", "/v1/config", Some(management::READ), None, None)
                    .await;
                status == 200 && body["store"]["watching"] == true
            },
        )
        .await;
    }

    /// Waits until `ok(i)` holds for every kernel `i`, each within
    /// `timeout`: a write answers once the kernel that took it has applied
    /// it, not the fleet, so another kernel is read until it converged.
    pub async fn until_every<'a, F, Fut>(&'a self, what: &str, timeout: Duration, ok: F)
    where
        F: Fn(&'a Self, usize) -> Fut,
        Fut: std::future::Future<Output = bool> + 'a,
    {
        for i in 0..self.apis.len() {
            until(&format!("kernel {i}: {what}"), timeout, || ok(self, i)).await;
        }
    }

    /// Waits until every kernel has exactly the routes `names` (sorted).
    pub async fn until_routes(&self, names: &[&str]) {
        self.until_every(
            &format!("routes {names:?}"),
            Duration::from_secs(10),
            |f, i| async move { f.apis[i].route_names().await == names },
        )
        .await;
    }

    /// PUT of `route` through kernel `i` at `version`: (status, body).
    pub async fn put_at(&self, i: usize, version: u64, route: &Value) -> (u16, Value) {
        let name = route["route_name"].as_str().expect("route_name");
        self.apis[i]
            .call(
                "PUT",
                &format!("/v1/routes/{}", enc(name)),
                Some(WRITE),
                Some(version),
                Some(route),
            )
            .await
    }

    /// GET `path` through Envoy `i`: the status.
    pub async fn status_via(&self, i: usize, path: &str) -> u16 {
        self.stacks[i].get(path, &[]).await.status
    }

    /// Restarts kernel `i` on its configuration and waits for its API.
    pub async fn restart_kernel(&mut self, i: usize) {
        // Gone before the new one binds its fixed management port.
        self.stacks[i].kernel.proc.kill();
        restart_kernel(&mut self.stacks[i].kernel);
        let api = &self.apis[i];
        until(
            &format!("kernel {i}'s management API"),
            Duration::from_secs(15),
            || async { api.client.get(format!("{}/v1/config", api.base)).send().await.is_ok() },
        )
        .await;
    }

    /// Every kernel's log and etcd's, for a failure message.
    pub fn diag(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.stacks.iter().enumerate() {
            out += &format!("--- kernel {i} ---\n{}\n", super::stack::tail(&s.kernel.log(), 40));
        }
        out + &self.etcd.logs()
    }
}
