use super::*;

fn check(raw: &str) -> Result<(), UrlViolation> {
    check_url(raw, &[], &[])
}

#[test]
fn the_issues_ssrf_cases_are_refused() {
    for raw in [
        "http://169.254.169.254/",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1:8080/",
    ] {
        assert_eq!(check(raw), Err(UrlViolation::PrivateAddress), "{raw}");
    }
}

#[test]
fn private_and_special_ranges_are_refused() {
    for raw in [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://0177.0.0.1/",
        "http://0x7f000001/",
        "http://017700000001/",
        "http://0/",
        "http://0.0.0.0/",
        "http://172.16.0.1/",
        "http://172.31.255.255/",
        "http://192.168.1.1/",
        "https://10.1.2.3/",
        "http://100.64.0.1/",
        "http://[::1]/",
        "http://[::]/",
        "http://[fc00::1]/",
        "http://[fd12:3456::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::ffff:8.8.8.8]/",
        "http://[::127.0.0.1]/",
        "http://localhost/",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "http://127.0.0.1./",
    ] {
        assert_eq!(check(raw), Err(UrlViolation::PrivateAddress), "{raw}");
    }
}

#[test]
fn public_addresses_on_default_ports_pass() {
    for raw in [
        "http://93.184.215.14/",
        "https://example.com/path?q=1",
        "http://example.com:8080/",
        "https://example.com:8443/",
        "http://[2606:4700::1111]/",
        "http://172.32.0.1/",
        "http://8.8.8.8/",
    ] {
        assert_eq!(check(raw), Ok(()), "{raw}");
    }
}

#[test]
fn schemes_ports_credentials_and_odd_characters() {
    assert_eq!(check("file:///etc/passwd"), Err(UrlViolation::Scheme));
    assert_eq!(check("gopher://example.com/"), Err(UrlViolation::Scheme));
    assert_eq!(check("ftp://example.com/"), Err(UrlViolation::Scheme));
    assert_eq!(check("http://example.com:22/"), Err(UrlViolation::Port));
    assert_eq!(check("http://example.com:6379/"), Err(UrlViolation::Port));
    assert_eq!(check_url("http://example.com:9000/", &[], &[9000]), Ok(()));
    assert_eq!(check("http://user:pw@example.com/"), Err(UrlViolation::Credentials));
    assert_eq!(check("http://example.com@127.0.0.1/"), Err(UrlViolation::Credentials));
    assert_eq!(check("http://example.com\\@127.0.0.1/"), Err(UrlViolation::NotAUrl));
    assert_eq!(check("http://exa\tmple.com/"), Err(UrlViolation::NotAUrl));
    assert_eq!(check(" http://example.com/"), Err(UrlViolation::NotAUrl));
    assert_eq!(check("/relative"), Err(UrlViolation::NotAUrl));
    assert_eq!(check("http://256.256.256.256/"), Err(UrlViolation::NotAUrl));
    assert_eq!(check(""), Err(UrlViolation::NotAUrl));
}

#[test]
fn allowed_hosts_are_exact_or_subdomains() {
    let hosts: Vec<HostPattern> = ["api.example.com", "*.docs.example.org"]
        .iter()
        .filter_map(|h| HostPattern::parse(h))
        .collect();
    assert_eq!(check_url("https://api.example.com/x", &hosts, &[]), Ok(()));
    assert_eq!(check_url("https://API.example.com./x", &hosts, &[]), Ok(()));
    assert_eq!(check_url("https://v1.docs.example.org/", &hosts, &[]), Ok(()));
    assert_eq!(
        check_url("https://docs.example.org/", &hosts, &[]),
        Err(UrlViolation::Host)
    );
    assert_eq!(
        check_url("https://evildocs.example.org/", &hosts, &[]),
        Err(UrlViolation::Host)
    );
    assert_eq!(check_url("https://example.com/", &hosts, &[]), Err(UrlViolation::Host));
    // SSRF rules apply even to an allowed host written as an address.
    let ip = [HostPattern::parse("10.0.0.1").unwrap()];
    assert_eq!(
        check_url("http://10.0.0.1/", &ip, &[]),
        Err(UrlViolation::PrivateAddress)
    );
    assert!(HostPattern::parse("*").is_none() && HostPattern::parse("").is_none());
    assert!(HostPattern::parse("a.*.com").is_none());
}

