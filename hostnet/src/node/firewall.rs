//! The node-level firewall as nf_tables objects.
//!
//! Table `inet cni-rs`, one chain `postrouting` (nat, srcnat priority) and per family two
//! interval sets, `pods4`/`pods6` (this node's pod ranges) and `nomasq4`/`nomasq6`
//! (destinations never masqueraded), with one rule per family:
//!
//! ```text
//! ip saddr @pods4 ip daddr != @nomasq4 ip daddr != 224.0.0.0/4 fib daddr type != local masquerade fully-random comment "cni-rs: masquerade v2"
//! ```
//!
//! `random-fully` as kube-proxy and flannel use it: without it, pods making many
//! connections to one destination collide on source ports and lose packets. Multicast
//! (224.0.0.0/4, ff00::/8) is never masqueraded. The comment names the rule's version: a
//! table made by an earlier version (same sets, other rule) does not match and is made anew.
//!
//! Forwarding: an accept in a base chain of ours cannot overrule another base chain's
//! drop, and the drop users meet is iptables' `FORWARD` policy (Docker sets it; Debian's
//! iptables is iptables-nft, so it is the nf_tables chain `ip filter FORWARD`). So when
//! that chain exists, we insert at its head, per pod range, the rules `iptables -I FORWARD
//! -i BRIDGE -s CIDR -j ACCEPT` and `-d CIDR` would make, encoded as iptables-nft encodes
//! them (so `iptables -S` still lists them) and commented [`FORWARD_COMMENT`] (rule
//! userdata, which iptables shows as `-m comment`), which is how we find exactly ours
//! again. Same for `ip6 filter FORWARD`. Everything, the old rules' removal included, is one
//! batch. The source rule holds only on the pods' bridge: without it, a packet with a
//! forged pod source from any interface would be forwarded anywhere past the policy. The
//! destination rule stays open: nodes, other nodes' pods and kube-proxy's DNATed traffic
//! reach pods (the Kubernetes network model; NetworkPolicy is what narrows that).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::nftnl::{
    self, BaseChain, CmpOp, Elem, Expr, Family, Hook, IntervalSet, Msg, NfSocket, NftError,
    RTN_LOCAL,
};

use super::{FamilyPolicy, NodePolicy};

pub const TABLE: &str = "cni-rs";
const NAT_CHAIN: &str = "postrouting";
/// nft's `srcnat` priority.
const SRCNAT: i32 = 100;
/// The comment on the masquerade rules; a change of their shape changes it, so a rule of
/// an earlier version is seen as drift.
pub const MASQ_COMMENT: &str = "cni-rs: masquerade v2";
/// The comment on our rules in iptables' `FORWARD` chains; like [`MASQ_COMMENT`] it names
/// the rules' version, so the rules of an earlier version are replaced.
pub const FORWARD_COMMENT: &str = "cni-rs: pod traffic v2";
/// The comment of the first version's rules (a source rule on any interface): still ours,
/// removed when found.
const FORWARD_COMMENT_V1: &str = "cni-rs: pod traffic";
const IPTABLES_TABLE: &str = "filter";
const IPTABLES_FORWARD: &str = "FORWARD";

/// What differs between the two families.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fam {
    /// The family of iptables' own table.
    iptables: Family,
    nfproto: u8,
    saddr: u32,
    daddr: u32,
    pub key_len: usize,
    suffix: &'static str,
    /// Set ids within a batch.
    pods_id: u32,
    nomasq_id: u32,
    /// The multicast range, never masqueraded: its address and prefix.
    multicast: (u128, u8),
}

pub(super) const V4: Fam = Fam {
    iptables: Family::Ip,
    nfproto: 2,
    saddr: 12,
    daddr: 16,
    key_len: 4,
    suffix: "4",
    pods_id: 1,
    nomasq_id: 2,
    // 224.0.0.0/4
    multicast: (0xe000_0000, 4),
};
pub(super) const V6: Fam = Fam {
    iptables: Family::Ip6,
    nfproto: 10,
    saddr: 8,
    daddr: 24,
    key_len: 16,
    suffix: "6",
    pods_id: 3,
    nomasq_id: 4,
    // ff00::/8
    multicast: (0xff << 120, 8),
};

