//! Pending approvals and grants, in memory: one state machine behind a
//! mutex, every operation given the time (`now`, Unix ms) so tests drive it.
//!
//! A request is pending until an approver decides it or it expires. A
//! decision to allow leaves a grant under the key of what it covers: the
//! exact call (`allow_once`, consumed by the first call it matches; `deny`,
//! refusing that call until the request would have expired), the caller's
//! tool in the session (`allow_session`), or the caller's tool on the route
//! version (`allow_always`, `allow_constrained`, until revoked or their
//! cap). A call that matches no grant goes (back) to approval.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::binding::CallBinding;
use super::constraints::Constraints;
use super::decision::{decision, expiry_denial, AT_EXPIRY};
use super::rule::{ApprovalRule, Approvers, GrantKind, OnExpiry};
use crate::rules::Caller;

/// Decided and expired requests kept for the API, at most.
pub const MAX_HISTORY: usize = 1000;
/// Events kept for `Last-Event-ID` resume, at most.
pub const MAX_EVENTS: usize = 1000;

/// Bounds on pending requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Pending requests per principal.
    pub per_principal: usize,
    /// Pending requests in all.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_principal: 20,
            total: 1000,
        }
    }
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for a decision.
    Pending,
    /// Allowed (a grant stands or stood).
    Allowed,
    /// Denied.
    Denied,
    /// Nobody decided in time.
    Expired,
    /// Allowed once, and the call ran.
    Consumed,
    /// Its standing grant was revoked.
    Revoked,
}

impl State {
    /// The name in the API (`pending`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Allowed => "allowed",
            State::Denied => "denied",
            State::Expired => "expired",
            State::Consumed => "consumed",
            State::Revoked => "revoked",
        }
    }
}

/// A decision, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    /// The approver's principal.
    pub by: String,
    /// The grant given.
    pub grant: GrantKind,
    /// Why (a denial's reason).
    pub reason: Option<String>,
    /// What to do instead (a denial's suggestion).
    pub alternative: Option<String>,
    /// A constrained grant's limits.
    pub constraints: Option<Constraints>,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// One request for approval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approval {
    /// Its id (128 random bits, hex).
    pub id: String,
    /// Where it stands.
    pub state: State,
    /// The call.
    pub binding: CallBinding,
    /// The arguments as approvers see them (redacted by the caller of the store).
    pub preview: Value,
    /// The rule that asked.
    pub rule: String,
    /// Its terms.
    pub terms: ApprovalRule,
    /// Unix ms.
    pub created_ms: u64,
    /// Unix ms.
    pub expires_ms: u64,
    /// Calls that asked while it was pending.
    pub attempts: u32,
    /// Bumped on every change (the ETag).
    pub version: u32,
    /// The decision, once made.
    pub decision: Option<Decided>,
}

impl Approval {
    /// A new request for the call `binding`, waiting from `now` for the
    /// rule's `ttl`.
    pub fn pending(
        id: String,
        binding: CallBinding,
        preview: Value,
        rule: &str,
        terms: &ApprovalRule,
        now: u64,
    ) -> Self {
        let ttl = u64::try_from(terms.ttl.as_millis()).unwrap_or(u64::MAX);
        Approval {
            id,
            state: State::Pending,
            binding,
            preview,
            rule: rule.to_string(),
            terms: terms.clone(),
            created_ms: now,
            expires_ms: now.saturating_add(ttl),
            attempts: 1,
            version: 1,
            decision: None,
        }
    }

    /// The ETag of this view.
    pub fn etag(&self) -> String {
        format!("\"{}.{}\"", &self.id[..12.min(self.id.len())], self.version)
    }

    /// The API's JSON.
    pub fn to_json(&self) -> Value {
        let b = &self.binding;
        json!({
            "id": self.id,
            "state": self.state.as_str(),
            "principal": b.principal,
            "route": b.route,
            "route_version": b.route_version,
            "endpoint": b.endpoint,
            "method": b.method,
            "target": b.target,
            "args_digest": b.args_digest,
            "args_preview": self.preview,
            "session": b.session,
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
            "attempts": self.attempts,
            // A session grant is offered only for a call made in a session.
            "grants": self
                .terms
                .grants
                .iter()
                .filter(|g| **g != GrantKind::AllowSession || b.session.is_some())
                .map(|g| g.as_str())
                .collect::<Vec<_>>(),
            "rule": self.rule,
            "etag": self.etag(),
            "decision": self.decision.as_ref().map(|d| json!({
                "by": d.by,
                "grant": d.grant.as_str(),
                "reason": d.reason,
                "alternative": d.alternative,
                "constraints": d.constraints,
                "at_ms": d.at_ms,
            })),
        })
    }
}

