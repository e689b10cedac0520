//! ipMasq, nftables backend, identical to the Go plugin's
//! `pkg/ip/ipmasq_nftables_linux.go` (knftables): table
//! `inet cni_plugins_masquerade`, regular chain `masq_checks` with one rule per
//! container IP, base chain `postrouting` (nat, priority 100) rewritten on every
//! setup. Rules are identified by their comment's hash prefix, so teardown needs
//! no IPs. Each operation is one `nft -j list` plus at most one `nft -f -`.

use ipnetwork::IpNetwork;
use serde_json::{Value, json};

use super::error::Result;
use super::names::{nft_comment, nft_instance_hash, nft_network_hash};
use super::nft::{self, Listing};

const TABLE: &str = "cni_plugins_masquerade";
const CHAIN: &str = "masq_checks";
const POSTROUTING: &str = "postrouting";

/// The table, chains and `postrouting` rules exactly as knftables writes them
/// (the double spaces before `return` are the reference's).
fn base_script() -> String {
    let t = format!("inet {TABLE}");
    [
        format!(
            "add table {t} {{ comment \"Masquerading for plugins from github.com/containernetworking/plugins\" ; }}"
        ),
        format!(
            "add chain {t} {CHAIN} {{ comment \"Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet\" ; }}"
        ),
        format!("add chain {t} {POSTROUTING} {{ type nat hook postrouting priority 100 ; }}"),
        format!("flush chain {t} {POSTROUTING}"),
        format!("add rule {t} {POSTROUTING} ip daddr == 224.0.0.0/4  return"),
        format!("add rule {t} {POSTROUTING} ip6 daddr == ff00::/8  return"),
        format!("add rule {t} {POSTROUTING} goto {CHAIN}"),
    ]
    .join("\n")
        + "\n"
}

fn family_word(ip: &IpNetwork) -> &'static str {
    match ip {
        IpNetwork::V4(_) => "ip",
        IpNetwork::V6(_) => "ip6",
    }
}

fn rule_line(ip: &IpNetwork, comment: &str) -> String {
    let f = family_word(ip);
    format!(
        "add rule inet {TABLE} {CHAIN} {f} saddr == {} {f} daddr != {}/{} masquerade comment \"{comment}\"\n",
        ip.ip(),
        ip.network(),
        ip.prefix()
    )
}

fn delete_line(handle: u64) -> String {
    format!("delete rule inet {TABLE} {CHAIN} handle {handle}\n")
}

const LIST: [&str; 3] = ["table", "inet", TABLE];

/// Handles of `masq_checks` rules whose comment starts with `prefix`.
fn handles_with_prefix<'a>(
    listing: &'a Listing,
    prefix: &'a str,
) -> impl Iterator<Item = u64> + 'a {
    listing
        .rules_in(CHAIN)
        .filter(move |r| r.comment.as_deref().is_some_and(|c| c.starts_with(prefix)))
        .map(|r| r.handle)
}

/// Install masquerading for `ips`, replacing any rules of the same
/// network/ifname/container (so a reused IP never keeps a stale owner).
pub fn setup(network: &str, ifname: &str, container_id: &str, ips: &[IpNetwork]) -> Result<()> {
    let comment = nft_comment(network, ifname, container_id);
    nft::check_comment(&comment)?;
    let hash = nft_instance_hash(network, ifname, container_id);
    nft::read_plan_apply(&LIST, |listing| {
        let mut script = base_script();
        script.extend(handles_with_prefix(listing, &hash).map(delete_line));
        script.extend(ips.iter().map(|ip| rule_line(ip, &comment)));
        script
    })
}

/// Delete this attachment's rules (found by hash; no IPs needed). A missing
/// table or chain is not an error. Table and chains stay, as in the reference.
pub fn teardown(network: &str, ifname: &str, container_id: &str) -> Result<()> {
    let hash = nft_instance_hash(network, ifname, container_id);
    nft::read_plan_apply(&LIST, |listing| {
        handles_with_prefix(listing, &hash)
            .map(delete_line)
            .collect::<String>()
    })
}

/// Delete every rule of `network` whose attachment (container id, ifname) is
/// not in `valid`.
pub fn gc(network: &str, valid: &[(&str, &str)]) -> Result<()> {
    let keep: Vec<String> = valid
        .iter()
        .map(|(id, ifname)| nft_comment(network, ifname, id))
        .collect();
    let prefix = nft_network_hash(network);
    nft::read_plan_apply(&LIST, |listing| {
        listing
            .rules_in(CHAIN)
            .filter(|r| {
                r.comment
                    .as_deref()
                    .is_some_and(|c| c.starts_with(&prefix) && !keep.iter().any(|k| k == c))
            })
            .map(|r| delete_line(r.handle))
            .collect::<String>()
    })
}

/// Whether `postrouting` jumps to `masq_checks` and every IP has its rule.
pub fn check(network: &str, ifname: &str, container_id: &str, ips: &[IpNetwork]) -> Result<bool> {
    let comment = nft_comment(network, ifname, container_id);
    let listing = nft::list(&LIST)?.unwrap_or_default();
    let goto = json!([{ "goto": { "target": CHAIN } }]);
    if !listing.rules_in(POSTROUTING).any(|r| r.expr == goto) {
        return Ok(false);
    }
    Ok(ips.iter().all(|ip| {
        let want = expected_expr(ip);
        listing
            .rules_in(CHAIN)
            .any(|r| r.comment.as_deref() == Some(comment.as_str()) && r.expr == want)
    }))
}

/// The JSON `nft -j` shows for the rule `rule_line` writes.
fn expected_expr(ip: &IpNetwork) -> Value {
    let f = family_word(ip);
    json!([
        { "match": { "op": "==", "left": { "payload": { "protocol": f, "field": "saddr" } },
                     "right": ip.ip().to_string() } },
        { "match": { "op": "!=", "left": { "payload": { "protocol": f, "field": "daddr" } },
                     "right": { "prefix": { "addr": ip.network().to_string(), "len": ip.prefix() } } } },
        { "masquerade": null }
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_text_matches_reference() {
        let ip: IpNetwork = "192.168.1.1/24".parse().unwrap();
        assert_eq!(
            rule_line(&ip, &nft_comment("unit-test", "eth0", "one")),
            "add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment \"6fd94d501e58f0aa-287fc69eff0574a2, net: unit-test, if: eth0, id: one\"\n"
        );
        let ip6: IpNetwork = "fd00::1/64".parse().unwrap();
        assert!(
            rule_line(&ip6, "c").contains("ip6 saddr == fd00::1 ip6 daddr != fd00::/64 masquerade")
        );
    }
}
