//! `mcpToolFilter`: a list shows only what the caller may use: the tools
//! of `tools/list` it may call, the prompts of `prompts/list` it may get,
//! the resources of `resources/list` it may read (by the same rules, on
//! `tools/call`, `prompts/get` and `resources/read`). Every list it reads,
//! `resources/templates/list` too, is marked `cacheScope: "private"` (MCP
//! 2026-07-28 caching: a list filtered per caller is not for a shared
//! cache), on every page, whatever the server said.
//!
//! Response phase, with the body. Every JSON-RPC message of the reply
//! (`application/json`, or each event of a `text/event-stream`) whose
//! `result.tools` is a list keeps the tools for which the same rules as
//! `mcpToolAuthorization` allow a `tools/call` by this caller; a tool without
//! a string `name` is dropped. The caller is read from the metadata the
//! request phase left (`roles`, `scope`, `consumer`, `sub`). The JSON stays
//! valid, the SSE framing is kept, other messages are untouched. Metadata:
//! `mcp.tools_listed` (kept), `mcp.tools_hidden` (dropped).
//!
//! It streams event streams (`streams_response_body`, events only): an SSE
//! reply (a POST's, or a session's GET stream) goes through one event at a
//! time, so progress notifications, server requests (elicitation, sampling)
//! and `notifications/tools/list_changed` reach the client as they are sent;
//! a `tools/list` result is filtered in its own event and every other event
//! passes at once, byte for byte. The counts run over the stream (in the
//! kernel-carried call state). A JSON reply is buffered by the kernel and
//! filtered whole, as without streaming.

use serde_json::Value;

use super::authorize::AuthzConfig;
use super::deny::config_error;
use super::events::{self, EventMessage};
use super::reply::{self, Format};
use crate::param_cache::ParamCache;
use crate::rules::{strip_prefix, Caller};
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Framing, Params, Policy, PolicyError, ResponseContext, ResponseOutcome,
};

const NAME: &str = "mcpToolFilter";
const KEYS: &[&str] = &["rules", "denial", "tool_prefix_separator"];

/// The list keys of [`LISTS`], for the scan that skips replies without a
/// list.
fn list_keys() -> &'static crate::mcp::shapes::Keys {
    static KEYS: std::sync::LazyLock<crate::mcp::shapes::Keys> = std::sync::LazyLock::new(|| {
        crate::mcp::shapes::Keys::new(&LISTS.iter().map(|(k, _, _)| *k).collect::<Vec<_>>())
    });
    &KEYS
}

/// What [`filter_message`] did to one message.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Filtered {
    /// Items kept.
    pub kept: usize,
    /// Items dropped.
    pub dropped: usize,
    /// Lists read.
    pub lists: usize,
    /// Whether the message changed.
    pub changed: bool,
}

/// The lists of a result the filter reads: the key, the method a listed
/// item is called by, and the item's member naming its target (`None`:
/// not filtered, templates are no target a rule names).
const LISTS: &[(&str, &str, Option<&str>)] = &[
    ("tools", "tools/call", Some("name")),
    ("prompts", "prompts/get", Some("name")),
    ("resources", "resources/read", Some("uri")),
    ("resourceTemplates", "resources/read", None),
];

/// Drops the tools, prompts and resources `caller` may not call, read or
/// get from one message, and marks the list `cacheScope: "private"` (MCP
/// 2026-07-28: a list filtered per caller may be served only to the same
/// caller, whatever the server said).
pub fn filter_message(cfg: &AuthzConfig, caller: &Caller, msg: &mut Value) -> Filtered {
    let mut out = Filtered::default();
    let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) else {
        return out;
    };
    for (key, method, member) in LISTS {
        let Some(items) = result.get_mut(*key).and_then(Value::as_array_mut) else {
            continue;
        };
        out.lists += 1;
        let before = items.len();
        if let Some(member) = member {
            items.retain(|t| {
                t.get(*member).and_then(Value::as_str).is_some_and(|name| {
                    let name = strip_prefix(name, cfg.prefix_separator.as_deref());
                    cfg.rules.decide(method, Some(name), caller).callable()
                })
            });
        }
        out.kept += items.len();
        out.dropped += before - items.len();
    }
    // A 2026-07-28 result says how it may be cached (`cacheScope`,
    // `ttlMs`, `resultType`); an older one says nothing and is left so.
    let modern = ["cacheScope", "ttlMs", "resultType"]
        .iter()
        .any(|k| result.contains_key(*k));
    out.changed = out.dropped > 0;
    if out.lists > 0 && modern && result.get("cacheScope").and_then(Value::as_str) != Some("private") {
        result.insert("cacheScope".into(), Value::String("private".into()));
        out.changed = true;
    }
    out
}