/// A standing grant.
#[derive(Debug, Clone)]
struct Grant {
    approval: String,
    kind: GrantKind,
    expires_ms: u64,
    constraints: Option<Constraints>,
    reason: Option<String>,
    alternative: Option<String>,
}

/// What a call that needs approval gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// A grant covers it; `args` are the arguments to run it with when a
    /// constrained grant rewrote them.
    Granted {
        /// The approval behind the grant.
        approval: String,
        /// Its kind.
        grant: GrantKind,
        /// Rewritten arguments, if any.
        args: Option<Value>,
    },
    /// It waits for a decision.
    Pending {
        /// The request's id.
        id: String,
        /// Whether this call created it.
        created: bool,
        /// Unix ms.
        expires_ms: u64,
    },
    /// An approver denied this call.
    Denied {
        /// The request's id.
        id: String,
        /// Why.
        reason: Option<String>,
        /// What to do instead.
        alternative: Option<String>,
    },
    /// Too many pending requests (`"principal"` or `"total"`).
    Limited(&'static str),
}

/// One event of the approvals stream.
#[derive(Debug, Clone)]
pub struct Event {
    /// Monotonic, from 1.
    pub id: u64,
    /// `approval.requested`, `approval.decided`, `approval.expired`,
    /// `approval.consumed` or `approval.revoked`.
    pub kind: &'static str,
    /// The approval as it then stood.
    pub data: Value,
    approvers: Approvers,
    principal: String,
}

impl Event {
    /// An event of a shared store (its id given there).
    pub(super) fn new(id: u64, kind: &'static str, data: Value, approvers: Approvers, principal: String) -> Event {
        Event {
            id,
            kind,
            data,
            approvers,
            principal,
        }
    }

    /// Whether `viewer` may see it (the request's approvers and requester).
    pub fn visible_to(&self, viewer: &Caller) -> bool {
        self.approvers.admit(viewer) || super::binding::principal(viewer) == self.principal
    }
}

/// A decision as the API receives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// The grant.
    pub grant: GrantKind,
    /// A denial's reason.
    pub reason: Option<String>,
    /// A denial's suggested alternative.
    pub alternative: Option<String>,
    /// A constrained grant's limits.
    pub constraints: Option<Constraints>,
    /// How long an `allow_always` / `allow_constrained` grant lasts (capped
    /// by the rule's `always_max_s`).
    pub ttl_s: Option<u64>,
}

/// Why an API operation changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status.
    pub status: u16,
    /// A short code.
    pub reason: &'static str,
    /// A sentence for people.
    pub message: String,
}

pub(super) fn refused(status: u16, reason: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        status,
        reason,
        message: message.into(),
    }
}

/// Something to record in the journal.
pub type Record = Map<String, Value>;

pub(super) fn record(event: &str, a: &Approval, extra: Value) -> Record {
    let mut m = Map::new();
    m.insert("event".into(), json!(event));
    m.insert("approval_id".into(), json!(a.id));
    m.insert("args_digest".into(), json!(a.binding.args_digest));
    m.insert("principal".into(), json!(a.binding.principal));
    m.insert("route".into(), json!(a.binding.route));
    m.insert("route_version".into(), json!(a.binding.route_version));
    m.insert("method".into(), json!(a.binding.method));
    m.insert("target".into(), json!(a.binding.target));
    if let Value::Object(x) = extra {
        m.extend(x);
    }
    m
}

/// The in-memory state.
#[derive(Debug, Default)]
pub struct Store {
    limits: Limits,
    approvals: HashMap<String, Approval>,
    pending_by_call: HashMap<String, String>,
    pending_per_principal: HashMap<String, usize>,
    pending: usize,
    expiries: BTreeSet<(u64, String)>,
    history: VecDeque<String>,
    grants: HashMap<String, Vec<Grant>>,
    grant_keys: HashMap<String, String>,
    events: VecDeque<Event>,
    next_event: u64,
}

