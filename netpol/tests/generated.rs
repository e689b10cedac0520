//! Random clusters (a fixed-seed PRNG, so every run checks the same ones): namespaces x, y,
//! z with pods a, b, c, random labels, nodes, hostNetwork and single-stack pods, named
//! ports, and random policies from the v1 feature list (a few of them refused). On every
//! one: every endpoint pair x family x protocol/port, the oracle against the compiled
//! programs of both nodes (`common::Net::try_reach` asserts they agree); and the diff of
//! programs: it turns one into the other, and a remote pod's event is set elements only.

mod common;

use common::random::{Rng, world};
use common::*;
use netpol::addr::Family;
use netpol::diff::{apply, diff};
use netpol::oracle::Endpoint;
use netpol::program::{Program, SetKind};
use serde_json::json;

const PROBES: [(u8, u16); 10] = [
    (TCP, 80),
    (TCP, 81),
    (TCP, 82),
    (UDP, 53),
    (UDP, 80),
    (UDP, 0),
    (UDP, 65535),
    (SCTP, 80),
    (SCTP, 81),
    (ICMP, 0),
];

fn endpoints(net: &Net) -> Vec<Endpoint<'_>> {
    let mut out: Vec<Endpoint> = net.cluster.pods.iter().map(Endpoint::Pod).collect();
    for ip in [OUTSIDE4, OUTSIDE6] {
        out.push(Endpoint::Outside(ip.parse().unwrap()));
    }
    out.extend((0..NODES.len()).flat_map(node_ips).map(Endpoint::Outside));
    out
}

#[test]
fn compiled_programs_agree_with_the_oracle_on_random_clusters() {
    let mut r = Rng(0x6e65_7470_6f6c);
    let (mut allowed, mut denied, mut refused) = (0usize, 0usize, 0usize);
    let mut port_maps = 0usize;
    for _ in 0..150 {
        let net = world(&mut r).build();
        refused += net.cluster.refused.len();
        port_maps += net
            .programs
            .iter()
            .flat_map(|p| p.sets.values())
            .filter(|s| s.kind == SetKind::PortDispatch && !s.elems.is_empty())
            .count();
        let eps = endpoints(&net);
        for s in &eps {
            for d in &eps {
                for f in Family::BOTH {
                    for (proto, port) in PROBES {
                        match net.try_reach(*s, *d, f, proto, port) {
                            Some(true) => allowed += 1,
                            Some(false) => denied += 1,
                            None => {}
                        }
                    }
                }
            }
        }
    }
    // The generator must exercise both outcomes and refusals, or the agreement says little.
    let total = allowed + denied;
    assert!(
        denied * 10 > total && allowed * 10 > total,
        "allowed {allowed}, denied {denied}"
    );
    assert!(refused > 0, "no refused policy generated");
    // Selection chains with a port map (several port-restricted policies) included.
    assert!(port_maps > 10, "{port_maps} port maps");
}

fn tables(p: &Program) -> (&impl PartialEq, &impl PartialEq) {
    (&p.sets, &p.chains)
}

#[test]
fn a_diff_turns_one_program_into_the_other() {
    let mut r = Rng(7);
    let mut prev = Program::default();
    for _ in 0..100 {
        let net = world(&mut r).build();
        for p in &net.programs {
            assert!(diff(p, p).is_empty());
            let mut got = prev.clone();
            apply(&mut got, &diff(&prev, p));
            assert!(tables(&got) == tables(p), "apply(diff) differs");
            prev = p.clone();
        }
    }
}

#[test]
fn compiling_is_a_function_of_the_objects_not_their_order() {
    let mut r = Rng(11);
    for _ in 0..50 {
        let w = world(&mut r);
        let mut shuffled = w.clone();
        shuffled.pods.reverse();
        shuffled.policies.reverse();
        shuffled.namespaces.reverse();
        assert!(w.build().programs == shuffled.build().programs);
    }
}

#[test]
fn a_remote_pod_event_changes_set_elements_only() {
    let mut r = Rng(13);
    let mut element_changes = 0;
    for _ in 0..100 {
        let w = world(&mut r);
        // A new pod on node-2 (remote for node-1's program), then relabelled, then gone.
        let mut added = w.clone();
        let labels = json!({"pod": r.pick(&["a", "b", "c"]), "app": r.pick(&["web", "db"])});
        let ports = json!([{"name": "http", "containerPort": 80}, {"name": "dns", "protocol": "UDP", "containerPort": 53}]);
        let mut pj = pod_json(r.below(3), 0, 1, labels, ports);
        pj["metadata"]["name"] = json!("new");
        pj["status"]["podIPs"] = json!([{"ip": "10.1.9.9"}, {"ip": "fd00:1:0:9::9"}]);
        added.pods.push(pj.clone());
        let mut relabelled = added.clone();
        relabelled.pods.last_mut().unwrap()["metadata"]["labels"]["app"] = json!("other");
        let states = [w.build(), added.build(), relabelled.build(), w.build()];
        for pair in states.windows(2) {
            let ch = diff(&pair[0].programs[0], &pair[1].programs[0]);
            assert!(ch.add_sets.is_empty() && ch.del_sets.is_empty(), "{ch:?}");
            assert!(
                ch.add_chains.is_empty() && ch.del_chains.is_empty() && ch.write_rules.is_empty(),
                "{ch:?}"
            );
            element_changes += ch.add_elems.len() + ch.del_elems.len();
        }
    }
    assert!(
        element_changes > 0,
        "no event touched a set: the test checks nothing"
    );
}
