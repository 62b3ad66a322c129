//! Who serves an agent's socket, and who may connect to the kernel's: the
//! kernel checks the peer credentials (SO_PEERCRED) of every new agent
//! connection against `agents[].expected_uid` / `expected_gid` (default: its
//! own uid), and of every ext_proc connection against
//! `server.allowed_peer_uids`. Through a real Envoy; the kernel and agents
//! run as unprivileged users (`setpriv`, so these tests need root to start
//! them and are skipped, saying so, without it).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// The kernel's user, and the agent's when it is the same user.
const KERNEL_UID: u32 = 40101;
/// Another local user, who took over the agent's socket path.
const OTHER_UID: u32 = 40102;
/// Both users' group.
const GID: u32 = 40100;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn as_user(uid: u32, program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={GID}"))
        .arg("--clear-groups")
        .arg(program);
    cmd
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Starts `policy-test-agent` as `uid` on `socket`; the socket is opened to
/// the group and others once it is there, so that only the credential check
/// can tell the two users apart.
fn agent_as(uid: u32, dir: &Path, socket: &Path, tag: &str) -> Proc {
    let script = dir.join(format!("agent-{uid}.yaml"));
    let events = dir.join(format!("agent-{uid}.events"));
    std::fs::write(
        &script,
        format!(
            "name: auth\nevents_file: {}\npolicies:\n  - name: tag\n    request:\n      - set_header: {{name: x-served-by, value: {tag}}}\n",
            events.display()
        ),
    )
    .expect("script");
    chmod(&script, 0o644);
    let _ = std::fs::remove_file(socket);
    let mut cmd = as_user(uid, Path::new(env!("CARGO_BIN_EXE_policy-test-agent")));
    cmd.arg("--socket").arg(socket).arg("--script").arg(&script);
    let p = Proc::spawn("agent", &mut cmd, &dir.join(format!("agent-{uid}.log")));
    wait_socket(socket, Duration::from_secs(10));
    chmod(socket, 0o666);
    p
}

/// The kernel's agents (`auth` on `agent`, `agent_extra` lines in its
/// entry) and route.
fn body(agent: &Path, agent_extra: &str) -> String {
    format!(
        "  agents:\n    - name: auth\n      socket_path: {}\n      health_check_interval_ms: 100\n{agent_extra}  route_policies:\n    - route_name: resp\n      request_policy_chain: [{{policy: tag}}]\n",
        agent.display()
    )
}

/// GETs `/resp/x` through Envoy until the status is `want` (or 10 s pass).
async fn until_status(s: &Stack, want: u16) -> Got {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.get("/resp/x", &[]).await;
        if r.status == want || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_socket_served_by_another_user_is_refused_and_the_expected_one_works() {
    if !is_root() {
        eprintln!("skipped: starting processes as two users needs root (setpriv)");
        return;
    }
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    chmod(&dir, 0o755);
    // The agents' directory: both users may create their socket there (the
    // weakness the check defends against).
    let agents = dir.join("agents");
    std::fs::create_dir(&agents).unwrap();
    chmod(&agents, 0o777);
    // The kernel's own socket directory, its user's, and its config
    // readable by it.
    let kdir = dir.join("k");
    std::fs::create_dir(&kdir).unwrap();
    std::os::unix::fs::chown(&kdir, Some(KERNEL_UID), Some(GID)).unwrap();
    chmod(&kdir, 0o750);
    std::fs::write(kdir.join("kernel.yaml"), "").unwrap();
    chmod(&kdir.join("kernel.yaml"), 0o644);
    let agent_socket = agents.join("auth.sock");

    let mut right = agent_as(KERNEL_UID, &agents, &agent_socket, "kernel-user");
    let (reuid, regid) = (format!("--reuid={KERNEL_UID}"), format!("--regid={GID}"));
    let s = b
        .kernel_dir("k")
        .kernel_prefix(&["setpriv", &reuid, &regid, "--clear-groups"])
        .kernel_body(&body(&agent_socket, ""))
        .start()
        .await;
    let log = || s.kernel.log();
    let metric = |sample: &str| s.kernel.metric(sample);

    // The agent runs as the kernel's user (the default expected_uid).
    let r = until_status(&s, 200).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, log());
    assert_eq!(r.echoed_header("x-served-by").as_deref(), Some("kernel-user"));
    let mismatches = "policy_kernel_agent_identity_mismatch_total{agent=\"auth\"}";
    assert_eq!(metric(mismatches), 0.0);

    // Another user takes the socket path over: the kernel's connection to
    // the agent ends, its new one is refused, the agent is unhealthy, and
    // requests get agent_unavailable_response (503), never the impostor.
    right.kill();
    let _other = agent_as(OTHER_UID, &agents, &agent_socket, "other-user");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(mismatches) < 1.0 {
        assert!(Instant::now() < deadline, "no identity mismatch counted:\n{}", log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = s.get("/resp/x", &[]).await;
    assert_eq!(r.status, 503, "{}\n{}", r.body, log());
    assert!(r.body.contains("AGENT_UNAVAILABLE"), "{}", r.body);
    assert_eq!(metric("policy_kernel_agent_health{agent=\"auth\"}"), 0.0);
    let line = log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "agent identity check failed: connection closed, agent not used")
        .unwrap_or_else(|| panic!("no identity log line:\n{}", log()));
    assert_eq!(line["agent"], "auth", "{line}");
    assert_eq!(line["uid_found"], format!("Some({OTHER_UID})"), "{line}");
    assert_eq!(line["expected_uid"], KERNEL_UID, "{line}");
    for _ in 0..5 {
        let r = s.get("/resp/x", &[]).await;
        assert_eq!(r.status, 503, "the impostor served a request: {}", r.body);
    }
    let impostor_events = std::fs::read_to_string(agents.join(format!("agent-{OTHER_UID}.events"))).unwrap_or_default();
    assert!(
        !impostor_events.contains("start"),
        "the impostor was called:\n{impostor_events}"
    );

    // Expecting the other user (a reload) makes that agent the right one.
    s.kernel.write_config(&body(
        &agent_socket,
        &format!("      expected_uid: {OTHER_UID}\n      expected_gid: {GID}\n"),
    ));
    s.kernel.proc.signal("HUP");
    let r = until_status(&s, 200).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, log());
    assert_eq!(r.echoed_header("x-served-by").as_deref(), Some("other-user"));
}

/// `server.allowed_peer_uids`: Envoy (here root, uid 0) is refused by a
/// kernel that allows only another uid, and served by one that allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernels_socket_admits_only_the_allowed_uids() {
    let me = unsafe { libc::geteuid() };
    for (allowed, want) in [(me.wrapping_add(1), 500u16), (me, 200)] {
        let s = Stack::builder()
            .test_agent(
                "tag",
                "policies:\n  - name: tag\n    request:\n      - set_header: {name: x-ran, value: tag}\n",
            )
            .server(&format!("    allowed_peer_uids: [{allowed}]\n"))
            .config("  route_policies:\n    - route_name: resp\n      request_policy_chain: [{policy: tag}]\n")
            .start()
            .await;
        let (kernel, agent) = (&s.kernel, s.test_agent("tag"));
        let r = s.get("/resp/x", &[]).await;
        assert_eq!(r.status, want, "allowed {allowed}: {}\n{}", r.body, kernel.log());
        let refused = kernel.metric("policy_kernel_ext_proc_peers_refused_total{reason=\"uid_not_allowed\"}");
        if want == 500 {
            assert!(refused >= 1.0, "{}", kernel.admin_get("/metrics").1);
            assert!(kernel.log_has("peer uid is not in server.allowed_peer_uids"));
            assert!(agent.events().is_empty(), "the agent was called: {:?}", agent.events());
        } else {
            assert_eq!(refused, 0.0);
            assert_eq!(r.echoed_header("x-ran").as_deref(), Some("tag"));
        }
    }
}