/// What an operation changed besides its answer.
#[derive(Debug, Default)]
pub struct Effects {
    /// Journal records, in order.
    pub records: Vec<Record>,
    /// Requests that expired (their age at expiry, ms).
    pub expired: usize,
    /// A decision and its time to decision (ms).
    pub decided: Option<(GrantKind, u64)>,
    /// Requests denied at expiry (`on_expiry: deny`).
    pub auto_denied: usize,
    /// The events to announce (of rules with notification targets), in
    /// order, with the request as it then stood.
    pub announce: Vec<(&'static str, Approval)>,
}

impl Effects {
    /// Keeps event `kind` about `a` for announcing, when its rule has
    /// targets.
    pub(super) fn announce(&mut self, kind: &'static str, a: &Approval) {
        if !a.terms.notify.is_empty() {
            self.announce.push((kind, a.clone()));
        }
    }
}

impl Store {
    /// An empty store with `limits`.
    pub fn new(limits: Limits) -> Self {
        Store {
            limits,
            next_event: 1,
            ..Store::default()
        }
    }

    /// Pending requests now.
    pub fn pending(&self) -> usize {
        self.pending
    }

    fn emit(&mut self, kind: &'static str, a: &Approval, fx: &mut Effects) {
        fx.announce(kind, a);
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        let id = self.next_event.max(1);
        self.next_event = id + 1;
        self.events.push_back(Event {
            id,
            kind,
            data: a.to_json(),
            approvers: a.terms.approvers.clone(),
            principal: a.binding.principal.clone(),
        });
    }

    /// The newest event's id (0: none yet).
    pub fn last_event_id(&self) -> u64 {
        self.next_event.saturating_sub(1)
    }

    /// Events after `after`; `None` when some of them were already dropped
    /// (the console must reload the list).
    pub fn events_after(&self, after: u64) -> Option<Vec<Event>> {
        if let Some(first) = self.events.front() {
            if after + 1 < first.id {
                return None;
            }
        }
        Some(self.events.iter().filter(|e| e.id > after).cloned().collect())
    }

    fn unpend(&mut self, id: &str) {
        let Some(a) = self.approvals.get(id) else { return };
        let (call, principal, expires) = (a.binding.call_key(), a.binding.principal.clone(), a.expires_ms);
        self.pending_by_call.remove(&call);
        self.expiries.remove(&(expires, id.to_string()));
        self.pending = self.pending.saturating_sub(1);
        if let Some(n) = self.pending_per_principal.get_mut(&principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending_per_principal.remove(&principal);
            }
        }
        self.history.push_back(id.to_string());
        while self.history.len() > MAX_HISTORY {
            if let Some(old) = self.history.pop_front() {
                if !self.grant_keys.contains_key(&old) {
                    self.approvals.remove(&old);
                }
            }
        }
    }

    /// Expires the requests whose time is up.
    pub fn sweep(&mut self, now: u64, fx: &mut Effects) {
        while let Some((at, id)) = self.expiries.first().cloned() {
            if at > now {
                break;
            }
            self.unpend(&id);
            let Some(a) = self.approvals.get_mut(&id) else { continue };
            if a.terms.on_expiry == OnExpiry::Deny {
                let (body, key, until) = expiry_denial(a, now);
                a.apply_decision(AT_EXPIRY, &body, now);
                fx.records.push(record(
                    "decided",
                    a,
                    json!({"by": AT_EXPIRY, "grant": "deny", "grant_expires_ms": until, "reason": body.reason}),
                ));
                fx.auto_denied += 1;
                let a = a.clone();
                self.grants.entry(key.clone()).or_default().push(Grant {
                    approval: id.clone(),
                    kind: GrantKind::Deny,
                    expires_ms: until,
                    constraints: None,
                    reason: body.reason,
                    alternative: None,
                });
                self.grant_keys.insert(id, key);
                self.emit("approval.decided", &a, fx);
            } else {
                a.state = State::Expired;
                a.version += 1;
                fx.records.push(record("expired", a, json!({})));
                fx.expired += 1;
                let a = a.clone();
                self.emit("approval.expired", &a, fx);
            }
        }
    }

