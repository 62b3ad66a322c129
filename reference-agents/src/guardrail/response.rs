//! `promptInjectionGuard` on a buffered response (JSON, or an SSE reply the
//! kernel buffered): MCP `tools/list` results are checked for tool
//! poisoning tool by tool (see [`poisoning`](super::poisoning)), and the
//! text the model reads from the rest is scored in windows (see
//! [`windows`](super::windows)).
//!
//! A poisoned tool, with `action: block`, is removed from the list
//! (`poisoned_tools: remove`, the default: the list is rewritten without it,
//! every other byte kept) or the whole list is refused with a JSON-RPC error
//! for its id (`poisoned_tools: refuse`). With `action: flag` the list
//! passes and `x-prompt-risk` is set. Metadata (journalled by `auditLog`
//! after the guard): `tool_poisoning` (`removed`, `refused`, `flagged`),
//! `tool_poisoning_tools` (the tools' names), `tool_poisoning_categories`,
//! `tool_poisoning_score` (the worst tool's); metrics in
//! [`metrics`](super::metrics).

use bytes::Bytes;
use serde_json::Value;

use super::detector::{Detector, Verdict};
use super::indirect::{self, Kind};
use super::injection::{round, spans, Action, GuardParams, PoisonedTools};
use super::metrics;
use super::poisoning::{self, Scan};
use policy_agents::stream::sse;
use policy_agents::{PolicyError, ResponseContext, ResponseOutcome};

/// What the tool-list check decided for a body.
#[derive(Debug, Default)]
pub(super) struct ListDecision {
    /// The lists found, with their poisoned tools.
    pub scans: Vec<Scan>,
    /// The body rewritten (tools removed, or lists refused), if it changed.
    pub body: Option<String>,
    /// `removed`, `refused` or `flagged` (empty: nothing poisoned).
    pub decision: &'static str,
}

impl ListDecision {
    fn names(&self) -> String {
        let names: Vec<String> = self.scans.iter().map(Scan::names).filter(|n| !n.is_empty()).collect();
        names.join(",")
    }

    fn categories(&self) -> String {
        let mut c: Vec<&str> = self.scans.iter().flat_map(Scan::categories).collect();
        c.sort_unstable();
        c.dedup();
        c.join(",")
    }

    fn worst(&self) -> f64 {
        self.scans.iter().fold(0.0, |m, s| m.max(s.worst))
    }

    /// The metadata of the decision (nothing when no tool was poisoned).
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        if self.decision.is_empty() {
            return Vec::new();
        }
        vec![
            ("tool_poisoning", self.decision.to_string()),
            ("tool_poisoning_tools", self.names()),
            ("tool_poisoning_categories", self.categories()),
            ("tool_poisoning_score", format!("{:.2}", self.worst())),
        ]
    }
}

/// What one JSON-RPC message's text becomes: the same (`None`), without
/// its poisoned tools, or the refusal.
fn decide_message(
    params: &GuardParams,
    raw: &str,
    doc: &Value,
    scans: &mut Vec<Scan>,
) -> Result<Option<String>, PolicyError> {
    let scan = poisoning::scan(doc, &params.weights, params.threshold).map_err(PolicyError::new)?;
    let Some(scan) = scan else { return Ok(None) };
    let out = if scan.poisoned.is_empty() || params.action == Action::Flag {
        None
    } else {
        match params.poisoned_tools {
            PoisonedTools::Refuse => Some(poisoning::refusal(&scan.id, params.jsonrpc_error_code, &scan).to_string()),
            PoisonedTools::Remove => {
                let drop: Vec<usize> = scan.poisoned.iter().map(|(i, _)| *i).collect();
                Some(poisoning::remove(raw, &drop).ok_or_else(|| {
                    PolicyError::new("a tools/list result that serde_json read could not be rewritten")
                })?)
            }
        }
    };
    scans.push(scan);
    Ok(out)
}

/// Whether `text` could hold a `tools/list` result (a cheap test first).
fn may_list_tools(text: &str) -> bool {
    text.contains("\"tools\"")
}

