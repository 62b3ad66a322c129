//! The management API's persisted state against a real kernel: API changes
//! survive a restart, a SIGHUP applies the file with the API's changes on
//! top (the API's version of a route wins, and it is logged), and a
//! persisted change the agents can no longer serve is kept and answered as
//! §4.2 says.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use serde_json::{json, Value};
use support::extproc::{self, Stream};
use support::management::{section, Api};
use support::*;

const A1: &str = r#"policies:
  - name: tag
    params: [k]
    request:
      - set_header: {name: x-tag, value: "${param:k}"}
"#;

const A2: &str = r#"policies:
  - name: onlyOnA2
"#;

fn file_routes(k: &str, extra: &str) -> String {
    format!(
        "  route_policies:\n    - route_name: /f1\n      request_policy_chain:\n        - policy: tag\n          params: {{k: {k}}}\n{extra}"
    )
}

/// The status of an immediate answer to a request on `route`, or the value
/// of the `x-tag` header the chain set.
async fn answer(kernel: &KernelProc, route: &str) -> String {
    let mut client = extproc::connect(&kernel.socket).await;
    let mut s = Stream::open(&mut client, None).await;
    let r = s
        .exchange(extproc::request_headers(Some(route), &[(":path", "/")]))
        .await;
    match r.response {
        Some(Response::ImmediateResponse(i)) => format!("status {}", i.status.map(|s| s.code).unwrap_or(0)),
        Some(Response::RequestHeaders(h)) => h
            .response
            .and_then(|c| c.header_mutation)
            .and_then(|m| {
                m.set_headers
                    .into_iter()
                    .find(|o| o.header.as_ref().is_some_and(|h| h.key == "x-tag"))
            })
            .and_then(|o| o.header)
            .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
            .unwrap_or_else(|| "continue".into()),
        other => panic!("unexpected answer {other:?}"),
    }
}

