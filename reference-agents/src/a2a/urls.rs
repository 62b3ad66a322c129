//! `a2aUrlGuard`: the URLs a caller hands an agent.
//!
//! Request phase, with the body. A send's push-notification URL
//! (`configuration.taskPushNotificationConfig.url`, 0.3
//! `pushNotificationConfig.url`), the URL of `CreateTaskPushNotificationConfig`
//! (0.3 `tasks/pushNotificationConfig/set`), and the URLs of a message's
//! file parts (`parts[].url`, 0.3 `parts[].file.uri`) are URLs the agent
//! will fetch or call: they go through the SSRF rules of
//! `toolArgumentGuard` (always: http(s) only, no loopback, private,
//! link-local or metadata address, numeric hosts decoded, the usual ports
//! unless `allowed_ports` says more) and, when set, `allowed_hosts`
//! (`example.com`, `*.example.com`). `check_file_urls: false` leaves file
//! parts alone.
//!
//! A refused URL refuses the call (JSON-RPC denial / HTTP 403, reason
//! `URL_NOT_ALLOWED`, ErrorInfo metadata `field` and `rule`; the URL itself
//! is not echoed).
//!
//! Metadata: `a2a.url_decision` (`allow`/`deny`), `a2a.url_rule`,
//! `a2a.url_field` (`push_url`, `file_url`), `a2a.urls_checked`.

use serde_json::json;

use super::authorize::unreadable;
use super::call::Call;
use super::errors::{self, Kind, Refusal};
use super::{denial, unknown_fields};
use crate::param_cache::ParamCache;
use crate::tool::deny::config_error;
use crate::tool::urls::{check_url, HostPattern};
use crate::tool::Style;
use policy_agents::{describe, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "a2aUrlGuard";
const KEYS: &[&str] = &[
    "allowed_hosts",
    "allowed_ports",
    "check_file_urls",
    "denial",
    "jsonrpc_error_code",
    "unknown_fields",
];

/// Parsed params.
#[derive(Debug)]
struct UrlParams {
    hosts: Vec<HostPattern>,
    ports: Vec<u16>,
    files: bool,
    style: Style,
    code: i64,
    strict: bool,
}

impl UrlParams {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let mut hosts = Vec::new();
        for h in p.list("allowed_hosts")? {
            hosts.push(
                HostPattern::parse(&h).ok_or_else(|| ParamError::invalid("allowed_hosts", &h, "bad host pattern"))?,
            );
        }
        let mut ports = Vec::new();
        for port in p.list("allowed_ports")? {
            ports.push(
                port.parse()
                    .map_err(|_| ParamError::invalid("allowed_ports", &port, "expected a port number"))?,
            );
        }
        Ok(UrlParams {
            hosts,
            ports,
            files: p.bool_or("check_file_urls", true)?,
            style: denial(p)?,
            code: p.parse_or("jsonrpc_error_code", errors::DENIED)?,
            strict: unknown_fields(p)?,
        })
    }
}

/// The `a2aUrlGuard` policy.
pub struct A2aUrlGuard {
    cache: ParamCache<UrlParams>,
}

impl Default for A2aUrlGuard {
    fn default() -> Self {
        A2aUrlGuard {
            cache: ParamCache::new(KEYS),
        }
    }
}

impl Policy for A2aUrlGuard {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, UrlParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let call = match Call::of(&ctx.request, cfg.strict) {
            Ok(c) => c,
            Err(u) => return Ok(unreadable(&u, cfg.style, cfg.code)),
        };
        let mut urls: Vec<(&str, &str)> = call.push_urls().into_iter().map(|u| ("push_url", u)).collect();
        if cfg.files {
            urls.extend(call.file_urls().into_iter().map(|u| ("file_url", u)));
        }
        for (field, url) in &urls {
            if let Err(v) = check_url(url, &cfg.hosts, &cfg.ports) {
                let rule = v.rule();
                tracing::info!(policy = NAME, request_id = %ctx.call.request_id, field, rule, "A2A URL refused");
                let r = Refusal {
                    kind: Kind::Denied,
                    reason: "URL_NOT_ALLOWED",
                    message: format!("the {} is not allowed ({rule})", field.replace('_', " ")),
                    metadata: json!({"field": field, "rule": rule}),
                };
                return Ok(
                    RequestOutcome::denied_with(errors::render(&call.binding, cfg.style, cfg.code, &r))
                        .set_metadata("a2a.url_decision", "deny")
                        .set_metadata("a2a.url_rule", rule)
                        .set_metadata("a2a.url_field", *field)
                        .set_metadata("a2a.urls_checked", urls.len().to_string()),
                );
            }
        }
        Ok(RequestOutcome::proceed()
            .set_metadata("a2a.url_decision", "allow")
            .set_metadata("a2a.urls_checked", urls.len().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest};

    fn send(config: serde_json::Value, parts: serde_json::Value) -> TestRequest {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}, "configuration": config}});
        post("/", body)
    }

    fn post(path: &str, body: serde_json::Value) -> TestRequest {
        TestRequest::new("POST", path)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    #[tokio::test]
    async fn private_push_urls_and_file_urls_are_refused() {
        let p = A2aUrlGuard::default();
        let call = TestCall::new();
        let ok = send(
            json!({"taskPushNotificationConfig": {"url": "https://hooks.example.com/a2a"}}),
            json!([{"text": "hi"}]),
        );
        let out = call.request(&p, &ok).await.unwrap();
        assert!(out.denial().is_none());
        assert_eq!(out.metadata_value("a2a.urls_checked"), Some("1"));
        let metadata = send(
            json!({"taskPushNotificationConfig": {"url": "http://169.254.169.254/latest"}}),
            json!([]),
        );
        let out = call.request(&p, &metadata).await.unwrap();
        let d = out.denial().expect("refused");
        let b: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(b["error"]["data"][0]["reason"], "URL_NOT_ALLOWED");
        assert!(!b.to_string().contains("169.254"), "{b}");
        assert_eq!(out.metadata_value("a2a.url_field"), Some("push_url"));
        let file = send(
            json!({}),
            json!([{"url": "http://127.0.0.1:6379/", "mediaType": "text/plain"}]),
        );
        let out = call.request(&p, &file).await.unwrap();
        assert_eq!(out.metadata_value("a2a.url_field"), Some("file_url"));
        let off = TestCall::new().params(&[("check_file_urls", "false")]);
        assert!(off.request(&p, &file).await.unwrap().denial().is_none());
        // 0.3's JSON-RPC name, and HTTP+JSON.
        let set = post(
            "/",
            json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/pushNotificationConfig/set",
            "params": {"taskId": "t", "pushNotificationConfig": {"url": "http://10.0.0.5/hook"}}}),
        );
        assert!(call.request(&p, &set).await.unwrap().denial().is_some());
        let rest = post(
            "/rest/tasks/t1/pushNotificationConfigs",
            json!({"url": "http://localhost/hook"}),
        );
        let out = call.request(&p, &rest).await.unwrap();
        assert_eq!(out.denial().map(|d| d.status), Some(403));
    }
}
