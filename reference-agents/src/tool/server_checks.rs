//! The decision on one server-to-client request (`mcpServerRequestGuard`):
//! the route's rules per caller, then what the request asks for.
//!
//! * `ping` is always allowed (rule `always_allowed`);
//! * every other method (`sampling/createMessage`, `elicitation/create`,
//!   `roots/list`, anything a server invents) needs a rule that allows it
//!   for this caller: first match wins, default deny. For
//!   `elicitation/create` the rule's target (`tools`) is the mode, `form` or
//!   `url` (`form` when the request names none), so a route can allow forms
//!   and refuse URLs;
//! * an allowed form elicitation is refused when its `requestedSchema` asks
//!   for a field named (or titled) like a secret: password, passphrase,
//!   secret, token, API or access key, private key, card number, CVV/CVC,
//!   security code, SSN, PIN, OTP; unless the field's name is in
//!   `secret_fields_allowed` (rule `secret_field`);
//! * an allowed URL elicitation is refused when its `url` breaks the SSRF and
//!   host rules of tool arguments ([`check_url`]) with the route's
//!   `allowed_hosts` / `allowed_ports` (rule: the URL rule, e.g.
//!   `private_address`, `host_not_allowed`).

use serde_json::Value;

use super::urls::{check_url, HostPattern};
use crate::rules::{Caller, Rules};

/// Rule name of requests allowed whatever the rules say (`ping`).
pub const ALWAYS_ALLOWED: &str = "always_allowed";

/// What the checks need from the params.
#[derive(Debug)]
pub struct Checks {
    /// The rules, per method and caller.
    pub rules: Rules,
    /// Hosts a URL elicitation may point to (empty: any public host).
    pub allowed_hosts: Vec<HostPattern>,
    /// Ports allowed beyond the defaults.
    pub allowed_ports: Vec<u16>,
    /// Field names (normalised: lower case, letters and digits) that may
    /// be asked although they look like secrets.
    pub secret_fields_allowed: Vec<String>,
}

/// The decision on one server request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Allowed or not.
    pub allowed: bool,
    /// The rule that decided (a rule's name, `default_deny`, `secret_field`,
    /// a URL rule, `invalid_elicitation`).
    pub rule: String,
    /// What was refused, for the error's data (a field name; never a value).
    pub detail: Option<String>,
}

impl Verdict {
    fn allow(rule: &str) -> Self {
        Verdict {
            allowed: true,
            rule: rule.to_string(),
            detail: None,
        }
    }

    fn deny(rule: &str, detail: Option<String>) -> Self {
        Verdict {
            allowed: false,
            rule: rule.to_string(),
            detail,
        }
    }
}

/// Letters and digits of `name`, lower-cased (`API-Key` -> `apikey`).
pub fn normalise(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Parts of a name that name a secret anywhere in it.
const SECRET_PARTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "cardnumber",
    "creditcard",
    "cardno",
    "securitycode",
    "socialsecurity",
];

/// Words that name a secret only as a whole word (`pin`, not `shipping`).
const SECRET_WORDS: &[&str] = &["pin", "otp", "cvv", "cvc", "ssn", "pwd", "totp", "mfa"];

/// The words of a name: split at non-alphanumerics and lower-to-upper case
/// changes (`cardPin` -> `card`, `pin`).
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            out.push(std::mem::take(&mut cur));
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    out.push(cur);
    out.retain(|w| !w.is_empty());
    out
}

/// True when `name` reads like a secret.
pub fn looks_secret(name: &str) -> bool {
    let flat = normalise(name);
    SECRET_PARTS.iter().any(|p| flat.contains(p)) || words(name).iter().any(|w| SECRET_WORDS.contains(&w.as_str()))
}

/// The first field of a form schema that asks for a secret, if any.
fn secret_field<'a>(checks: &Checks, schema: &'a Value) -> Option<&'a str> {
    let props = schema.get("properties")?.as_object()?;
    props.iter().find_map(|(name, field)| {
        let title = field.get("title").and_then(Value::as_str).unwrap_or_default();
        let description = field.get("format").and_then(Value::as_str).unwrap_or_default();
        let secret = looks_secret(name) || looks_secret(title) || description == "password";
        (secret && !checks.secret_fields_allowed.contains(&normalise(name))).then_some(name.as_str())
    })
}