fn log_lines(kernel: &KernelProc, message: &str) -> Vec<Value> {
    kernel
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"].as_str().is_some_and(|m| m.contains(message)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_changes_survive_a_restart_and_win_over_the_file_on_sighup() {
    let dir = workdir();
    let a1 = TestAgent::start(dir.path(), "a1", A1);
    let head = format!("  agents:\n{}", agent_entry("a1", &a1, ""));
    let mgmt = section(dir.path(), "");
    let body = format!("{head}{}{mgmt}", file_routes("file", ""));
    let kernel = KernelProc::start(dir.path(), &body);
    let api = Api::of(&kernel);
    until("a1 discovered", Duration::from_secs(10), || async {
        api.get("/v1/config").await["agents"][0]["discovered"] == true
    })
    .await;
    assert_eq!(answer(&kernel, "/f1").await, "file");
    let route = |name: &str, k: &str| json!({"route_name": name, "request_policy_chain": [{"policy": "tag", "params": {"k": k}}]});
    assert_eq!(api.put(&route("/f1", "api")).await.0, 200);
    assert_eq!(api.put(&route("/a1", "added")).await.0, 200);
    assert_eq!(answer(&kernel, "/f1").await, "api");
    assert_eq!(answer(&kernel, "/a1").await, "added");
    let version = api.version().await;
    let history = api.get("/v1/versions").await;

    // Restart: same file, same state.
    let socket = kernel.socket.clone();
    drop(kernel);
    let _ = std::fs::remove_file(&socket);
    let kernel = KernelProc::start(dir.path(), &body);
    let api = Api::of(&kernel);
    until("a1 discovered", Duration::from_secs(10), || async {
        api.get("/v1/config").await["agents"][0]["discovered"] == true
    })
    .await;
    assert_eq!(
        api.version().await,
        version,
        "a restart with nothing new keeps the version"
    );
    assert_eq!(api.get("/v1/versions").await, history);
    assert_eq!(api.route_names().await, ["/a1", "/f1"]);
    assert_eq!(answer(&kernel, "/f1").await, "api");
    assert_eq!(answer(&kernel, "/a1").await, "added");
    assert_eq!(
        log_lines(&kernel, "overridden by a change made through the management API").len(),
        1
    );

    // The file changes /f1 and adds /f2; SIGHUP: /f1 stays the API's.
    kernel.write_config(&format!(
        "{head}{}{mgmt}",
        file_routes(
            "file2",
            "    - route_name: /f2\n      request_policy_chain:\n        - policy: tag\n          params: {k: f2}\n"
        )
    ));
    kernel.proc.signal("HUP");
    until("reloaded", Duration::from_secs(10), || async {
        api.version().await == version + 1
    })
    .await;
    assert_eq!(api.route_names().await, ["/a1", "/f1", "/f2"]);
    assert_eq!(answer(&kernel, "/f1").await, "api");
    assert_eq!(answer(&kernel, "/f2").await, "f2");
    let latest = &api.get("/v1/versions").await["versions"][0];
    assert_eq!(latest["source"], "file", "{latest}");
    let overridden = log_lines(&kernel, "overridden by a change made through the management API");
    assert_eq!(overridden.len(), 2, "once at startup, once at the reload");
    assert_eq!(overridden[1]["route"], "/f1");
    assert_eq!(
        kernel.metric(r#"policy_kernel_config_changes_total{result="success",source="file"}"#),
        1.0
    );
    // A file that does not load changes nothing.
    std::fs::write(&kernel.config, "policy_kernel: [").unwrap();
    kernel.proc.signal("HUP");
    until("reload refused", Duration::from_secs(10), || async {
        kernel.metric(r#"policy_kernel_config_changes_total{result="rejected",source="file"}"#) == 1.0
    })
    .await;
    assert_eq!(api.version().await, version + 1);
    assert_eq!(answer(&kernel, "/a1").await, "added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_change_that_became_invalid_is_kept_logged_and_answered_500() {
    let dir = workdir();
    let a1 = TestAgent::start(dir.path(), "a1", A1);
    let mut a2 = TestAgent::start(dir.path(), "a2", A2);
    let mgmt = section(dir.path(), "");
    let agents = format!(
        "  agents:\n{}{}",
        agent_entry("a1", &a1, ""),
        agent_entry("a2", &a2, "")
    );
    let kernel = KernelProc::start(dir.path(), &format!("{agents}{}{mgmt}", file_routes("file", "")));
    let api = Api::of(&kernel);
    until("agents healthy", Duration::from_secs(10), || async {
        api.get("/v1/config").await["agents"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["healthy"] == true))
    })
    .await;
    let r = json!({"route_name": "/on-a2", "request_policy_chain": [{"policy": "onlyOnA2"}]});
    assert_eq!(api.put(&r).await.0, 200);
    assert_eq!(answer(&kernel, "/on-a2").await, "continue");
    let socket = kernel.socket.clone();
    drop(kernel);
    let _ = std::fs::remove_file(&socket);
    // a2 leaves: the restarted kernel only knows a1.
    a2.kill();
    let agents = format!("  agents:\n{}", agent_entry("a1", &a1, ""));
    let kernel = KernelProc::start(dir.path(), &format!("{agents}{}{mgmt}", file_routes("file", "")));
    let api = Api::of(&kernel);
    assert_eq!(api.route_names().await, ["/f1", "/on-a2"], "never dropped");
    let cfg = api.get("/v1/config").await;
    let on_a2 = cfg["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route_name"] == "/on-a2")
        .unwrap();
    assert_eq!(on_a2["valid"], false, "{cfg}");
    assert_eq!(answer(&kernel, "/on-a2").await, "status 500");
    let logged = log_lines(&kernel, "cannot be served now");
    assert!(
        logged
            .iter()
            .any(|l| l["route"] == "/on-a2" && l["policy"] == "onlyOnA2"),
        "{}",
        kernel.log()
    );
}
