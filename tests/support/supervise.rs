//! Helpers of the upgrade and restart tests (`tests/upgrade.rs`): the
//! generations of a kernel run by `policy-kernel supervise`, the `upgrade`
//! command, and an Envoy in front of two kernels.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::load::{envoy_config, EnvoyOpts};
use super::Envoy;

/// The generation header the upgrade tests configure
/// (`server.generations.header`), kept on each answer (`load::hit`).
pub const GENERATION_HEADER: &str = "x-policy-kernel-generation";

/// The headers `load::hit` keeps on each answer (`Answer::tag`), read
/// from the response or from the upstream's echo of the request.
pub const TAGGED: [&str; 5] = ["x-gate", "x-lat", "x-body-included", "x-seen", GENERATION_HEADER];

/// The child processes of `pid` (the generations of a `supervise` parent).
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Runs `policy-kernel upgrade --config=...`: whether it succeeded, and
/// what it printed.
pub fn upgrade(config: &Path) -> (bool, String) {
    upgrade_with(&format!("--config={}", config.display()))
}

/// Runs `policy-kernel upgrade ARG` (`--config=...` or `--control-socket=...`).
pub fn upgrade_with(arg: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_policy-kernel"))
        .arg("upgrade")
        .arg(arg)
        .output()
        .expect("run policy-kernel upgrade");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text.trim().to_string())
}

/// Waits until the parent `pid` has exactly one child (the draining
/// generations have exited); returns it.
pub fn single_generation(pid: u32, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let c = children(pid);
        if c.len() == 1 {
            return Some(c[0]);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Envoy configured like the suite's (`load::start_envoy`), with the
/// `policy_kernel` cluster made of two kernels (`a`, `b`), and gRPC retries
/// of the ext_proc stream: `retry_on` conditions, `attempts` retries.
pub fn start_envoy_two_kernels(dir: &Path, a: &Path, b: &Path, upstream: u16, opts: &EnvoyOpts) -> Envoy {
    let one = envoy_config(a, upstream, opts);
    let single = format!(
        "endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {}}}}}}}}}]}}]",
        a.display()
    );
    let two = format!(
        "endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {}}}}}}}}}, {{endpoint: {{address: {{pipe: {{path: {}}}}}}}}}]}}]",
        a.display(),
        b.display()
    );
    assert!(one.contains(&single), "the suite's Envoy config changed: {one}");
    let grpc = "                envoy_grpc: {cluster_name: policy_kernel}\n";
    assert!(one.contains(grpc), "the suite's Envoy config changed: {one}");
    let cluster = "  - name: policy_kernel\n    type: STATIC\n    connect_timeout: 1s\n";
    let limits = "thresholds: [{max_requests: 100000, max_pending_requests: 100000, max_connections: 100000}]";
    assert!(
        one.contains(cluster) && one.contains(limits),
        "the suite's Envoy config changed: {one}"
    );
    let config = one
        .replacen(cluster, &format!("{cluster}{TWO_KERNEL_OUTLIER}"), 1)
        // Envoy allows 3 retries in flight per cluster by default.
        .replacen(limits, &limits.replace("}]", ", max_retries: 100000}]"), 1)
        .replace(&single, &two)
        .replace(
        grpc,
        &format!("{grpc}                retry_policy:\n                  retry_on: \"{TWO_KERNEL_RETRY_ON}\"\n                  num_retries: 2\n                  retry_back_off: {{base_interval: 0.01s, max_interval: 0.05s}}\n                  retry_host_predicate: [{{name: envoy.retry_host_predicates.previous_hosts, typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}}}]\n                  host_selection_retry_max_attempts: 3\n"),
    );
    Envoy::launch(dir, &config, &["-l", "warning"])
}

/// Outlier detection of the two-kernel cluster: a kernel that refuses two
/// connections in a row (dead) is ejected at once, for 10 s and longer each
/// time, so new streams stop trying it.
pub const TWO_KERNEL_OUTLIER: &str = "    outlier_detection: {consecutive_local_origin_failure: 2, split_external_local_origin_errors: true, base_ejection_time: 10s, max_ejection_percent: 50}\n";

/// The conditions on which Envoy retries the ext_proc stream in the
/// two-kernel setup (README, "Two kernels behind Envoy").
pub const TWO_KERNEL_RETRY_ON: &str = "connect-failure,refused-stream,unavailable,reset";