/// The counts carried between the calls of a stream: `kept hidden`.
fn counts(state: &[u8]) -> (usize, usize) {
    let text = std::str::from_utf8(state).unwrap_or_default();
    let mut parts = text.split(' ').map(|n| n.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The `mcpToolFilter` policy.
#[derive(Debug)]
pub struct McpToolFilter {
    cache: ParamCache<AuthzConfig>,
}

impl Default for McpToolFilter {
    fn default() -> Self {
        McpToolFilter::new()
    }
}

impl McpToolFilter {
    /// A policy with an empty params cache.
    pub fn new() -> Self {
        McpToolFilter {
            cache: ParamCache::new(KEYS),
        }
    }
}

impl Policy for McpToolFilter {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Response, body: true, streams: true, events_only: true }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, AuthzConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        if ctx.framing == Framing::Raw {
            return Err(PolicyError::new(format!(
                "{NAME}: a streamed reply that is not an event stream cannot be filtered piece by piece (the kernel buffers it when it honours streams_event_streams_only)"
            )));
        }
        reply::refuse_encoded(NAME, &ctx.response)?;
        let caller = Caller::from_metadata(ctx.metadata);
        let (mut kept, mut hidden) = counts(ctx.state);
        let mut lists = 0;
        let mut changed = false;
        let mut out = Vec::with_capacity(ctx.events.len());
        for ev in ctx.events {
            let EventMessage::Message(mut msg) = events::read(ev) else {
                out.push(ev.clone());
                continue;
            };
            let mut event_changed = false;
            let items: Vec<&mut Value> = match &mut msg {
                Value::Array(items) => items.iter_mut().collect(),
                one => vec![one],
            };
            for m in items {
                let f = filter_message(&cfg, &caller, m);
                kept += f.kept;
                hidden += f.dropped;
                lists += f.lists;
                event_changed |= f.changed;
            }
            if event_changed {
                changed = true;
                out.push(events::with_message(ev, &msg));
            } else {
                out.push(ev.clone());
            }
        }
        let mut outcome = if changed {
            ChunkOutcome::pass().replace(out)
        } else {
            ChunkOutcome::pass()
        };
        if lists > 0 {
            outcome = outcome
                .set_metadata("mcp.tools_listed", kept.to_string())
                .set_metadata("mcp.tools_hidden", hidden.to_string());
        }
        Ok(outcome.state(format!("{kept} {hidden}")))
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, AuthzConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let Some(format) = Format::of(ctx.response.header("content-type")) else {
            return Ok(ResponseOutcome::proceed());
        };
        let body = match ctx.response.body() {
            Some(b) if !b.is_empty() => b,
            Some(_) => return Ok(ResponseOutcome::proceed()),
            // Streamed: the events come to `on_response_chunk`.
            None if format == Format::Sse => return Ok(ResponseOutcome::proceed()),
            None => {
                return Err(PolicyError::new(format!(
                    "{NAME}: the response body was not included (the policy requires it)"
                )))
            }
        };
        reply::refuse_encoded(NAME, &ctx.response)?;
        // No list in the reply (a tool's answer): checked to be JSON, not
        // parsed into a tree.
        if format == Format::Json && list_keys().surely_absent(body) {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map_err(|e| PolicyError::new(format!("{NAME}: reply is not JSON: {e}")))?;
            return Ok(ResponseOutcome::proceed());
        }
        let caller = Caller::from_metadata(ctx.metadata);
        let (mut kept, mut hidden, mut lists) = (0, 0, 0);
        let new = reply::rewrite(body, format, &mut |msg| {
            let f = filter_message(&cfg, &caller, msg);
            kept += f.kept;
            hidden += f.dropped;
            lists += f.lists;
            f.changed
        })
        .map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let out = match new {
            Some(body) => ResponseOutcome::proceed().set_body(body),
            None => ResponseOutcome::proceed(),
        };
        if lists == 0 {
            return Ok(out);
        }
        Ok(out
            .set_metadata("mcp.tools_listed", kept.to_string())
            .set_metadata("mcp.tools_hidden", hidden.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest, TestResponse};

    const RULES: &str = r#"[{"effect":"allow","tools":["*"],"when":{"roles_any":["admin"]}},{"effect":"allow","tools":["read_*"],"when":{"roles_any":["reader"]}}]"#;

    fn list_reply() -> String {
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [
            {"name": "read_file", "inputSchema": {"type": "object"}},
            {"name": "delete_file", "inputSchema": {"type": "object"}},
            {"name": 7},
            {"name": "srv__read_log"}
        ], "nextCursor": "c"}})
        .to_string()
    }

    fn names(v: &Value) -> Vec<&str> {
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    async fn run(role: &str, ct: &str, body: &str, sep: Option<&str>) -> ResponseOutcome {
        let mut params = vec![("rules", RULES)];
        if let Some(s) = sep {
            params.push(("tool_prefix_separator", s));
        }
        TestCall::new()
            .params(&params)
            .metadata("roles", role)
            .response(
                &McpToolFilter::new(),
                &TestRequest::new("POST", "/mcp"),
                &TestResponse::new(200).header("content-type", ct).body(body.to_string()),
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn json_lists_are_filtered_per_caller() {
        let out = run("reader", "application/json", &list_reply(), None).await;
        let v: Value = serde_json::from_slice(&out.body_set().unwrap().body).unwrap();
        assert_eq!(names(&v), vec!["read_file"]);
        assert_eq!(v["result"]["nextCursor"], "c");
        assert_eq!(out.metadata_value("mcp.tools_hidden"), Some("3"));
        let out = run("reader", "application/json", &list_reply(), Some("__")).await;
        let v: Value = serde_json::from_slice(&out.body_set().unwrap().body).unwrap();
        assert_eq!(names(&v), vec!["read_file", "srv__read_log"]);
        let out = run("admin", "application/json", &list_reply(), None).await;
        let v: Value = serde_json::from_slice(&out.body_set().unwrap().body).unwrap();
        assert_eq!(names(&v), vec!["read_file", "delete_file", "srv__read_log"]);
        let out = run("nobody", "application/json", &list_reply(), None).await;
        let v: Value = serde_json::from_slice(&out.body_set().unwrap().body).unwrap();
        assert!(names(&v).is_empty());
    }

    #[tokio::test]
    async fn sse_lists_are_filtered_and_other_replies_untouched() {
        let sse = format!("event: message\ndata: {}\n\n", list_reply());
        let out = run("reader", "text/event-stream", &sse, None).await;
        let text = String::from_utf8(out.body_set().unwrap().body.to_vec()).unwrap();
        let data = text
            .strip_prefix("event: message\ndata: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        assert_eq!(names(&serde_json::from_str(data).unwrap()), vec!["read_file"]);
        let call = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
        let out = run("reader", "application/json", call, None).await;
        assert!(out.body_set().is_none() && out.metadata_value("mcp.tools_hidden").is_none());
        let out = run("reader", "text/html", "<html>", None).await;
        assert!(out.body_set().is_none());
    }

    #[tokio::test]
    async fn streamed_events_are_filtered_one_by_one() {
        use bytes::Bytes;
        let progress = Bytes::from(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n",
        );
        let list = Bytes::from(format!("event: message\nid: 9\ndata: {}\n\n", list_reply()));
        let call = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "reader");
        let req = TestRequest::new("POST", "/mcp");
        let resp = TestResponse::new(200).header("content-type", "text/event-stream");
        let filter = McpToolFilter::new();
        // Progress alone: passes untouched, nothing recorded.
        let out = call
            .chunk(&filter, &req, &resp, std::slice::from_ref(&progress), 0, false, b"")
            .await
            .unwrap();
        assert!(out.replacement().is_none() && out.metadata_set().is_empty());
        // The list in its own event: filtered, framing kept, counted.
        let out = call
            .chunk(
                &filter,
                &req,
                &resp,
                &[progress.clone(), list],
                1,
                true,
                out.next_state(),
            )
            .await
            .unwrap();
        let events = out.replacement().expect("replaced");
        assert_eq!(events[0], progress, "other events pass byte for byte");
        let text = std::str::from_utf8(&events[1]).unwrap();
        assert!(text.starts_with("event: message\nid: 9\ndata: "), "{text}");
        let v: Value = serde_json::from_str(policy_agents::stream::sse::data(&events[1]).unwrap().as_ref()).unwrap();
        assert_eq!(names(&v), vec!["read_file"]);
        assert_eq!(out.metadata_set()[1], ("mcp.tools_hidden".to_string(), "3".to_string()));
        // The end of the stream with no event: nothing to do.
        let end = call.chunk(&filter, &req, &resp, &[], 2, true, b"3 1").await.unwrap();
        assert!(end.replacement().is_none() && end.metadata_set().is_empty());
        assert_eq!(end.next_state(), b"3 1", "the counts carry on");
    }

    #[tokio::test]
    async fn bad_replies_and_params_fail() {
        let filter = McpToolFilter::new();
        let resp = TestResponse::new(200)
            .header("content-type", "application/json")
            .body("{oops");
        let req = TestRequest::new("POST", "/mcp");
        assert!(TestCall::new()
            .params(&[("rules", RULES)])
            .response(&filter, &req, &resp)
            .await
            .is_err());
        let err = TestCall::new()
            .params(&[("rules", "[{\"effect\":\"sometimes\"}]")])
            .response(&filter, &req, &resp)
            .await
            .unwrap_err();
        assert!(err.message().contains("`rules`"), "{}", err.message());
        assert_eq!(err.denial().map(|d| d.status), Some(500));
    }
}
