//! URL arguments: SSRF protection (always) and a host allowlist (optional).
//!
//! As the agent runtime's policy enforcer: `http` and `https` only; no
//! loopback, private (RFC 1918), link-local, unspecified (`0.0.0.0/8`),
//! IPv6 unique-local (`fc00::/7`) or IPv4-mapped/-compatible IPv6 address;
//! ports 80, 443, 8080 and 8443 unless the constraint allows more. A host
//! written as a number (`2130706433`, `0x7f.1`, `0177.0.0.1`) is decoded as
//! an IPv4 address before the check, by the WHATWG rules the `url` crate
//! also follows, and checked again here on its own so that the check does
//! not rest on one parser. Names are not resolved: a public name that
//! resolves to a private address (DNS rebinding) is the upstream's to
//! refuse, or use `allowed_hosts`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// Ports allowed without `allowed_ports`.
pub const DEFAULT_PORTS: [u16; 4] = [80, 443, 8080, 8443];

/// Why a URL was refused (the `rule` of the denial).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlViolation {
    /// Not an absolute URL, or characters a server could read differently.
    NotAUrl,
    /// Not `http` or `https`.
    Scheme,
    /// User name or password in the URL.
    Credentials,
    /// Loopback, private, link-local, unspecified or mapped address.
    PrivateAddress,
    /// A port outside the allowed ones.
    Port,
    /// A host outside `allowed_hosts`.
    Host,
}

impl UrlViolation {
    /// The rule name shown in denials and metadata.
    pub fn rule(self) -> &'static str {
        match self {
            UrlViolation::NotAUrl => "not_a_url",
            UrlViolation::Scheme => "scheme_not_allowed",
            UrlViolation::Credentials => "credentials_in_url",
            UrlViolation::PrivateAddress => "private_address",
            UrlViolation::Port => "port_not_allowed",
            UrlViolation::Host => "host_not_allowed",
        }
    }
}

/// An allowed host: `example.com` (exactly) or `*.example.com` (any subdomain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host only.
    Exact(String),
    /// Any name ending in `.suffix`.
    Subdomains(String),
}

impl HostPattern {
    /// Parses a pattern (lower-cased); `None` for an empty or malformed one.
    pub fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim().trim_end_matches('.').to_ascii_lowercase();
        match raw.strip_prefix("*.") {
            Some(rest) if !rest.is_empty() && !rest.contains('*') => Some(HostPattern::Subdomains(rest.to_string())),
            Some(_) => None,
            None if !raw.is_empty() && !raw.contains('*') => Some(HostPattern::Exact(raw)),
            None => None,
        }
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => h == host,
            HostPattern::Subdomains(s) => host
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

/// Decodes a host written as an IPv4 number, as the WHATWG URL standard
/// does: one to four dot-separated parts, each decimal, `0x` hex or
/// `0`-prefixed octal; the last part fills the remaining bytes.
/// `None` when the host is not numeric (a name), `Some(Err)` when it is
/// numeric but out of range.
pub fn numeric_ipv4(host: &str) -> Option<Result<Ipv4Addr, ()>> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    let parts: Vec<&str> = host.split('.').collect();
    // WHATWG "ends in a number": the last label is all digits, or 0x + hex digits.
    let last = *parts.last()?;
    fn hex(p: &str) -> Option<&str> {
        p.strip_prefix("0x").or_else(|| p.strip_prefix("0X"))
    }
    let number_like = match hex(last) {
        Some(h) => h.chars().all(|c| c.is_ascii_hexdigit()),
        None => !last.is_empty() && last.chars().all(|c| c.is_ascii_digit()),
    };
    if !number_like {
        return None;
    }
    if parts.len() > 4 {
        return Some(Err(()));
    }
    let parse = |p: &str| -> Option<u64> {
        let (digits, radix) = match hex(p) {
            Some(h) => (h, 16),
            None if p.len() > 1 && p.starts_with('0') => (&p[1..], 8),
            None => (p, 10),
        };
        if digits.is_empty() {
            // "0x" alone is zero; an empty label is not a number.
            return (radix == 16).then_some(0);
        }
        u64::from_str_radix(digits, radix).ok()
    };
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        match parse(p) {
            Some(n) => nums.push(n),
            None => return Some(Err(())),
        }
    }
    let (head, tail) = nums.split_at(nums.len() - 1);
    if head.iter().any(|&n| n > 255) {
        return Some(Err(()));
    }
    let tail = tail[0];
    let room = 8 * (5 - nums.len() as u32);
    if room < 64 && tail >= (1u64 << room) {
        return Some(Err(()));
    }
    let mut value = tail;
    for (i, &n) in head.iter().enumerate() {
        value += n << (8 * (3 - i as u32));
    }
    Some(u32::try_from(value).map(Ipv4Addr::from).map_err(|_| ()))
}

