//! The tool agent's argument checks never panic, and what they accept holds:
//! an accepted path is under an allowed prefix once normalised, an accepted
//! URL is http(s) on an allowed port and not a blocked address.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reference_agents::tool::paths::{check_command, check_path, normalise, within};
use reference_agents::tool::urls::{blocked_ip, check_url, numeric_ipv4, DEFAULT_PORTS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let allowed = ["/srv/data".to_string()];
    if check_path(text, &allowed).is_ok() {
        let n = normalise(text).expect("an accepted path normalises");
        assert!(within(&n, "/srv/data"), "{text:?} -> {n:?}");
        assert!(!n.split('/').any(|s| s == ".."));
    }
    let _ = check_command(&[text], &["git".to_string()]);
    let _ = numeric_ipv4(text);
    if check_url(text, &[], &[]).is_ok() {
        let url = url::Url::parse(text).expect("an accepted URL parses");
        assert!(matches!(url.scheme(), "http" | "https"));
        assert!(DEFAULT_PORTS.contains(&url.port_or_known_default().unwrap_or(0)));
        match url.host() {
            Some(url::Host::Ipv4(ip)) => assert!(!blocked_ip(ip.into()), "{text:?}"),
            Some(url::Host::Ipv6(ip)) => assert!(!blocked_ip(ip.into()), "{text:?}"),
            _ => {}
        }
    }
});
