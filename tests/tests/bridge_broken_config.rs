//! A conflist that breaks after pods were attached (a bad edit, a bad rollout) must not
//! strand them: ADD refuses it and changes nothing, while DEL (and GC) with it still
//! remove everything an earlier ADD made under the valid version.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// One mistake a user can make, applied to a valid config.
type Break = fn(&mut Value);

/// Mistakes in the IPAM section (host-local reads only the store location on DEL), then
/// in the bridge's own fields (the bridge says on stderr what it ignored).
fn mistakes() -> Vec<(&'static str, Break)> {
    vec![
        ("empty range subnet", |c| {
            c["ipam"]["ranges"] = json!([[{"subnet": ""}]])
        }),
        ("subnet prefix 33", |c| {
            c["ipam"]["ranges"] = json!([[{"subnet": "10.1.2.0/33"}]])
        }),
        ("legacy subnet not an address", |c| {
            c["ipam"].as_object_mut().unwrap().remove("ranges");
            c["ipam"]["subnet"] = json!("bogus");
        }),
        ("gateway not an address", |c| {
            c["ipam"]["ranges"][0][0]["gateway"] = json!("not-an-ip")
        }),
        ("rangeStart outside the subnet", |c| {
            c["ipam"]["ranges"][0][0]["rangeStart"] = json!("10.9.9.9")
        }),
        ("route without a destination", |c| {
            c["ipam"]["routes"] = json!([{"dst": "bogus"}])
        }),
        // The bridge's own fields from here on.
        ("mtu 5", |c| c["mtu"] = json!(5)),
        ("mtu a string", |c| c["mtu"] = json!("abc")),
        ("vlan 5000", |c| c["vlan"] = json!(5000)),
        ("vlanTrunk minID 0", |c| {
            c["vlanTrunk"] = json!([{"minID": 0, "maxID": 3}])
        }),
        ("ipMasqBackend bogus", |c| {
            c["ipMasqBackend"] = json!("bogus")
        }),
        ("hairpin and promisc", |c| {
            c["hairpinMode"] = json!(true);
            c["promiscMode"] = json!(true);
        }),
        ("runtimeConfig.mac bogus", |c| {
            c["runtimeConfig"] = json!({"mac": "zz:zz"})
        }),
    ]
}

const FIRST_BRIDGE_MISTAKE: usize = 6;

#[test]
#[ignore = "needs root"]
fn del_with_a_config_broken_since_add_removes_everything() {
    if !privileged("del_with_a_config_broken_since_add_removes_everything") {
        return;
    }
    for (i, (what, break_it)) in mistakes().into_iter().enumerate() {
        let env = Env::new("broken");
        let good = env.conf(
            "1.0.0",
            &["10.1.2.0/24"],
            json!({"ipMasq": true, "ipMasqBackend": "iptables", "macspoofchk": true}),
        );
        let mut broken = good.clone();
        break_it(&mut broken);

        let ctr = NamedNetns::new("attached");
        let result = env.add(&ctr, "attached", &good);
        let links_before = env.links().len();

        // ADD refuses the broken config and leaves nothing of its own.
        let fresh = NamedNetns::new("fresh");
        let (code, msg) = error_of(&env.run("ADD", &fresh, "fresh", &broken));
        assert!(
            matches!(code, 7 | 999),
            "{what}: ADD fails with {code}: {msg}"
        );
        assert_eq!(env.links().len(), links_before, "{what}: ADD left a link");
        assert_eq!(env.ip_files().len(), 1, "{what}: ADD left a lease");
        // DEL of what never got attached succeeds, twice.
        for _ in 0..2 {
            env.del(&fresh, "fresh", &broken);
        }

        // The attachment made under the valid config goes entirely, with the cached
        // prevResult and again without it (containerd's second DEL, empty netns).
        let out = env.run("DEL", &ctr, "attached", &with_prev(&broken, &result));
        out.assert_success();
        env.assert_clean_with(&ctr);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if i >= FIRST_BRIDGE_MISTAKE {
            assert!(
                stderr.contains("ignoring"),
                "{what}: DEL names what it ignored: {stderr}"
            );
        }
        env.plugin("DEL", "", "attached", &with_prev(&broken, &result))
            .run_in(&env.host)
            .assert_success();
        env.assert_clean_with(&ctr);
    }
}

/// GC with a broken config still collects the leases and rules of attachments that are
/// not valid any more.
#[test]
#[ignore = "needs root"]
fn gc_with_a_broken_config_collects() {
    if !privileged("gc_with_a_broken_config_collects") {
        return;
    }
    let env = Env::new("brokengc");
    let good = env.conf(
        "1.1.0",
        &["10.1.2.0/24"],
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    let ctr = NamedNetns::new("gone");
    env.add(&ctr, "gone", &good);
    drop(ctr);
    env.wait_for_no_links(std::time::Duration::from_secs(3));
    let mut broken = merge(good, json!({"mtu": 1, "cni.dev/valid-attachments": []}));
    broken["ipam"]["ranges"] = json!([[{"subnet": ""}]]);
    env.plugin("GC", "", "", &broken)
        .run_in(&env.host)
        .assert_success();
    env.assert_clean();
}
