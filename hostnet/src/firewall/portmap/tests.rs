//! Rule generation, checked against what the Go plugin made (cluster-networking.md §4:
//! Debian's 1.1.1 on network `pmnet`, container `pm1`, address 10.249.0.5/24).

use super::rules::*;
use super::*;

fn tcp_and_udp() -> [PortMapping; 2] {
    [
        PortMapping {
            host_port: 30080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        },
        PortMapping {
            host_port: 30053,
            container_port: 53,
            protocol: Protocol::Udp,
            host_ip: Some("10.249.0.1".parse().unwrap()),
        },
    ]
}

fn maps(mappings: &[PortMapping]) -> PortMaps<'_> {
    PortMaps {
        network: "pmnet",
        container_id: "pm1",
        mappings,
        snat: true,
        masq_all: false,
        mark: MarkChain::Own { bit: 13 },
        conditions_v4: &[],
        conditions_v6: &[],
    }
}

const CHAIN: &str = "CNI-DN-052f95871406991a21dc1";

#[test]
fn iptables_rules_are_the_references() {
    let m = tcp_and_udp();
    let ip: IpNetwork = "10.249.0.5/24".parse().unwrap();
    let c = CHAIN;
    assert_eq!(
        dnat_rules(&maps(&m), &ip),
        [
            format!("-A {c} -s 10.249.0.0/24 -p tcp -m tcp --dport 30080 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {c} -s 127.0.0.1/32 -p tcp -m tcp --dport 30080 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {c} -p tcp -m tcp --dport 30080 -j DNAT --to-destination 10.249.0.5:80"),
            format!(
                "-A {c} -s 10.249.0.0/24 -d 10.249.0.1/32 -p udp -m udp --dport 30053 -j CNI-HOSTPORT-SETMARK"
            ),
            format!(
                "-A {c} -s 127.0.0.1/32 -d 10.249.0.1/32 -p udp -m udp --dport 30053 -j CNI-HOSTPORT-SETMARK"
            ),
            format!(
                "-A {c} -d 10.249.0.1/32 -p udp -m udp --dport 30053 -j DNAT --to-destination 10.249.0.5:53"
            ),
        ]
    );
    let comment = r#""dnat name: \"pmnet\" id: \"pm1\"""#;
    let saved: Vec<String> = entry_rules(&maps(&m), false)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(
        saved,
        [
            format!(
                "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment {comment} -m multiport --dports 30080 -j {c}"
            ),
            format!(
                "-A CNI-HOSTPORT-DNAT -p udp -m comment --comment {comment} -m multiport --dports 30053 -j {c}"
            ),
        ]
    );
    assert_eq!(
        setmark_rule(13),
        "-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000"
    );
    assert_eq!(
        masq_rule(13),
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE"
    );
    assert_eq!(
        masq_rule(0),
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x1/0x1 -j MASQUERADE"
    );
    assert_eq!(
        top_jumps()[1],
        "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT"
    );
}

#[test]
fn ipv6_skips_other_family_host_ips_and_localhost() {
    let m = tcp_and_udp();
    let ip: IpNetwork = "fd00::5/64".parse().unwrap();
    // The udp mapping's hostIP is IPv4: no IPv6 rule for it, but its port is in the jump.
    assert_eq!(
        dnat_rules(&maps(&m), &ip),
        [
            format!("-A {CHAIN} -s fd00::/64 -p tcp -m tcp --dport 30080 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {CHAIN} -p tcp -m tcp --dport 30080 -j DNAT --to-destination [fd00::5]:80"),
        ]
    );
    assert_eq!(entry_rules(&maps(&m), true).unwrap().len(), 2);
}

#[test]
fn options_shape_the_rules() {
    let ip: IpNetwork = "10.249.0.5/24".parse().unwrap();
    let m = [PortMapping {
        host_port: 8443,
        container_port: 443,
        protocol: Protocol::Sctp,
        host_ip: Some("0.0.0.0".parse().unwrap()),
    }];
    let mut pm = maps(&m);
    pm.snat = false;
    assert_eq!(
        dnat_rules(&pm, &ip),
        [format!(
            "-A {CHAIN} -p sctp -m sctp --dport 8443 -j DNAT --to-destination 10.249.0.5:443"
        )]
    );
    pm.snat = true;
    pm.masq_all = true;
    pm.mark = MarkChain::External("KUBE-MARK-MASQ".into());
    assert_eq!(
        dnat_rules(&pm, &ip)[0],
        format!("-A {CHAIN} -p sctp -m sctp --dport 8443 -j KUBE-MARK-MASQ")
    );
    assert_eq!(dnat_rules(&pm, &ip).len(), 2);
    let conds = ["-s".to_string(), "192.0.2.0/24".into(), "a b".into()];
    pm.conditions_v4 = &conds;
    let (saved, write) = entry_rules(&pm, false).unwrap().remove(0);
    assert!(saved.ends_with(&format!("--dports 8443 -j {CHAIN}")));
    assert!(write.ends_with(&format!("--dports 8443 -s 192.0.2.0/24 \"a b\" -j {CHAIN}")));
    let bad = ["x\" -j ACCEPT".to_string()];
    pm.conditions_v4 = &bad;
    assert!(entry_rules(&pm, false).is_err());
}