    fn grant_for(&mut self, key: &str, now: u64, args: &Value) -> Option<(Grant, Option<Value>)> {
        let list = self.grants.get_mut(key)?;
        list.retain(|g| g.expires_ms > now);
        let mut found = None;
        for (i, g) in list.iter().enumerate() {
            match g.kind {
                GrantKind::AllowConstrained => {
                    if let Some(rewritten) = g.constraints.as_ref().and_then(|c| c.apply(args)) {
                        let changed = (&rewritten != args).then_some(rewritten);
                        found = Some((i, changed));
                        break;
                    }
                }
                _ => {
                    found = Some((i, None));
                    break;
                }
            }
        }
        let (i, rewritten) = found?;
        let g = if list[i].kind == GrantKind::AllowOnce {
            list.remove(i)
        } else {
            list[i].clone()
        };
        if list.is_empty() {
            self.grants.remove(key);
        }
        Some((g, rewritten))
    }

    /// Decides a call that an `approve` rule named `rule` governs.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &mut self,
        binding: CallBinding,
        args: &Value,
        preview: impl FnOnce() -> Value,
        rule: &str,
        terms: &ApprovalRule,
        new_id: impl FnOnce() -> String,
        now: u64,
        fx: &mut Effects,
    ) -> Check {
        self.sweep(now, fx);
        let call = binding.call_key();
        let mut keys = vec![call.clone()];
        keys.extend(binding.session_key());
        keys.push(binding.tool_key());
        for key in &keys {
            if let Some((g, rewritten)) = self.grant_for(key, now, args) {
                if g.kind == GrantKind::Deny {
                    if let Some(a) = self.approvals.get(&g.approval) {
                        fx.records.push(record("refused", a, json!({"grant": "deny"})));
                    }
                    return Check::Denied {
                        id: g.approval,
                        reason: g.reason,
                        alternative: g.alternative,
                    };
                }
                if let Some(a) = self.approvals.get_mut(&g.approval) {
                    let mut extra = json!({"grant": g.kind.as_str(), "call_digest": binding.args_digest});
                    if let Some(r) = &rewritten {
                        extra["rewritten_digest"] = json!(super::binding::digest(r));
                    }
                    if g.kind == GrantKind::AllowOnce {
                        a.state = State::Consumed;
                        a.version += 1;
                        fx.records.push(record("released", a, extra));
                        let a = a.clone();
                        self.grant_keys.remove(&g.approval);
                        self.emit("approval.consumed", &a, fx);
                    } else {
                        fx.records.push(record("released", a, extra));
                    }
                }
                return Check::Granted {
                    approval: g.approval,
                    grant: g.kind,
                    args: rewritten,
                };
            }
        }
        if let Some(id) = self.pending_by_call.get(&call).cloned() {
            if let Some(a) = self.approvals.get_mut(&id) {
                a.attempts += 1;
                a.version += 1;
                return Check::Pending {
                    id,
                    created: false,
                    expires_ms: a.expires_ms,
                };
            }
        }
        let mine = self.pending_per_principal.get(&binding.principal).copied().unwrap_or(0);
        if mine >= self.limits.per_principal {
            return Check::Limited("principal");
        }
        if self.pending >= self.limits.total {
            return Check::Limited("total");
        }
        let id = new_id();
        // Only a new request is shown to people: the (redacting) preview is
        // made for it alone, not on every granted call.
        let a = Approval::pending(id.clone(), binding, preview(), rule, terms, now);
        let expires_ms = a.expires_ms;
        *self
            .pending_per_principal
            .entry(a.binding.principal.clone())
            .or_default() += 1;
        self.pending += 1;
        self.pending_by_call.insert(call, id.clone());
        self.expiries.insert((expires_ms, id.clone()));
        fx.records.push(record(
            "requested",
            &a,
            json!({"rule": a.rule, "expires_ms": expires_ms, "session": a.binding.session}),
        ));
        self.emit("approval.requested", &a, fx);
        self.approvals.insert(id.clone(), a);
        Check::Pending {
            id,
            created: true,
            expires_ms,
        }
    }

    /// One request, as `viewer` may see it (its approvers and its requester).
    pub fn get(&mut self, id: &str, viewer: &Caller, now: u64, fx: &mut Effects) -> Result<&Approval, Refused> {
        self.sweep(now, fx);
        let a = self
            .approvals
            .get(id)
            .ok_or_else(|| refused(404, "unknown_approval", format!("no approval {id}")))?;
        if !may_view(a, viewer) {
            // Not told apart from an unknown id: ids are not to be probed.
            return Err(refused(404, "unknown_approval", format!("no approval {id}")));
        }
        Ok(a)
    }

    /// The requests `viewer` may see, newest first, filtered.
    pub fn list(&mut self, viewer: &Caller, filter: &Filter<'_>, now: u64, fx: &mut Effects) -> Vec<Value> {
        self.sweep(now, fx);
        let mut out: Vec<&Approval> = self
            .approvals
            .values()
            .filter(|a| may_view(a, viewer) && filter.admits(a))
            .collect();
        out.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
        out.into_iter().take(500).map(Approval::to_json).collect()
    }

    /// An approver's decision on request `id`.
    pub fn decide(
        &mut self,
        id: &str,
        approver: &Caller,
        body: DecideBody,
        if_match: Option<&str>,
        now: u64,
        fx: &mut Effects,
    ) -> Result<Value, Refused> {
        self.sweep(now, fx);
        let a = self
            .approvals
            .get(id)
            .ok_or_else(|| refused(404, "unknown_approval", format!("no approval {id}")))?;
        let (key, expires_ms, who) = decision(a, id, approver, &body, if_match, now)?;
        let created = a.created_ms;
        let grant = Grant {
            approval: id.to_string(),
            kind: body.grant,
            expires_ms,
            constraints: body.constraints.clone(),
            reason: body.reason.clone(),
            alternative: body.alternative.clone(),
        };
        self.unpend(id);
        self.grants.entry(key.clone()).or_default().push(grant);
        self.grant_keys.insert(id.to_string(), key);
        let Some(a) = self.approvals.get_mut(id) else {
            return Err(refused(404, "unknown_approval", format!("no approval {id}")));
        };
        a.apply_decision(&who, &body, now);
        fx.records.push(record(
            "decided",
            a,
            json!({"by": who, "grant": body.grant.as_str(), "grant_expires_ms": expires_ms}),
        ));
        fx.decided = Some((body.grant, now.saturating_sub(created)));
        let a = a.clone();
        self.emit("approval.decided", &a, fx);
        Ok(a.to_json())
    }

    /// Revokes the standing grant that approval `id` gave.
    pub fn revoke(&mut self, id: &str, by: &Caller, now: u64, fx: &mut Effects) -> Result<Value, Refused> {
        self.sweep(now, fx);
        let a = self
            .approvals
            .get(id)
            .ok_or_else(|| refused(404, "unknown_approval", format!("no approval {id}")))?;
        if !a.terms.approvers.admit(by) {
            return Err(refused(
                403,
                "not_an_approver",
                format!("{} may not revoke approval {id}'s grant", super::binding::principal(by)),
            ));
        }
        let key = self
            .grant_keys
            .remove(id)
            .ok_or_else(|| refused(409, "no_grant", format!("approval {id} has no standing grant")))?;
        if let Some(list) = self.grants.get_mut(&key) {
            list.retain(|g| g.approval != id);
            if list.is_empty() {
                self.grants.remove(&key);
            }
        }
        let who = super::binding::principal(by);
        let Some(a) = self.approvals.get_mut(id) else {
            return Err(refused(404, "unknown_approval", format!("no approval {id}")));
        };
        a.state = State::Revoked;
        a.version += 1;
        fx.records.push(record("revoked", a, json!({"by": who})));
        let a = a.clone();
        self.emit("approval.revoked", &a, fx);
        Ok(a.to_json())
    }
}

pub(super) fn may_view(a: &Approval, viewer: &Caller) -> bool {
    a.terms.approvers.admit(viewer) || super::binding::principal(viewer) == a.binding.principal
}

/// The API's list filters.
#[derive(Debug, Default)]
pub struct Filter<'a> {
    /// `pending`, `allowed`, ...
    pub state: Option<&'a str>,
    /// A principal.
    pub principal: Option<&'a str>,
    /// A tool or skill.
    pub target: Option<&'a str>,
    /// A route.
    pub route: Option<&'a str>,
}

impl Filter<'_> {
    pub(super) fn admits(&self, a: &Approval) -> bool {
        self.state.is_none_or(|s| s == a.state.as_str())
            && self.principal.is_none_or(|p| p == a.binding.principal)
            && self.target.is_none_or(|t| t == a.binding.target)
            && self.route.is_none_or(|r| r == a.binding.route)
    }
}

/// `Approvers` for tests and docs.
pub fn approvers_of_roles(roles: &[&str]) -> Approvers {
    Approvers {
        roles_any: roles.iter().map(|s| s.to_string()).collect(),
        ..Approvers::default()
    }
}
