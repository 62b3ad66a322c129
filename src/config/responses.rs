//! The configured immediate answers (`policy_not_supported_response` and the
//! four others): their type, defaults and checks.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{invalid, ConfigError};
use crate::http::{valid_header_name, valid_header_value};

/// A configured immediate response. When the section is given, `status_code`
/// is required; `body` defaults to empty and `headers` to none.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseConfig {
    /// HTTP status, 200-599.
    pub status_code: u16,
    /// Body, sent as is.
    #[serde(default)]
    pub body: String,
    /// Headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl ResponseConfig {
    fn json(status: u16, body: &str, headers: &[(&str, &str)]) -> Self {
        let mut h: BTreeMap<String, String> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        h.insert("Content-Type".into(), "application/json".into());
        Self {
            status_code: status,
            body: body.into(),
            headers: h,
        }
    }
    /// Default `policy_not_supported_response`.
    pub fn not_supported_default() -> Self {
        Self::json(
            500,
            r#"{"error": "Policy configuration error", "code": "POLICY_NOT_SUPPORTED"}"#,
            &[("X-Policy-Error", "configuration")],
        )
    }
    /// Default `agent_unavailable_response`.
    pub fn unavailable_default() -> Self {
        Self::json(
            503,
            r#"{"error": "Policy service temporarily unavailable", "code": "AGENT_UNAVAILABLE"}"#,
            &[("X-Policy-Error", "temporary"), ("Retry-After", "30")],
        )
    }
    /// Default `overload_response`.
    pub fn overload_default() -> Self {
        Self::json(
            503,
            r#"{"error": "Policy service overloaded", "code": "OVERLOADED"}"#,
            &[("Retry-After", "1")],
        )
    }
    /// Default `payload_too_large_response`.
    pub fn too_large_default() -> Self {
        Self::json(
            413,
            r#"{"error": "Request body too large", "code": "PAYLOAD_TOO_LARGE"}"#,
            &[],
        )
    }
    /// Default `policy_failure_response`.
    pub fn failure_default() -> Self {
        Self::json(
            500,
            r#"{"error": "Policy execution failed", "code": "POLICY_EXECUTION_FAILED"}"#,
            &[],
        )
    }
}

impl ResponseConfig {
    pub(super) fn validate(&self, f: &str) -> Result<(), ConfigError> {
        if !(200..=599).contains(&self.status_code) {
            return Err(invalid(format!("{f}.status_code"), "must be 200-599", None));
        }
        for (k, v) in &self.headers {
            if !valid_header_name(k.as_bytes()) || k.starts_with(':') {
                return Err(invalid(format!("{f}.headers.{k}"), "not a header name", None));
            }
            if !valid_header_value(v.as_bytes()) {
                return Err(invalid(format!("{f}.headers.{k}"), "value holds CR, LF or NUL", None));
            }
        }
        Ok(())
    }
}