#[test]
fn multiport_takes_fifteen_ports_a_rule_and_protocols_sort() {
    let m: Vec<PortMapping> = (0..20)
        .map(|i| PortMapping {
            host_port: 9000 + i,
            container_port: 80,
            protocol: if i == 19 {
                Protocol::Sctp
            } else {
                Protocol::Udp
            },
            host_ip: None,
        })
        .collect();
    let e = entry_rules(&maps(&m), false).unwrap();
    assert_eq!(e.len(), 3);
    assert!(e[0].0.contains("-p sctp") && e[0].0.contains("--dports 9019 "));
    let fifteen: Vec<String> = (9000..9015).map(|p| p.to_string()).collect();
    assert!(e[1].0.contains(&format!("--dports {} ", fifteen.join(","))));
    assert!(e[2].0.contains("--dports 9015,9016,9017,9018 "));
}

#[test]
fn chain_names_and_comments() {
    assert_eq!(dnat_chain("pmnet", "pm1"), CHAIN);
    assert_eq!(dnat_chain("pmnet", "pm1").len(), 28);
    assert!(old_snat_chain("pmnet", "pm1").starts_with("CNI-SN-"));
    let long = "x".repeat(300);
    let c = comment("n", &long);
    assert_eq!(c.len(), 256);
    assert!(c.ends_with("..."));
}

/// As the Go plugin (v1.9's rule form, #1210's layout) writes them: every mapping in
/// `hostports`, a `hostIP` one with its `daddr`.
#[test]
fn nft_rules_are_what_knftables_writes() {
    let m = tcp_and_udp();
    let ip: IpNetwork = "10.249.0.5/24".parse().unwrap();
    assert_eq!(
        nft_rules(&maps(&m), &ip),
        [
            "add rule ip cni_hostport hostports tcp dport 30080 dnat to 10.249.0.5:80 comment \"pm1\"",
            "add rule ip cni_hostport hostports ip daddr 10.249.0.1 udp dport 30053 dnat to 10.249.0.5:53 comment \"pm1\"",
            "add rule ip cni_hostport masquerading ip saddr 10.249.0.5 ip daddr 10.249.0.5 masquerade comment \"pm1\"",
            "add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr 10.249.0.5 masquerade comment \"pm1\"",
        ]
    );
    assert_eq!(
        nft_expected(&maps(&m), &ip),
        [("hostports", 2), ("masquerading", 2)]
    );
    let ip6: IpNetwork = "fd00::5/64".parse().unwrap();
    assert_eq!(
        nft_rules(&maps(&m), &ip6)[0],
        "add rule ip6 cni_hostport hostports tcp dport 30080 dnat to [fd00::5]:80 comment \"pm1\""
    );
    assert_eq!(
        nft_expected(&maps(&m), &ip6),
        [("hostports", 1), ("masquerading", 1)]
    );
}

/// Both hooks reach the mappings only for a local destination, through `hostports_all`.
#[test]
fn nft_hooks_map_only_traffic_to_the_node() {
    let m = tcp_and_udp();
    let conds = [
        "ip".to_string(),
        "daddr".into(),
        "!=".into(),
        "10.0.0.9".into(),
    ];
    let mut pm = maps(&m);
    pm.conditions_v4 = &conds;
    let base = nft_base(&pm, false).unwrap();
    let t = "ip cni_hostport";
    let want = [
        format!("add table {t} {{ comment \"CNI portmap plugin\" ; }}"),
        format!("add chain {t} hostports"),
        format!("add chain {t} hostip_hostports"),
        format!("add chain {t} hostports_all"),
        format!("flush chain {t} hostports_all"),
        format!("add rule {t} hostports_all jump hostip_hostports"),
        format!("add rule {t} hostports_all jump hostports"),
        format!("add chain {t} prerouting {{ type nat hook prerouting priority -100 ; }}"),
        format!("flush chain {t} prerouting"),
        format!(
            "add rule {t} prerouting ip daddr != 10.0.0.9 fib daddr type local jump hostports_all"
        ),
        format!("add chain {t} output {{ type nat hook output priority -100 ; }}"),
        format!("flush chain {t} output"),
        format!("add rule {t} output ip daddr != 10.0.0.9 fib daddr type local jump hostports_all"),
        format!("add chain {t} masquerading {{ type nat hook postrouting priority 100 ; }}"),
    ];
    assert_eq!(base.lines().collect::<Vec<_>>(), want);
    // Every rule that reaches a mapping chain from a hook passes the fib check.
    for line in base.lines().filter(|l| l.contains("jump")) {
        let from_hook = NFT_HOOKS
            .iter()
            .any(|h| line.starts_with(&format!("add rule {t} {h} ")));
        assert!(
            !from_hook || line.contains("fib daddr type local"),
            "{line}"
        );
    }
}

#[test]
fn protocols_parse_in_any_case() {
    assert_eq!(Protocol::parse("TCP"), Some(Protocol::Tcp));
    assert_eq!(Protocol::parse("sctp"), Some(Protocol::Sctp));
    assert_eq!(Protocol::parse("icmp"), None);
    assert_eq!(Protocol::parse(""), None);
}
