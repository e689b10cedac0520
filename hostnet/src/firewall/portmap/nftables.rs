//! Port mappings, nftables backend: tables `ip cni_hostport` and `ip6 cni_hostport` as the
//! reference's `portmap_nftables.go` (knftables) makes them, each attachment's rules named
//! by the container ID in their comment. Per family one `nft -j list` and one `nft -f -`
//! transaction.

use ipnetwork::IpNetwork;

use super::PortMaps;
use super::rules::{self, NFT_RULE_CHAINS, NFT_TABLE};
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

/// Installs the mappings to `ip`, replacing rules the attachment had (the reference adds
/// them again beside the old ones).
/// Refuses what the config gives that a script cannot carry.
pub fn validate(maps: &PortMaps, v6: bool) -> Result<()> {
    nft::check_comment(maps.container_id)?;
    rules::nft_base(maps, v6).map(drop)
}

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
/// [`add`] writes there.
pub fn check(maps: &PortMaps, ip: &IpNetwork) -> Result<bool> {
    let listing = nft::list(&table(ip.is_ipv6()))?.unwrap_or_default();
    Ok(rules::nft_expected(maps, ip).iter().all(|(chain, want)| {
        let have = (listing.rules_in(chain))
            .filter(|r| r.comment.as_deref() == Some(maps.container_id))
            .count();
        have >= *want
    }))
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
