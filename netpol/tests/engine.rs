//! The incremental engine against the from-scratch compile: long generated event
//! sequences (fixed seed) on the random clusters of `generated.rs`, and after EVERY event,
//! on both nodes, the engine's program equals `compile` of the objects, and the changes
//! it returned are exactly `diff(before, after)` (so `apply(before, changes) == after`).

mod common;

use common::random::{Rng, policy_spec, world};
use common::*;
use netpol::diff::{Changes, apply, diff};
use netpol::engine::Engine;
use netpol::model;
use netpol::program::{Elem, Program};
use netpol::validate::Policy;
use serde_json::{Value, json};

fn de<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

fn pod(v: &Value) -> netpol::cluster::Pod {
    netpol::cluster::Pod::from_object(&de::<model::Pod>(v))
}

fn key(v: &Value) -> (String, String) {
    let m = &v["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    (s("namespace"), s("name"))
}

fn engines(w: &World) -> Vec<Engine> {
    (0..NODES.len())
        .map(|n| {
            let mut e = Engine::new(NODES[n], &node_ips(n));
            let nss: Vec<model::Namespace> = w.namespaces.iter().map(de).collect();
            let nps: Vec<model::NetworkPolicy> = w.policies.iter().map(de).collect();
            e.load(
                &nss,
                w.pods.iter().map(pod),
                nps.iter().map(Policy::from_object),
            );
            same_as_compiled(e.program(), &w.build().programs[n], "load");
            // The agent's first pod list, added as it is read, before the rest.
            let mut streamed = Engine::new(NODES[n], &node_ips(n));
            let half = w.pods.len() / 2;
            streamed.add_pods(w.pods[..half].iter().map(pod));
            streamed.add_pods(w.pods[half..].iter().map(pod));
            streamed.load(&nss, [], nps.iter().map(Policy::from_object));
            same_as_compiled(streamed.program(), &w.build().programs[n], "pods first");
            e
        })
        .collect()
}

/// The engine's program is the compiled one, and `changes` what turned `before` into it.
fn check(before: &Program, changes: &Changes, now: &Program, compiled: &Program, what: &str) {
    same_as_compiled(now, compiled, what);
    let want = diff(before, now);
    assert!(
        *changes == want,
        "{what}: changes {changes:?}\nwant {want:?}"
    );
    let mut applied = before.clone();
    apply(&mut applied, changes);
    // `apply` is the kernel's part: sets and chains (the rest is bookkeeping).
    let kernel = |p: &Program| (p.sets.clone(), p.chains.clone());
    assert!(
        kernel(&applied) == kernel(now),
        "{what}: apply(before, changes) != after"
    );
}

fn same_as_compiled(now: &Program, compiled: &Program, what: &str) {
    assert!(
        now == compiled,
        "{what}: engine != compile; compile -> engine: {:?}",
        diff(compiled, now)
    );
}

/// One random event, applied to the objects and fed to every engine.
fn event(r: &mut Rng, w: &mut World, gone: &mut Vec<Value>, es: &mut [Engine]) -> Vec<Changes> {
    let feed =
        |es: &mut [Engine], f: &dyn Fn(&mut Engine) -> Changes| es.iter_mut().map(f).collect();
    match r.below(10) {
        0..=4 if !w.pods.is_empty() => {
            let i = r.below(w.pods.len());
            let mut p = w.pods[i].clone();
            match r.below(9) {
                0 => {
                    let (ns, name) = key(&w.pods.remove(i));
                    gone.push(p);
                    return es.iter_mut().map(|e| e.remove_pod(&ns, &name)).collect();
                }
                1 if !gone.is_empty() => p = gone.remove(r.below(gone.len())),
                2 => {
                    // A second pod claiming this one's addresses (or one of them).
                    p["metadata"]["name"] = json!(format!("dup{}", r.below(1000)));
                    p["metadata"]["namespace"] = json!(r.pick(&NAMESPACES));
                    p["spec"]["nodeName"] = json!(r.pick(&NODES));
                    if r.chance(2) {
                        p["status"]["podIPs"].as_array_mut().unwrap().truncate(1);
                    }
                }
                3 => p["status"]["phase"] = json!(r.pick(&["Succeeded", "Running", "Pending"])),
                4 => p["spec"]["nodeName"] = json!(r.pick(&NODES)),
                5 => {
                    let other = &w.pods[r.below(w.pods.len())];
                    p["status"]["podIPs"] = other["status"]["podIPs"].clone();
                }
                6 => {
                    let ports = json!([{"name": "http", "containerPort": r.pick(&[80, 81])},
                        {"name": "dns", "protocol": "UDP", "containerPort": r.pick(&[53, 80])}]);
                    p["spec"]["containers"][0]["ports"] = ports;
                }
                _ => {
                    let mut labels = json!({"pod": r.pick(&["a", "b", "c"])});
                    if r.chance(2) {
                        labels["app"] = json!(r.pick(&["web", "db"]));
                    }
                    p["metadata"]["labels"] = labels;
                }
            }
            p["metadata"]["creationTimestamp"] = json!(stamp(r));
            w.pods.retain(|q| key(q) != key(&p));
            w.pods.push(p.clone());
            feed(es, &|e| e.set_pod(pod(&p)))
        }
        5 | 6 => {
            let name = r.pick(&NAMESPACES);
            w.namespaces.retain(|n| n["metadata"]["name"] != name);
            if r.chance(4) {
                feed(es, &|e| e.remove_namespace(name))
            } else {
                let mut labels = json!({"ns": r.pick(&["x", "y", "z"])});
                if r.chance(2) {
                    labels["team"] = json!(r.pick(&["red", "blue"]));
                }
                let ns = json!({"metadata": {"name": name, "labels": labels}});
                w.namespaces.push(ns.clone());
                feed(es, &|e| e.set_namespace(&de(&ns)))
            }
        }
        _ => {
            if !w.policies.is_empty() && r.chance(3) {
                let (ns, name) = key(&w.policies.remove(r.below(w.policies.len())));
                feed(es, &|e| e.remove_policy(&ns, &name))
            } else {
                let (ns, name) = (r.pick(&NAMESPACES), format!("p{}", r.below(5)));
                let np =
                    json!({"metadata": {"namespace": ns, "name": name}, "spec": policy_spec(r)});
                w.policies.retain(|q| key(q) != key(&np));
                w.policies.push(np.clone());
                feed(es, &|e| e.set_policy(&de(&np)))
            }
        }
    }
}

/// Few distinct times, so ties (decided by namespace/name) happen too.
fn stamp(r: &mut Rng) -> String {
    format!("2024-01-01T00:00:0{}Z", r.below(4))
}

#[test]
fn every_event_gives_the_compiled_program_and_its_diff() {
    let mut r = Rng(0x656e_6769_6e65);
    let mut events = 0;
    for s in 0..30 {
        let mut w = world(&mut r);
        for p in &mut w.pods {
            p["metadata"]["creationTimestamp"] = json!(stamp(&mut r));
        }
        let mut es = engines(&w);
        let mut gone = vec![];
        for k in 0..60 {
            let before: Vec<Program> = es.iter().map(|e| e.program().clone()).collect();
            let changes = event(&mut r, &mut w, &mut gone, &mut es);
            let net = w.build();
            for n in 0..es.len() {
                let what = format!("sequence {s} event {k} node {n}");
                check(
                    &before[n],
                    &changes[n],
                    es[n].program(),
                    &net.programs[n],
                    &what,
                );
            }
            events += 1;
        }
    }
    assert_eq!(events, 30 * 60);
}

/// Dispatch elements of an address (one per direction when isolated).
fn jumps(p: &Program, ip: std::net::IpAddr) -> Vec<String> {
    let elems = p.sets.values().flat_map(|s| &s.elems);
    elems
        .filter_map(|e| match e {
            Elem::Jump(i, c) if *i == ip => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_address_two_pods_claim_is_the_newer_pods() {
    // x/a (node-1) is isolated by `in` with only port 81 open; x/dup takes its addresses
    // on node-1 too, newer, and is selected by nothing: the address is dup's, unpoliced.
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"ports": [{"port": 81}]}]});
    let peers = json!({"podSelector": {"matchLabels": {"pod": "b"}}, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "a"}}}]}]});
    let mut w = World::upstream()
        .policy("x", "in", spec)
        .policy("y", "from-a", peers);
    w.pods[0]["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    let ip: std::net::IpAddr = "10.1.1.1".parse().unwrap();
    let mut es = engines(&w);
    let x_a = w.pods[0].clone();
    assert_eq!(jumps(es[0].program(), ip).len(), 1, "x/a is isolated");
    let mut dup = x_a.clone();
    dup["metadata"]["name"] = json!("dup");
    dup["metadata"]["labels"] = json!({"pod": "dup"});
    dup["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:05Z");
    w.pods.push(dup.clone());
    let net = w.build();
    for (n, e) in es.iter_mut().enumerate() {
        let before = e.program().clone();
        let ch = e.set_pod(pod(&dup));
        check(&before, &ch, e.program(), &net.programs[n], "dup arrives");
    }
    assert!(
        jumps(es[0].program(), ip).is_empty(),
        "the newer pod's, not policed"
    );
    // y/b admits pods labelled a: no longer that address.
    for e in &es {
        let sets = &e.program().sets;
        assert!(!sets.values().any(|s| s.elems.contains(&Elem::Addr(ip))));
    }
    // An older claimant changes nothing; the newer one leaving gives it back.
    let mut old = x_a.clone();
    old["metadata"]["name"] = json!("old");
    old["metadata"]["creationTimestamp"] = json!("2023-01-01T00:00:00Z");
    w.pods.push(old.clone());
    let net = w.build();
    for (n, e) in es.iter_mut().enumerate() {
        let before = e.program().clone();
        let ch = e.set_pod(pod(&old));
        check(&before, &ch, e.program(), &net.programs[n], "old arrives");
        assert!(ch.is_empty(), "the older claimant is not seen");
    }
    w.pods.retain(|p| p["metadata"]["name"] != "dup");
    let net = w.build();
    for (n, e) in es.iter_mut().enumerate() {
        let before = e.program().clone();
        let ch = e.remove_pod("x", "dup");
        check(&before, &ch, e.program(), &net.programs[n], "dup leaves");
    }
    assert_eq!(
        jumps(es[0].program(), ip).len(),
        1,
        "x/a's again: newer than x/old"
    );
}

