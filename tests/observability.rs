//! deploy/observability against real parts: promtool checks and unit-tests
//! the rules; every metric the rules and the dashboard read is served by the
//! kernel; and a real Prometheus scrapes a kernel behind a real Envoy, with
//! the rules loaded, and its recorded series have the values known traffic
//! gives. Prometheus and promtool come from the Debian package `prometheus`
//! (`make test` installs it).

#[path = "observability/promql.rs"]
mod promql;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/observability")
}

/// A command of the `prometheus` package, or a failure saying how to get it.
fn tool(name: &str) -> Command {
    let found =
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()));
    assert!(
        found,
        "{name} not found: install the Debian package `prometheus` (`make test` does: NEED_TEST)"
    );
    Command::new(name)
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_the_rules_and_the_prometheus_config() {
    let text = run_ok(
        tool("promtool")
            .arg("check")
            .arg("rules")
            .arg(dir().join("policy-kernel.rules.yml")),
    );
    assert!(text.contains("SUCCESS"), "{text}");
    // The config of `make observe`, with the rules file it names.
    let text = run_ok(
        tool("promtool")
            .arg("check")
            .arg("config")
            .arg(dir().join("prometheus.yml")),
    );
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn promtool_unit_tests_every_alert_firing_and_quiet() {
    let tests = dir().join("policy-kernel.rules.test.yml");
    let text = run_ok(tool("promtool").arg("test").arg("rules").arg(&tests));
    assert!(text.contains("SUCCESS"), "{text}");
    // Each alert has a case where it fires and one where it stays quiet.
    let cases = std::fs::read_to_string(&tests).expect("tests");
    for alert in alerts() {
        let line = format!("alertname: {alert}\n");
        let at: Vec<usize> = cases.match_indices(&line).map(|(i, _)| i).collect();
        let quiet = at
            .iter()
            .filter(|&&i| cases[i + line.len()..].trim_start().starts_with("exp_alerts: []"))
            .count();
        assert!(quiet >= 1, "{alert}: no case where it stays quiet");
        assert!(at.len() > quiet, "{alert}: no case where it fires");
    }
}

fn rules() -> serde_yaml::Value {
    let text = std::fs::read_to_string(dir().join("policy-kernel.rules.yml")).expect("rules");
    serde_yaml::from_str(&text).expect("rules YAML")
}

fn rule_entries() -> Vec<serde_yaml::Value> {
    rules()["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .collect()
}

fn alerts() -> Vec<String> {
    rule_entries()
        .iter()
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect()
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(dir().join("grafana-dashboard.json")).expect("dashboard");
    serde_json::from_str(&text).expect("dashboard JSON")
}

/// Every panel query of the dashboard.
fn panel_exprs(d: &Value) -> Vec<String> {
    d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("target expr").to_string())
        .collect()
}

/// The series selector of each `label_values(SELECTOR, LABEL)` variable.
fn variable_selectors(d: &Value) -> Vec<String> {
    d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]["query"].as_str().expect("variable query");
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("not label_values(...): {q}"));
            let (selector, _label) = inner.rsplit_once(',').expect("label_values(SELECTOR, LABEL)");
            selector.trim().to_string()
        })
        .collect()
}

/// A dashboard query with its variables as an "All" selection has them.
fn substituted(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$instance", ".*")
        .replace("$route", ".*")
        .replace("$agent", ".*")
}

#[test]
fn the_dashboard_is_importable_and_uses_its_variables_and_data_source() {
    let d = dashboard();
    assert_eq!(d["uid"], "policy-kernel");
    let vars: BTreeSet<&str> = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["datasource", "instance", "route", "agent"] {
        assert!(vars.contains(v), "variable {v} missing");
    }
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    let mut row = "";
    for p in d["panels"].as_array().expect("panels") {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().expect("x"), g["w"].as_u64().expect("w"));
        assert!(
            x + w <= 24 && g["h"].as_u64().is_some() && g["y"].as_u64().is_some(),
            "{p}"
        );
        if p["type"] == "row" {
            row = p["title"].as_str().expect("row title");
            continue;
        }
        titles.insert(p["title"].as_str().expect("title").to_string());
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            let expr = t["expr"].as_str().expect("expr");
            // Every variable a query uses is defined (or Grafana's own).
            for (i, _) in expr.match_indices('$') {
                let name: String = expr[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    vars.contains(name.as_str()) || name == "__rate_interval",
                    "{}: unknown variable ${name}",
                    p["title"]
                );
            }
            // Every panel follows the instance selection; route panels the route one.
            assert!(expr.contains("instance=~\"$instance\""), "{}: {expr}", p["title"]);
            if row == "Routes" {
                assert!(expr.contains("route=~\"$route\""), "{}: {expr}", p["title"]);
            }
        }
    }
    for want in [
        "Requests per route",
        "Denies by status and reason",
        "Chain latency p50 / p99",
        "Agent health",
        "Circuit state",
        "Calls by outcome",
        "Error ratio",
        "Timeouts",
        "CPU",
        "Resident memory",
        "Config version",
        "Reloads",
    ] {
        assert!(titles.contains(want), "panel {want:?} missing");
    }
}