/// True for addresses a tool must never be sent to.
pub fn blocked_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || a == 0
        || ip.is_broadcast()
        || ip.is_multicast()
        // Shared address space (RFC 6598), often the cloud's own network.
        || (a == 100 && (64..128).contains(&b))
}

fn blocked_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fc00::/7 unique local, fe80::/10 link-local.
        || (seg[0] & 0xfe00) == 0xfc00
        || (seg[0] & 0xffc0) == 0xfe80
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated):
        // every such address is refused, whatever IPv4 address it holds.
        || seg[..5].iter().all(|&s| s == 0) && (seg[5] == 0xffff || seg[5] == 0)
        // NAT64 (64:ff9b::/96) reaches IPv4 space the same way.
        || (seg[0] == 0x64 && seg[1] == 0xff9b)
}

/// The authority part of a raw URL (between `//` and the path), if any.
fn raw_authority(raw: &str) -> Option<&str> {
    let rest = raw.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Checks one URL argument.
pub fn check_url(raw: &str, allowed_hosts: &[HostPattern], allowed_ports: &[u16]) -> Result<(), UrlViolation> {
    // Characters the WHATWG parser drops or reinterprets (tabs, newlines,
    // backslashes) and other parsers do not: refuse rather than guess.
    if raw.chars().any(|c| c.is_control() || c.is_whitespace() || c == '\\') {
        return Err(UrlViolation::NotAUrl);
    }
    if raw_authority(raw).is_some_and(|a| a.contains('@')) {
        return Err(UrlViolation::Credentials);
    }
    let url = Url::parse(raw).map_err(|_| UrlViolation::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlViolation::Scheme);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlViolation::Credentials);
    }
    let host_text = match url.host() {
        None => return Err(UrlViolation::NotAUrl),
        Some(Host::Ipv4(ip)) => {
            if blocked_v4(ip) {
                return Err(UrlViolation::PrivateAddress);
            }
            ip.to_string()
        }
        Some(Host::Ipv6(ip)) => {
            if blocked_v6(ip) {
                return Err(UrlViolation::PrivateAddress);
            }
            ip.to_string()
        }
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            match numeric_ipv4(&name) {
                Some(Ok(ip)) if blocked_v4(ip) => return Err(UrlViolation::PrivateAddress),
                Some(Err(())) => return Err(UrlViolation::NotAUrl),
                _ => {}
            }
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(UrlViolation::PrivateAddress);
            }
            name
        }
    };
    let port = url.port_or_known_default().ok_or(UrlViolation::Port)?;
    if !DEFAULT_PORTS.contains(&port) && !allowed_ports.contains(&port) {
        return Err(UrlViolation::Port);
    }
    if !allowed_hosts.is_empty() && !allowed_hosts.iter().any(|h| h.matches(&host_text)) {
        return Err(UrlViolation::Host);
    }
    Ok(())
}

#[cfg(test)]
#[path = "urls_tests.rs"]
mod tests;
