//! Port mappings, nftables backend: tables `ip cni_hostport` and `ip6 cni_hostport` as the
//! reference's `portmap_nftables.go` (knftables) makes them, each attachment's rules named
//! by the container ID in their comment (see [`rules::nft_base`] for the layout). Per
//! family one `nft -j list` and one `nft -f -` transaction.

use ipnetwork::IpNetwork;

use super::PortMaps;
use serde_json::json;

use super::rules::{self, NFT_HOOKS, NFT_HOSTPORTS, NFT_HOSTPORTS_ALL, NFT_RULE_CHAINS, NFT_TABLE};
use crate::firewall::error::Result;
use crate::firewall::nft::{self, Listing};

fn table(v6: bool) -> [&'static str; 3] {
    ["table", rules::nft_family(v6), NFT_TABLE]
}

/// Deletions of the attachment's rules found in `listing`.
fn deletions(listing: &Listing, v6: bool, container_id: &str) -> Vec<String> {
    let f = rules::nft_family(v6);
    (listing.rules.iter())
        .filter(|r| NFT_RULE_CHAINS.contains(&r.chain.as_str()))
        .filter(|r| r.comment.as_deref() == Some(container_id))
        .map(|r| {
            format!(
                "delete rule {f} {NFT_TABLE} {} handle {}\n",
                r.chain, r.handle
            )
        })
        .collect()
}

/// Refuses what the config gives that a script cannot carry.
pub fn validate(maps: &PortMaps, v6: bool) -> Result<()> {
    nft::check_comment(maps.container_id)?;
    rules::nft_base(maps, v6).map(drop)
}

/// Installs the mappings to `ip`, replacing rules the attachment had (the reference adds
/// them again beside the old ones), its rules of an earlier layout included.
pub fn add(maps: &PortMaps, ip: &IpNetwork) -> Result<()> {
    let v6 = ip.is_ipv6();
    let base = rules::nft_base(maps, v6)?;
    let added: String = rules::nft_rules(maps, ip)
        .iter()
        .map(|r| format!("{r}\n"))
        .collect();
    nft::read_plan_apply(&table(v6), |listing| {
        let mut script = base.clone();
        script.extend(deletions(listing, v6, maps.container_id));
        script.push_str(&added);
        script
    })
}

/// As the reference checks: each chain holds at least as many of the attachment's rules as
/// [`add`] writes there. Beyond the reference, the table must route as [`add`] lays it out:
/// a table of the earlier layout maps forwarded traffic too, and only an ADD repairs it.
pub fn check(maps: &PortMaps, ip: &IpNetwork) -> Result<bool> {
    let listing = nft::list(&table(ip.is_ipv6()))?.unwrap_or_default();
    let counts = rules::nft_expected(maps, ip).iter().all(|(chain, want)| {
        let have = (listing.rules_in(chain))
            .filter(|r| r.comment.as_deref() == Some(maps.container_id))
            .count();
        have >= *want
    });
    Ok(counts && routes_local_only(&listing))
}

/// Whether each hook holds rules, every one a jump to `hostports_all` behind
/// `fib daddr type local`, and `hostports_all` jumps to `hostports`.
fn routes_local_only(listing: &Listing) -> bool {
    let fib = json!({ "match": { "op": "==", "right": "local",
        "left": { "fib": { "result": "type", "flags": ["daddr"] } } } });
    let jump = |to: &str| json!({ "jump": { "target": to } });
    let to_all = jump(NFT_HOSTPORTS_ALL);
    let guarded = |r: &nft::Rule| {
        r.expr
            .as_array()
            .is_some_and(|e| e.contains(&fib) && e.last() == Some(&to_all))
    };
    let hooks = NFT_HOOKS.iter().all(|hook| {
        let mut rules = listing.rules_in(hook).peekable();
        rules.peek().is_some() && rules.all(guarded)
    });
    let reaches =
        (listing.rules_in(NFT_HOSTPORTS_ALL)).any(|r| r.expr == json!([jump(NFT_HOSTPORTS)]));
    hooks && reaches
}

/// Deletes the attachment's rules in both families; a missing table has none. Tables and
/// chains stay, as in the reference.
pub fn remove(container_id: &str) -> Result<()> {
    let mut errs = Vec::new();
    for v6 in [false, true] {
        if let Err(e) = nft::read_plan_apply(&table(v6), |listing| {
            deletions(listing, v6, container_id).concat()
        }) {
            errs.push(e);
        }
    }
    crate::firewall::error::FirewallError::collect(errs)
}
