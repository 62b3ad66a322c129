//! The Envoy of the approvals end-to-end tests: the service's routes, then
//! `/approvals/page` and `/approvals` answered by the kernel.

use std::path::Path;

use super::envoy::{self, EnvoyConfig, KernelAt};

/// `/mcp` to the server (30 s), as [`envoy_config`]'s `service` routes.
pub fn mcp_route() -> String {
    envoy::route("mcp", "/mcp", ", timeout: 30s")
}

/// The config: `service` (the routes to the server on `upstream`, matched
/// first), then `/approvals/page` and `/approvals`; `clusters` beside the
/// server's; no idle timeout (streams stay open).
pub fn envoy_config(kernel: &Path, upstream: u16, service: &str, clusters: Vec<(&str, u16)>) -> String {
    let routes = [
        service.to_string(),
        envoy::route("approvals-page", "/approvals/page", ""),
        envoy::route("approvals", "/approvals", ""),
    ]
    .concat();
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream,
        access_log:
            "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %UPSTREAM_CLUSTER% %DYNAMIC_METADATA(policy_kernel)%",
        routes,
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: true,
        extra_clusters: clusters,
    }
    .render()
}

/// The tool calls an MCP server recorded in `file` (JSON lines with `tool`
/// and `args`, as `tests/mcp/server.py` and `tests/mcp/ts/server.mjs`
/// write them): `(tool, path)`.
pub fn ran(file: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["tool"].as_str().unwrap_or("").to_string(),
                v["args"]["path"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}
