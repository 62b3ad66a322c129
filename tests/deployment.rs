//! Deployment mechanisms that can be exercised here: the Kubernetes
//! config-reloader script against a real kernel, and the deployable
//! configurations against the real Envoy configuration.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_sends_sighup_when_the_config_changes() {
    let dir = workdir();
    let agent = TestAgent::start(dir.path(), "r", "policies:\n  - name: p\n");
    let body = |route: &str| {
        format!(
            "  agents:\n{}  route_policies:\n    - route_name: {route}\n      request_policy_chain: [{{policy: p}}]\n",
            agent_entry("r", &agent, "")
        )
    };
    let kernel = KernelProc::start(dir.path(), &body("one"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/k8s/reload-on-change.sh");
    let mut reloader = Command::new("sh")
        .arg(script)
        .env("CONFIG", &kernel.config)
        .env("INTERVAL", "0.2")
        .env("KERNEL_PID", kernel.proc.pid().to_string())
        .stdout(Stdio::null())
        .spawn()
        .expect("reloader");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        kernel.metric("policy_kernel_config_version"),
        1.0,
        "no change, no reload"
    );

    kernel.write_config(&body("two"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while kernel.metric("policy_kernel_config_version") < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no reload after the change:\n{}",
            kernel.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, config) = kernel.admin_get("/config");
    assert!(config.contains("\"route_name\":\"two\""), "{config}");
    let _ = reloader.kill();
    let _ = reloader.wait();
}

#[test]
fn deploy_envoy_routes_match_the_kernel_config() {
    let envoy = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/envoy.yaml")).unwrap();
    let cfg = policy_kernel::config::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/kernel-config.yaml"
    )))
    .unwrap();
    for r in &cfg.route_policies {
        assert!(
            envoy.contains(&format!("- name: \"{}\"", r.route_name)),
            "deploy/envoy.yaml has no route named {}",
            r.route_name
        );
    }
    let output = Command::new(support::envoy::envoy_bin())
        .args(["--mode", "validate", "-c"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/envoy.yaml"))
        .output()
        .expect("envoy");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// The shipped Envoy config keeps the two cluster settings the kernel needs
/// under load (docs/operating.md, "Scaling"): Envoy's defaults (1,024 requests, 1,000
/// queued control frames) fail requests before the kernel sheds them.
#[test]
fn deploy_envoy_kernel_cluster_is_sized_for_load() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/envoy.yaml")).unwrap();
    let envoy: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let cluster = envoy["static_resources"]["clusters"]
        .as_sequence()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "policy_kernel"))
        .expect("deploy/envoy.yaml has a policy_kernel cluster");
    let h2 = &cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        ["explicit_http_config"]["http2_protocol_options"];
    let control_frames = h2["max_outbound_control_frames"].as_u64().unwrap_or(1000);
    assert!(control_frames >= 10_000, "max_outbound_control_frames {control_frames}");
    let max_requests = cluster["circuit_breakers"]["thresholds"][0]["max_requests"]
        .as_u64()
        .unwrap_or(1024);
    assert!(max_requests >= 10_000, "circuit_breakers max_requests {max_requests}");
}

/// Every agent the shipped kernel config names is started by supervisord
/// (`make run`, the container), built into the image, and run as a sidecar
/// in the Kubernetes manifest, on the socket the config gives.
#[test]
fn every_configured_agent_is_shipped() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let (supervisord, dockerfile, k8s) = (
        read("supervisord.conf"),
        read("deploy/Dockerfile"),
        read("deploy/k8s/policy-engine.yaml"),
    );
    let cfg = policy_kernel::config::load(&root.join("config/kernel-config.yaml")).unwrap();
    assert!(!cfg.agents.is_empty());
    for agent in &cfg.agents {
        let socket = agent
            .socket_path
            .file_name()
            .and_then(|s| s.to_str())
            .expect("socket file name");
        let command = supervisord
            .lines()
            .find(|l| l.starts_with("command=") && l.contains(&format!("/sockets/{socket}")))
            .unwrap_or_else(|| panic!("supervisord.conf starts no agent on {socket} ({})", agent.name));
        // `reference-agents auth …` runs auth-agent (the five agents in one binary).
        let mut words = command.split_whitespace();
        let program = words.next().and_then(|c| c.rsplit('/').next()).unwrap();
        assert_eq!(program, "reference-agents", "{command}");
        let binary = format!("{}-agent", words.next().unwrap());
        assert!(
            dockerfile.contains("target/release/reference-agents "),
            "deploy/Dockerfile does not ship reference-agents"
        );
        let short = binary.trim_end_matches("-agent");
        assert!(
            dockerfile.lines().any(|l| l.contains("ln -s reference-agents")
                && l.split_whitespace().any(|w| w.trim_end_matches(';') == short)),
            "deploy/Dockerfile does not link {binary} to reference-agents"
        );
        assert!(
            k8s.contains(&format!(
                "[\"{binary}\", \"--socket=/srv/policy-engine/run/sockets/{socket}\""
            )),
            "deploy/k8s/policy-engine.yaml runs no {binary} on {socket}"
        );
    }
}

/// The fleet manifest's kernel configuration parses, and keeps the
/// management API's changes in etcd with client certificates from the
/// mounted Secret.
#[test]
fn the_fleet_manifest_configures_an_etcd_store_from_a_secret() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("deploy/k8s/fleet-etcd.yaml")).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let config = docs[0]["data"]["container.yaml"].as_str().expect("container.yaml");
    let cfg = policy_kernel::config::parse(config).unwrap();
    let management = cfg.management.expect("management");
    let etcd = management.store.expect("store").etcd;
    assert_eq!(etcd.endpoints.len(), 3);
    let tls = etcd.tls.expect("tls");
    let mounts = docs[1]["spec"]["template"]["spec"]["containers"][1]["volumeMounts"]
        .as_sequence()
        .expect("mounts");
    let secret_dir = mounts
        .iter()
        .find(|m| m["name"] == "etcd-client-tls")
        .and_then(|m| m["mountPath"].as_str())
        .expect("etcd-client-tls mounted");
    for file in [Some(&tls.ca), tls.cert.as_ref(), tls.key.as_ref()] {
        assert!(
            file.expect("set").starts_with(secret_dir),
            "{file:?} not in {secret_dir}"
        );
    }
}