const A1: &str = r#"policies:
  - name: tag
    rules:
      - when: {header_present: x-deny}
        request: [{immediate: {status: 403, body: "denied", reason: denied}}]
    request:
      - set_header: {name: x-a1, value: "1"}
  - name: broken
    request_id: wrong
    request:
      - set_header: {name: x-broken, value: "1"}
"#;
const A2: &str = "policies:\n  - name: stamp\n    request:\n      - set_header: {name: x-a2, value: \"1\"}\n";
const A3: &str =
    "policies:\n  - name: gate\n    request:\n      - immediate: {status: 403, body: \"closed\", reason: denied}\n";

/// Three test agents, a kernel and a real Envoy: route `chain` runs `tag`
/// (a1; denies with 403 when `x-deny` is present) then `stamp` (a2); route
/// `fail` runs `broken` (a1), whose reply carries the wrong request id;
/// route `deny` runs `gate` (a3), which denies every request with 403; route
/// `invalid` names a policy no agent declares (policy_not_supported).
async fn stack() -> Stack {
    let routes = "  route_policies:\n    - route_name: chain\n      request_policy_chain: [{policy: tag}, {policy: stamp}]\n    - route_name: fail\n      request_policy_chain: [{policy: broken}]\n    - route_name: deny\n      request_policy_chain: [{policy: gate}]\n    - route_name: invalid\n      request_policy_chain: [{policy: nosuch}]\n";
    Stack::builder()
        .test_agent("a1", A1)
        .test_agent("a2", A2)
        .test_agent("a3", A3)
        .config(routes)
        .start()
        .await
}

/// One request on route `deny`, answered 403 by a3.
async fn deny(s: &Stack, c: &reqwest::Client) {
    let r = send(c, "GET", &s.url("/deny/x"), &[], None).await;
    assert_eq!(r.status, 403, "{}", r.body);
}

/// The known traffic: on `chain`, 3 requests through both agents and 1
/// denied by the first; 1 on `fail`, failed by an invalid reply; 2 on
/// `deny`; 1 on `invalid`, answered 500 without an agent call. Agent
/// calls: a1 5 (1 invalid), a2 3, a3 2; calls per request on `chain`:
/// (3 × 2 + 1) / 4 = 1.75.
async fn traffic(s: &Stack) {
    let c = reqwest::Client::new();
    for _ in 0..3 {
        let r = send(&c, "GET", &s.url("/chain/x"), &[], None).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, s.kernel.log());
        assert_eq!(r.echoed_header("x-a2").as_deref(), Some("1"), "{}", r.body);
    }
    let r = send(&c, "GET", &s.url("/chain/x"), &[("x-deny", "1")], None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = send(&c, "GET", &s.url("/fail/x"), &[], None).await;
    assert_eq!(r.status, 500, "{}", r.body);
    deny(s, &c).await;
    deny(s, &c).await;
    let r = send(&c, "GET", &s.url("/invalid/x"), &[], None).await;
    assert_eq!(r.status, 500, "{}", r.body);
}

