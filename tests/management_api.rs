//! The management API over HTTP against a real kernel and real agents:
//! authentication, If-Match under concurrent writers, strict validation
//! (each rejection changes nothing), dry runs, versions, rollback, and the
//! `policy-kernel config` command.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::management::{enc, section, Api, READ, WRITE};
use support::*;

const A1: &str = r#"policies:
  - name: tag
    params: [k, api_key]
    required: [k]
    request:
      - set_header: {name: x-tag, value: "${param:k}"}
  - name: respOnly
    phases: response
"#;

const A2: &str = r#"policies:
  - name: onlyOnA2
"#;

struct Stack {
    _dir: tempfile::TempDir,
    kernel: KernelProc,
    api: Api,
    _a1: TestAgent,
    _a2: TestAgent,
    down: std::path::PathBuf,
}

/// A kernel with agents a1 (healthy) and a2 (NOT_SERVING while `down`
/// exists), a file route `/file` and the management API.
async fn stack() -> Stack {
    let dir = workdir();
    let down = dir.path().join("a2.down");
    std::fs::write(&down, "").expect("down file");
    let a1 = TestAgent::start(dir.path(), "a1", A1);
    let a2 = TestAgent::start(dir.path(), "a2", &format!("not_serving_file: {}\n{A2}", down.display()));
    let body = format!(
        "  agents:\n{}{}  route_policies:\n    - route_name: /file\n      request_policy_chain:\n        - policy: tag\n          params: {{k: file, api_key: hunter2}}\n{}",
        agent_entry("a1", &a1, ""),
        agent_entry("a2", &a2, ""),
        section(dir.path(), "")
    );
    let kernel = KernelProc::start(dir.path(), &body);
    let api = Api::of(&kernel);
    until("agents discovered", Duration::from_secs(10), || async {
        api.get("/v1/config").await["agents"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["discovered"] == true))
    })
    .await;
    Stack {
        _dir: dir,
        kernel,
        api,
        _a1: a1,
        _a2: a2,
        down,
    }
}

