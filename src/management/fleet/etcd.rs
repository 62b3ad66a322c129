//! The etcd side of the fleet's store: the keys, the client, the full read
//! and the one transaction per write.
//!
//! Keys under `prefix`:
//! - `head`: `{"seq": N}`, rewritten by every write. Its mod revision is the
//!   fleet's version, which `If-Match` compares in the write's transaction.
//! - `routes/<name>`: the route put through the API (JSON), or `null` for
//!   a route deleted through the API. No key: the file's route.
//! - `history/<seq, 20 digits>`: the version's [`Entry`]; the last
//!   `management.history` are kept.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};
use serde::{Deserialize, Serialize};

use super::history::{Entry, Overrides, Slot};
use crate::config::{EtcdConfig, RoutePolicy};

/// The most operations etcd takes in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// The keys of one fleet.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// What a key under the prefix is.
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'a> {
    /// The version marker.
    Head,
    /// A route's slot.
    Route(&'a str),
    /// A history entry.
    History,
    /// Something else (left alone).
    Other,
}

/// The `head` key's value.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Head {
    /// The history position of the last version.
    pub seq: u64,
}

impl Keys {
    /// The keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn head(&self) -> String {
        format!("{}head", self.prefix)
    }

    fn route(&self, name: &str) -> String {
        format!("{}routes/{name}", self.prefix)
    }

    fn history(&self, seq: u64) -> String {
        format!("{}history/{seq:020}", self.prefix)
    }

    /// What `key` is.
    pub fn parse<'a>(&self, key: &'a [u8]) -> Key<'a> {
        let Some(rest) = key.strip_prefix(self.prefix.as_bytes()) else {
            return Key::Other;
        };
        if rest == b"head" {
            return Key::Head;
        }
        if rest.starts_with(b"history/") {
            return Key::History;
        }
        match rest.strip_prefix(b"routes/").map(std::str::from_utf8) {
            Some(Ok(name)) if !name.is_empty() => Key::Route(name),
            _ => Key::Other,
        }
    }
}

/// A client for `cfg`'s members. Without a user it connects lazily, so
/// this succeeds with every member down; with one it authenticates now.
pub async fn connect(cfg: &EtcdConfig) -> Result<Client, String> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(cfg.connect_timeout_ms))
        .with_timeout(Duration::from_millis(cfg.request_timeout_ms))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    if let Some(tls) = &cfg.tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("management.store.etcd.tls: cannot read {}: {e}", p.display()))
        };
        let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            t = t.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        opts = opts.with_tls(t);
    }
    if let Some(user) = &cfg.username {
        let password = cfg.password()?.unwrap_or_default();
        opts = opts.with_user(user.clone(), password);
    }
    Client::connect(&cfg.endpoints, Some(opts))
        .await
        .map_err(|e| format!("etcd {}: {e}", cfg.endpoints.join(",")))
}

/// Whether `e` says no member could be reached, so the request was never
/// sent and sending it again cannot apply it twice. (The balanced channel
/// may pick a member that is still down, when another is up.)
fn unsent(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.code() == tonic::Code::Unavailable && s.message().contains("connect error"))
}

/// Runs `call` again, at most 3 more times, while it was not sent.
async fn resend<T, F, Fut>(mut call: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Err(e) if unsent(&e) && tries < 3 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// Keys read per request: a large prefix is read in pages, all at the
/// revision of the first, so no answer nears gRPC's 4 MiB message limit.
const PAGE: i64 = 500;

/// The end of the range of keys starting with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Every key starting with `prefix`, in pages of [`PAGE`], as of one
/// revision: (that revision, the keys).
async fn read_prefix(client: &Client, prefix: &str) -> Result<(u64, Vec<etcd_client::KeyValue>), etcd_client::Error> {
    let end = prefix_end(prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut out = Vec::new();
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let mut resp = resend(|| {
            let (mut c, from, options) = (client.clone(), from.clone(), options.clone());
            async move { c.get(from, Some(options)).await }
        })
        .await?;
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        let more = resp.more();
        let kvs = resp.take_kvs();
        let Some(last) = kvs.last() else { break };
        from = last.key().to_vec();
        from.push(0);
        out.extend(kvs);
        if !more {
            break;
        }
    }
    Ok((revision as u64, out))
}

/// The store's content at one revision.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The store revision read at.
    pub revision: u64,
    /// The fleet's version (the head's mod revision; 0: no write yet).
    pub version: u64,
    /// The head.
    pub head: Head,
    /// The routes' slots.
    pub overrides: Overrides,
}

