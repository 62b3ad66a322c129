//! The `approval` terms of an `approve` rule: who may decide, how long a
//! request waits, which grants an approver may give.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rules::Caller;
use policy_agents::ParamError;

/// A pending request lives this long unless the rule says (`ttl_s`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The longest a pending request may live.
pub const MAX_TTL: Duration = Duration::from_secs(86_400);
/// `allow_always` and `allow_constrained` grants last at most this long
/// unless the rule says (`always_max_s`).
pub const DEFAULT_ALWAYS_MAX: Duration = Duration::from_secs(7 * 86_400);

/// A kind of grant, as the approver gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// The one call approved, once.
    AllowOnce,
    /// This tool for this caller in this session.
    AllowSession,
    /// This tool for this caller, until revoked or its cap.
    AllowAlways,
    /// This tool for this caller, only in the form the approver limited.
    AllowConstrained,
    /// Refused, with an optional reason and suggested alternative.
    Deny,
}

impl GrantKind {
    /// Every kind, in the order pages show them.
    pub const ALL: [GrantKind; 5] = [
        GrantKind::AllowOnce,
        GrantKind::AllowSession,
        GrantKind::AllowAlways,
        GrantKind::AllowConstrained,
        GrantKind::Deny,
    ];

    /// The name on the wire (`allow_once`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::AllowOnce => "allow_once",
            GrantKind::AllowSession => "allow_session",
            GrantKind::AllowAlways => "allow_always",
            GrantKind::AllowConstrained => "allow_constrained",
            GrantKind::Deny => "deny",
        }
    }
}

/// Who may decide a rule's requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Approvers {
    /// Callers holding one of these roles.
    #[serde(default)]
    pub roles_any: Vec<String>,
    /// Callers with one of these JWT subjects.
    #[serde(default)]
    pub subs: Vec<String>,
    /// Callers with one of these API-key consumers.
    #[serde(default)]
    pub consumers: Vec<String>,
}

impl Approvers {
    /// Whether `c` is one of them.
    pub fn admit(&self, c: &Caller) -> bool {
        self.roles_any.iter().any(|r| c.roles.contains(r))
            || c.sub.as_ref().is_some_and(|s| self.subs.contains(s))
            || c.consumer.as_ref().is_some_and(|s| self.consumers.contains(s))
    }

    fn is_empty(&self) -> bool {
        self.roles_any.is_empty() && self.subs.is_empty() && self.consumers.is_empty()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    approvers: Approvers,
    ttl_s: Option<u64>,
    grants: Option<Vec<GrantKind>>,
    always_max_s: Option<u64>,
    #[serde(default)]
    self_approve: bool,
    #[serde(default)]
    on_expiry: OnExpiry,
    expiry_reason: Option<String>,
    #[serde(default)]
    notify: Vec<super::notify::Target>,
}

/// What becomes of a request nobody decided within its `ttl_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExpiry {
    /// It expires; the caller's next call asks again.
    #[default]
    Expire,
    /// It is denied with a reason (`expiry_reason`), and the call is
    /// refused with it for one more `ttl_s`.
    Deny,
}

/// The compiled `approval` of a rule (serialized only to keep a request's
/// terms in a shared store; rules are read with [`ApprovalRule::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    /// Who may decide.
    pub approvers: Approvers,
    /// How long a request waits for a decision.
    pub ttl: Duration,
    /// The grants an approver may give.
    pub grants: Vec<GrantKind>,
    /// The cap on `allow_always` and `allow_constrained` grants.
    pub always_max: Duration,
    /// Whether a caller may approve its own call.
    pub self_approve: bool,
    /// A digest of the `approve` rule that asked (its matchers and these
    /// terms, not its name nor its notification targets): standing grants
    /// are bound to it, so they outlive edits of the rest of the route and
    /// die with the rule.
    pub digest: String,
    /// What becomes of a request nobody decided in time.
    #[serde(default)]
    pub on_expiry: OnExpiry,
    /// The reason an expired request is denied with (`on_expiry: deny`).
    #[serde(default)]
    pub expiry_reason: Option<String>,
    /// Where the rule's requests and decisions are announced.
    #[serde(default)]
    pub notify: Vec<super::notify::Target>,
}

impl ApprovalRule {
    /// Parses the `approval` object of rule `rule` of param `param`.
    pub fn parse(param: &str, rule: &str, raw: serde_json::Value) -> Result<Self, ParamError> {
        let bad = |why: String| ParamError::invalid(param, rule, format!("approval: {why}"));
        let spec: Spec = serde_json::from_value(raw).map_err(|e| bad(e.to_string()))?;
        if spec.approvers.is_empty() {
            return Err(bad("approvers names nobody (roles_any, subs or consumers)".into()));
        }
        let ttl = spec.ttl_s.map_or(DEFAULT_TTL, Duration::from_secs);
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(bad(format!("ttl_s must be 1 to {}", MAX_TTL.as_secs())));
        }
        let grants = spec.grants.unwrap_or_else(|| GrantKind::ALL.to_vec());
        if grants.is_empty() {
            return Err(bad("grants is empty: nobody could decide".into()));
        }
        let always_max = spec.always_max_s.map_or(DEFAULT_ALWAYS_MAX, Duration::from_secs);
        if always_max.is_zero() {
            return Err(bad("always_max_s must be at least 1".into()));
        }
        let mut unique = Vec::new();
        for g in grants {
            if !unique.contains(&g) {
                unique.push(g);
            }
        }
        if spec.on_expiry == OnExpiry::Deny && !unique.contains(&GrantKind::Deny) {
            return Err(bad("on_expiry: deny needs `deny` among the grants".into()));
        }
        if spec.expiry_reason.is_some() && spec.on_expiry != OnExpiry::Deny {
            return Err(bad("expiry_reason is only for on_expiry: deny".into()));
        }
        for (i, t) in spec.notify.iter().enumerate() {
            t.validate().map_err(|why| bad(format!("notify[{i}]: {why}")))?;
        }
        Ok(ApprovalRule {
            approvers: spec.approvers,
            ttl,
            grants: unique,
            always_max,
            self_approve: spec.self_approve,
            digest: String::new(),
            on_expiry: spec.on_expiry,
            expiry_reason: spec.expiry_reason,
            notify: spec.notify,
        })
    }

    /// The reason an auto-denied request gives.
    pub fn expiry_reason(&self) -> String {
        self.expiry_reason
            .clone()
            .unwrap_or_else(|| format!("nobody decided within {} s", self.ttl.as_secs()))
    }

    /// Whether the rule's requests must expire on time, not at the next
    /// operation: they are announced, or denied at expiry.
    pub fn needs_sweeping(&self) -> bool {
        self.on_expiry == OnExpiry::Deny || !self.notify.is_empty()
    }
}
