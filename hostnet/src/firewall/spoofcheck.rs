//! macspoofchk: drop frames from a container whose source MAC is not the
//! container's, as the Go plugin's `pkg/link/spoofcheck.go` does:
//!
//! ```text
//! table bridge nat
//!   chain PREROUTING  (type filter hook prerouting priority -300; policy accept)
//!     iifname "<hostVeth>" jump cni-br-iface-<id>-<if>     comment "macspoofchk-<id>-<if>"
//!   chain cni-br-iface-<id>-<if>
//!     jump cni-br-iface-<id>-<if>-mac                       comment "macspoofchk-<id>-<if>"
//!   chain cni-br-iface-<id>-<if>-mac
//!     ether saddr <mac> return                              comment "macspoofchk-<id>-<if>"
//!     drop                                                  comment "macspoofchk-<id>-<if>"
//! ```
//!
//! The reference needs two transactions for setup. Ours is one `nft -j -f -` for a new
//! attachment; when its chains exist, one `nft -j list` (to replace the earlier
//! PREROUTING jump: repeated setup stays idempotent, where the reference would add a
//! second jump) and one `nft -j -f -` (nft accepts `flush chain` of a chain added
//! earlier in the same batch).
//! Batches are JSON, as the reference's: chain names hold the CNI ifname, which
//! may be any of `e@0`, `e{}`, `e"x`, ... that nft's text syntax cannot spell.
//! Teardown keeps the table and the PREROUTING base chain, as the reference.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::error::{FirewallError, Result};
use super::names::{
    spoofcheck_comment, spoofcheck_iface_chain, spoofcheck_mac_chain, spoofcheck_ref,
};
use super::nft::{self, Batch, Listing, json_literal};

const FAMILY: &str = "bridge";
const TABLE: &str = "nat";
const BASE_CHAIN: &str = "PREROUTING";
const LIST: [&str; 3] = ["table", FAMILY, TABLE];
const IFACE_PREFIX: &str = "cni-br-iface-";
const COMMENT_PREFIX: &str = "macspoofchk-";

/// Where one attachment's rules live, for a message that must lead an admin to them:
/// `nft chain "cni-br-iface-<id>-<if>" in table bridge nat`.
pub fn rules_place(container_id: &str, ifname: &str) -> String {
    let chain = spoofcheck_iface_chain(&spoofcheck_ref(container_id, ifname));
    format!("nft chain {chain:?} in table {FAMILY} {TABLE}")
}

/// Install the anti-spoofing chains for one attachment.
pub fn setup(container_id: &str, ifname: &str, host_veth: &str, mac: &str) -> Result<()> {
    let reference = spoofcheck_ref(container_id, ifname);
    let (iface, mac_chain, comment) = names(&reference);
    let iface_target = json_literal("interface name", &iface)?;
    let iif = json_literal("host interface name", host_veth)?;
    let mac = normalize_mac(mac)?;
    let rule = |chain: &str, expr: Value| {
        add(
            "rule",
            json!({ "chain": chain, "comment": comment, "expr": expr }),
        )
    };
    let base = [
        json!({ "add": { "table": { "family": FAMILY, "name": TABLE } } }),
        add(
            "chain",
            json!({ "name": BASE_CHAIN, "type": "filter", "hook": "prerouting",
                    "prio": -300, "policy": "accept" }),
        ),
    ];
    let rules = [
        rule(BASE_CHAIN, iif_jump(&iif, &iface_target)),
        rule(&iface, jump(&mac_chain)),
        rule(&mac_chain, mac_return(&mac)),
        rule(&mac_chain, json!([{ "drop": null }])),
    ];
    let chains =
        |verb: &str| [&iface, &mac_chain].map(|c| command(verb, "chain", json!({ "name": c })));
    // A new attachment costs one process: `create chain` fails, atomically and changing
    // nothing, when either chain exists (and a PREROUTING jump needs its chain); then the
    // listing path below replaces what is there.
    let fresh: Vec<Value> = [&base[..], &chains("create"), &rules].concat();
    if fresh.apply().is_ok() {
        return Ok(());
    }
    nft::read_plan_apply(&LIST, |listing| {
        let mut batch = base.to_vec();
        batch.extend(chains("add"));
        batch.extend(chains("flush"));
        batch.extend(jumps_with_comment(listing, &comment).map(delete_rule));
        batch.extend(rules.iter().cloned());
        batch
    })
}

