//! NetworkPolicy programs on the fake and on the real kernel: every probe between every
//! pair of ends (TCP and UDP, IPv4 and IPv6) decided as `netpol::oracle` says, after the
//! first program and after each change applied as a diff.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use netpol::addr::Family;
use netpol::cluster::Cluster;
use netpol::compile::compile;
use netpol::diff::{Changes, diff};
use netpol::eval::Packet;
use netpol::program::{Elem, Program, SetKind};

use super::PolicyNet;
use super::fake::FakeNodeNet;
use super::policy_cluster::{NODE, NODE_IPS, PROBES, cluster, expected};
use super::policy_lab::{Lab, addr_of, connect, echoes, probe};
use super::tests::{Ns, ip};
use crate::policy;
use testkit::privileged;

/// Every (source, destination) among `pods` local pods and the outside (`None`).
fn pairs(pods: usize) -> Vec<(Option<usize>, Option<usize>)> {
    let ends: Vec<Option<usize>> = (0..pods).map(Some).chain([None]).collect();
    let mut out = Vec::new();
    for s in &ends {
        for d in ends.iter().filter(|d| *d != s) {
            out.push((*s, *d));
        }
    }
    out
}

type Case = (Option<usize>, Option<usize>, Family, (u8, u16));

fn cases(pods: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for (s, d) in pairs(pods) {
        for f in Family::BOTH {
            for p in PROBES {
                out.push((s, d, f, p));
            }
        }
    }
    out
}

fn packet(&(s, d, f, (proto, port)): &Case) -> Packet {
    Packet {
        src: addr_of(s, f),
        dst: addr_of(d, f),
        proto,
        port,
    }
}

/// The program of node n1, checked against the oracle on every case first.
fn program(c: &Cluster, pods: usize) -> Program {
    let mut p = compile(c, NODE);
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    p.local = NODE_IPS.iter().map(|s| ip(s)).collect();
    for case in cases(pods) {
        let want = expected(c, case.0, case.1, case.2, case.3);
        assert_eq!(
            p.passes(&packet(&case)),
            Ok(want),
            "eval vs oracle {case:?}"
        );
    }
    p
}

#[test]
fn the_fake_decides_as_the_oracle_and_refuses_a_change_that_does_not_fit() {
    let fake = FakeNodeNet::new(vec![], NODE_IPS.iter().map(|s| ip(s)).collect());
    let phases = [(3, true), (4, true), (4, false)];
    let mut held = Program::default();
    for (pods, with_db) in phases {
        let c = cluster(pods, with_db);
        let p = program(&c, pods);
        fake.apply_policy(&diff(&held, &p)).unwrap();
        assert!(fake.policy_matches(&p).unwrap());
        for case in cases(pods) {
            let want = expected(&c, case.0, case.1, case.2, case.3);
            assert_eq!(fake.policy_passes(&packet(&case)), Ok(want), "{case:?}");
        }
        held = p;
    }
    // Deleting what is not there fails whole: nothing of the batch happens.
    let mut bad = diff(&held, &program(&cluster(4, true), 4));
    bad.del_elems
        .push((bad.add_elems[0].0.clone(), bad.add_elems[0].1.clone()));
    bad.del_elems
        .push(("no-such-set".into(), bad.add_elems[0].1.clone()));
    assert!(fake.apply_policy(&bad).is_err());
    assert!(fake.policy_matches(&held).unwrap());
    fake.remove_policy().unwrap();
    assert_eq!(fake.read_policy().unwrap(), Some(Program::default()));
}

