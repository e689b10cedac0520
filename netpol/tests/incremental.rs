//! A remote pod's event applied in place (`update::pod_event`) gives the program a full
//! compile of the cluster after the event gives; a local pod's event asks for a compile.

mod common;

use common::random::{Rng, world};
use common::*;
use netpol::compile::compile;
use netpol::update::{LocalPod, pod_event};
use serde_json::json;

/// Node-1's program before, patched by the event, equals node-1's program after.
fn check(before: &World, after: &World, ns: &str, name: &str) -> Result<usize, LocalPod> {
    let (b, a) = (before.build(), after.build());
    let mut prog = compile(&b.cluster, NODES[0]);
    let start = prog.clone();
    pod_event(
        &a.cluster,
        NODES[0],
        &mut prog,
        b.cluster.pod(ns, name),
        a.cluster.pod(ns, name),
    )?;
    assert!(prog == a.programs[0], "{ns}/{name}: in place != compiled");
    let changed = netpol::diff::diff(&start, &prog);
    Ok(changed.add_elems.len() + changed.del_elems.len())
}

#[test]
fn remote_pod_events_in_place_equal_a_compile() {
    let mut r = Rng(17);
    let (mut changed, mut local) = (0, 0);
    for _ in 0..150 {
        let w = world(&mut r);
        let i = r.below(w.pods.len());
        let (ns, name) = {
            let m = &w.pods[i]["metadata"];
            (
                m["namespace"].as_str().unwrap().to_string(),
                m["name"].as_str().unwrap().to_string(),
            )
        };
        // Relabel, delete, re-add an existing pod: remote or local.
        let mut relabelled = w.clone();
        relabelled.pods[i]["metadata"]["labels"] =
            json!({"pod": r.pick(&["a", "b"]), "app": r.pick(&["web", "db"])});
        let mut deleted = w.clone();
        deleted.pods.remove(i);
        let mut moved_ports = w.clone();
        moved_ports.pods[i]["spec"]["containers"][0]["ports"] = json!([{"name": "http", "containerPort": 81}, {"name": "dns", "protocol": "UDP", "containerPort": 80}]);
        for (before, after) in [
            (&w, &relabelled),
            (&w, &deleted),
            (&deleted, &w),
            (&w, &moved_ports),
        ] {
            match check(before, after, &ns, &name) {
                Ok(n) => changed += n,
                Err(LocalPod) => {
                    local += 1;
                    let on = w.pods[i]["spec"]["nodeName"].as_str().unwrap();
                    let host = w.pods[i]["spec"]["hostNetwork"].as_bool().unwrap_or(false);
                    assert!(
                        on == NODES[0] && !host,
                        "only a pod of node-1 needs a compile"
                    );
                }
            }
        }
    }
    assert!(
        changed > 0 && local > 0,
        "changed {changed}, local {local}: the test checks little"
    );
}

#[test]
fn an_address_two_pods_claim_stays_while_one_holds_it() {
    // y/b (node-1 policed by nothing) and a copy on node-2 with the same address: the
    // copy's deletion must not take the address out of x/a's peer set.
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": [{"namespaceSelector": {}}]}]});
    let w = World::upstream().policy("x", "p", spec);
    let mut twin = w.clone();
    let mut copy = w.pods[4].clone();
    copy["metadata"]["name"] = json!("b2");
    copy["spec"]["nodeName"] = json!(NODES[1]);
    twin.pods.push(copy);
    assert!(check(&twin, &w, "y", "b2").is_ok());
    assert!(check(&w, &twin, "y", "b2").is_ok());
}