/// `{"<verb>": {"<object>": {family, table, ...fields}}}`.
fn command(verb: &str, object: &str, fields: Value) -> Value {
    let mut body = json!({ "family": FAMILY, "table": TABLE });
    if let (Some(body), Value::Object(fields)) = (body.as_object_mut(), fields) {
        body.extend(fields);
    }
    json!({ verb: { object: body } })
}

fn add(object: &str, fields: Value) -> Value {
    command("add", object, fields)
}

fn delete_rule(handle: u64) -> Value {
    command(
        "delete",
        "rule",
        json!({ "chain": BASE_CHAIN, "handle": handle }),
    )
}

fn delete_chain(handle: u64) -> Value {
    command("delete", "chain", json!({ "handle": handle }))
}

/// Rule expressions, in the form `nft -j list` shows them back (`check`
/// compares with these; a jump target is listed unescaped).
fn iif_jump(iif: &str, target: &str) -> Value {
    json!([
        { "match": { "op": "==", "left": { "meta": { "key": "iifname" } }, "right": iif } },
        { "jump": { "target": target } }
    ])
}

fn jump(target: &str) -> Value {
    json!([{ "jump": { "target": target } }])
}

fn mac_return(mac: &str) -> Value {
    json!([
        { "match": { "op": "==", "left": { "payload": { "protocol": "ether", "field": "saddr" } },
                     "right": mac } },
        { "return": null }
    ])
}

/// Remove the attachment's PREROUTING jump and both of its chains; whatever
/// is already gone is skipped.
pub fn teardown(container_id: &str, ifname: &str) -> Result<()> {
    // No name goes into the batch (see `removal`): any container id and ifname will do.
    let reference = spoofcheck_ref(container_id, ifname);
    nft::read_plan_apply(&LIST, |listing| removal(listing, &reference))
}

/// Whether the attachment's rules are all present as `setup` writes them.
pub fn check(container_id: &str, ifname: &str, host_veth: &str, mac: &str) -> Result<bool> {
    let (iface, mac_chain, comment) = names(&spoofcheck_ref(container_id, ifname));
    let iif = json_literal("host interface name", host_veth)?;
    let mac = normalize_mac(mac)?;
    let Some(listing) = nft::list(&LIST)? else {
        return Ok(false);
    };
    let has = |chain: &str, expr: Value| {
        listing
            .rules_in(chain)
            .any(|r| r.comment.as_deref() == Some(comment.as_str()) && r.expr == expr)
    };
    Ok(has(BASE_CHAIN, iif_jump(&iif, &iface))
        && has(&iface, jump(&mac_chain))
        && has(&mac_chain, mac_return(&mac))
        && has(&mac_chain, json!([{ "drop": null }])))
}

/// Remove the rules and chains of every attachment not in `valid` (pairs of
/// container id and ifname). The rules carry no network name, while CNI GC is
/// per network; so an attachment whose host interface (the PREROUTING
/// `iifname`) still exists is kept: it may belong to another network.
pub fn gc(valid: &[(&str, &str)]) -> Result<()> {
    let keep: BTreeSet<String> = valid
        .iter()
        .map(|(id, ifname)| spoofcheck_ref(id, ifname))
        .collect();
    let live = live_interfaces();
    nft::read_plan_apply(&LIST, |listing| {
        let in_use = refs_with_live_interface(listing, &live);
        references(listing)
            .into_iter()
            .filter(|r| !keep.contains(r) && !in_use.contains(r))
            .flat_map(|r| removal(listing, &r))
            .collect::<Vec<Value>>()
    })
}

fn names(reference: &str) -> (String, String, String) {
    (
        spoofcheck_iface_chain(reference),
        spoofcheck_mac_chain(reference),
        spoofcheck_comment(reference),
    )
}

/// `aa:bb:cc:dd:ee:ff`, lower case (the form nft lists).
fn normalize_mac(mac: &str) -> Result<String> {
    let parts: Vec<&str> = mac.split(':').collect();
    let ok = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        return Err(FirewallError::InvalidName {
            what: "MAC address",
            value: mac.to_string(),
        });
    }
    Ok(mac.to_ascii_lowercase())
}