#[test]
fn numeric_hosts_decode_like_whatwg() {
    let v4 = |s: &str| numeric_ipv4(s).map(|r| r.map(|ip| ip.to_string()));
    assert_eq!(v4("2130706433"), Some(Ok("127.0.0.1".into())));
    assert_eq!(v4("0x7f.1"), Some(Ok("127.0.0.1".into())));
    assert_eq!(v4("0177.0.0.1"), Some(Ok("127.0.0.1".into())));
    assert_eq!(v4("0x7F.0.0.0x1"), Some(Ok("127.0.0.1".into())));
    assert_eq!(v4("169.254.43518"), Some(Ok("169.254.169.254".into())));
    assert_eq!(v4("10.1"), Some(Ok("10.0.0.1".into())));
    assert_eq!(v4("0x"), Some(Ok("0.0.0.0".into())));
    assert_eq!(v4("1.2.3.4."), Some(Ok("1.2.3.4".into())));
    assert_eq!(v4("4294967296"), Some(Err(())));
    assert_eq!(v4("256.1.1.1"), Some(Err(())));
    assert_eq!(v4("1.2.3.4.5"), Some(Err(())));
    assert_eq!(v4("99999999999999999999999999999999999"), Some(Err(())));
    assert_eq!(v4("example.com"), None);
    assert_eq!(v4("1.2.3.com"), None);
    assert_eq!(v4("08"), Some(Err(())));
    // The url crate agrees on every decodable case.
    for host in ["2130706433", "0x7f.1", "0177.0.0.1", "169.254.43518", "10.1"] {
        let url = Url::parse(&format!("http://{host}/")).unwrap();
        let ours = numeric_ipv4(host).unwrap().unwrap();
        assert_eq!(url.host(), Some(Host::Ipv4(ours)), "{host}");
    }
}

proptest::proptest! {
    /// Whatever the string, an accepted URL is http(s), on an allowed port,
    /// and its host is not a blocked address, by the url crate's reading.
    #[test]
    fn accepted_urls_hold_the_ssrf_rules(
        scheme in "(http|https|ftp|file|HTTP)",
        host in "([0-9]{1,10}|0x[0-9a-f]{1,8}|[0-9]{1,3}(\\.[0-9]{1,3}){1,3}|\\[[0-9a-f:.]{2,30}\\]|[a-z]{1,8}(\\.[a-z]{1,5})?|localhost)",
        port in proptest::option::of(0u32..70000),
        path in "(/[a-z.%0-9]{0,6}){0,3}",
    ) {
        let raw = match port {
            Some(p) => format!("{scheme}://{host}:{p}{path}"),
            None => format!("{scheme}://{host}{path}"),
        };
        if check_url(&raw, &[], &[]).is_ok() {
            let url = Url::parse(&raw).unwrap();
            proptest::prop_assert!(matches!(url.scheme(), "http" | "https"));
            proptest::prop_assert!(DEFAULT_PORTS.contains(&url.port_or_known_default().unwrap()));
            match url.host() {
                Some(Host::Ipv4(ip)) => proptest::prop_assert!(!blocked_ip(ip.into()), "{raw}"),
                Some(Host::Ipv6(ip)) => proptest::prop_assert!(!blocked_ip(ip.into()), "{raw}"),
                Some(Host::Domain(d)) => proptest::prop_assert!(!d.contains("localhost"), "{raw}"),
                None => proptest::prop_assert!(false, "no host: {raw}"),
            }
        }
    }
}
