//! `a2aCardFilter`: the agent card a caller sees.
//!
//! Response phase, with the body. A JSON reply that is an agent card (the
//! public card at `/.well-known/agent-card.json`, the extended card of
//! `GetExtendedAgentCard` / `GET /extendedAgentCard`, or a JSON-RPC result
//! holding one: an object with `skills` and `name`) is rewritten:
//! * `skills` keeps the skills the caller may send to: those for which the
//!   `rules` (the same rules as `a2aAuthorization`'s) allow `SendMessage`
//!   or `SendStreamingMessage` with that skill id;
//! * with `public_url` (the gateway's address of the agent, such as
//!   `https://gw.example.com/agents/research`), the interface URLs (A2A
//!   1.0 `supportedInterfaces[].url`, 0.3 `url` and
//!   `additionalInterfaces[].url`) name the gateway: their scheme, host and
//!   port become `public_url`'s and its path goes before theirs. Clients
//!   send their later calls to the card's URLs, so a card naming the
//!   agent's own address would lead them around the gateway;
//! * a changed card loses its `signatures`, which no longer match it.
//!
//! The card stays valid JSON with every other member as it was. Other
//! replies pass unchanged; event streams pass event by event, unbuffered.
//! A compressed reply (`content-encoding` other than `identity`) cannot be
//! read, so it fails the call rather than pass a card unfiltered.
//!
//! Metadata: `a2a.card_skills` (shown), `a2a.card_skills_hidden`,
//! `a2a.card_urls_rewritten`.

use serde_json::Value;
use url::Url;

use super::SEND_METHODS;
use crate::param_cache::ParamCache;
use crate::rules::{Caller, Rules};
use crate::tool::deny::config_error;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, ParamError, Params, Policy, PolicyError, ResponseContext, ResponseOutcome,
};

const NAME: &str = "a2aCardFilter";
const KEYS: &[&str] = &["rules", "public_url"];

/// Parsed params.
#[derive(Debug)]
struct CardParams {
    rules: Rules,
    public_url: Option<Url>,
}

impl CardParams {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let public_url = match p.get("public_url").map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(raw) => {
                let u =
                    Url::parse(raw).map_err(|e| ParamError::invalid("public_url", raw, format!("not a URL: {e}")))?;
                if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
                    return Err(ParamError::invalid(
                        "public_url",
                        raw,
                        "expected an http(s) URL with a host",
                    ));
                }
                Some(u)
            }
        };
        Ok(CardParams {
            rules: Rules::parse_with_default("rules", p.required("rules")?, SEND_METHODS)?,
            public_url,
        })
    }
}

/// The `a2aCardFilter` policy.
pub struct A2aCardFilter {
    cache: ParamCache<CardParams>,
}

impl Default for A2aCardFilter {
    fn default() -> Self {
        A2aCardFilter {
            cache: ParamCache::new(KEYS),
        }
    }
}

/// True for an agent card.
fn is_card(v: &Value) -> bool {
    v.get("skills").is_some_and(Value::is_array) && v.get("name").is_some_and(Value::is_string)
}

/// `raw` moved under `public`: its scheme, host and port replaced, and
/// `public`'s path put before its own.
fn rewrite(raw: &str, public: &Url) -> Option<String> {
    let u = Url::parse(raw).ok()?;
    let mut out = public.clone();
    let base = public.path().trim_end_matches('/');
    out.set_path(&format!("{base}{}", u.path()));
    out.set_query(u.query());
    Some(out.to_string())
}

/// What was done to a card.
#[derive(Debug, Default, PartialEq)]
struct Changes {
    shown: usize,
    hidden: usize,
    urls: usize,
}

/// Filters and rewrites `card` in place.
fn apply(cfg: &CardParams, caller: &Caller, card: &mut Value) -> Changes {
    let mut c = Changes::default();
    if let Some(Value::Array(skills)) = card.get_mut("skills") {
        let before = skills.len();
        skills.retain(|s| {
            let Some(id) = s.get("id").and_then(Value::as_str) else {
                return false;
            };
            SEND_METHODS
                .iter()
                .any(|m| cfg.rules.decide(m, Some(id), caller).callable())
        });
        c.shown = skills.len();
        c.hidden = before - skills.len();
    }
    if let Some(public) = &cfg.public_url {
        let mut urls: Vec<&mut Value> = Vec::new();
        let Value::Object(obj) = card else {
            return c;
        };
        for (key, v) in obj.iter_mut() {
            match (key.as_str(), v) {
                ("url", u @ Value::String(_)) => urls.push(u),
                (
                    "supportedInterfaces" | "supported_interfaces" | "additionalInterfaces" | "additional_interfaces",
                    Value::Array(items),
                ) => urls.extend(items.iter_mut().filter_map(|i| i.get_mut("url"))),
                _ => {}
            }
        }
        for u in urls {
            if let Some(new) = u.as_str().and_then(|raw| rewrite(raw, public)) {
                if u.as_str() != Some(new.as_str()) {
                    *u = Value::String(new);
                    c.urls += 1;
                }
            }
        }
    }
    if c.hidden + c.urls > 0 {
        if let Value::Object(obj) = card {
            obj.remove("signatures");
        }
    }
    c
}

impl Policy for A2aCardFilter {
    type Params = Params;
    // Declared as streaming event streams so that a route's streamed replies
    // (SendStreamingMessage) are not buffered for it: cards are JSON, and
    // events pass unchanged.
    describe! { name: NAME, params: KEYS, required: &["rules"], phases: Response, body: true, streams: true, events_only: true }

    async fn on_response_chunk(&self, _params: &Params, _ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        Ok(ChunkOutcome::pass())
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, CardParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        crate::tool::refuse_encoded(NAME, &ctx.response)?;
        let Some(mut doc) = ctx
            .response
            .body()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        else {
            return Ok(ResponseOutcome::proceed());
        };
        let card = if doc.get("jsonrpc").is_some() {
            doc.get_mut("result").filter(|r| is_card(r))
        } else if is_card(&doc) {
            Some(&mut doc)
        } else {
            None
        };
        let Some(card) = card else {
            return Ok(ResponseOutcome::proceed());
        };
        let caller = Caller::from_metadata(ctx.metadata);
        let c = apply(&cfg, &caller, card);
        let out = ResponseOutcome::proceed()
            .set_metadata("a2a.card_skills", c.shown.to_string())
            .set_metadata("a2a.card_skills_hidden", c.hidden.to_string())
            .set_metadata("a2a.card_urls_rewritten", c.urls.to_string());
        if c.hidden + c.urls == 0 {
            return Ok(out);
        }
        let ct = ctx
            .response
            .header("content-type")
            .unwrap_or("application/json")
            .to_string();
        Ok(out.set_body_with_type(doc.to_string(), ct))
    }
}

#[cfg(test)]
#[path = "card_tests.rs"]
mod tests;