impl Fam {
    fn pods(self) -> IntervalSet {
        IntervalSet {
            name: format!("pods{}", self.suffix),
            id: self.pods_id,
            key_len: self.key_len,
        }
    }
    pub(super) fn nomasq(self) -> IntervalSet {
        IntervalSet {
            name: format!("nomasq{}", self.suffix),
            id: self.nomasq_id,
            key_len: self.key_len,
        }
    }
    pub(super) fn of(self, policy: &NodePolicy) -> Option<&FamilyPolicy> {
        if self.key_len == 4 {
            policy.v4.as_ref()
        } else {
            policy.v6.as_ref()
        }
    }
    fn holds(self, net: &IpNetwork) -> bool {
        net.is_ipv4() == (self.key_len == 4)
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn key(value: u128, key_len: usize) -> Vec<u8> {
    value.to_be_bytes()[16 - key_len..].to_vec()
}

/// The elements an interval set of `cidrs` holds in the kernel, as nft sends them: the
/// ranges merged (the kernel refuses overlaps), each a start and an end one past it (none
/// for a range reaching the top), and an end marker at zero unless a range starts there.
pub(crate) fn interval_elems(cidrs: &[IpNetwork], key_len: usize) -> Vec<Elem> {
    let merged = merged_ranges(cidrs, key_len);
    let mut elems = Vec::new();
    if zero_marker(&merged) {
        elems.push((key(0, key_len), true));
    }
    for range in merged {
        elems.extend(range_elems(range, key_len));
    }
    elems
}

/// `cidrs` of the family of `key_len` as first and last addresses, sorted, overlapping
/// and adjacent ones merged.
pub(super) fn merged_ranges(cidrs: &[IpNetwork], key_len: usize) -> Vec<(u128, u128)> {
    let mut ranges: Vec<(u128, u128)> = cidrs
        .iter()
        .filter(|c| (c.is_ipv4()) == (key_len == 4))
        .map(|c| (to_u128(c.network()), to_u128(c.broadcast_or_last())))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::new();
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Whether a set of the `merged` ranges holds an end marker at zero: it has ranges, and
/// none starts at zero.
pub(super) fn zero_marker(merged: &[(u128, u128)]) -> bool {
    merged.first().is_some_and(|(start, _)| *start != 0)
}

/// One merged range's elements: its start and, unless it reaches the top, its end one
/// past it.
pub(super) fn range_elems((start, end): (u128, u128), key_len: usize) -> Vec<Elem> {
    let top = u128::MAX >> (128 - 8 * key_len);
    let mut elems = vec![(key(start, key_len), false)];
    if end < top {
        elems.push((key(end + 1, key_len), true));
    }
    elems
}

trait LastAddress {
    fn broadcast_or_last(&self) -> IpAddr;
}

impl LastAddress for IpNetwork {
    fn broadcast_or_last(&self) -> IpAddr {
        match self {
            IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
            IpNetwork::V6(n) => {
                let host_mask = u128::MAX.checked_shr(u32::from(n.prefix())).unwrap_or(0);
                IpAddr::V6((u128::from(n.network()) | host_mask).into())
            }
        }
    }
}

fn masquerade_rule(fam: Fam) -> Vec<Expr> {
    let (pods, nomasq) = (fam.pods(), fam.nomasq());
    let addr = |offset| Expr::Network {
        offset,
        len: fam.key_len as u32,
    };
    let mut rule = vec![
        Expr::MetaNfproto,
        Expr::Cmp(CmpOp::Eq, vec![fam.nfproto]),
        addr(fam.saddr),
        Expr::Lookup {
            set: pods.name,
            set_id: pods.id,
            invert: false,
        },
        addr(fam.daddr),
        Expr::Lookup {
            set: nomasq.name,
            set_id: nomasq.id,
            invert: true,
        },
    ];
    rule.extend(not_multicast(fam));
    rule.extend([
        Expr::FibDaddrType,
        Expr::Cmp(CmpOp::Neq, RTN_LOCAL.to_ne_bytes().to_vec()),
        Expr::Masquerade { random_fully: true },
    ]);
    rule
}

/// `daddr != 224.0.0.0/4` (`ff00::/8`), as nft encodes it.
fn not_multicast(fam: Fam) -> Vec<Expr> {
    let (net, prefix) = fam.multicast;
    prefix_match(
        fam,
        &key(net, fam.key_len),
        prefix.into(),
        fam.daddr,
        CmpOp::Neq,
    )
}

/// `-i IIF -s CIDR -j ACCEPT` (or `-d CIDR`, on any interface) as iptables-nft encodes it.
fn forward_rule(fam: Fam, cidr: &IpNetwork, offset: u32, iif: Option<&str>) -> Vec<Expr> {
    let net = key(to_u128(cidr.network()), fam.key_len);
    let mut exprs = Vec::new();
    if let Some(name) = iif {
        // iptables-nft compares the name with its terminating NUL (an exact match).
        let mut name = name.as_bytes().to_vec();
        name.push(0);
        exprs.extend([Expr::MetaIifname, Expr::Cmp(CmpOp::Eq, name)]);
    }
    exprs.extend(prefix_match(
        fam,
        &net,
        cidr.prefix().into(),
        offset,
        CmpOp::Eq,
    ));
    exprs.push(Expr::Counter);
    exprs.push(Expr::Accept);
    exprs
}

/// The address at `offset` compared (`op`) with `net`/`prefix` as nft and iptables-nft
/// encode it: a byte-aligned prefix loads only its bytes, any other is masked.
fn prefix_match(fam: Fam, net: &[u8], prefix: usize, offset: u32, op: CmpOp) -> Vec<Expr> {
    let mut exprs = Vec::new();
    if prefix.is_multiple_of(8) {
        exprs.push(Expr::Network {
            offset,
            len: (prefix / 8) as u32,
        });
        exprs.push(Expr::Cmp(op, net[..prefix / 8].to_vec()));
    } else {
        let mask = key(
            u128::MAX << (128 - prefix) >> (128 - fam.key_len * 8),
            fam.key_len,
        );
        exprs.push(Expr::Network {
            offset,
            len: fam.key_len as u32,
        });
        exprs.push(Expr::Mask(mask));
        exprs.push(Expr::Cmp(op, net.to_vec()));
    }
    exprs
}

/// The pod ranges whose traffic gets forward rules: a `/0` would accept everything and
/// is refused.
fn pod_ranges(fam: Fam, policy: Option<&FamilyPolicy>) -> Result<Vec<IpNetwork>, NftError> {
    let Some(p) = policy else {
        return Ok(Vec::new());
    };
    let cidrs: Vec<IpNetwork> = p
        .pod_cidrs
        .iter()
        .filter(|c| fam.holds(c))
        .copied()
        .collect();
    if let Some(all) = cidrs.iter().find(|c| c.prefix() == 0) {
        return Err(NftError::unexpected(
            "firewall policy",
            format!("pod CIDR {all} would forward and masquerade everything; refused"),
        ));
    }
    Ok(cidrs)
}

/// Our rules in iptables' `FORWARD` chain of `family`, each with whether it is of this
/// version; `None` when that chain does not exist (no iptables-nft rules on this node:
/// nothing to work around).
fn our_forward_rules(
    nf: &mut NfSocket,
    family: Family,
) -> Result<Option<Vec<(u64, bool)>>, NftError> {
    let chain = nftnl::selector(IPTABLES_TABLE, 3, IPTABLES_FORWARD);
    let what = format!("get chain {} filter FORWARD", family.name());
    match nf.get(nftnl::NFT_MSG_GETCHAIN, family as u8, &chain, &what) {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    }
    let rules = nftnl::selector(IPTABLES_TABLE, 2, IPTABLES_FORWARD);
    let what = format!("list rules {} filter FORWARD", family.name());
    let listed = nf.dump(nftnl::NFT_MSG_GETRULE, family as u8, &rules, &what)?;
    Ok(Some(
        listed
            .iter()
            .filter_map(nftnl::parse_rule)
            .filter_map(|r| match r.comment.as_deref() {
                Some(FORWARD_COMMENT) => Some((r.handle, true)),
                Some(FORWARD_COMMENT_V1) => Some((r.handle, false)),
                _ => None,
            })
            .collect(),
    ))
}

/// The batch that makes the firewall exactly `policy` (an empty policy: none of ours).
pub fn apply_batch(nf: &mut NfSocket, policy: &NodePolicy) -> Result<Vec<Msg>, NftError> {
    let mut msgs = vec![
        nftnl::new_table(Family::Inet, TABLE),
        nftnl::del_table(Family::Inet, TABLE),
    ];
    let wanted = [V4, V6].iter().any(|f| f.of(policy).is_some());
    if wanted {
        msgs.push(nftnl::new_table(Family::Inet, TABLE));
        msgs.push(nftnl::new_base_chain(
            Family::Inet,
            TABLE,
            NAT_CHAIN,
            BaseChain {
                kind: "nat",
                hook: Hook::Postrouting,
                priority: SRCNAT,
            },
        ));
    }
    for fam in [V4, V6] {
        let Some(p) = fam.of(policy) else { continue };
        for (set, cidrs) in [(fam.pods(), &p.pod_cidrs), (fam.nomasq(), &p.no_masquerade)] {
            msgs.push(nftnl::new_set(Family::Inet, TABLE, &set));
            let elems = interval_elems(cidrs, fam.key_len);
            msgs.extend(nftnl::new_set_elems(Family::Inet, TABLE, &set, &elems));
        }
        msgs.push(nftnl::new_rule(
            Family::Inet,
            TABLE,
            NAT_CHAIN,
            &masquerade_rule(fam),
            Some(MASQ_COMMENT),
            true,
        ));
    }
    for fam in [V4, V6] {
        let ranges = pod_ranges(fam, fam.of(policy))?;
        let Some(old) = our_forward_rules(nf, fam.iptables)? else {
            continue;
        };
        if !ranges.is_empty() && policy.pods_on.is_empty() {
            return Err(NftError::unexpected(
                "firewall policy",
                "no interface named for the pods' traffic; refused".to_string(),
            ));
        }
        for (handle, _) in old {
            msgs.push(nftnl::del_rule(
                fam.iptables,
                IPTABLES_TABLE,
                IPTABLES_FORWARD,
                handle,
            ));
        }
        for cidr in &ranges {
            for (offset, iif) in [
                (fam.saddr, Some(policy.pods_on.as_str())),
                (fam.daddr, None),
            ] {
                msgs.push(nftnl::new_rule(
                    fam.iptables,
                    IPTABLES_TABLE,
                    IPTABLES_FORWARD,
                    &forward_rule(fam, cidr, offset, iif),
                    Some(FORWARD_COMMENT),
                    false,
                ));
            }
        }
    }
    Ok(msgs)
}

fn sorted(mut elems: Vec<Elem>) -> Vec<Elem> {
    elems.sort();
    elems
}

/// Whether the kernel holds exactly what [`apply_batch`] would make of `policy`: the
/// table's chain and one rule per family, each of this version ([`MASQ_COMMENT`]), each
/// set's elements, and our forward rules
/// (two per pod range) in every iptables `FORWARD` chain there is.
pub fn matches(nf: &mut NfSocket, policy: &NodePolicy) -> Result<bool, NftError> {
    let families = [V4, V6].iter().filter(|f| f.of(policy).is_some()).count();
    let rules = nftnl::selector(TABLE, 2, NAT_CHAIN);
    let chain = nftnl::selector(TABLE, 3, NAT_CHAIN);
    let present = match nf.get(
        nftnl::NFT_MSG_GETCHAIN,
        Family::Inet as u8,
        &chain,
        "get chain inet cni-rs postrouting",
    ) {
        Ok(_) => true,
        Err(e) if e.is_not_found() => false,
        Err(e) => return Err(e),
    };
    if present != (families > 0) {
        return Ok(false);
    }
    if present {
        let listed = nf.dump(
            nftnl::NFT_MSG_GETRULE,
            Family::Inet as u8,
            &rules,
            "list rules inet cni-rs",
        )?;
        let current = listed
            .iter()
            .filter_map(nftnl::parse_rule)
            .filter(|r| r.comment.as_deref() == Some(MASQ_COMMENT))
            .count();
        if listed.len() != families || current != families {
            return Ok(false);
        }
    }
    for fam in [V4, V6] {
        if let Some(p) = fam.of(policy) {
            for (set, cidrs) in [(fam.pods(), &p.pod_cidrs), (fam.nomasq(), &p.no_masquerade)] {
                let what = format!("list set inet {TABLE} {}", set.name);
                let sel = nftnl::selector(TABLE, 2, &set.name);
                let answers =
                    match nf.dump(nftnl::NFT_MSG_GETSETELEM, Family::Inet as u8, &sel, &what) {
                        Ok(a) => a,
                        Err(e) if e.is_not_found() => return Ok(false),
                        Err(e) => return Err(e),
                    };
                let held: Vec<Elem> = answers.iter().flat_map(nftnl::parse_set_elems).collect();
                if sorted(held) != sorted(interval_elems(cidrs, fam.key_len)) {
                    return Ok(false);
                }
            }
        }
        let ranges = pod_ranges(fam, fam.of(policy))?;
        if let Some(ours) = our_forward_rules(nf, fam.iptables)?
            && (ours.len() != 2 * ranges.len() || ours.iter().any(|(_, current)| !current))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNetwork> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn ranges_merge_and_end_one_past_as_nft_stores_them() {
        // nft stored { 10.0.0.0/24, 10.2.0.0/16, 192.168.0.0/30 } as these elements.
        let e = interval_elems(&nets(&["192.168.0.0/30", "10.2.0.0/16", "10.0.0.0/24"]), 4);
        let want: Vec<Elem> = vec![
            (vec![0, 0, 0, 0], true),
            (vec![10, 0, 0, 0], false),
            (vec![10, 0, 1, 0], true),
            (vec![10, 2, 0, 0], false),
            (vec![10, 3, 0, 0], true),
            (vec![192, 168, 0, 0], false),
            (vec![192, 168, 0, 4], true),
        ];
        assert_eq!(e, want);
        // Overlapping and adjacent ranges become one; the other family is ignored.
        let e = interval_elems(
            &nets(&["10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "fd00::/64"]),
            4,
        );
        assert_eq!(
            e[1..],
            [(vec![10, 0, 0, 0], false), (vec![10, 0, 2, 0], true)]
        );
        // A range from zero has no leading marker; one reaching the top no end.
        let e = interval_elems(&nets(&["0.0.0.0/1", "128.0.0.0/1"]), 4);
        assert_eq!(e, vec![(vec![0, 0, 0, 0], false)]);
        let e = interval_elems(&nets(&["fd00:1::/64"]), 16);
        assert_eq!(e.len(), 3);
        assert_eq!(e[2].0[..8], [0xfd, 0, 0, 1, 0, 0, 0, 1]);
        assert!(interval_elems(&[], 4).is_empty());
    }

    #[test]
    fn forward_rules_have_iptables_shape() {
        // iptables-nft for -i cni0 -s 10.0.0.0/24: meta load iifname, cmp eq "cni0\0",
        // payload 3b @ +12, cmp eq 0x0a0000.
        let r = forward_rule(V4, &"10.0.0.0/24".parse().unwrap(), V4.saddr, Some("cni0"));
        assert_eq!(r[0], Expr::MetaIifname);
        assert_eq!(r[1], Expr::Cmp(CmpOp::Eq, b"cni0\0".to_vec()));
        assert_eq!(r[2], Expr::Network { offset: 12, len: 3 });
        assert_eq!(r[3], Expr::Cmp(CmpOp::Eq, vec![10, 0, 0]));
        assert_eq!(r[4..], [Expr::Counter, Expr::Accept]);
        // -d 10.0.0.0/23: payload 4b @ +16, mask 0xfffffe00.
        let r = forward_rule(V4, &"10.0.0.0/23".parse().unwrap(), V4.daddr, None);
        assert_eq!(r[0], Expr::Network { offset: 16, len: 4 });
        assert_eq!(r[1], Expr::Mask(vec![255, 255, 254, 0]));
        // -d fd00:1::/60: payload 16b @ +24, mask ffff:ffff:ffff:fff0::.
        let r = forward_rule(V6, &"fd00:1::/60".parse().unwrap(), V6.daddr, None);
        assert_eq!(
            r[0],
            Expr::Network {
                offset: 24,
                len: 16
            }
        );
        let Expr::Mask(m) = &r[1] else {
            panic!("{r:?}")
        };
        assert_eq!(m[..8], [255, 255, 255, 255, 255, 255, 255, 0xf0]);
        assert!(m[8..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_pod_range_of_everything_is_refused() {
        let p = FamilyPolicy {
            pod_cidrs: nets(&["0.0.0.0/0"]),
            no_masquerade: vec![],
        };
        let e = pod_ranges(V4, Some(&p)).unwrap_err();
        assert!(e.to_string().contains("0.0.0.0/0"), "{e}");
    }
}