#[test]
fn peer_sets_filled_later_allow_less_in_between_and_then_all_of_it() {
    let mut r = Rng(0x6669_6c6c);
    let (mut fills, mut held_back) = (0usize, 0usize);
    for s in 0..20 {
        let mut w = world(&mut r);
        let mut es = engines(&w);
        es.iter_mut().for_each(Engine::fill_later);
        let mut gone = vec![];
        for k in 0..40 {
            let before: Vec<Program> = es.iter().map(|e| e.program().clone()).collect();
            let changes = event(&mut r, &mut w, &mut gone, &mut es);
            let net = w.build();
            let mut addrs: Vec<std::net::IpAddr> = net
                .cluster
                .pods
                .iter()
                .flat_map(|p| p.ips.clone())
                .collect();
            addrs.extend([OUTSIDE4, OUTSIDE6].map(|a| a.parse::<std::net::IpAddr>().unwrap()));
            for n in 0..es.len() {
                let what = format!("sequence {s} event {k} node {n}");
                let between = es[n].program().clone();
                assert!(changes[n] == diff(&before[n], &between), "{what}: changes");
                let fill = es[n].fill();
                let compiled = &net.programs[n];
                check(&between, &fill, es[n].program(), compiled, &what);
                if fill.is_empty() {
                    continue;
                }
                fills += 1;
                for (&src, &dst) in addrs.iter().flat_map(|s| addrs.iter().map(move |d| (s, d))) {
                    if src.is_ipv4() != dst.is_ipv4() {
                        continue;
                    }
                    for (proto, port) in [(6, 80), (6, 81), (17, 53)] {
                        let pkt = netpol::eval::Packet {
                            src,
                            dst,
                            proto,
                            port,
                        };
                        let now = between.passes(&pkt).expect("the program stands alone");
                        let then = compiled.passes(&pkt).unwrap();
                        assert!(!now || then, "{what}: {pkt:?} passed before its fill");
                        held_back += usize::from(then && !now);
                    }
                }
            }
        }
    }
    // Fills that held something back, or the check says little.
    assert!(
        fills > 20 && held_back > 0,
        "{fills} fills, {held_back} held back"
    );
}
