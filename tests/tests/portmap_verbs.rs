//! portmap's verbs beyond the happy path: no mappings, bad input, DEL in every state of
//! the container, CHECK, GC, STATUS, the nftables backend and a failed ADD.

#[path = "portmap_support/mod.rs"]
mod support;

use cni_tests::PluginRun;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

fn run(node: &Node, cmd: &str, pod: &Pod, conf: &Value) -> cni_tests::PluginOutput {
    node.portmap(&ours(), cmd, pod, conf)
}

#[test]
#[ignore = "needs root"]
fn no_mappings_passes_the_result_on_and_changes_nothing() {
    if !privileged("no_mappings_passes_the_result_on_and_changes_nothing") {
        return;
    }
    let node = Node::new("pmnone");
    let pod = node.attach("pm-none");
    let before = node.host().exec_in(&["iptables-save", "-t", "nat"]);
    node.map(&ours(), &pod, &[]);
    let conf = node.portmap_conf(&[], Some(&pod.result), json!({}));
    run(&node, "DEL", &pod, &conf).assert_success();
    let after = node.host().exec_in(&["iptables-save", "-t", "nat"]);
    let rules = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(rules(&before), rules(&after));
    // Not chained: refused.
    let (code, msg) = error_of(&run(
        &node,
        "ADD",
        &pod,
        &node.portmap_conf(&[tcp(1, 1)], None, json!({})),
    ));
    assert_eq!(
        (code, msg.as_str()),
        (7, "must be called as chained plugin")
    );
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn bad_input_is_refused_naming_the_field_and_changes_nothing() {
    if !privileged("bad_input_is_refused_naming_the_field_and_changes_nothing") {
        return;
    }
    let node = Node::new("pmbad");
    let pod = node.attach("pm-bad");
    let good = tcp(30080, 80);
    for (bad, field) in [
        (tcp(0, 80), "portMappings[1].hostPort"),
        (tcp(65535, 80), ""),
        (
            json!({"hostPort": 65536, "containerPort": 80, "protocol": "tcp"}),
            "portMappings[1].hostPort",
        ),
        (
            json!({"hostPort": 80, "containerPort": 0, "protocol": "tcp"}),
            "portMappings[1].containerPort",
        ),
        (
            json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}),
            "portMappings[1].protocol",
        ),
        (on(tcp(80, 80), "10.0.0.300"), "portMappings[1].hostIP"),
        (on(tcp(80, 80), "localhost"), "portMappings[1].hostIP"),
    ] {
        if field.is_empty() {
            continue; // 65535 is a valid port (only here to keep the bounds in view).
        }
        let conf = node.portmap_conf(&[good.clone(), bad], Some(&pod.result), json!({}));
        let (code, msg) = error_of(&run(&node, "ADD", &pod, &conf));
        assert_eq!(code, 7, "{msg}");
        assert!(msg.contains(field), "{msg:?} names {field}");
        node.assert_no_portmap_rules();
    }
    for (extra, msg) in [
        (
            json!({"markMasqBit": 32}),
            "MasqMarkBit must be between 0 and 31",
        ),
        (json!({"backend": "pf"}), "unrecognized backend \"pf\""),
        (
            json!({"conditionsV4": ["-s", "x\ny"]}),
            "iptables condition",
        ),
    ] {
        let conf = node.portmap_conf(std::slice::from_ref(&good), Some(&pod.result), extra);
        let (code, got) = error_of(&run(&node, "ADD", &pod, &conf));
        assert_eq!(code, 7);
        assert!(got.contains(msg), "{got:?}");
        node.assert_no_portmap_rules();
    }
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn del_removes_the_rules_whatever_is_left_of_the_container() {
    if !privileged("del_removes_the_rules_whatever_is_left_of_the_container") {
        return;
    }
    let node = Node::new("pmdel");
    let pod = node.attach("pm-del");
    let mappings = [tcp(30080, 80), udp(30053, 53)];
    let cases: [(&str, Value, &str); 4] = [
        (
            "no prevResult",
            node.portmap_conf(&mappings, None, json!({})),
            "",
        ),
        (
            "netns gone",
            node.portmap_conf(&mappings, None, json!({})),
            "/run/netns/cnirs-gone",
        ),
        (
            "broken config",
            node.portmap_conf(
                &[tcp(0, 80)],
                Some(&pod.result),
                json!({"markMasqBit": 99, "snat": "yes"}),
            ),
            "",
        ),
        (
            "second DEL",
            node.portmap_conf(&mappings, Some(&pod.result), json!({})),
            "",
        ),
    ];
    for (what, conf, netns) in cases {
        if what != "second DEL" {
            node.map(&ours(), &pod, &mappings);
            assert!(!node.attachment_rules().is_empty());
        }
        let netns = if netns.is_empty() {
            pod.ns.path().to_str().unwrap()
        } else {
            netns
        };
        PluginRun::new(ours())
            .command("DEL")
            .container_id(&pod.id)
            .netns(netns)
            .ifname(IFNAME)
            .cni_path([node.env.cni.path()])
            .stdin(conf.to_string())
            .run_in(node.host())
            .assert_success();
        assert_eq!(node.attachment_rules(), Vec::<String>::new(), "{what}");
    }
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn check_finds_missing_rules() {
    if !privileged("check_finds_missing_rules") {
        return;
    }
    let node = Node::new("pmcheck");
    let pod = node.attach("pm-check");
    let mappings = [tcp(30080, 80), on(udp(30053, 53), GATEWAY4)];
    let conf = node.portmap_conf(&mappings, Some(&pod.result), json!({}));
    node.map(&ours(), &pod, &mappings);
    run(&node, "CHECK", &pod, &conf).assert_success();
    // The Go plugin's rules pass our CHECK too.
    node.unmap(&ours(), &pod, &mappings);
    let (code, _) = error_of(&run(&node, "CHECK", &pod, &conf));
    assert_eq!(code, 999);
    node.map(&go(), &pod, &mappings);
    run(&node, "CHECK", &pod, &conf).assert_success();
    // One rule gone: CHECK fails.
    let dnat = node
        .attachment_rules()
        .into_iter()
        .find(|r| r.contains("--dport 30053 -j DNAT"))
        .unwrap();
    let delete: Vec<String> = dnat
        .replacen("-A", "-D", 1)
        .split(' ')
        .map(str::to_string)
        .collect();
    let mut argv = vec!["iptables", "-w", "-t", "nat"];
    argv.extend(delete.iter().map(String::as_str));
    node.host().exec_in(&argv);
    let (code, msg) = error_of(&run(&node, "CHECK", &pod, &conf));
    assert_eq!(code, 999);
    assert!(msg.contains("missing port mapping rules"), "{msg}");
    let no_prev = node.portmap_conf(&mappings, None, json!({}));
    let (code, msg) = error_of(&run(&node, "CHECK", &pod, &no_prev));
    assert_eq!((code, msg.as_str()), (7, "Required prevResult missing"));
    node.unmap(&ours(), &pod, &mappings);
    node.detach(&pod);
}

fn gc(node: &Node, valid: Option<Value>) {
    let mut conf = json!({"cniVersion": "1.1.0", "name": NETWORK, "type": "portmap"});
    if let Some(v) = valid {
        conf["cni.dev/valid-attachments"] = v;
    }
    PluginRun::new(ours())
        .command("GC")
        .cni_path([node.env.cni.path()])
        .stdin(conf.to_string())
        .run_in(node.host())
        .assert_success();
}

#[test]
#[ignore = "needs root"]
fn gc_removes_the_rules_of_attachments_not_listed() {
    if !privileged("gc_removes_the_rules_of_attachments_not_listed") {
        return;
    }
    let node = Node::new("pmgc");
    let kept = node.attach("pm-kept");
    let stale = node.attach("pm-stale");
    node.map(&ours(), &kept, &[tcp(30080, 80)]);
    node.map(&go(), &stale, &[tcp(30090, 90)]);
    let has = |port: &str| node.attachment_rules().iter().any(|r| r.contains(port));
    gc(&node, None);
    assert!(has("30080") && has("30090"), "without the key nothing goes");
    gc(
        &node,
        Some(json!([{"containerID": "pm-kept", "ifname": IFNAME}])),
    );
    assert!(has("30080") && !has("30090"));
    gc(&node, Some(Value::Null));
    assert_eq!(
        node.attachment_rules(),
        Vec::<String>::new(),
        "null is an empty list"
    );
    node.detach(&kept);
    node.detach(&stale);
}

#[test]
#[ignore = "needs root"]
fn status_says_whether_the_backend_works() {
    if !privileged("status_says_whether_the_backend_works") {
        return;
    }
    let node = Node::new("pmstatus");
    let status = |extra: Value, path: &str| {
        let conf = merge(
            json!({"cniVersion": "1.1.0", "name": NETWORK, "type": "portmap"}),
            extra,
        );
        PluginRun::new(ours())
            .command("STATUS")
            .env("PATH", path)
            .cni_path([node.env.cni.path()])
            .stdin(conf.to_string())
            .run_in(node.host())
    };
    let system = std::env::var("PATH").unwrap_or_default();
    status(json!({}), &system).assert_success();
    status(json!({"backend": "nftables"}), &system).assert_success();
    for extra in [
        json!({}),
        json!({"backend": "iptables"}),
        json!({"backend": "nftables"}),
    ] {
        let (code, msg) = error_of(&status(extra, "/nonexistent"));
        assert_eq!(code, 50, "{msg}");
        assert!(msg.contains("not usable"), "{msg}");
    }
}

#[test]
#[ignore = "needs root"]
fn nftables_backend_maps_checks_and_unmaps() {
    if !privileged("nftables_backend_maps_checks_and_unmaps") {
        return;
    }
    let node = Node::new("pmnft");
    let client = node.client();
    let pod = node.attach("pm-nft");
    let _tcp = TcpServer::start(&pod.ns, 80, "pod");
    let mappings = [tcp(30080, 80), on(tcp(30081, 80), NODE6)];
    let extra = json!({"backend": "nftables"});
    node.map_with(&ours(), &pod, &mappings, extra.clone());
    node.assert_no_portmap_rules();
    let ruleset = node.env.nft_ruleset();
    assert!(
        ruleset.contains("table ip cni_hostport") && ruleset.contains("table ip6 cni_hostport")
    );
    assert!(tcp_get(&client, &format!("{NODE4}:30080")).is_some());
    assert!(tcp_get(&client, &format!("[{NODE6}]:30081")).is_some());
    assert!(tcp_get(node.host(), "127.0.0.1:30080").is_some());
    let conf = node.portmap_conf(&mappings, Some(&pod.result), extra.clone());
    run(&node, "CHECK", &pod, &conf).assert_success();
    // A second ADD replaces the rules rather than doubling them.
    node.map_with(&ours(), &pod, &mappings, extra);
    assert_eq!(
        node.env.nft_ruleset().matches("comment \"pm-nft\"").count(),
        6
    );
    // DEL without the backend in the config still finds them.
    node.unmap(&ours(), &pod, &mappings);
    assert!(!node.env.nft_ruleset().contains("\"pm-nft\""));
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30080")), None);
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn a_failed_add_leaves_no_rule() {
    if !privileged("a_failed_add_leaves_no_rule") {
        return;
    }
    let node = Node::new("pmfail");
    let pod = node.attach("pm-fail");
    // The mark chain exists for IPv4 only: IPv4's batch applies, IPv6's fails.
    node.host()
        .exec_in(&["iptables", "-w", "-t", "nat", "-N", "KUBE-MARK-MASQ"]);
    let conf = node.portmap_conf(
        &[tcp(30080, 80)],
        Some(&pod.result),
        json!({"externalSetMarkChain": "KUBE-MARK-MASQ"}),
    );
    let (code, msg) = error_of(&run(&node, "ADD", &pod, &conf));
    assert_eq!(code, 999);
    assert!(msg.contains("ip6tables-restore"), "{msg}");
    assert_eq!(node.attachment_rules(), Vec::<String>::new());
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn concurrent_adds_on_a_fresh_node_keep_every_rule() {
    if !privileged("concurrent_adds_on_a_fresh_node_keep_every_rule") {
        return;
    }
    // Every ADD finds the shared chains missing and races to create them: the losers'
    // restores fail whole and are planned again, so no jump is flushed or doubled.
    let node = Node::new("pmconc");
    let pods: Vec<Pod> = (0..6)
        .map(|i| node.attach(&format!("pm-conc-{i}")))
        .collect();
    std::thread::scope(|s| {
        for (i, pod) in pods.iter().enumerate() {
            let node = &node;
            s.spawn(move || node.map(&ours(), pod, &[tcp(30100 + i as u16, 80)]));
        }
    });
    let rules = node.portmap_rules();
    for i in 0..6 {
        let jumps = (rules.iter())
            .filter(|r| {
                r.starts_with("-A CNI-HOSTPORT-DNAT")
                    && r.contains(&format!("--dports {} ", 30100 + i))
            })
            .count();
        assert_eq!(jumps, 2, "one jump per family for port {}", 30100 + i);
    }
    for shared in [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
    ] {
        assert_eq!(
            rules.iter().filter(|r| *r == shared).count(),
            2,
            "{shared} once per family"
        );
    }
    for (i, pod) in pods.iter().enumerate() {
        node.unmap(&ours(), pod, &[tcp(30100 + i as u16, 80)]);
        node.detach(pod);
    }
    assert_eq!(node.attachment_rules(), Vec::<String>::new());
}
