//! Scenarios of the reference `range_test.go`.

use super::*;

fn raw(subnet: &str) -> RawRange {
    RawRange {
        subnet: Some(subnet.into()),
        ..Default::default()
    }
}

/// A range with the optional fields given (`Some("")` is kept: it means "the default").
fn with(subnet: &str, start: Option<&str>, end: Option<&str>, gateway: Option<&str>) -> RawRange {
    RawRange {
        subnet: Some(subnet.into()),
        range_start: start.map(Into::into),
        range_end: end.map(Into::into),
        gateway: gateway.map(Into::into),
    }
}

fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn canon(r: RawRange) -> Range {
    r.canonicalize().unwrap()
}

fn err(r: RawRange) -> String {
    r.canonicalize().unwrap_err().to_string()
}

#[test]
fn defaults_for_v4_and_v6() {
    let r = canon(raw("192.0.2.0/24"));
    assert_eq!(
        (r.start, r.end, r.gateway),
        (ipa("192.0.2.1"), ipa("192.0.2.254"), ipa("192.0.2.1"))
    );
    let r = canon(raw("192.0.2.0/25"));
    assert_eq!((r.start, r.end), (ipa("192.0.2.1"), ipa("192.0.2.126")));
    let r = canon(raw("2001:db8:1::/64"));
    assert_eq!(r.start, ipa("2001:db8:1::1"));
    assert_eq!(r.end, ipa("2001:db8:1:0:ffff:ffff:ffff:ffff"));
    assert_eq!(r.gateway, ipa("2001:db8:1::1"));
    assert_eq!(
        r.to_string(),
        "2001:db8:1::1-2001:db8:1:0:ffff:ffff:ffff:ffff"
    );
}

#[test]
fn host_bits_are_refused_with_the_network_address() {
    let cases = [
        (
            "192.0.2.1/24",
            "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0",
        ),
        (
            "192.0.3.0/23",
            "Network has host bits set. For a subnet mask of length 23 the network address is 192.0.2.0",
        ),
        (
            "2001:db8:1::1/64",
            "Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::",
        ),
        (
            "2001:db8:1:1::/63",
            "Network has host bits set. For a subnet mask of length 63 the network address is 2001:db8:1::",
        ),
    ];
    for (subnet, want) in cases {
        assert_eq!(err(raw(subnet)), want, "{subnet}");
    }
}

#[test]
fn too_small_and_missing_or_bad_subnets() {
    let cases = [
        (
            "192.0.2.0/31",
            "Network 192.0.2.0/31 too small to allocate from",
        ),
        (
            "192.0.2.0/32",
            "Network 192.0.2.0/32 too small to allocate from",
        ),
        (
            "2001:db8::/127",
            "Network 2001:db8::/127 too small to allocate from",
        ),
        ("192.0.2.0", "invalid CIDR address: 192.0.2.0"),
        ("::ffff:10.0.0.0/104", "IPNet IP and Mask version mismatch"),
    ];
    for (subnet, want) in cases {
        assert_eq!(err(raw(subnet)), want, "{subnet}");
    }
    assert!(raw("192.0.2.0/30").canonicalize().is_ok());
    assert_eq!(err(RawRange::default()), "IP <nil> not v4 nor v6");
}

#[test]
fn start_and_end_must_be_in_the_network() {
    let cases = [
        (
            with("192.0.2.0/24", Some("192.0.3.0"), None, None),
            "RangeStart 192.0.3.0 not in network 192.0.2.0/24",
        ),
        (
            with("192.0.2.0/24", None, Some("192.0.4.0"), None),
            "RangeEnd 192.0.4.0 not in network 192.0.2.0/24",
        ),
        // start after end reports the start, as the reference does
        (
            with("192.0.2.0/24", Some("192.0.2.50"), Some("192.0.2.40"), None),
            "RangeStart 192.0.2.50 not in network 192.0.2.0/24",
        ),
        (
            with("192.0.2.0/24", Some("2001:db8::1"), None, None),
            "RangeStart 2001:db8::1 not in network 192.0.2.0/24",
        ),
        // A start past the default end (the IPv4 broadcast) is a start after the end too.
        // The reference accepts it, hands out the broadcast address and then walks on out
        // of the subnet (10.1.3.0, 10.1.3.1, ... with gateway 10.1.2.1).
        (
            with("10.1.2.0/24", Some("10.1.2.255"), None, None),
            "RangeStart 10.1.2.255 not in network 10.1.2.0/24",
        ),
        (
            with("192.0.2.0/24", None, None, Some("bogus")),
            "invalid IP address: bogus",
        ),
    ];
    for (r, want) in cases {
        assert_eq!(err(r.clone()), want, "{r:?}");
    }
}

#[test]
fn all_fields_and_empty_strings() {
    let r = canon(with(
        "192.0.2.0/24",
        Some("192.0.2.40"),
        Some("192.0.2.50"),
        Some("192.0.2.254"),
    ));
    assert_eq!(
        (r.start, r.end, r.gateway),
        (ipa("192.0.2.40"), ipa("192.0.2.50"), ipa("192.0.2.254"))
    );
    assert_eq!(r.capacity(), 11);
    // the network address itself may be an explicit start
    let r = canon(with("192.0.2.0/24", Some("192.0.2.0"), Some(""), Some("")));
    assert_eq!(
        (r.start, r.end, r.gateway),
        (ipa("192.0.2.0"), ipa("192.0.2.254"), ipa("192.0.2.1"))
    );
    assert_eq!(r.capacity(), 254);
}

#[test]
fn contains_v4_and_v6() {
    let r = canon(raw("192.0.2.0/24"));
    assert!(!r.contains(ipa("192.0.2.0")));
    assert!(r.contains(ipa("192.0.2.1")));
    assert!(r.contains(ipa("192.0.2.254")));
    assert!(!r.contains(ipa("192.0.2.255")));
    assert!(!r.contains(ipa("192.0.3.1")));
    assert!(!r.contains(ipa("::1")));
    let r = canon(raw("2001:db8:1::/64"));
    assert!(!r.contains(ipa("2001:db8:1::")));
    assert!(r.contains(ipa("2001:db8:1::1")));
    assert!(r.contains(ipa("2001:db8:1:0:ffff:ffff:ffff:ffff")));
    assert!(!r.contains(ipa("2001:db8:2::1")));
    assert!(!r.contains(ipa("192.0.2.1")));
}

#[test]
fn overlap_table() {
    let range = |subnet: &str, start: Option<&str>, end: Option<&str>| {
        canon(with(subnet, start, end, None))
    };
    let cases = [
        (
            range("10.0.0.0/24", None, None),
            range("10.0.1.0/24", None, None),
            false,
        ),
        (
            range("0.0.0.0/24", None, None),
            range("::/24", None, None),
            false,
        ),
        (
            range("10.0.0.0/24", None, None),
            range("10.0.0.0/24", None, None),
            true,
        ),
        (
            range("10.0.0.0/20", None, None),
            range("10.0.1.0/24", None, None),
            true,
        ),
        (
            range("10.0.0.0/24", None, Some("10.0.0.127")),
            range("10.0.0.0/24", Some("10.0.0.128"), None),
            false,
        ),
        (
            range("10.0.0.0/24", None, Some("10.0.0.127")),
            range("10.0.0.0/24", Some("10.0.0.127"), None),
            true,
        ),
    ];
    for (a, b, want) in cases {
        assert_eq!(a.overlaps(&b), want, "{a} vs {b}");
        assert_eq!(b.overlaps(&a), want, "{b} vs {a}");
    }
}
