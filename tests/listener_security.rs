//! Who may open ext_proc streams: the TCP listener with mutual TLS (through a
//! real Envoy, certificates made per run), the warning for a plain listener
//! other hosts can reach, and the shipped configurations serving the socket
//! only.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::certs::{ca, leaf, write};
use support::stack::tail as tail_lines;
use support::*;

fn tail(s: &str) -> String {
    tail_lines(s, 40)
}

/// PEM files of one run: a CA, the kernel's certificate, a client
/// certificate from that CA, and one from a CA the kernel does not trust.
struct Certs {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
    stranger: (PathBuf, PathBuf),
}

impl Certs {
    fn make(dir: &Path) -> Self {
        let trusted = ca("policy-kernel test CA");
        let other = ca("unknown CA");
        Self {
            ca: write(dir, "ca.pem", &trusted.pem()),
            server: leaf(dir, "kernel", &trusted),
            client: leaf(dir, "envoy", &trusted),
            stranger: leaf(dir, "stranger", &other),
        }
    }
}

const SCRIPT: &str = r#"policies:
  - name: tag
    request:
      - set_header: {name: x-ran, value: tag}
"#;

/// With `server.tls`, Envoy with a client certificate from the configured CA
/// reaches the kernel; one with a certificate from another CA, or none, is
/// refused at the handshake (Envoy answers 500 itself: failure_mode_allow is
/// false) and no policy runs for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_certificate_from_the_configured_ca() {
    let b = Stack::builder();
    let certs = Certs::make(b.dir());
    let s = b
        .test_agent("tls", SCRIPT)
        .server(&format!(
            "    tls:\n      cert_path: {}\n      key_path: {}\n      client_ca_path: {}\n",
            certs.server.0.display(),
            certs.server.1.display(),
            certs.ca.display()
        ))
        .config("  route_policies:\n    - route_name: resp\n      request_policy_chain: [{policy: tag}]\n")
        .envoy_tls(&certs.ca, Some((&certs.client.0, &certs.client.1)))
        .start()
        .await;
    let (kernel, trusted, client) = (&s.kernel, &s.envoy, &s.client);
    let port = kernel.tcp_port();
    let calls = || kernel.metric("policy_kernel_requests_total{agent=\"tls\",route=\"resp\",status=\"ok\"}");

    let r = send(client, "GET", &trusted.url("/resp/x"), &[], None).await;
    assert_eq!(r.status, 200, "{}\n{}", tail(&kernel.log()), tail(&trusted.log()));
    assert_eq!(r.echoed_header("x-ran").as_deref(), Some("tag"));
    assert_eq!(calls(), 1.0);

    for (name, client_cert) in [
        ("stranger", Some((&certs.stranger.0, &certs.stranger.1))),
        ("anonymous", None),
    ] {
        let envoy = s.envoy_at(
            name,
            envoy::KernelAt::TcpTls {
                port,
                ca: &certs.ca,
                client: client_cert.map(|(c, k)| (c.as_path(), k.as_path())),
            },
        );
        let r = send(client, "GET", &envoy.url("/resp/x"), &[], None).await;
        assert_eq!(r.status, 500, "{name}: {}", tail(&envoy.log()));
        assert!(
            r.body.is_empty() || !r.body.contains("\"path\""),
            "{name} reached the upstream: {}",
            r.body
        );
        assert!(
            envoy.stat("cluster.policy_kernel.upstream_cx_connect_fail") > 0
                || envoy.stat("cluster.policy_kernel.ssl.connection_error") > 0
                || envoy.stat("cluster.policy_kernel.upstream_cx_destroy_remote") > 0,
            "{name}: the kernel did not refuse the connection"
        );
    }
    // A plain-text client (no TLS at all) is refused too.
    let plain = s.envoy_at("plain", envoy::KernelAt::Tcp(port));
    let r = send(client, "GET", &plain.url("/resp/x"), &[], None).await;
    assert_eq!(r.status, 500, "plain text: {}", tail(&plain.log()));
    assert_eq!(calls(), 1.0, "a refused client made the kernel call its agent");

    // The trusted Envoy still works after the refusals.
    let r = send(client, "GET", &trusted.url("/resp/y"), &[], None).await;
    assert_eq!(r.status, 200);
    assert_eq!(calls(), 2.0);
}

fn kernel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_policy-kernel"))
}

