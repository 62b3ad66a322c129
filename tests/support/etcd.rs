//! A real etcd cluster on loopback (Debian `etcd-server`, installed by
//! `make test`): members started, stopped and restarted by the tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{free_port, Proc};

/// One member's ports and data directory.
struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    log: PathBuf,
    proc: Option<Proc>,
}

/// A cluster of `n` members (fast elections: 50 ms heartbeats, 500 ms
/// election timeout).
pub struct EtcdCluster {
    members: Vec<Member>,
    initial: String,
    tls: Option<EtcdTls>,
}

/// TLS of the members' client URLs: their certificate and key, and the CA
/// whose client certificates they accept (and no others).
#[derive(Clone)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The `etcd` binary (Debian's), or a clear failure naming the package.
fn etcd_bin() -> PathBuf {
    let bin = PathBuf::from(std::env::var("ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into()));
    assert!(
        bin.exists(),
        "{} not found: `make test` installs Debian's etcd-server (or set ETCD_BIN)",
        bin.display()
    );
    bin
}

impl EtcdCluster {
    /// Starts `n` members in `dir` and waits until the cluster answers.
    pub async fn start(dir: &Path, n: usize) -> Self {
        Self::start_with(dir, n, None).await
    }

    /// Like [`EtcdCluster::start`], the client URLs over TLS with client
    /// certificates required when `tls` is given.
    pub async fn start_with(dir: &Path, n: usize, tls: Option<EtcdTls>) -> Self {
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                data: dir.join(format!("etcd-m{i}")),
                log: dir.join(format!("etcd-m{i}.log")),
                proc: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Self { members, initial, tls };
        for i in 0..n {
            c.launch(i);
        }
        c.until_healthy().await;
        c
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    fn launch(&mut self, i: usize) {
        let initial = self.initial.clone();
        let scheme = self.scheme();
        let tls = self.tls.clone();
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("etcd log");
        let err = log.try_clone().expect("etcd log");
        let mut cmd = Command::new(etcd_bin());
        cmd.args([
            "--name",
            &m.name,
            "--data-dir",
            &m.data.display().to_string(),
            "--listen-client-urls",
            &format!("{scheme}://127.0.0.1:{}", m.client),
            "--advertise-client-urls",
            &format!("{scheme}://127.0.0.1:{}", m.client),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{}", m.peer),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{}", m.peer),
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "policy-kernel-tests",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--log-level",
            "warn",
        ]);
        if let Some(t) = &tls {
            cmd.arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key)
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--client-cert-auth");
        }
        m.proc = Some(Proc::spawn_io(
            &m.name,
            &mut cmd,
            std::process::Stdio::from(log),
            std::process::Stdio::from(err),
        ));
    }

    /// The client URLs of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("{}://127.0.0.1:{}", self.scheme(), m.client))
            .collect()
    }

    /// The `endpoints: [...]` YAML value.
    pub fn endpoints_yaml(&self) -> String {
        format!("[{}]", self.endpoints().join(", "))
    }

    /// A client of the running members.
    pub async fn client(&self) -> etcd_client::Client {
        let up: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.proc.is_some())
            .map(|m| format!("{}://127.0.0.1:{}", self.scheme(), m.client))
            .collect();
        let mut opts = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(3));
        if let Some(t) = &self.tls {
            let read = |p: &Path| std::fs::read(p).expect("pem");
            opts = opts.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(read(&t.ca)))
                    .identity(etcd_client::Identity::from_pem(read(&t.cert), read(&t.key))),
            );
        }
        etcd_client::Client::connect(up, Some(opts)).await.expect("etcd client")
    }

    /// Waits until a write goes through (a leader is elected).
    pub async fn until_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut c = self.client().await;
            if c.put("/health-check", "1", None).await.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "etcd not healthy:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The index of the leader.
    pub async fn leader(&self) -> usize {
        let mut c = self.client().await;
        let status = c.status().await.expect("etcd status");
        let leader = status.leader();
        for (i, m) in self.members.iter().enumerate() {
            if m.proc.is_none() {
                continue;
            }
            let mut one = etcd_client::Client::connect([format!("http://127.0.0.1:{}", m.client)], None)
                .await
                .expect("etcd client");
            if one.status().await.ok().and_then(|s| s.header().map(|h| h.member_id())) == Some(leader) {
                return i;
            }
        }
        panic!("no leader among the running members")
    }

    /// Stops member `i` (SIGKILL).
    pub fn stop(&mut self, i: usize) {
        self.members[i].proc = None;
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].proc.is_none(), "member {i} is running");
        self.launch(i);
    }

    /// Stops every member.
    pub fn stop_all(&mut self) {
        for m in &mut self.members {
            m.proc = None;
        }
    }

    /// Starts every stopped member.
    pub fn restart_all(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].proc.is_none() {
                self.launch(i);
            }
        }
    }

    /// The members' logs, for failure messages.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log = std::fs::read_to_string(&m.log).unwrap_or_default();
                format!("--- {}:\n{}", m.name, super::stack::tail(&log, 20))
            })
            .collect()
    }
}

/// A TCP forwarder to one member that the test can cut (every connection
/// closed, new ones refused) and restore on the same port: a kernel's
/// network path to etcd lost while the cluster goes on.
pub struct Cut {
    port: u16,
    target: u16,
    cut: tokio::sync::watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl Cut {
    /// Forwards a new loopback port to `target`.
    pub fn start(target: u16) -> Self {
        let (cut, _) = tokio::sync::watch::channel(false);
        let mut c = Self {
            port: free_port(),
            target,
            cut,
            accept: None,
        };
        c.restore();
        c
    }

    /// The forwarder's client URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and stops accepting.
    pub fn cut(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
        }
        self.cut.send_replace(true);
    }

    /// Accepts (and forwards) again.
    pub fn restore(&mut self) {
        self.cut.send_replace(false);
        let listener = std::net::TcpListener::bind(("127.0.0.1", self.port)).expect("bind forwarder");
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = tokio::net::TcpListener::from_std(listener).expect("forwarder");
        let (target, cut) = (self.target, self.cut.clone());
        self.accept = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut closed = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = closed.wait_for(|c| *c) => {}
                    }
                });
            }
        }));
    }
}

impl EtcdCluster {
    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client
    }
}
