//! Shadow mode (`mode: shadow` on a route): the route's chains run for real,
//! but every answer to Envoy is a plain CONTINUE with no mutation, whatever
//! the chain decided, and agent failures (which would answer 500/503) never
//! reach the client. What the chain would have done is:
//!
//! - logged once per request (`shadow route: decision not applied`);
//! - counted in `policy_kernel_shadow_decisions_total{route,decision}`, with
//!   decision `allow` (no change), `modify` (header, body or status changes)
//!   or `deny` (an immediate response: a policy's denial, or the kernel's
//!   own 500/503 for an unsupported policy or a failed agent);
//! - put in the dynamic metadata of every answer, under `policy_kernel`:
//!   `route`, `shadow_decision` and, for a denial, `shadow_status`.
//!
//! The session calls [`Shadow::neutralize`] on each answer of a shadow
//! route. The chain's own dynamic metadata is not forwarded either.
//! A shadow route still makes Envoy buffer the bodies its policies need.

use std::sync::{Arc, LazyLock};

use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_response::Response, CommonResponse, ProcessingResponse,
};
use prometheus::{IntCounterVec, Opts};

use crate::aggregate::Metadata;
use crate::envoy::translate::{self, Answer};
use crate::snapshot::Route;
use crate::telemetry::metrics::metrics;

static DECISIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let name = "policy_kernel_shadow_decisions_total";
    let c = IntCounterVec::new(
        Opts::new(name, "Decisions of shadow routes' chains, not applied"),
        &["route", "decision"],
    )
    .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    metrics()
        .registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    c
});

/// Registers the metric, so that `/metrics` lists it from the start.
pub fn register() {
    LazyLock::force(&DECISIONS);
}

/// What a shadow route's chain decided so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing changed.
    Allow,
    /// Headers, body or status would have changed.
    Modify,
    /// The request would have been answered with this status.
    Deny(u32),
}

impl Decision {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Modify => "modify",
            Decision::Deny(_) => "deny",
        }
    }
}

/// One request on a shadow route.
#[derive(Debug)]
pub struct Shadow {
    route: Arc<Route>,
    decision: Decision,
    reason: String,
    phase: &'static str,
}

fn changes(common: Option<&CommonResponse>) -> bool {
    common.is_some_and(|c| {
        c.status != 0
            || c.body_mutation.is_some()
            || c.header_mutation
                .as_ref()
                .is_some_and(|h| !h.set_headers.is_empty() || !h.remove_headers.is_empty())
    })
}

impl Shadow {
    /// A request on the shadow route `route`.
    pub fn new(route: Arc<Route>) -> Self {
        Self {
            route,
            decision: Decision::Allow,
            reason: String::new(),
            phase: "",
        }
    }

    /// What the chain decided so far.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Records what `resp` would have done and returns the plain CONTINUE
    /// sent instead.
    pub fn neutralize(&mut self, answer: Answer, resp: ProcessingResponse) -> ProcessingResponse {
        let phase = match answer {
            Answer::RequestHeaders | Answer::RequestBody | Answer::RequestTrailers => "request",
            _ => "response",
        };
        let mut mode = resp.mode_override;
        match &resp.response {
            Some(Response::ImmediateResponse(imm)) => {
                if !matches!(self.decision, Decision::Deny(_)) {
                    self.decision = Decision::Deny(imm.status.as_ref().map(|s| s.code as u32).unwrap_or(0));
                    self.reason = imm.details.clone();
                    self.phase = phase;
                }
                // Nothing more to do for this request: no further messages.
                mode = (answer == Answer::RequestHeaders).then(|| translate::mode_override(false, false, false));
            }
            Some(Response::RequestHeaders(h) | Response::ResponseHeaders(h)) if changes(h.response.as_ref()) => {
                self.modified(phase)
            }
            Some(Response::RequestBody(b) | Response::ResponseBody(b)) if changes(b.response.as_ref()) => {
                self.modified(phase)
            }
            _ => {}
        }
        let mut out = translate::respond(answer, None);
        out.mode_override = mode;
        let mut meta = Metadata::new();
        meta.insert("shadow_decision".into(), self.decision.as_str().into());
        if let Decision::Deny(status) = self.decision {
            meta.insert("shadow_status".into(), status.to_string());
        }
        out.dynamic_metadata = Some(translate::dynamic_metadata(&self.route.name, &meta));
        out
    }