/// Handles of PREROUTING rules carrying `comment` (the reference finds its
/// jump the same way: by comment, ignoring the expression).
fn jumps_with_comment<'a>(
    listing: &'a Listing,
    comment: &'a str,
) -> impl Iterator<Item = u64> + 'a {
    listing
        .rules_in(BASE_CHAIN)
        .filter(move |r| r.comment.as_deref() == Some(comment))
        .map(|r| r.handle)
}

/// Batch removing one attachment: its PREROUTING jump, then its chains (the interface
/// chain first, as it jumps to the MAC chain; deleting a chain takes its rules along).
/// Everything is named by handle, so no name needs spelling.
fn removal(listing: &Listing, reference: &str) -> Vec<Value> {
    let (iface, mac_chain, comment) = names(reference);
    let mut batch: Vec<Value> = jumps_with_comment(listing, &comment)
        .map(delete_rule)
        .collect();
    batch.extend(
        [&iface, &mac_chain]
            .into_iter()
            .filter_map(|c| listing.chain_handle(c))
            .map(delete_chain),
    );
    batch
}

/// Every attachment reference found in the table: from rule comments and from
/// chain names (a flushed chain has no comment left).
fn references(listing: &Listing) -> BTreeSet<String> {
    let mut refs: BTreeSet<String> = listing
        .rules
        .iter()
        .filter_map(|r| r.comment.as_deref()?.strip_prefix(COMMENT_PREFIX))
        .map(str::to_string)
        .collect();
    for chain in listing.chains.iter().map(|c| &c.name) {
        let Some(rest) = chain.strip_prefix(IFACE_PREFIX) else {
            continue;
        };
        // `<ref>-mac` is the MAC chain of <ref> when <ref>'s own chain exists.
        let is_mac_chain = rest
            .strip_suffix("-mac")
            .is_some_and(|stem| listing.has_chain(&spoofcheck_iface_chain(stem)));
        if !is_mac_chain {
            refs.insert(rest.to_string());
        }
    }
    refs
}

/// References whose PREROUTING jump matches an interface that exists.
fn refs_with_live_interface(listing: &Listing, live: &BTreeSet<String>) -> BTreeSet<String> {
    listing
        .rules_in(BASE_CHAIN)
        .filter_map(|r| {
            let reference = r.comment.as_deref()?.strip_prefix(COMMENT_PREFIX)?;
            let iif = r.expr.get(0)?.get("match")?.get("right")?.as_str()?;
            // Listed as written: a trailing `*` escaped (see `json_literal`).
            let iif = match iif.strip_suffix("\\*") {
                Some(stem) => format!("{stem}*"),
                None => iif.to_string(),
            };
            live.contains(&iif).then(|| reference.to_string())
        })
        .collect()
}

/// Interface names of the calling thread's network namespace (tests run on a
/// thread in its own netns, hence `thread-self`, not `self`).
fn live_interfaces() -> BTreeSet<String> {
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    dev.lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_validated() {
        assert_eq!(
            normalize_mac("0A:58:0a:01:00:05").unwrap(),
            "0a:58:0a:01:00:05"
        );
        assert!(normalize_mac("0a:58:0a:01:00").is_err());
        assert!(normalize_mac("0a:58:0a:01:00:zz").is_err());
    }

    #[test]
    fn references_from_names_and_comments() {
        let listing = Listing {
            chains: [
                "PREROUTING",
                "cni-br-iface-a-eth0",
                "cni-br-iface-a-eth0-mac",
                "cni-br-iface-b-eth0-mac",
            ]
            .into_iter()
            .zip(1..)
            .map(|(name, handle)| nft::Chain {
                name: name.into(),
                handle,
            })
            .collect(),
            rules: vec![nft::Rule {
                chain: "PREROUTING".into(),
                handle: 3,
                comment: Some("macspoofchk-c-net1".into()),
                expr: serde_json::Value::Null,
            }],
        };
        let refs: Vec<String> = references(&listing).into_iter().collect();
        assert_eq!(refs, vec!["a-eth0", "b-eth0-mac", "c-net1"]);
    }
}