/// Decides one server request of `method` with `params` for `caller`.
pub fn decide(checks: &Checks, caller: &Caller, method: &str, params: Option<&Value>) -> Verdict {
    if method == "ping" {
        return Verdict::allow(ALWAYS_ALLOWED);
    }
    let mode = if method == "elicitation/create" {
        match params.and_then(|p| p.get("mode")) {
            None => Some("form"),
            Some(Value::String(m)) if m == "form" || m == "url" => Some(m.as_str()),
            Some(_) => return Verdict::deny("invalid_elicitation", Some("mode".into())),
        }
    } else {
        None
    };
    let d = checks.rules.decide(method, mode, caller);
    if !d.allowed {
        return Verdict::deny(d.rule, None);
    }
    match mode {
        Some("form") => {
            let Some(schema) = params.and_then(|p| p.get("requestedSchema")).filter(|s| s.is_object()) else {
                return Verdict::deny("invalid_elicitation", Some("requestedSchema".into()));
            };
            if let Some(field) = secret_field(checks, schema) {
                return Verdict::deny("secret_field", Some(super::metadata_text(field)));
            }
        }
        Some(_) => {
            let Some(url) = params.and_then(|p| p.get("url")).and_then(Value::as_str) else {
                return Verdict::deny("invalid_elicitation", Some("url".into()));
            };
            if let Err(v) = check_url(url, &checks.allowed_hosts, &checks.allowed_ports) {
                return Verdict::deny(v.rule(), Some("url".into()));
            }
        }
        None => {}
    }
    Verdict::allow(d.rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checks(allowed_secrets: &[&str]) -> Checks {
        let rules = r#"[
            {"name": "no-url-for-readers", "effect": "deny", "methods": ["elicitation/create"], "tools": ["url"], "when": {"roles_any": ["reader"]}},
            {"name": "ask", "effect": "allow", "methods": ["elicitation/create", "roots/list"]},
            {"name": "sample", "effect": "allow", "methods": ["sampling/createMessage"], "when": {"roles_any": ["admin"]}}
        ]"#;
        Checks {
            rules: Rules::parse("rules", rules).unwrap(),
            allowed_hosts: vec![HostPattern::parse("*.example.com").unwrap()],
            allowed_ports: vec![],
            secret_fields_allowed: allowed_secrets.iter().map(|s| normalise(s)).collect(),
        }
    }

    fn caller(role: &str) -> Caller {
        Caller {
            roles: vec![role.to_string()],
            ..Caller::default()
        }
    }

    fn form(fields: Value) -> Value {
        json!({"message": "?", "requestedSchema": {"type": "object", "properties": fields}})
    }

    #[test]
    fn methods_are_decided_per_caller() {
        let c = checks(&[]);
        let d = decide(&c, &caller("admin"), "sampling/createMessage", Some(&json!({})));
        assert_eq!((d.allowed, d.rule.as_str()), (true, "sample"));
        let d = decide(&c, &caller("reader"), "sampling/createMessage", None);
        assert_eq!((d.allowed, d.rule.as_str()), (false, "default_deny"));
        assert!(decide(&c, &caller("reader"), "roots/list", None).allowed);
        assert!(decide(&c, &Caller::default(), "ping", None).allowed);
        assert!(!decide(&c, &caller("admin"), "x/unknown", None).allowed);
    }

    #[test]
    fn forms_asking_for_secrets_are_refused_unless_allowed() {
        let c = checks(&["api_key"]);
        let who = caller("admin");
        let ok = form(json!({"name": {"type": "string"}, "shipping": {"type": "string"}}));
        assert!(decide(&c, &who, "elicitation/create", Some(&ok)).allowed);
        for (field, spec) in [
            ("password", json!({"type": "string"})),
            ("githubToken", json!({"type": "string"})),
            ("card_number", json!({"type": "string"})),
            ("cardPin", json!({"type": "string"})),
            ("x", json!({"type": "string", "title": "Credit card"})),
            ("y", json!({"type": "string", "format": "password"})),
        ] {
            let d = decide(&c, &who, "elicitation/create", Some(&form(json!({field: spec}))));
            assert_eq!((d.allowed, d.rule.as_str()), (false, "secret_field"), "{field}");
            assert_eq!(d.detail.as_deref(), Some(field));
        }
        let allowed = form(json!({"apiKey": {"type": "string"}}));
        assert!(decide(&c, &who, "elicitation/create", Some(&allowed)).allowed);
        let no_schema = json!({"message": "?"});
        assert_eq!(
            decide(&c, &who, "elicitation/create", Some(&no_schema)).rule,
            "invalid_elicitation"
        );
    }

    #[test]
    fn url_elicitations_follow_the_url_rules() {
        let c = checks(&[]);
        let who = caller("admin");
        let url = |u: &str| json!({"mode": "url", "message": "?", "url": u, "elicitationId": "e1"});
        assert!(
            decide(
                &c,
                &who,
                "elicitation/create",
                Some(&url("https://login.example.com/x"))
            )
            .allowed
        );
        let d = decide(&c, &who, "elicitation/create", Some(&url("http://127.0.0.1/x")));
        assert_eq!(d.rule, "private_address");
        let d = decide(&c, &who, "elicitation/create", Some(&url("https://evil.test/x")));
        assert_eq!(d.rule, "host_not_allowed");
        let d = decide(
            &c,
            &caller("reader"),
            "elicitation/create",
            Some(&url("https://login.example.com/")),
        );
        assert_eq!((d.allowed, d.rule.as_str()), (false, "no-url-for-readers"));
        let d = decide(&c, &who, "elicitation/create", Some(&json!({"mode": 3})));
        assert_eq!(d.rule, "invalid_elicitation");
    }
}