/// Probes every case at once (a denied one waits out its timeout) and returns the ones
/// where the kernel and the oracle disagree.
fn disagreements(lab: &Lab, c: &Cluster, pods: usize) -> (Vec<String>, usize) {
    let all = cases(pods);
    let seen: Vec<bool> = std::thread::scope(|s| {
        let probes: Vec<_> = all
            .iter()
            .map(|case| {
                let p = packet(case);
                let to = SocketAddr::new(p.dst, p.port);
                s.spawn(move || probe(lab.ns(case.0), to, p.proto))
            })
            .collect();
        probes.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut wrong = Vec::new();
    let mut allowed = 0;
    for (case, got) in all.iter().zip(seen) {
        let want = expected(c, case.0, case.1, case.2, case.3);
        allowed += usize::from(want);
        if got != want {
            wrong.push(format!("{case:?}: kernel {got}, oracle {want}"));
        }
    }
    (wrong, allowed)
}

#[test]
#[ignore = "needs root"]
fn the_kernel_enforces_programs_and_their_diffs_as_the_oracle_says() {
    if !privileged("the_kernel_enforces_programs_and_their_diffs_as_the_oracle_says") {
        return;
    }
    let lab = Lab::new(4);
    let k = lab.node.node();

    // The first program, as one batch.
    let (c, pods) = (cluster(3, true), 3);
    let first = program(&c, pods);
    k.replace_policy(&first).unwrap();
    assert!(k.policy_matches(&first).unwrap());
    let listed = lab
        .node
        .sh("nft", &["list", "table", "inet", "cni-rs-netpol"]);
    for line in [
        "type filter hook forward priority filter - 1; policy accept;",
        "ct state established,related accept",
        "ip saddr vmap @egress-pods4",
        "ip6 daddr vmap @ingress-pods6",
        "meta l4proto . th dport @",
        "ip daddr . meta l4proto . th dport @",
        "meta l4proto . th dport vmap @",
    ] {
        assert!(listed.contains(line), "nft reads no {line:?} in\n{listed}");
    }
    let (wrong, allowed) = disagreements(&lab, &c, pods);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(allowed > 0 && allowed < cases(pods).len(), "{allowed}");

    // A pod starts (it joins selected sets): the diff, as one batch.
    let (c, pods) = (cluster(4, true), 4);
    let second = program(&c, pods);
    let ch = diff(&first, &second);
    assert!(!ch.add_elems.is_empty());
    k.apply_policy(&ch).unwrap();
    assert!(k.policy_matches(&second).unwrap());
    // One element or one rule less than the kernel holds is told (sets are compared one
    // at a time as they are read).
    for (what, i) in [("element", 0), ("rule", 1)] {
        let mut off = second.clone();
        if i == 0 {
            let set = off.sets.values_mut().rev().find(|s| !s.elems.is_empty());
            set.unwrap().elems.pop_last();
        } else {
            let chain = off.chains.values_mut().find(|c| !c.rules.is_empty());
            chain.unwrap().rules.pop();
        }
        assert!(!k.policy_matches(&off).unwrap(), "an {what} less matched");
    }
    let (wrong, _) = disagreements(&lab, &c, pods);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // An established connection the next change denies (outside -> db on TCP 7000).
    let db = SocketAddr::new(ip("fd50::12"), 7000);
    let mut kept = connect(&lab.outside, db).expect("allowed before the change");

    // A policy removed: chains, rules and sets go, as one batch.
    let c = cluster(4, false);
    let third = program(&c, pods);
    let ch = diff(&second, &third);
    assert!(!ch.del_chains.is_empty() && !ch.del_sets.is_empty());
    k.apply_policy(&ch).unwrap();
    assert!(k.policy_matches(&third).unwrap());
    assert!(!k.policy_matches(&second).unwrap());
    let (wrong, _) = disagreements(&lab, &c, pods);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(connect(&lab.outside, db).is_none(), "a new one is denied");
    assert!(
        echoes(&mut kept),
        "the established one goes on (no conntrack flush)"
    );

    // A change that does not fit the kernel fails whole and changes nothing.
    let mut bad = diff(&third, &second);
    bad.del_elems.push(bad.add_elems[0].clone());
    assert!(k.apply_policy(&bad).is_err());
    assert!(k.policy_matches(&third).unwrap());
    assert_eq!(
        k.read_policy().unwrap().map(|p| p.chains),
        Some(third.chains.clone())
    );

    k.remove_policy().unwrap();
    k.remove_policy().unwrap();
    assert!(k.policy_matches(&Program::default()).unwrap());
}

/// The whole-table batch reads the elements from the program: the same messages as the
/// batch of its difference from the empty program, but for the room its sets of
/// addresses are made with (a difference makes them unbounded).
#[test]
fn the_whole_table_batch_is_the_batch_of_the_difference_from_nothing() {
    let c = cluster(4, true);
    let mut p = program(&c, 4);
    assert!(p.sets.values().any(|s| !s.elems.is_empty()));
    whole_is_difference(&p);
    // Large enough for its elements to be encoded on two threads: the same messages.
    let mut sets = p
        .sets
        .values_mut()
        .filter(|s| s.kind == SetKind::Addrs(Family::V4));
    for (n, set) in sets.by_ref().take(3).enumerate() {
        for i in 0..8_000u32 {
            let a = Ipv4Addr::from(0x0a80_0000 + ((n as u32) << 16) + i);
            set.elems.insert(Elem::Addr(IpAddr::V4(a)));
        }
    }
    let elems: usize = p.sets.values().map(|s| s.elems.len()).sum();
    assert!(elems > 16_384, "{elems} elements");
    whole_is_difference(&p);
}

fn whole_is_difference(p: &Program) {
    use crate::policy::{Kinds, changes_batch, remove_batch, replace_batch};
    let mut want = remove_batch();
    want.extend(changes_batch(&diff(&Program::default(), p), &Kinds::new()).unwrap());
    let got = replace_batch(p).unwrap();
    assert_eq!(got.len(), want.len());
    let mut sized = 0;
    for (g, w) in got.iter().zip(&want) {
        let same_but_attrs = (g.kind, g.flags, &g.what) == (w.kind, w.flags, &w.what);
        assert!(same_but_attrs, "{g:?} vs {w:?}");
        // NFTA_SET_DESC { NFTA_SET_DESC_SIZE }: 12 bytes more.
        if g.attrs.0.len() == w.attrs.0.len() + 12 && g.what.starts_with("add set") {
            sized += 1;
        } else {
            assert_eq!(g.attrs.0, w.attrs.0, "{}", g.what);
        }
    }
    let addr_sets = p.sets.values().filter(|s| policy::room(s) != 0).count();
    assert_eq!((sized, addr_sets > 0), (addr_sets, true));
}

#[test]
#[ignore = "needs root"]
fn a_set_made_with_the_whole_table_refuses_elements_past_its_room() {
    if !privileged("a_set_made_with_the_whole_table_refuses_elements_past_its_room") {
        return;
    }
    let ns = Ns::new();
    let k = ns.node();
    let mut p = program(&cluster(3, true), 3);
    let (name, set) = p
        .sets
        .iter()
        .find(|(_, s)| s.kind == SetKind::Addrs(Family::V4))
        .map(|(n, s)| (n.clone(), s.clone()))
        .expect("a set of IPv4 addresses");
    let room = policy::room(&set) as usize;
    k.replace_policy(&p).unwrap();
    let listed = ns.sh("nft", &["list", "set", "inet", policy::TABLE, &name]);
    assert!(listed.contains(&format!("size {room}")), "{listed}");
    let adds = |from: usize, n: usize| Changes {
        add_elems: (from..from + n)
            .map(|i| {
                (
                    name.clone(),
                    Elem::Addr(IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i as u32))),
                )
            })
            .collect(),
        ..Changes::default()
    };
    // Filled to its room, then one more is refused, whole, saying why.
    let free = room - set.elems.len();
    k.apply_policy(&adds(0, free)).unwrap();
    let e = k.apply_policy(&adds(free, 3)).unwrap_err();
    assert_eq!(e.errno(), Some(nix::libc::ENFILE), "{e}");
    assert!(e.to_string().contains("is full"), "{e}");
    netpol::diff::apply(&mut p, &adds(0, free));
    assert!(
        k.policy_matches(&p).unwrap(),
        "nothing of the refused batch"
    );
    // The whole table again: room for what the set now holds, and more.
    k.replace_policy(&p).unwrap();
    k.apply_policy(&adds(free, 3)).unwrap();
    netpol::diff::apply(&mut p, &adds(free, 3));
    assert!(k.policy_matches(&p).unwrap());
    k.remove_policy().unwrap();
}