/// Parses a route slot's value; the error names the key. Besides parsing,
/// a route must carry its key's name, and each chain entry a policy and
/// params the kernel can send: the checks that do not depend on a
/// kernel's agents, so every kernel judges a value alike.
pub fn parse_slot(name: &str, value: &[u8]) -> Result<Option<RoutePolicy>, String> {
    let route: Option<RoutePolicy> =
        serde_json::from_slice(value).map_err(|e| format!("store key routes/{name}: not a route: {e}"))?;
    let Some(r) = &route else { return Ok(None) };
    if r.route_name != name {
        return Err(format!("store key routes/{name}: holds route_name {:?}", r.route_name));
    }
    for e in r.request_policy_chain.iter().chain(&r.response_policy_chain) {
        if e.policy.is_empty() {
            return Err(format!("store key routes/{name}: a chain entry has no policy"));
        }
        if let Err((param, reason)) = crate::config::encode_params(&e.params) {
            return Err(format!(
                "store key routes/{name}: policy {:?}, param {param}: {reason}",
                e.policy
            ));
        }
    }
    Ok(route)
}

/// The route in force for a value that is not a valid route: one whose
/// only policy is reserved, so that every request on it gets
/// `policy_not_supported_response`. Not the route before (a kernel that
/// starts now never saw it) and not no route (no route lets requests
/// through): the same on every kernel, from the store's content alone.
pub fn refusing_route(name: &str) -> RoutePolicy {
    RoutePolicy {
        route_name: name.to_string(),
        mode: crate::config::RouteMode::Enforce,
        request_policy_chain: vec![crate::config::ChainEntry {
            policy: crate::snapshot::STORE_VALUE_INVALID.to_string(),
            params: Default::default(),
            on_failure: None,
            agent: None,
        }],
        response_policy_chain: Vec::new(),
        decision_cache: false,
    }
}

/// Whether `route` is the [`refusing_route`] of an invalid value.
pub fn is_refusing(route: &RoutePolicy) -> bool {
    route
        .request_policy_chain
        .iter()
        .any(|e| e.policy == crate::snapshot::STORE_VALUE_INVALID)
}

/// The slot a stored value puts in force: the route it holds, or, when it
/// is not a valid route, the [`refusing_route`] (logged with `revision`).
pub fn slot_of(name: &str, value: &[u8], revision: u64) -> Option<RoutePolicy> {
    parse_slot(name, value).unwrap_or_else(|error| {
        tracing::error!(%error, revision, route = name,
            "configuration store: not a valid route; the route refuses every request (policy_not_supported_response) until it is written again");
        Some(refusing_route(name))
    })
}

/// Reads everything under the prefix but the history. A value that is
/// not a valid route puts its [`refusing_route`] in force.
pub async fn read_all(client: &mut Client, keys: &Keys) -> Result<Read, etcd_client::Error> {
    let (revision, kvs) = read_prefix(client, keys.prefix()).await?;
    let mut read = Read {
        revision,
        ..Read::default()
    };
    for kv in &kvs {
        match keys.parse(kv.key()) {
            Key::Head => {
                read.version = kv.mod_revision() as u64;
                read.head = serde_json::from_slice(kv.value()).unwrap_or_default();
            }
            Key::Route(name) => {
                let slot = slot_of(name, kv.value(), kv.mod_revision() as u64);
                read.overrides.insert(name.to_string(), slot);
            }
            Key::History | Key::Other => {}
        }
    }
    Ok(read)
}

/// The fleet's version now: a linearizable read of the head (so a member
/// that is behind the cluster answers only once it has caught up).
pub async fn head_version(client: &mut Client, keys: &Keys) -> Result<u64, etcd_client::Error> {
    let resp = resend(|| {
        let mut c = client.clone();
        async move { c.get(keys.head(), None).await }
    })
    .await?;
    Ok(resp.kvs().first().map_or(0, |kv| kv.mod_revision() as u64))
}

/// The history, oldest first, as `(version, entry)`.
pub async fn read_history(client: &mut Client, keys: &Keys) -> Result<Vec<(u64, Entry)>, etcd_client::Error> {
    let resp = resend(|| {
        let mut c = client.clone();
        async move {
            c.get(
                format!("{}history/", keys.prefix()),
                Some(GetOptions::new().with_prefix()),
            )
            .await
        }
    })
    .await?;
    let mut out = Vec::with_capacity(resp.kvs().len());
    for kv in resp.kvs() {
        match serde_json::from_slice::<Entry>(kv.value()) {
            Ok(e) => out.push((kv.create_revision() as u64, e)),
            Err(error) => tracing::error!(%error, key = %String::from_utf8_lossy(kv.key()),
                "configuration store: history entry left out"),
        }
    }
    Ok(out)
}