    fn modified(&mut self, phase: &'static str) {
        if self.decision == Decision::Allow {
            self.decision = Decision::Modify;
            self.phase = phase;
        }
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        DECISIONS
            .with_label_values(&[self.route.name.as_str(), self.decision.as_str()])
            .inc();
        let status = match self.decision {
            Decision::Deny(s) => Some(s),
            _ => None,
        };
        tracing::info!(route = %self.route.name, mode = "shadow", decision = self.decision.as_str(), status,
            phase = self.phase, reason = %self.reason, "shadow route: the chain's decision was not applied");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Immediate;
    use crate::snapshot::Snapshot;

    fn route() -> Arc<Route> {
        let cfg = crate::config::parse(
            "policy_kernel:\n  route_policies:\n    - route_name: shadowed\n      mode: shadow\n      request_policy_chain:\n        - policy: p\n",
        )
        .unwrap();
        let snap = Snapshot::build(Arc::new(cfg), Vec::new(), 1);
        assert_eq!(snap.routes["shadowed"].mode, crate::config::RouteMode::Shadow);
        Arc::clone(&snap.routes["shadowed"])
    }

    fn decision_meta(resp: &ProcessingResponse) -> String {
        use envoy_types::pb::google::protobuf::value::Kind;
        let outer = resp.dynamic_metadata.as_ref().unwrap();
        let Some(Kind::StructValue(inner)) = &outer.fields[translate::METADATA_NAMESPACE].kind else {
            panic!("no namespace")
        };
        match &inner.fields["shadow_decision"].kind {
            Some(Kind::StringValue(s)) => s.clone(),
            _ => panic!("no decision"),
        }
    }

    #[test]
    fn a_denial_becomes_a_plain_continue_and_is_remembered() {
        let mut s = Shadow::new(route());
        let deny = translate::immediate(&Immediate {
            status: 403,
            headers: Vec::new(),
            body: bytes::Bytes::from_static(b"no"),
            reason: "guard".into(),
        });
        let out = s.neutralize(Answer::RequestHeaders, deny);
        assert!(matches!(out.response, Some(Response::RequestHeaders(ref h)) if h.response.is_none()));
        assert!(out.mode_override.is_some(), "no further messages for this request");
        assert_eq!(s.decision(), Decision::Deny(403));
        assert_eq!(decision_meta(&out), "deny");
        // A later allow does not hide the denial.
        let out = s.neutralize(
            Answer::ResponseHeaders,
            translate::respond(Answer::ResponseHeaders, None),
        );
        assert_eq!(decision_meta(&out), "deny");
    }

    #[test]
    fn mutations_are_dropped_and_counted_as_modify() {
        let mut s = Shadow::new(route());
        let common = CommonResponse {
            header_mutation: Some(Default::default()),
            ..Default::default()
        };
        let out = s.neutralize(
            Answer::RequestHeaders,
            translate::respond(Answer::RequestHeaders, Some(common)),
        );
        assert_eq!(s.decision(), Decision::Allow, "an empty mutation changes nothing");
        assert_eq!(decision_meta(&out), "allow");
        let common = CommonResponse {
            status: 1,
            ..Default::default()
        };
        let out = s.neutralize(
            Answer::RequestBody,
            translate::respond(Answer::RequestBody, Some(common)),
        );
        assert!(matches!(out.response, Some(Response::RequestBody(ref b)) if b.response.is_none()));
        assert_eq!(s.decision(), Decision::Modify);
    }
}
