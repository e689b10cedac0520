//! Scenarios of the reference `allocator_test.go`, over the in-memory store.

use super::*;
use crate::range::RawRange;
use crate::store::Holder;
use crate::store::mem::MemStore;

fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn set(subnets: &[&str]) -> RangeSet {
    RangeSet::of_subnets(subnets)
}

fn att(id: &str) -> Attachment {
    Attachment::new(id, "eth0")
}

fn walk(set: &RangeSet, last: Option<&str>) -> Vec<String> {
    RangeIter::new(set, last.map(ipa))
        .map(|(ip, _)| ip.to_string())
        .collect()
}

#[test]
fn iterator_from_beginning_end_and_middle() {
    let s = set(&["192.168.1.0/29"]);
    let all = [
        "192.168.1.2",
        "192.168.1.3",
        "192.168.1.4",
        "192.168.1.5",
        "192.168.1.6",
    ];
    assert_eq!(walk(&s, None), all);
    assert_eq!(walk(&s, Some("192.168.1.6")), all);
    assert_eq!(
        walk(&s, Some("192.168.1.3")),
        [
            "192.168.1.4",
            "192.168.1.5",
            "192.168.1.6",
            "192.168.1.2",
            "192.168.1.3"
        ]
    );
    // the gateway is never a candidate, even when the walk starts next to it
    assert_eq!(walk(&s, Some("192.168.1.0")), all);
}

#[test]
fn round_robin_table() {
    struct Case {
        subnets: &'static [&'static str],
        taken: &'static [&'static str],
        last: Option<&'static str>,
        want: &'static str,
    }
    let cases = [
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &[],
            last: None,
            want: "10.0.0.2",
        },
        Case {
            subnets: &["2001:db8:1::0/64"],
            taken: &[],
            last: None,
            want: "2001:db8:1::2",
        },
        Case {
            subnets: &["10.0.0.0/30"],
            taken: &[],
            last: None,
            want: "10.0.0.2",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &["10.0.0.2"],
            last: None,
            want: "10.0.0.3",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &[],
            last: Some("10.0.0.5"),
            want: "10.0.0.6",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &["10.0.0.4", "10.0.0.5"],
            last: Some("10.0.0.3"),
            want: "10.0.0.6",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &["10.0.0.6"],
            last: Some("10.0.0.5"),
            want: "10.0.0.2",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &["10.0.0.2"],
            last: Some("10.0.0.128"),
            want: "10.0.0.3",
        },
        Case {
            subnets: &["10.0.0.0/29"],
            taken: &["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
            last: Some("10.0.0.3"),
            want: "10.0.0.3",
        },
        Case {
            subnets: &["10.0.0.0/30", "10.0.1.0/30"],
            taken: &[],
            last: None,
            want: "10.0.0.2",
        },
        Case {
            subnets: &["10.0.0.0/30", "10.0.1.0/30"],
            taken: &[],
            last: Some("10.0.0.2"),
            want: "10.0.1.2",
        },
        Case {
            subnets: &["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"],
            taken: &[],
            last: Some("10.0.2.2"),
            want: "10.0.0.2",
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let mut store = MemStore::default();
        for t in c.taken {
            store.holding(t, Holder::Attachment(att("other")));
        }
        if let Some(l) = c.last {
            store.last.insert(0, ipa(l));
        }
        let s = set(c.subnets);
        let got = allocate_in_set(&mut store, &s, 0, &att("id"), None, &[]).unwrap();
        assert_eq!(got.address.ip(), ipa(c.want), "case {i}");
        assert_eq!(store.last[&0], ipa(c.want), "case {i}");
    }
}

#[test]
fn never_hands_out_the_broadcast_and_reports_exhaustion() {
    let s = set(&["192.168.1.0/29"]);
    let mut store = MemStore::default();
    for i in 2..=6 {
        let got = allocate_in_set(&mut store, &s, 0, &att(&format!("c{i}")), None, &[]).unwrap();
        assert_eq!(got.address.to_string(), format!("192.168.1.{i}/29"));
        assert_eq!(got.gateway, Some(ipa("192.168.1.1")));
    }
    let err = allocate_in_set(&mut store, &s, 0, &att("c7"), None, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no IP addresses available in range set: 192.168.1.1-192.168.1.6"
    );
}

#[test]
fn release_then_allocate_moves_on() {
    let s = [set(&["192.168.1.0/29"])];
    let mut store = MemStore::default();
    let a = allocate(&mut store, &s, &att("a"), &[]).unwrap();
    assert_eq!(a[0].address.ip(), ipa("192.168.1.2"));
    assert_eq!(store.release(&att("a")).unwrap(), [ipa("192.168.1.2")]);
    let b = allocate(&mut store, &s, &att("a"), &[]).unwrap();
    assert_eq!(b[0].address.ip(), ipa("192.168.1.3"));
}

