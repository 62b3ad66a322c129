//! `addSecurityHeaders`: sets the headers of the `headers` parameter, a
//! block of `Name: value` lines (values may be quoted) or a JSON object.

use policy_agents::header_name;
use policy_agents::{
    describe, FromParams, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome, ResponseContext,
    ResponseOutcome,
};

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

fn check(name: &str, value: &str) -> Result<(String, String), String> {
    let lower = header_name(name.trim()).map_err(|e| e.to_string())?;
    if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(format!("value of {name} contains CR, LF or NUL"));
    }
    Ok((lower, value.to_string()))
}

/// Parses a header block: `Name: "value"` lines (blank lines and `#`
/// comments skipped) or a JSON object of names to values.
pub fn parse_header_block(raw: &str) -> Result<Vec<(String, String)>, String> {
    let trimmed = raw.trim();
    if trimmed.starts_with('{') {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(trimmed).map_err(|e| format!("bad JSON object: {e}"))?;
        return map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => check(k, s),
                other => check(k, &other.to_string()),
            })
            .collect();
    }
    let mut out = Vec::new();
    for line in trimmed.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("line {line:?} is not `Name: value`"))?;
        out.push(check(name, unquote(value))?);
    }
    if out.is_empty() {
        return Err("no header given".to_string());
    }
    Ok(out)
}

/// Parameters of `addSecurityHeaders`.
#[derive(Debug, Clone)]
pub struct HeaderParams {
    headers: Vec<(String, String)>,
}

impl FromParams for HeaderParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let raw = p.required("headers")?;
        let headers = parse_header_block(raw).map_err(|e| ParamError::invalid("headers", raw, e))?;
        Ok(HeaderParams { headers })
    }
}

/// The `addSecurityHeaders` policy.
#[derive(Debug, Clone, Default)]
pub struct AddSecurityHeaders;

impl Policy for AddSecurityHeaders {
    type Params = HeaderParams;
    describe! { name: "addSecurityHeaders", params: &["headers"], phases: Both }

    async fn on_request(
        &self,
        params: &HeaderParams,
        _ctx: &RequestContext<'_>,
    ) -> Result<RequestOutcome, PolicyError> {
        let out = params
            .headers
            .iter()
            .fold(RequestOutcome::proceed(), |o, (n, v)| o.set_header(n, v));
        Ok(out)
    }

    async fn on_response(
        &self,
        params: &HeaderParams,
        _ctx: &ResponseContext<'_>,
    ) -> Result<ResponseOutcome, PolicyError> {
        let out = params
            .headers
            .iter()
            .fold(ResponseOutcome::proceed(), |o, (n, v)| o.set_header(n, v));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest, TestResponse};

    #[test]
    fn parses_quoted_unquoted_and_json_blocks() {
        let block = "X-Content-Type-Options: \"nosniff\"\n# comment\n\nX-Frame-Options: DENY\nContent-Security-Policy: \"default-src 'self'\"\nStrict-Transport-Security: max-age=63072000; includeSubDomains\n";
        let parsed = parse_header_block(block).unwrap();
        assert_eq!(parsed[0], ("x-content-type-options".into(), "nosniff".into()));
        assert_eq!(parsed[1], ("x-frame-options".into(), "DENY".into()));
        assert_eq!(parsed[2].1, "default-src 'self'");
        assert_eq!(parsed[3].1, "max-age=63072000; includeSubDomains");
        let json = parse_header_block(r#"{"X-Frame-Options":"DENY"}"#).unwrap();
        assert_eq!(json, [("x-frame-options".to_string(), "DENY".to_string())]);
    }

    #[test]
    fn rejects_bad_blocks() {
        assert!(parse_header_block("no colon here").is_err());
        assert!(parse_header_block("Bad Name: x").is_err());
        assert!(parse_header_block(":path: /x").is_err());
        assert!(parse_header_block("  \n# only comments\n").is_err());
    }

    #[tokio::test]
    async fn sets_headers_in_both_phases() {
        let call = TestCall::new().params(&[("headers", "X-Frame-Options: \"DENY\"")]);
        let req = TestRequest::new("GET", "/");
        let resp = call
            .response(&AddSecurityHeaders, &req, &TestResponse::new(200))
            .await
            .unwrap();
        assert_eq!(resp.header_set("x-frame-options"), Some("DENY"));
        let out = call.request(&AddSecurityHeaders, &req).await.unwrap();
        assert_eq!(out.header_set("x-frame-options"), Some("DENY"));
        let bad = TestCall::new().params(&[("headers", "oops")]);
        assert!(bad.request(&AddSecurityHeaders, &req).await.is_err());
    }
}
