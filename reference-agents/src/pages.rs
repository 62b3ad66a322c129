//! The pages the agents serve themselves (the approvals page, the connect
//! and connections pages): one set of response headers, so each is served
//! without framing, sniffing, referrers or caching, under its own
//! content security policy; and HTML escaping for what they show.

use policy_agents::Deny;

/// The content security policy of a page with one inline script that
/// fetches only its own origin and posts no form.
pub const CSP_SCRIPT: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
/// The content security policy of a page without script whose forms post
/// to its own origin.
pub const CSP_FORMS: &str =
    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// `html` with `status`, under `csp`, answered by the agent (`reason` in
/// the kernel's metadata).
pub fn page(status: u16, html: impl Into<String>, csp: &str, reason: &str) -> Deny {
    Deny::new(status, html.into())
        .header("content-type", "text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .header("content-security-policy", csp)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .reason(reason)
}

/// The base path of a page-serving policy's param `base_path` (`default`
/// when unset): absolute, no trailing `/`; an error naming `policy`.
pub fn base_path(p: &policy_agents::Params, default: &str, policy: &str) -> Result<String, policy_agents::PolicyError> {
    let b = p.get("base_path").map(str::trim).unwrap_or(default);
    if !b.starts_with('/') || b.contains(['?', '#']) {
        return Err(policy_agents::PolicyError::new(format!(
            "{policy}: param `base_path` must be an absolute path, got {b:?}"
        )));
    }
    Ok(b.trim_end_matches('/').to_string())
}

/// `given` (a page's URL from a param), else `{scheme}://{authority}{path}`
/// of the request: where the person's browser reaches the page.
pub fn page_url(given: Option<&str>, request: &policy_agents::RequestView<'_>, path: &str) -> String {
    match given.map(str::trim).filter(|s| !s.is_empty()) {
        Some(u) => u.to_string(),
        None => {
            let scheme = match request.scheme() {
                "" => "http",
                s => s,
            };
            format!("{scheme}://{}{path}", request.authority())
        }
    }
}

/// `s` safe in HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_is_escaped_for_html() {
        assert_eq!(
            super::escape(r#"<b a="x">'&'</b>"#),
            "&lt;b a=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/b&gt;"
        );
    }
}