#[test]
fn requested_ips() {
    let s = set(&["192.168.1.0/29"]);
    let mut store = MemStore::default();
    let got = allocate_in_set(&mut store, &s, 0, &att("a"), Some(ipa("192.168.1.5")), &[]).unwrap();
    assert_eq!(got.address.to_string(), "192.168.1.5/29");
    let err =
        allocate_in_set(&mut store, &s, 0, &att("b"), Some(ipa("192.168.1.5")), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested IP address 192.168.1.5 is not available in range set 192.168.1.1-192.168.1.6"
    );
    let err =
        allocate_in_set(&mut store, &s, 0, &att("b"), Some(ipa("192.168.1.1")), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested ip 192.168.1.1 is subnet's gateway"
    );
    let narrow = RangeSet::canonicalize(&[RawRange {
        subnet: Some("192.168.1.0/24".into()),
        range_start: Some("192.168.1.10".into()),
        range_end: Some("192.168.1.20".into()),
        gateway: None,
    }])
    .unwrap();
    for ip in ["192.168.1.21", "192.168.1.9"] {
        let err =
            allocate_in_set(&mut store, &narrow, 0, &att("b"), Some(ipa(ip)), &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{ip} not in range set 192.168.1.10-192.168.1.20")
        );
    }
}

#[test]
fn duplicate_allocation_is_refused_per_set() {
    let sets = [set(&["10.1.2.0/24"]), set(&["2001:db8:1::/64"])];
    let mut store = MemStore::default();
    allocate(&mut store, &sets, &att("dummy"), &[]).unwrap();
    let err = allocate(&mut store, &sets, &att("dummy"), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to allocate for range 0: 10.1.2.2 has been allocated to dummy, duplicate allocation is not allowed"
    );
    // another ifname of the same container is another attachment
    let other = allocate(&mut store, &sets, &Attachment::new("dummy", "eth1"), &[]).unwrap();
    assert_eq!(other[0].address.ip(), ipa("10.1.2.3"));
    // a legacy ID-only file counts as held by the container
    store.holding("10.1.2.50", Holder::Legacy("old".into()));
    let err = allocate(&mut store, &sets, &att("old"), &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("10.1.2.50 has been allocated to old"),
        "{err}"
    );
}

#[test]
fn failure_in_a_later_set_releases_the_earlier_ones() {
    let sets = [set(&["10.1.2.0/24"]), set(&["10.2.2.0/30"])];
    let mut store = MemStore::default();
    store.holding("10.2.2.2", Holder::Unknown);
    let err = allocate(&mut store, &sets, &att("a"), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to allocate for range 1: no IP addresses available in range set: 10.2.2.1-10.2.2.2"
    );
    assert_eq!(store.files.len(), 1, "only the foreign file is left");
    // the same with a requested address nobody could serve
    let sets = [set(&["10.1.2.0/24"])];
    let err = allocate(
        &mut store,
        &sets,
        &att("a"),
        &[ipa("10.1.2.9"), ipa("10.1.2.10")],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to allocate all requested IPs: 10.1.2.10"
    );
    assert_eq!(store.files.len(), 1);
}

#[test]
fn requested_ips_go_to_their_sets() {
    let sets = [
        set(&["10.1.2.0/24", "10.1.3.0/24"]),
        set(&["10.2.2.0/24"]),
        set(&["2001:db8:1::/64"]),
    ];
    let mut store = MemStore::default();
    let got = allocate(
        &mut store,
        &sets,
        &att("a"),
        &[ipa("10.1.3.77"), ipa("2001:db8:1::999"), ipa("10.2.2.9")],
    )
    .unwrap();
    let addrs: Vec<String> = got.iter().map(|c| c.address.to_string()).collect();
    assert_eq!(addrs, ["10.1.3.77/24", "10.2.2.9/24", "2001:db8:1::999/64"]);
    assert_eq!(got[0].gateway, Some(ipa("10.1.3.1")));
}

#[test]
fn an_empty_lease_is_never_handed_out() {
    let sets = [set(&["10.1.2.0/30"])];
    let mut store = MemStore::default();
    store.holding("10.1.2.2", Holder::Empty);
    let err = allocate(&mut store, &sets, &att("a"), &[]).unwrap_err();
    assert!(
        err.to_string().contains("no IP addresses available"),
        "{err}"
    );
    let err = allocate(&mut store, &sets, &att("a"), &[ipa("10.1.2.2")]).unwrap_err();
    assert!(err.to_string().contains("10.1.2.2"), "{err}");
    assert_eq!(store.files.get(&ipa("10.1.2.2")), Some(&Holder::Empty));
}