fn validate(config: &Path) -> (bool, String) {
    let out = Command::new(kernel_bin())
        .arg("validate")
        .arg(format!("--config={}", config.display()))
        .output()
        .expect("run validate");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A TCP listener on a non-loopback address without TLS starts, and says at
/// startup and in `validate` what it exposes; a loopback one does not.
#[test]
fn a_plain_tcp_listener_other_hosts_can_reach_is_named_as_a_risk() {
    let tmp = workdir();
    let dir = tmp.path();
    let open = dir.join("open.yaml");
    std::fs::write(
        &open,
        "policy_kernel:\n  server: {address: 0.0.0.0, port: 9001}\n  observability: {metrics_port: 0}\n",
    )
    .unwrap();
    let (ok, out) = validate(&open);
    assert!(ok, "the listener is allowed:\n{out}");
    assert!(out.contains("ext_proc TCP listener: 0.0.0.0:9001"), "{out}");
    assert!(
        out.contains("warning: server: ext_proc listens on TCP 0.0.0.0:9001 without TLS"),
        "{out}"
    );
    assert!(out.contains("unauthenticated"), "{out}");

    let local = dir.join("local.yaml");
    std::fs::write(&local, "policy_kernel:\n  server: {address: 127.0.0.1, port: 9001}\n").unwrap();
    let (ok, out) = validate(&local);
    assert!(ok && !out.contains("warning"), "{out}");

    // At startup: the kernel serves and logs the risk.
    let kernel = KernelProc::start_with(dir, "    address: 0.0.0.0\n", "");
    let log = kernel.log();
    let warning = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "ext_proc TCP listener without TLS on a non-loopback address")
        .unwrap_or_else(|| panic!("no warning in the log:\n{log}"));
    assert_eq!(warning["level"], "warning", "{warning}");
    assert!(warning["risk"].as_str().unwrap_or("").contains("0.0.0.0:"), "{warning}");
    assert_ne!(kernel.tcp_port(), 0);
}

/// `validate` reads the TLS files: a missing one is an error naming the field.
#[test]
fn validate_refuses_tls_files_it_cannot_use() {
    let tmp = workdir();
    let dir = tmp.path();
    let certs = Certs::make(dir);
    let cfg = |key: &Path| {
        format!(
            "policy_kernel:\n  server:\n    address: 0.0.0.0\n    port: 0\n    tls: {{cert_path: {}, key_path: {}, client_ca_path: {}}}\n",
            certs.server.0.display(),
            key.display(),
            certs.ca.display()
        )
    };
    let good = dir.join("good.yaml");
    std::fs::write(&good, cfg(&certs.server.1)).unwrap();
    let (ok, out) = validate(&good);
    assert!(ok, "{out}");
    assert!(
        out.contains("(TLS, client certificates verified)") && !out.contains("warning"),
        "{out}"
    );

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, cfg(&dir.join("missing.key"))).unwrap();
    let (ok, out) = validate(&bad);
    assert!(!ok, "{out}");
    assert!(
        out.contains("error: policy_kernel.server.tls.key_path: cannot read"),
        "{out}"
    );
}

/// The sockets a process listens on for TCP, from /proc: its socket inodes
/// matched against the kernel's LISTEN table.
fn tcp_listen_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, ..., st (0A = LISTEN), ..., inode
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                if let Some(port) = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                    ports.push(port);
                }
            }
        }
    }
    ports
}

/// The container configuration as shipped (only its paths and metrics port
/// moved into the test's directory): the kernel listens on TCP for nothing
/// but its metrics endpoint.
#[test]
fn the_shipped_container_config_serves_ext_proc_on_the_socket_only() {
    let tmp = workdir();
    let dir = tmp.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let metrics = free_port();
    let text = std::fs::read_to_string(root.join("config/container.yaml"))
        .unwrap()
        .replace("run/sockets/", &format!("{}/", dir.display()))
        .replace("metrics_port: 9090", &format!("metrics_port: {metrics}"))
        .replace("metrics_address: \"0.0.0.0\"", "metrics_address: \"127.0.0.1\"");
    let config = dir.join("container.yaml");
    std::fs::write(&config, text).unwrap();
    let log = std::fs::File::create(dir.join("kernel.log")).unwrap();
    let mut child = Command::new(kernel_bin())
        .arg(format!("--config={}", config.display()))
        .stdout(log)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kernel");
    let socket = dir.join("kernel.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while http_get(metrics, "/healthz").0 != 200 || !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "kernel did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let ports = tcp_listen_ports(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(ports, vec![metrics], "TCP listeners of the kernel");
    let log = std::fs::read_to_string(dir.join("kernel.log")).unwrap();
    assert!(log.contains("\"address\":\"none\""), "{log}");
}