/// The sample names of a `/metrics` text.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(String::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_dashboard_read_is_served_by_the_kernel() {
    let stack = stack().await;
    traffic(&stack).await;
    let (status, text) = stack.kernel.admin_get("/metrics");
    assert_eq!(status, 200);
    let served = sample_names(&text);
    let recorded: BTreeSet<String> = rule_entries()
        .iter()
        .filter_map(|r| r["record"].as_str().map(String::from))
        .collect();
    let d = dashboard();
    let mut exprs: Vec<(String, String)> = rule_entries()
        .iter()
        .map(|r| {
            let name = r["record"].as_str().or(r["alert"].as_str()).unwrap_or("?").to_string();
            (name, r["expr"].as_str().expect("expr").to_string())
        })
        .collect();
    exprs.extend(panel_exprs(&d).into_iter().map(|e| ("dashboard".to_string(), e)));
    exprs.extend(
        variable_selectors(&d)
            .into_iter()
            .map(|e| ("dashboard variable".to_string(), e)),
    );
    let mut checked = BTreeSet::new();
    for (what, expr) in &exprs {
        let names = promql::series_names(expr);
        assert!(!names.is_empty(), "{what}: no series in {expr}");
        for name in names {
            let known = if name.contains(':') {
                recorded.contains(&name)
            } else if name.starts_with("policy_kernel_config_store_") {
                // Served only with a fleet store: tests/fleet_drift.rs
                // checks these against a kernel that has one.
                true
            } else {
                // `up` is Prometheus's own, per scrape target.
                name == "up" || served.contains(&name)
            };
            assert!(known, "{what} reads {name}, which the kernel does not serve:\n{expr}");
            checked.insert(name);
        }
    }
    // The families the issue asks for are all read.
    for name in [
        "policy_kernel_agent_health",
        "policy_kernel_agent_circuit_state",
        "policy_kernel_config_reload_total",
        "policy_kernel_config_version",
        "policy_kernel_ready",
        "policy_kernel_log_lines_dropped_total",
        "policy_kernel_agent_timeouts_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_cpu_seconds_total",
    ] {
        assert!(checked.contains(name), "{name} is read by no rule or panel");
    }
    assert!(text.lines().any(|l| l == "policy_kernel_ready 1"), "{text}");
}

