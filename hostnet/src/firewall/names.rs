//! Names, hashes and comments, byte-identical to the Go reference
//! (containernetworking/plugins `pkg/utils`, `pkg/ip/ipmasq_*`, `pkg/link/spoofcheck.go`)
//! so that rules made by either implementation are found by the other.

use std::fmt::Write;

use sha2::{Digest, Sha512};

/// Lower-case hex of sha512(input).
fn sha512_hex(input: &str) -> String {
    let digest = Sha512::digest(input.as_bytes());
    let mut hex = String::with_capacity(128);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// iptables per-attachment chain: `CNI-` + 24 hex of sha512(network + containerID)
/// (`utils.FormatChainName`; 28 characters, under the 29-character limit).
pub fn iptables_chain(network: &str, container_id: &str) -> String {
    let hash = sha512_hex(&format!("{network}{container_id}"));
    format!("CNI-{}", &hash[..24])
}

/// iptables per-attachment chain with a kind prefix (portmap's `DN-`): `CNI-` + prefix + hex
/// of sha512(network + containerID), cut to 28 characters
/// (`utils.MustFormatChainNameWithPrefix`).
pub fn iptables_prefixed_chain(prefix: &str, network: &str, container_id: &str) -> String {
    let mut chain = format!(
        "CNI-{prefix}{}",
        sha512_hex(&format!("{network}{container_id}"))
    );
    chain.truncate(28);
    chain
}

/// iptables rule comment: `name: "<network>" id: "<containerID>"` with Go `%q`
/// quoting (`utils.FormatComment`).
pub fn iptables_comment(network: &str, container_id: &str) -> String {
    format!("name: {} id: {}", go_quote(network), go_quote(container_id))
}

/// nftables ipMasq: 16 hex of sha512(network) (`hashForNetwork`).
pub fn nft_network_hash(network: &str) -> String {
    sha512_hex(network)[..16].to_string()
}

/// nftables ipMasq: network hash + "-" + 16 hex of sha512(ifname + ":" + containerID)
/// (`hashForInstance`).
pub fn nft_instance_hash(network: &str, ifname: &str, container_id: &str) -> String {
    let instance = sha512_hex(&format!("{ifname}:{container_id}"));
    format!("{}-{}", nft_network_hash(network), &instance[..16])
}

/// Longest nft comment knftables accepts (`knftables.CommentLengthMax`).
const NFT_COMMENT_MAX: usize = 128;

/// nftables ipMasq rule comment (`commentForInstance`): the instance hash and a
/// human-readable tail with `"` removed, cut to 128 bytes.
pub fn nft_comment(network: &str, ifname: &str, container_id: &str) -> String {
    let strip = |s: &str| s.replace('"', "");
    let mut comment = format!(
        "{}, net: {}, if: {}, id: {}",
        nft_instance_hash(network, ifname, container_id),
        strip(network),
        strip(ifname),
        strip(container_id)
    );
    if comment.len() > NFT_COMMENT_MAX {
        // Go cuts bytes; we cut at the last char boundary (same for ASCII).
        let mut end = NFT_COMMENT_MAX;
        while !comment.is_char_boundary(end) {
            end -= 1;
        }
        comment.truncate(end);
    }
    comment
}

/// macspoofchk reference id: `<containerID>-<ifname>` (bridge.go `uniqueID`).
pub fn spoofcheck_ref(container_id: &str, ifname: &str) -> String {
    format!("{container_id}-{ifname}")
}

/// macspoofchk per-attachment chain: `cni-br-iface-<ref>`; its MAC chain adds `-mac`.
pub fn spoofcheck_iface_chain(reference: &str) -> String {
    format!("cni-br-iface-{reference}")
}

pub fn spoofcheck_mac_chain(reference: &str) -> String {
    format!("{}-mac", spoofcheck_iface_chain(reference))
}

/// macspoofchk rule comment: `macspoofchk-<ref>`.
pub fn spoofcheck_comment(reference: &str) -> String {
    format!("macspoofchk-{reference}")
}

pub use sysproc::goquote::quote as go_quote;

/// Inverse of [`go_quote`] for the escapes it produces for `"` and `\`; other
/// escapes give `None` (such a comment was not written by us or the reference
/// for any realistic name, and we do not guess).
pub fn go_unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                _ => return None,
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_golden_vectors() {
        // From pkg/ip/ipmasq_nftables_linux_test.go: (network, ifname, id, instance hash).
        for (network, ifname, id, hash) in [
            (
                "unit-test",
                "eth0",
                "one",
                "6fd94d501e58f0aa-287fc69eff0574a2",
            ),
            (
                "unit-test",
                "eth0",
                "two",
                "6fd94d501e58f0aa-d750b2c8f0f25d5f",
            ),
            (
                "unit-test",
                "eth0",
                "three",
                "6fd94d501e58f0aa-a4d4adb82b669cfe",
            ),
            (
                "alternate",
                "net1",
                "three",
                "82783ef24bdc7036-acb19d111858e348",
            ),
            (
                "unit-test",
                "eth0",
                "four",
                "6fd94d501e58f0aa-e766de567ef6c543",
            ),
        ] {
            assert_eq!(nft_instance_hash(network, ifname, id), hash);
            assert_eq!(
                nft_comment(network, ifname, id),
                format!("{hash}, net: {network}, if: {ifname}, id: {id}")
            );
        }
    }

    #[test]
    fn nft_comment_strips_quotes_and_truncates() {
        let long = "x".repeat(200);
        let c = nft_comment("n\"et", "eth0", &long);
        assert_eq!(c.len(), 128);
        assert!(c.contains(", net: net, if: eth0, id: xxx"));
    }

    #[test]
    fn iptables_chain_and_comment() {
        let chain = iptables_chain("net", "id");
        assert_eq!(chain.len(), 28);
        assert!(chain.starts_with("CNI-"));
        assert_eq!(chain, "CNI-30e7440e95deb2a63c98a3df");
        // The portmap chain of cluster-networking.md section 4 (Go 1.1.1 made it).
        assert_eq!(
            iptables_prefixed_chain("DN-", "pmnet", "pm1"),
            "CNI-DN-052f95871406991a21dc1"
        );
        assert_eq!(
            iptables_comment("my\"net", "c1"),
            r#"name: "my\"net" id: "c1""#
        );
    }

    #[test]
    fn quote_roundtrip() {
        for s in ["plain", "with \"quote\"", "back\\slash", ""] {
            assert_eq!(go_unquote(&go_quote(s)).as_deref(), Some(s));
        }
        assert_eq!(go_quote("a\nb\u{1}"), "\"a\\nb\\x01\"");
        assert_eq!(go_unquote("\"a\\nb\""), None);
    }

    #[test]
    fn spoofcheck_names() {
        let r = spoofcheck_ref("abc", "eth0");
        assert_eq!(spoofcheck_iface_chain(&r), "cni-br-iface-abc-eth0");
        assert_eq!(spoofcheck_mac_chain(&r), "cni-br-iface-abc-eth0-mac");
        assert_eq!(spoofcheck_comment(&r), "macspoofchk-abc-eth0");
    }
}
