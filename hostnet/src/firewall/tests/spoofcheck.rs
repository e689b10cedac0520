//! macspoofchk against the kernel.

use super::support::{ODD_IFNAMES, netns_test, nft_apply, nft_list};
use crate::firewall::spoofcheck;

const TABLE: [&str; 3] = ["table", "bridge", "nat"];
const MAC: &str = "0a:58:0a:01:00:05";

fn attachment_chains(reference: &str, veth: &str, mac: &str) -> (String, String) {
    let c = format!("comment \"macspoofchk-{reference}\"");
    (
        format!("\t\tiifname \"{veth}\" jump cni-br-iface-{reference} {c}\n"),
        format!(
            "\n\tchain cni-br-iface-{reference} {{\n\
             \t\tjump cni-br-iface-{reference}-mac {c}\n\
             \t}}\n\n\
             \tchain cni-br-iface-{reference}-mac {{\n\
             \t\tether saddr {mac} return {c}\n\
             \t\tdrop {c}\n\
             \t}}\n"
        ),
    )
}

/// `nft list table bridge nat` with the given attachments (reference, veth, mac).
fn dump(attachments: &[(&str, &str, &str)]) -> String {
    let mut jumps = String::new();
    let mut chains = String::new();
    for (r, veth, mac) in attachments {
        let (j, c) = attachment_chains(r, veth, mac);
        jumps.push_str(&j);
        chains.push_str(&c);
    }
    format!(
        "table bridge nat {{\n\
         \tchain PREROUTING {{\n\
         \t\ttype filter hook prerouting priority dstnat; policy accept;\n\
         {jumps}\t}}\n{chains}}}\n"
    )
}

#[test]
#[ignore = "needs root"]
fn spoofcheck_setup_exact_idempotent_teardown() {
    netns_test("spoofcheck_setup_exact_idempotent_teardown", || {
        assert!(!spoofcheck::check("abc", "eth0", "veth1234", MAC).unwrap());
        // Nothing there: teardown is fine.
        spoofcheck::teardown("abc", "eth0").unwrap();

        spoofcheck::setup("abc", "eth0", "veth1234", "0A:58:0A:01:00:05").unwrap();
        let one = dump(&[("abc-eth0", "veth1234", MAC)]);
        assert_eq!(nft_list(&TABLE), one);
        assert!(spoofcheck::check("abc", "eth0", "veth1234", MAC).unwrap());
        assert!(!spoofcheck::check("abc", "eth0", "veth1234", "0a:58:0a:01:00:06").unwrap());
        assert!(!spoofcheck::check("abc", "eth0", "veth9999", MAC).unwrap());

        // Repeated setup: same state (one PREROUTING jump, not two).
        spoofcheck::setup("abc", "eth0", "veth1234", MAC).unwrap();
        assert_eq!(nft_list(&TABLE), one);

        spoofcheck::setup("def", "net1", "veth5678", MAC).unwrap();
        spoofcheck::teardown("abc", "eth0").unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[("def-net1", "veth5678", MAC)]));
        spoofcheck::teardown("def", "net1").unwrap();
        spoofcheck::teardown("def", "net1").unwrap();
        // Table and base chain stay, as in the reference.
        assert_eq!(nft_list(&TABLE), dump(&[]));
    });
}

#[test]
#[ignore = "needs root"]
fn spoofcheck_gc() {
    netns_test("spoofcheck_gc", || {
        spoofcheck::setup("keep", "eth0", "vethkeep", MAC).unwrap();
        spoofcheck::setup("gone", "eth0", "vethgone", MAC).unwrap();
        // Its host interface exists (lo stands in for a live veth): kept,
        // since it may belong to another network's attachment.
        spoofcheck::setup("othernet", "net1", "lo", MAC).unwrap();
        // A half-removed attachment: only its empty chains are left.
        spoofcheck::setup("half", "eth0", "vethhalf", MAC).unwrap();
        let prerouting = nft_list(&["chain", "bridge", "nat", "PREROUTING"]);
        assert!(prerouting.contains("vethhalf"));
        nft_apply(
            "flush chain bridge nat PREROUTING\n\
             flush chain bridge nat cni-br-iface-half-eth0\n\
             flush chain bridge nat cni-br-iface-half-eth0-mac\n",
        );
        spoofcheck::setup("keep", "eth0", "vethkeep", MAC).unwrap();
        spoofcheck::setup("gone", "eth0", "vethgone", MAC).unwrap();
        spoofcheck::setup("othernet", "net1", "lo", MAC).unwrap();

        spoofcheck::gc(&[("keep", "eth0")]).unwrap();
        assert_eq!(
            nft_list(&TABLE),
            dump(&[("keep-eth0", "vethkeep", MAC), ("othernet-net1", "lo", MAC)])
        );
    });
}

#[test]
#[ignore = "needs root"]
fn spoofcheck_unusual_ifnames() {
    netns_test("spoofcheck_unusual_ifnames", || {
        for ifname in ODD_IFNAMES {
            let reference = format!("a.B_c-{ifname}");
            spoofcheck::setup("a.B_c", ifname, "veth1234", MAC).unwrap();
            let one = dump(&[(&reference, "veth1234", MAC)]);
            assert_eq!(nft_list(&TABLE), one, "{ifname:?}");
            assert!(spoofcheck::check("a.B_c", ifname, "veth1234", MAC).unwrap());
            spoofcheck::setup("a.B_c", ifname, "veth1234", MAC).unwrap();
            assert_eq!(nft_list(&TABLE), one, "{ifname:?}");
            spoofcheck::teardown("a.B_c", ifname).unwrap();
            assert_eq!(nft_list(&TABLE), dump(&[]), "{ifname:?}");
        }
        for ifname in ODD_IFNAMES {
            spoofcheck::setup("gc", ifname, "veth1234", MAC).unwrap();
        }
        spoofcheck::gc(&[]).unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[]));
    });
}

/// A host interface name is matched literally: a trailing `*` is no wildcard;
/// names nft cannot take literally are refused, not misread.
#[test]
#[ignore = "needs root"]
fn spoofcheck_host_interface_literal() {
    netns_test("spoofcheck_host_interface_literal", || {
        spoofcheck::setup("abc", "eth0", "v*", MAC).unwrap();
        assert!(nft_list(&TABLE).contains("iifname \"v\\*\" jump cni-br-iface-abc-eth0"));
        assert!(spoofcheck::check("abc", "eth0", "v*", MAC).unwrap());
        assert!(!spoofcheck::check("abc", "eth0", "v", MAC).unwrap());
        spoofcheck::teardown("abc", "eth0").unwrap();
        assert!(spoofcheck::setup("abc", "eth0", "@v", MAC).is_err());
        assert!(spoofcheck::setup("abc", "e\\*", "veth1", MAC).is_err());
        assert_eq!(nft_list(&TABLE), dump(&[]));
    });
}