fn route(name: &str, chain: Value) -> Value {
    json!({"route_name": name, "request_policy_chain": chain})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_and_read_tokens_cannot_write() {
    let s = stack().await;
    let api = &s.api;
    let (status, body) = api.call("GET", "/v1/config", None, None, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["code"], "unauthorized");
    let (status, _) = api.call("GET", "/v1/config", Some("not-a-token"), None, None).await;
    assert_eq!(status, 401);
    let v = api.version().await;
    let r = route("/new", json!([{"policy": "tag", "params": {"k": "1"}}]));
    let (status, body) = api
        .call(
            "PUT",
            &format!("/v1/routes/{}", enc("/new")),
            Some(READ),
            Some(v),
            Some(&r),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "forbidden");
    assert!(body["message"].as_str().unwrap().contains("viewer"), "{body}");
    let (status, _) = api.rollback(READ, v, v).await;
    assert_eq!(status, 403);
    assert_eq!(api.version().await, v, "refused writes change nothing");
    // The read token may read and dry-run.
    let (status, body) = api.call("POST", "/v1/validate", Some(READ), None, Some(&r)).await;
    assert_eq!(status, 200, "{body}");
    // Secret-looking params are masked; others shown.
    let cfg = api.get("/v1/config").await;
    let params = &cfg["routes"][0]["request_policy_chain"][0]["params"];
    assert_eq!(params["api_key"], "***", "{cfg}");
    assert_eq!(params["k"], "file", "{cfg}");
    assert_eq!(cfg["routes"][0]["mode"], "enforce");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_with_the_same_if_match_exactly_one_wins() {
    let s = stack().await;
    let v = s.api.version().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let api = Api {
            base: s.api.base.clone(),
            client: reqwest::Client::new(),
        };
        tasks.push(tokio::spawn(async move {
            let r = route(
                &format!("/c{i}"),
                json!([{"policy": "tag", "params": {"k": i.to_string()}}]),
            );
            api.call(
                "PUT",
                &format!("/v1/routes/{}", enc(&format!("/c{i}"))),
                Some(WRITE),
                Some(v),
                Some(&r),
            )
            .await
        }));
    }
    let mut ok = 0;
    let mut conflicts = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            200 => {
                ok += 1;
                assert_eq!(body["version"], v + 1);
            }
            409 => {
                conflicts += 1;
                assert_eq!(body["code"], "version_conflict", "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((ok, conflicts), (1, 7));
    assert_eq!(s.api.version().await, v + 1);
    assert_eq!(s.api.route_names().await.len(), 2, "the file route and the winner");
    assert_eq!(
        s.kernel
            .metric(r#"policy_kernel_config_changes_total{result="conflict",source="api"}"#),
        7.0
    );
    assert_eq!(
        s.kernel
            .metric(r#"policy_kernel_config_changes_total{result="success",source="api"}"#),
        1.0
    );
    // A write without If-Match is refused.
    let r = route("/x", json!([{"policy": "tag", "params": {"k": "1"}}]));
    let (status, body) = s
        .api
        .call("PUT", &format!("/v1/routes/{}", enc("/x")), Some(WRITE), None, Some(&r))
        .await;
    assert_eq!(status, 428, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_rejections_change_nothing_and_name_the_entry() {
    let s = stack().await;
    let api = &s.api;
    let v = api.version().await;
    let before_cfg = api.get("/v1/routes").await;
    let state = std::fs::read(s.kernel.config.with_file_name("state.json")).expect("state file");
    let cases = [
        // A policy no discovered agent supports.
        (
            route(
                "/r",
                json!([{"policy": "tag", "params": {"k": "1"}}, {"policy": "nope"}]),
            ),
            1,
            "nope",
            "no discovered agent supports",
        ),
        // The only agent supporting it is unhealthy.
        (route("/r", json!([{"policy": "onlyOnA2"}])), 0, "onlyOnA2", "unhealthy"),
        // A referenced agent that is unhealthy.
        (
            route("/r", json!([{"policy": "tag", "params": {"k": "1"}, "agent": "a2"}])),
            0,
            "tag",
            "\"a2\" is unavailable or unhealthy",
        ),
        // An unknown param.
        (
            route("/r", json!([{"policy": "tag", "params": {"k": "1", "zz": 2}}])),
            0,
            "tag",
            "unknown params [\"zz\"]",
        ),
        // A required param missing.
        (
            route("/r", json!([{"policy": "tag", "params": {"api_key": "x"}}])),
            0,
            "tag",
            "required params missing [\"k\"]",
        ),
    ];
    for (r, index, policy, reason) in cases {
        let (status, body) = api
            .call(
                "PUT",
                &format!("/v1/routes/{}", enc("/r")),
                Some(WRITE),
                Some(v),
                Some(&r),
            )
            .await;
        assert_eq!(status, 422, "{r}: {body}");
        assert_eq!(body["code"], "validation_failed");
        let e = &body["errors"][0];
        assert_eq!(e["route"], "/r", "{body}");
        assert_eq!(e["phase"], "request", "{body}");
        assert_eq!(e["index"], index, "{body}");
        assert_eq!(e["policy"], policy, "{body}");
        assert!(e["reason"].as_str().unwrap().contains(reason), "{body}");
        // The dry run says the same.
        let (status, _) = api.call("POST", "/v1/validate", Some(READ), None, Some(&r)).await;
        assert_eq!(status, 422);
        assert_eq!(api.version().await, v);
        assert_eq!(api.get("/v1/routes").await, before_cfg);
        assert_eq!(
            std::fs::read(s.kernel.config.with_file_name("state.json")).unwrap(),
            state
        );
    }
    // A response-only policy in a request chain.
    let r = route("/r", json!([{"policy": "respOnly"}]));
    let (status, body) = api
        .call(
            "PUT",
            &format!("/v1/routes/{}", enc("/r")),
            Some(WRITE),
            Some(v),
            Some(&r),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["message"].as_str().unwrap().contains("another phase"), "{body}");
    // Once a2 is healthy, the same route is accepted.
    std::fs::remove_file(&s.down).unwrap();
    until("a2 healthy", Duration::from_secs(10), || async {
        api.get("/v1/config").await["agents"][1]["healthy"] == true
    })
    .await;
    let (status, body) = api.put(&route("/r", json!([{"policy": "onlyOnA2"}]))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.kernel
            .metric(r#"policy_kernel_config_changes_total{result="rejected",source="api"}"#),
        6.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_rollback_and_the_config_command() {
    let s = stack().await;
    let api = &s.api;
    let v1 = api.version().await;
    let (status, _) = api
        .put(&route("/a/b", json!([{"policy": "tag", "params": {"k": "one"}}])))
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .put(&json!({"route_name": "/a/b", "mode": "shadow", "request_policy_chain": [{"policy": "tag", "params": {"k": "two"}}]}))
        .await;
    assert_eq!(status, 200);
    let got = api.get(&format!("/v1/routes/{}", enc("/a/b"))).await;
    assert_eq!(got["mode"], "shadow");
    assert_eq!(got["request_policy_chain"][0]["params"]["k"], "two");
    let (_, admin) = s.kernel.admin_get("/config");
    assert!(admin.contains(r#""mode":"shadow""#), "{admin}");
    let v3 = api.version().await;
    assert_eq!(v3, v1 + 2);
    let versions = api.get("/v1/versions").await;
    let list = versions["versions"].as_array().unwrap();
    assert_eq!(list[0]["version"], v3);
    assert_eq!(list[0]["source"], "api");
    assert_eq!(list[0]["token"], "ci");
    assert!(
        list[0]["summary"].as_str().unwrap().contains("replace route \"/a/b\""),
        "{versions}"
    );
    assert_eq!(list.last().unwrap()["source"], "file");
    assert_eq!(list[0]["hash"].as_str().unwrap().len(), 64);
    // Rollback to the first version: /a/b is gone again.
    let (status, body) = api.rollback(WRITE, v3, v1).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(api.route_names().await, ["/file"]);
    let (status, body) = api.rollback(WRITE, v3 + 1, 999).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = api
        .call(
            "DELETE",
            &format!("/v1/routes/{}", enc("/zz")),
            Some(WRITE),
            Some(v3 + 1),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("route_not_found")));

    // The command: token from a file, address from the log.
    let token = s.kernel.config.with_file_name("cli.token");
    std::fs::write(&token, format!("{WRITE}\n")).unwrap();
    let addr = api.base.trim_start_matches("http://").to_string();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_policy-kernel"))
            .args(["config", "--addr", &addr, "--token-file"])
            .arg(&token)
            .args(args)
            .output()
            .expect("run config command");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let file = s.kernel.config.with_file_name("route.yaml");
    std::fs::write(
        &file,
        "route_name: /cli\nrequest_policy_chain:\n  - policy: tag\n    params: {k: cli}\n",
    )
    .unwrap();
    let (ok, out, err) = cli(&["validate", file.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli(&["put-route", file.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert_eq!(api.route_names().await, ["/cli", "/file"]);
    let (ok, out, _) = cli(&["versions"]);
    assert!(ok && out.contains("add route \\\"/cli\\\""), "{out}");
    let now = api.version().await;
    let (ok, out, err) = cli(&["diff", &v1.to_string(), &now.to_string()]);
    assert!(ok && out.contains("+ route \"/cli\""), "{out}{err}");
    let (ok, out, err) = cli(&["delete-route", "/cli"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli(&["rollback", &now.to_string()]);
    assert!(ok, "{out}{err}");
    assert_eq!(api.route_names().await, ["/cli", "/file"]);
    std::fs::write(&file, "route_name: /cli\nrequest_policy_chain:\n  - policy: nope\n").unwrap();
    let (ok, _, err) = cli(&["put-route", file.to_str().unwrap()]);
    assert!(!ok && err.contains("validation_failed"), "{err}");
    let (ok, out, _) = cli(&["get"]);
    assert!(ok && out.contains("\"version\""), "{out}");
    // Every API change was logged with the token's name and the version.
    let log = s.kernel.log();
    let changes: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "configuration changed through the management API")
        .collect();
    assert_eq!(changes.len(), 6, "{log}");
    assert!(changes.iter().all(|c| c["token"] == "ci" && c["version"].is_u64()));
}