/// A write's result.
#[derive(Debug, PartialEq, Eq)]
pub enum Committed {
    /// Stored at this revision, the new version.
    Done(u64),
    /// The version was no longer `expect`; it is this.
    Conflict(u64),
}

/// Stores `entry` (its steps, itself, a new head) in one transaction that
/// holds only while the fleet's version is `expect`, and drops history
/// entries beyond the last `keep`.
pub async fn commit(
    client: &mut Client,
    keys: &Keys,
    expect: u64,
    entry: &Entry,
    keep: usize,
) -> Result<Committed, etcd_client::Error> {
    let guard = if expect == 0 {
        Compare::version(keys.head(), CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(keys.head(), CompareOp::Equal, expect as i64)
    };
    let mut ops = Vec::with_capacity(entry.steps.len() + 3);
    ops.push(TxnOp::put(keys.head(), json(&Head { seq: entry.seq }), None));
    ops.push(TxnOp::put(keys.history(entry.seq), json(entry), None));
    let keep = keep as u64;
    if entry.seq > keep {
        let end = keys.history(entry.seq - keep + 1);
        ops.push(TxnOp::delete(
            keys.history(0),
            Some(DeleteOptions::new().with_range(end)),
        ));
    }
    for s in &entry.steps {
        ops.push(match &s.after {
            Slot::Unset => TxnOp::delete(keys.route(&s.route), None),
            Slot::Deleted => TxnOp::put(keys.route(&s.route), "null", None),
            Slot::Route(r) => TxnOp::put(keys.route(&s.route), json(&**r), None),
        });
    }
    let txn = Txn::new()
        .when([guard])
        .and_then(ops)
        .or_else([TxnOp::get(keys.head(), None)]);
    let resp = resend(|| {
        let (mut c, txn) = (client.clone(), txn.clone());
        async move { c.txn(txn).await }
    })
    .await?;
    if resp.succeeded() {
        return Ok(Committed::Done(resp.header().map_or(0, |h| h.revision()) as u64));
    }
    let current = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map_or(0, |kv| kv.mod_revision() as u64)),
            _ => None,
        })
        .unwrap_or(0);
    Ok(Committed::Conflict(current))
}

/// A stored value's JSON (these types always serialize).
fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_named_and_parsed_back() {
        let k = Keys::new("/pk/");
        assert_eq!(k.parse(k.head().as_bytes()), Key::Head);
        assert_eq!(k.parse(k.route("/api/v1").as_bytes()), Key::Route("/api/v1"));
        assert_eq!(k.parse(k.history(7).as_bytes()), Key::History);
        assert_eq!(k.history(7), "/pk/history/00000000000000000007");
        assert_eq!(k.parse(b"/pk/routes/"), Key::Other);
        assert_eq!(k.parse(b"/other/head"), Key::Other);
        assert!(k.history(9) < k.history(10), "history keys sort by seq");
    }

    #[test]
    fn a_prefix_ends_where_its_keys_do() {
        assert_eq!(prefix_end("/pk/"), b"/pk0");
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80");
    }

    #[test]
    fn a_slot_must_parse_and_match_its_key() {
        assert_eq!(parse_slot("/a", b"null").unwrap(), None);
        let r = parse_slot("/a", br#"{"route_name":"/a"}"#).unwrap().unwrap();
        assert_eq!(r.route_name, "/a");
        assert!(parse_slot("/a", br#"{"route_name":"/b"}"#).unwrap_err().contains("/b"));
        assert!(parse_slot("/a", b"{").unwrap_err().contains("routes//a"));
        let no_policy = br#"{"route_name":"/a","request_policy_chain":[{"policy":""}]}"#;
        assert!(parse_slot("/a", no_policy).unwrap_err().contains("no policy"));
    }

    #[test]
    fn a_value_that_is_not_a_route_puts_a_refusing_route_in_force() {
        for bad in [&b"{"[..], br#"{"route_name":"/b"}"#, b"[1]"] {
            let slot = slot_of("/a", bad, 7).expect("a route, not a deletion");
            assert_eq!(slot, refusing_route("/a"));
            assert!(is_refusing(&slot));
        }
        let good = slot_of("/a", br#"{"route_name":"/a"}"#, 7).unwrap();
        assert!(!is_refusing(&good));
        assert_eq!(slot_of("/a", b"null", 7), None);
    }
}
