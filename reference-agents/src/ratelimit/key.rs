//! Which requests share a limit: the `key` parameter.

use policy_agents::{Metadata, ParamError, RequestView};

/// The `key` parameter: `client_ip`, `header:<name>` or `metadata:<key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpec {
    /// The client IP (the default).
    ClientIp,
    /// The value of a request header.
    Header(String),
    /// The value of a metadata key (for example `consumer` or `sub`).
    Metadata(String),
}

impl KeySpec {
    /// Parses the `key` parameter; absent means `client_ip`.
    pub fn parse(raw: Option<&str>) -> Result<Self, ParamError> {
        let raw = raw.map(str::trim).unwrap_or("client_ip");
        let bad = |why: &str| ParamError::invalid("key", raw, why);
        match raw.split_once(':') {
            None if raw == "client_ip" || raw.is_empty() => Ok(KeySpec::ClientIp),
            Some(("header", name)) if !name.trim().is_empty() => Ok(KeySpec::Header(name.trim().to_ascii_lowercase())),
            Some(("metadata", key)) if !key.trim().is_empty() => Ok(KeySpec::Metadata(key.trim().to_string())),
            _ => Err(bad("expected client_ip, header:<name> or metadata:<key>")),
        }
    }

    /// The key of a request: `<spec>=<value>`, with `-` when the value is missing.
    pub fn resolve(&self, request: &RequestView<'_>, metadata: &Metadata) -> String {
        let (kind, value) = match self {
            KeySpec::ClientIp => ("ip", request.client_ip()),
            KeySpec::Header(name) => (name.as_str(), request.header(name)),
            KeySpec::Metadata(key) => (key.as_str(), metadata.get(key)),
        };
        let tag = match self {
            KeySpec::ClientIp => "c",
            KeySpec::Header(_) => "h",
            KeySpec::Metadata(_) => "m",
        };
        format!("{tag}:{kind}={}", value.unwrap_or("-"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::TestRequest;

    #[test]
    fn parses_and_resolves_keys() {
        let req = TestRequest::new("GET", "/")
            .header("X-Tenant", "t1")
            .client_ip("10.0.0.1");
        let view = RequestView::new(req.data());
        let md: Metadata = [("consumer", "alice")].into_iter().collect();
        let ip = KeySpec::parse(None).unwrap();
        assert_eq!(ip.resolve(&view, &md), "c:ip=10.0.0.1");
        let h = KeySpec::parse(Some("header:X-Tenant")).unwrap();
        assert_eq!(h.resolve(&view, &md), "h:x-tenant=t1");
        let m = KeySpec::parse(Some("metadata:consumer")).unwrap();
        assert_eq!(m.resolve(&view, &md), "m:consumer=alice");
        let missing = KeySpec::parse(Some("metadata:sub")).unwrap();
        assert_eq!(missing.resolve(&view, &md), "m:sub=-");
        assert!(KeySpec::parse(Some("cookie:x")).is_err());
        assert!(KeySpec::parse(Some("header:")).is_err());
    }
}