/// A Prometheus server on a port it picked, storing in a temp dir.
struct Prometheus {
    _proc: Proc,
    port: u16,
    log: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, metrics_port: u16) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{}]\nscrape_configs:\n  - job_name: policy-kernel\n    static_configs: [{{targets: [\"127.0.0.1:{metrics_port}\"]}}]\n",
                self::dir().join("policy-kernel.rules.yml").display()
            ),
        )
        .expect("write prometheus.yml");
        let log = dir.join("prometheus.log");
        let mut cmd = tool("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg("--web.listen-address=127.0.0.1:0");
        let mut proc = Proc::spawn("prometheus", &mut cmd, &log);
        // The port it bound is in its log: `msg="Listening on" address=127.0.0.1:PORT`.
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let port = text
                .lines()
                .filter(|l| l.contains("msg=\"Listening on\""))
                .find_map(|l| l.rsplit("address=").next()?.trim().parse::<std::net::SocketAddr>().ok())
                .map(|a| a.port());
            if let Some(p) = port.filter(|p| *p != 0 && http_get(*p, "/-/ready").0 == 200) {
                break p;
            }
            let exited = proc.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "prometheus not ready (exit {exited:?}):\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self { _proc: proc, port, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET on the HTTP API; the `data` of a successful answer.
    async fn api(&self, c: &reqwest::Client, path: &str) -> Value {
        let url = format!("http://127.0.0.1:{}/api/v1/{path}", self.port);
        let body: Value = c
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(body["status"], "success", "{path}: {body}");
        body["data"].clone()
    }

    /// An instant query: (labels, value) of each result.
    async fn query(&self, c: &reqwest::Client, expr: &str) -> Vec<(Value, f64)> {
        let q = percent_encoding::utf8_percent_encode(expr, percent_encoding::NON_ALPHANUMERIC);
        let data = self.api(c, &format!("query?query={q}")).await;
        data["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{expr}: {data}"))
            .iter()
            .map(|r| {
                let v = r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (r["metric"].clone(), v)
            })
            .collect()
    }

    /// Polls the query until its one result is `want`; fails after 30 s.
    async fn until_value(&self, c: &reqwest::Client, expr: &str, want: f64) {
        self.until(c, expr, &format!("{want}"), |got| {
            got.len() == 1 && (got[0].1 - want).abs() < 1e-9
        })
        .await;
    }

    /// Polls the query until `holds` its results (`want` says what, for
    /// the failure); fails after 30 s. A recorded rate is evaluated on the
    /// rules' schedule, after the scrape that saw the traffic.
    async fn until(
        &self,
        c: &reqwest::Client,
        expr: &str,
        want: &str,
        holds: impl Fn(&[(Value, f64)]) -> bool,
    ) -> Vec<(Value, f64)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.query(c, expr).await;
            if holds(&got) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{expr}: want {want}, got {got:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_kernel_behind_envoy_and_records_known_traffic() {
    let stack = stack().await;
    let c = reqwest::Client::new();
    // A series appears with its first increment, which a rate cannot see:
    // one deny before Prometheus starts makes route `deny`'s series exist
    // from the first scrape on (deploy/observability/README.md, Limits).
    deny(&stack, &c).await;
    let tmp = workdir();
    let prom = Prometheus::start(tmp.path(), stack.kernel.metrics_port);

    // Two scrapes before the traffic, so that every counter the rules read
    // starts from a sample at 0.
    let mut scrapes = 0.0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while scrapes < 2.0 {
        assert!(Instant::now() < deadline, "no scrapes:\n{}", prom.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
        scrapes = prom
            .query(
                &c,
                r#"count_over_time(policy_kernel_agent_calls_per_request_count{job="policy-kernel",route="chain"}[1m])"#,
            )
            .await
            .first()
            .map(|r| r.1)
            .unwrap_or(0.0);
    }
    traffic(&stack).await;
    // A reload of a file that does not load: rejected and counted.
    std::fs::write(&stack.kernel.config, "policy_kernel: [").expect("write config");
    stack.kernel.proc.signal("HUP");
    until("the rejected reload counted", Duration::from_secs(10), || {
        let failures = stack
            .kernel
            .metric(r#"policy_kernel_config_reload_total{status="failure"}"#);
        async move { failures == 1.0 }
    })
    .await;

    // Recorded series, exact because every series in each ratio started
    // from 0 at the same scrapes.
    prom.until_value(
        &c,
        r#"route:policy_kernel_agent_calls_per_request:ratio_rate1m{route="chain"}"#,
        1.75,
    )
    .await;
    prom.until_value(&c, r#"agent:policy_kernel_agent_errors:ratio_rate5m{agent="a1"}"#, 0.2)
        .await;
    prom.until_value(&c, r#"agent:policy_kernel_agent_errors:ratio_rate5m{agent="a2"}"#, 0.0)
        .await;
    // Denies by status and reason: route `deny`'s 2 after the baseline.
    let denied = |got: &[(Value, f64)]| {
        got.iter().any(|(m, v)| {
            format!("{} {} {}", m["route"], m["status"], m["reason"]) == r#""deny" "403" "denied""# && *v > 0.0
        })
    };
    prom.until(
        &c,
        "route_status_reason:policy_kernel_immediate_responses:rate1m",
        "a rate above 0 for route deny, 403, denied",
        denied,
    )
    .await;
    let requests = prom
        .until(
            &c,
            r#"route:policy_kernel_requests:rate1m{route="chain"}"#,
            "one rate above 0",
            |got| got.len() == 1 && got[0].1 > 0.0,
        )
        .await;
    assert_eq!(
        requests[0].0["instance"],
        format!("127.0.0.1:{}", stack.kernel.metrics_port)
    );

    // Every rule evaluated without error.
    let data = prom.api(&c, "rules").await;
    let mut evaluated = 0;
    for g in data["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            assert_eq!(r["health"], "ok", "{r}");
            evaluated += 1;
        }
    }
    assert_eq!(evaluated, rule_entries().len());
    // Real alerts: the rejected reload and route `invalid` fire at once (no
    // `for`); a1's 20% errors put PolicyKernelAgentErrors in pending (it
    // fires after 5 minutes); nothing else.
    let want = [
        r#"PolicyKernelAgentErrors agent="a1" pending"#,
        r#"PolicyKernelConfigReloadFailed status="failure" firing"#,
        r#"PolicyKernelPolicyNotSupported route="invalid" firing"#,
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let alerts = prom.api(&c, "alerts").await;
        let mut active: Vec<String> = alerts["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .map(|a| {
                let l = &a["labels"];
                let key = ["agent", "status", "route"]
                    .into_iter()
                    .find_map(|k| l[k].as_str().map(|v| format!("{k}=\"{v}\"")))
                    .unwrap_or_default();
                format!(
                    "{} {key} {}",
                    l["alertname"].as_str().unwrap_or("?"),
                    a["state"].as_str().unwrap_or("?")
                )
            })
            .collect();
        active.sort();
        if active == want {
            break;
        }
        assert!(Instant::now() < deadline, "alerts {active:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Every dashboard query runs on this Prometheus; every variable lists values.
    let d = dashboard();
    for expr in panel_exprs(&d) {
        prom.query(&c, &substituted(&expr)).await;
    }
    for selector in variable_selectors(&d) {
        let got = prom.query(&c, &substituted(&selector)).await;
        assert!(!got.is_empty(), "variable query {selector} lists nothing");
    }
    drop(prom);
}
