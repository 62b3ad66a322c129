//! What a notification says, in each format. It names the tool or skill,
//! the caller, the route, the decision, and shows the arguments only as
//! the page does (the redacted preview kept with the request, cut short):
//! never the raw arguments. Deciding takes the link, to the page, where
//! the approver signs in as always.

use serde_json::{json, Value};

use super::super::store::Approval;
use super::target::Format;

/// The longest argument preview a notification carries (characters).
const PREVIEW_MAX: usize = 1500;

/// The approvals page's link to request `a`: the target's `page`, else the
/// page on the authority the call came through.
pub fn link(page: Option<&str>, a: &Approval) -> String {
    let base = match page {
        Some(p) => p.trim_end_matches('/').to_string(),
        None => {
            let authority = a.binding.endpoint.split('/').next().unwrap_or_default();
            format!("http://{authority}/approvals/page")
        }
    };
    format!("{base}#id={}", a.id)
}

/// The preview as short text: JSON, cut at [`PREVIEW_MAX`] characters.
fn preview_text(a: &Approval) -> String {
    let s = a.preview.to_string();
    if s.chars().count() <= PREVIEW_MAX {
        return s;
    }
    let mut cut: String = s.chars().take(PREVIEW_MAX).collect();
    cut.push('…');
    cut
}

/// `approval.requested` → `requested`.
pub fn short(kind: &str) -> &str {
    kind.strip_prefix("approval.").unwrap_or(kind)
}

fn headline(kind: &str, a: &Approval) -> String {
    let d = a.decision.as_ref();
    match short(kind) {
        "requested" => format!(
            "Approval needed: {} wants to run {} ({})",
            a.binding.principal, a.binding.target, a.binding.method
        ),
        "decided" => format!(
            "{} {} for {}'s {}",
            d.map_or("someone", |d| d.by.as_str()),
            d.map_or("decided", |d| d.grant.as_str()),
            a.binding.principal,
            a.binding.target
        ),
        "expired" => format!(
            "Expired undecided: {}'s {} ({})",
            a.binding.principal, a.binding.target, a.binding.method
        ),
        "consumed" => format!("Ran once as approved: {}'s {}", a.binding.principal, a.binding.target),
        "revoked" => format!("Grant revoked: {}'s {}", a.binding.principal, a.binding.target),
        other => format!("Approval {other}: {}'s {}", a.binding.principal, a.binding.target),
    }
}

/// The event as its fields (the webhook's `approval`).
fn fields(a: &Approval, link: &str) -> Value {
    let b = &a.binding;
    json!({
        "id": a.id,
        "state": a.state.as_str(),
        "rule": a.rule,
        "principal": b.principal,
        "route": b.route,
        "endpoint": b.endpoint,
        "method": b.method,
        "target": b.target,
        "args_digest": b.args_digest,
        "args_preview": preview_text(a),
        "session": b.session.is_some(),
        "created_ms": a.created_ms,
        "expires_ms": a.expires_ms,
        "decision": a.decision.as_ref().map(|d| json!({
            "by": d.by,
            "grant": d.grant.as_str(),
            "reason": d.reason,
            "at_ms": d.at_ms,
        })),
        "link": link,
    })
}

/// The body of event `kind` (`approval.requested`, ...) about `a`, in
/// `format`; `delivery` names this delivery (the same on every retry).
pub fn body(format: Format, kind: &str, a: &Approval, link: &str, delivery: &str, now_ms: u64) -> Value {
    match format {
        Format::Webhook => json!({
            "type": kind,
            "delivery": delivery,
            "sent_ms": now_ms,
            "approval": fields(a, link),
        }),
        Format::Slack => slack(kind, a, link),
        Format::Teams => teams(kind, a, link),
    }
}

/// Slack mrkdwn: `&`, `<` and `>` escaped, as Slack asks.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn slack(kind: &str, a: &Approval, link: &str) -> Value {
    let text = headline(kind, a);
    let b = &a.binding;
    let mut facts = vec![
        json!({"type": "mrkdwn", "text": format!("*Tool*\n{}", esc(&b.target))}),
        json!({"type": "mrkdwn", "text": format!("*Caller*\n{}", esc(&b.principal))}),
        json!({"type": "mrkdwn", "text": format!("*Route*\n{}", esc(&b.route))}),
        json!({"type": "mrkdwn", "text": format!("*State*\n{}", a.state.as_str())}),
    ];
    if let Some(reason) = a.decision.as_ref().and_then(|d| d.reason.as_deref()) {
        facts.push(json!({"type": "mrkdwn", "text": format!("*Reason*\n{}", esc(&cut(reason, 1900)))}));
    }
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": cut(&text, 150), "emoji": false}}),
        json!({"type": "section", "fields": facts}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*Arguments (redacted)*\n```{}```", esc(&preview_text(a)))}}),
    ];
    if link.len() <= 3000 {
        blocks.push(json!({"type": "actions", "elements": [{
            "type": "button",
            "text": {"type": "plain_text", "text": "Open in the approvals page"},
            "url": link,
            "action_id": "open_approval",
        }]}));
    }
    json!({"text": text, "blocks": blocks})
}

fn teams(kind: &str, a: &Approval, link: &str) -> Value {
    let b = &a.binding;
    let mut facts = vec![
        json!({"title": "Tool", "value": b.target}),
        json!({"title": "Caller", "value": b.principal}),
        json!({"title": "Route", "value": b.route}),
        json!({"title": "State", "value": a.state.as_str()}),
    ];
    if let Some(reason) = a.decision.as_ref().and_then(|d| d.reason.as_deref()) {
        facts.push(json!({"title": "Reason", "value": reason}));
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": headline(kind, a), "weight": "Bolder", "size": "Medium", "wrap": true},
                    {"type": "FactSet", "facts": facts},
                    {"type": "TextBlock", "text": "Arguments (redacted)", "weight": "Bolder"},
                    {"type": "TextBlock", "text": preview_text(a), "fontType": "Monospace", "wrap": true},
                ],
                "actions": [{"type": "Action.OpenUrl", "title": "Open in the approvals page", "url": link}],
            },
        }],
    })
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut c: String = s.chars().take(n - 1).collect();
    c.push('…');
    c
}
