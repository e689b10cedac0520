//! GC and STATUS as a node runs them: GC keyed by `cni.dev/valid-attachments` touches only
//! this network's masquerade rules (never another network's, never portmap's chains, and
//! nothing at all without the key), and reads `null` as the empty list (CRI-O sends it);
//! STATUS is cheap enough to run every 5 s.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

const OTHER: &str = "othernet";

fn masq(env: &Env, backend: &str) -> Value {
    env.conf(
        "1.1.0",
        &["10.1.9.0/24"],
        json!({"ipMasq": true, "ipMasqBackend": backend}),
    )
}

fn other(env: &Env, backend: &str) -> Value {
    merge(
        env.conf(
            "1.1.0",
            &["10.1.10.0/24"],
            json!({"ipMasq": true, "ipMasqBackend": backend}),
        ),
        json!({"name": OTHER, "bridge": "bridge1"}),
    )
}

fn gc_conf(env: &Env, valid: Option<Vec<Value>>) -> Value {
    let extra = match valid {
        Some(list) => json!({ "cni.dev/valid-attachments": list }),
        None => json!({}),
    };
    env.conf("1.1.0", &["10.1.9.0/24"], extra)
}

/// Rules (both backends) whose comment names `network` and container `id`.
fn has_rules(env: &Env, network: &str, id: &str) -> (bool, bool) {
    let chain = hostnet::firewall::names::iptables_chain(network, id);
    let ipt = env.cni_nat_rules().iter().any(|l| l.contains(&chain));
    let nft = env
        .nft_ruleset()
        .contains(&format!("net: {network}, if: {IFNAME}, id: {id}\""));
    (ipt, nft)
}

#[test]
#[ignore = "needs root"]
fn gc_without_key_removes_nothing_and_empty_list_only_this_network() {
    if !privileged("gc_without_key_removes_nothing_and_empty_list_only_this_network") {
        return;
    }
    let env = Env::new("gcnet");
    let ctrs: Vec<NamedNetns> = (0..4).map(|_| NamedNetns::new("ctr")).collect();
    let attachments = [
        ("c0", masq(&env, "iptables")),
        ("c1", masq(&env, "nftables")),
        ("o0", other(&env, "iptables")),
        ("o1", other(&env, "nftables")),
    ];
    let results: Vec<Value> = attachments
        .iter()
        .zip(&ctrs)
        .map(|((id, conf), ctr)| env.add(ctr, id, conf))
        .collect();
    // A portmap chain of this network, same comment format, for a container that is gone.
    let pm_comment = format!("name: \"{NETWORK}\" id: \"gone\"");
    env.host.exec_in(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-N",
        "CNI-DN-0123456789abcdef01234",
    ]);
    env.host.exec_in(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-A",
        "CNI-DN-0123456789abcdef01234",
        "-m",
        "comment",
        "--comment",
        &pm_comment,
        "-j",
        "RETURN",
    ]);
    let ips_before = env.ip_files().len();

    let gc = |valid| {
        env.plugin("GC", "", "", &gc_conf(&env, valid))
            .run_in(&env.host)
            .assert_success();
    };
    gc(None);
    for (id, want) in [("c0", (true, false)), ("c1", (false, true))] {
        assert_eq!(has_rules(&env, NETWORK, id), want, "no key: {id} kept");
    }
    assert_eq!(env.ip_files().len(), ips_before, "no key: no IP released");

    gc(Some(vec![]));
    let after_empty_list = [
        (NETWORK, "c0", (false, false), "empty list: c0 gone"),
        (NETWORK, "c1", (false, false), "empty list: c1 gone"),
        (OTHER, "o0", (true, false), "other network kept"),
        (OTHER, "o1", (false, true), "other network kept"),
    ];
    for (network, id, want, what) in after_empty_list {
        assert_eq!(has_rules(&env, network, id), want, "{what}");
    }
    assert!(
        env.cni_nat_rules()
            .iter()
            .any(|l| l.contains("CNI-DN-0123456789abcdef01234")),
        "portmap's chain kept"
    );

    env.host.exec_in(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-F",
        "CNI-DN-0123456789abcdef01234",
    ]);
    env.host.exec_in(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-X",
        "CNI-DN-0123456789abcdef01234",
    ]);
    for (((id, conf), ctr), result) in attachments.iter().zip(&ctrs).zip(&results) {
        env.del(ctr, id, &with_prev(conf, result));
    }
    env.host.exec_in(&["ip", "link", "del", "bridge1"]);
    env.assert_clean();
}

/// CRI-O runs GC at every start; on a node whose pods are all gone (after a reboot or a
/// crash) Go's libcni sends both lists as `null`, its encoding of an empty list. That is
/// the empty list: GC frees every lease, masquerade rule and spoof check of the dead pods
/// (their veths went with their namespaces; GC never deletes links). `[]` does the same.
#[test]
#[ignore = "needs root"]
fn gc_with_null_or_empty_lists_frees_everything_of_dead_pods() {
    if !privileged("gc_with_null_or_empty_lists_frees_everything_of_dead_pods") {
        return;
    }
    for list in [Value::Null, json!([])] {
        let env = Env::new("gcnull");
        for (id, backend) in [("c0", "iptables"), ("c1", "nftables")] {
            let ctr = NamedNetns::new("ctr");
            let extra = json!({"ipMasq": true, "ipMasqBackend": backend, "macspoofchk": true});
            env.add(&ctr, id, &env.conf("1.1.0", &["10.1.9.0/24"], extra));
            // The pod's namespace goes; the kernel deletes its veth pair with it.
        }
        env.wait_for_no_links(std::time::Duration::from_secs(10));
        assert_eq!(env.ip_files().len(), 2, "{list}: leases before GC");
        assert_eq!(has_rules(&env, NETWORK, "c0"), (true, false), "{list}");
        assert_eq!(has_rules(&env, NETWORK, "c1"), (false, true), "{list}");
        assert_eq!(env.nft_ruleset().matches("macspoofchk-c").count(), 8);

        let mut gc = env.conf("1.1.0", &["10.1.9.0/24"], json!({}));
        // Set here: `merge` reads null as "remove the key".
        gc["cni.dev/valid-attachments"] = list.clone();
        gc["cni.dev/attachments"] = list.clone();
        env.plugin("GC", "", "", &gc)
            .run_in(&env.host)
            .assert_success();
        env.assert_clean();
    }
}

/// containerd polls STATUS every 5 s: it answers the same every time and changes nothing
/// (its cost is measured by the benchmarks, not here).
#[test]
#[ignore = "needs root"]
fn status_is_repeatable_and_changes_nothing() {
    if !privileged("status_is_repeatable_and_changes_nothing") {
        return;
    }
    let env = Env::new("status");
    let ctr = NamedNetns::new("ctr");
    let conf = masq(&env, "iptables");
    for _ in 0..5 {
        env.run("STATUS", &ctr, "", &conf).assert_success();
    }
    assert!(env.ip_files().is_empty());
    assert!(env.cni_nat_rules().is_empty());
}