/// Checks the `tools/list` results of a body (JSON, or SSE events).
pub(super) fn tool_lists(
    params: &GuardParams,
    content_type: Option<&str>,
    text: &str,
) -> Result<ListDecision, PolicyError> {
    let mut d = ListDecision::default();
    if !may_list_tools(text) {
        return Ok(d);
    }
    let ct = content_type.unwrap_or("").to_ascii_lowercase();
    let trimmed = text.trim_start();
    let is_sse = ct.contains("text/event-stream") || trimmed.starts_with("data:") || trimmed.starts_with("event:");
    if !is_sse {
        let Ok(doc) = serde_json::from_str::<Value>(text) else {
            return Ok(d);
        };
        d.body = decide_message(params, text, &doc, &mut d.scans)?;
    } else {
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        for event in split_events(text) {
            let rewritten = match sse::data(event.as_bytes()) {
                Some(data) if may_list_tools(&data) => match serde_json::from_str::<Value>(&data) {
                    Ok(doc) => decide_message(params, &data, &doc, &mut d.scans)?,
                    Err(_) => None,
                },
                _ => None,
            };
            match rewritten {
                Some(new) => {
                    changed = true;
                    let ev: Bytes = sse::with_data(event.as_bytes(), &new);
                    out.push_str(&String::from_utf8_lossy(&ev));
                }
                None => out.push_str(event),
            }
        }
        if changed {
            d.body = Some(out);
        }
    }
    let poisoned: Vec<&str> = d
        .scans
        .iter()
        .flat_map(|s| s.poisoned.iter().flat_map(|(_, v)| v.categories.iter().copied()))
        .collect();
    d.decision = match (poisoned.is_empty(), params.action, params.poisoned_tools) {
        (true, _, _) => "",
        (false, Action::Flag, _) => "flagged",
        (false, Action::Block, PoisonedTools::Remove) => "removed",
        (false, Action::Block, PoisonedTools::Refuse) => "refused",
    };
    if !d.scans.is_empty() {
        metrics::tool_list(if d.decision.is_empty() { "pass" } else { d.decision }, &poisoned);
    }
    Ok(d)
}

/// The events of an SSE body with their terminators, so that joining them
/// gives the body back byte for byte.
fn split_events(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let end = if bytes[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if bytes[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        };
        match end {
            Some(e) => {
                out.push(&text[start..e]);
                start = e;
                i = e;
            }
            None => i += 1,
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The guard's response hook on a buffered body.
pub(super) fn on_response(
    params: &GuardParams,
    ctx: &ResponseContext<'_>,
    body: &[u8],
) -> Result<ResponseOutcome, PolicyError> {
    let content_type = ctx.response.header("content-type");
    let text = String::from_utf8_lossy(body);
    let lists = tool_lists(params, content_type, &text)?;
    let with_lists = |mut o: ResponseOutcome| {
        for (k, v) in lists.metadata() {
            o = o.set_metadata(k, v);
        }
        o
    };
    // The rest of the body (tool definitions are not in this text).
    let found = indirect::extract(content_type, body);
    let verdict = super::windows::assess(Detector::shared()?, &found.text, &params.weights, params.windowed);
    let list_outcome = || {
        let mut o = ResponseOutcome::proceed();
        if let Some(b) = &lists.body {
            o = o.set_body(b.clone());
            if lists.decision == "refused" {
                o = o.set_metadata("response_blocked", "tool_poisoning");
            }
        }
        if lists.decision == "flagged" {
            o = o.set_header("x-prompt-risk", format!("{:.2}", lists.worst()));
        }
        with_lists(o)
    };
    if verdict.score == 0.0 {
        return Ok(list_outcome());
    }
    let score = format!("{:.2}", verdict.score);
    let with_metadata = |o: ResponseOutcome| {
        with_lists(o)
            .set_metadata("response_risk_score", score.clone())
            .set_metadata("response_risk_categories", verdict.categories().join(","))
            .set_metadata("response_risk_spans", spans(&verdict))
    };
    if verdict.score < params.threshold {
        return Ok(list_outcome()
            .set_metadata("response_risk_score", score.clone())
            .set_metadata("response_risk_categories", verdict.categories().join(","))
            .set_metadata("response_risk_spans", spans(&verdict)));
    }
    Ok(block(
        params,
        &found.kind,
        &verdict,
        with_metadata,
        lists.body.is_some(),
        &lists,
    ))
}

fn block(
    params: &GuardParams,
    kind: &Kind,
    verdict: &Verdict,
    with_metadata: impl Fn(ResponseOutcome) -> ResponseOutcome,
    lists_changed: bool,
    lists: &ListDecision,
) -> ResponseOutcome {
    let score = format!("{:.2}", verdict.score);
    match (params.action, kind) {
        (Action::Flag, _) => {
            let mut o = ResponseOutcome::proceed().set_header("x-prompt-risk", &score);
            if lists_changed {
                if let Some(b) = &lists.body {
                    o = o.set_body(b.clone());
                }
            }
            with_metadata(o)
        }
        (Action::Block, Kind::JsonRpc { ids, sse }) => {
            metrics::blocked("jsonrpc");
            let body = indirect::jsonrpc_block_body(
                ids,
                *sse,
                params.jsonrpc_error_code,
                &verdict.categories(),
                round(verdict.score),
            );
            let content_type = if *sse { "text/event-stream" } else { "application/json" };
            with_metadata(ResponseOutcome::proceed().set_body_with_type(body, content_type))
                .set_metadata("response_blocked", "prompt_injection_detected")
        }
        (Action::Block, Kind::Other) => {
            metrics::blocked("other");
            let body = serde_json::json!({
                "error": "bad_gateway",
                "reason": "prompt_injection_in_response",
                "categories": verdict.categories(),
                "risk_score": round(verdict.score),
            });
            with_metadata(ResponseOutcome::deny_json(params.response_status, &body))
                .deny_reason("prompt_injection_in_response")
        }
    }
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
