//! The firewall changed by its sets' elements alone: when only the no-masquerade ranges
//! differ between the policy our table holds and the one wanted (a Node added or deleted),
//! one batch deletes and adds those elements instead of making the whole table anew
//! (with its 10,000 ranges at 5,000 dual-stack Nodes) and reading iptables' chains first.
//!
//! The delta is computed on the merged ranges (what the kernel holds, see
//! [`interval_elems`]), range by range: a range of the old list that is not in the new one
//! has its elements deleted, a new one has its elements added, in key order. Not element by
//! element: the kernel's overlap check (`nft_set_rbtree`) sees each element added against
//! what the set holds at that moment, and splitting one range in two element by element
//! would add an end element just before an existing end, which that check refuses. Deleting whole ranges first leaves only well-formed ranges, which
//! never touch an added one (merged ranges are neither overlapping nor adjacent). The
//! result is exactly the new list's elements.

use ipnetwork::IpNetwork;

use crate::nftnl::{self, Elem, Family, IntervalSet, Msg};

use super::NodePolicy;
use super::firewall::{Fam, TABLE, V4, V6, merged_ranges, range_elems, zero_marker};

/// One set's change: its elements deleted, then those added (in this order, one batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetDelta {
    pub set: IntervalSet,
    pub key_len: usize,
    pub del: Vec<Elem>,
    pub add: Vec<Elem>,
}

/// The element changes that make a table holding `from` hold `to`; None when anything
/// else differs (a family, the pod ranges, which also make the FORWARD rules, or the
/// pods' interface): then the whole table is made anew.
pub(crate) fn set_deltas(from: &NodePolicy, to: &NodePolicy) -> Option<Vec<SetDelta>> {
    if from.pods_on != to.pods_on {
        return None;
    }
    let mut deltas = Vec::new();
    for fam in [V4, V6] {
        match (fam.of(from), fam.of(to)) {
            (None, None) => {}
            (Some(a), Some(b)) if a.pod_cidrs == b.pod_cidrs => {
                let (del, add) = delta(&a.no_masquerade, &b.no_masquerade, fam);
                if !del.is_empty() || !add.is_empty() {
                    deltas.push(SetDelta {
                        set: fam.nomasq(),
                        key_len: fam.key_len,
                        del,
                        add,
                    });
                }
            }
            _ => return None,
        }
    }
    Some(deltas)
}

/// The elements to delete and to add (in key order) that turn the set of `old` into
/// the set of `new`.
fn delta(old: &[IpNetwork], new: &[IpNetwork], fam: Fam) -> (Vec<Elem>, Vec<Elem>) {
    let (old, new) = (
        merged_ranges(old, fam.key_len),
        merged_ranges(new, fam.key_len),
    );
    let (had, has) = (zero_marker(&old), zero_marker(&new));
    let mut del = Vec::new();
    let mut add = Vec::new();
    if had && !has {
        del.push((vec![0; fam.key_len], true));
    }
    if has && !had {
        add.push((vec![0; fam.key_len], true));
    }
    // Both sorted: one walk.
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o == n => {
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o < n => {
                del.extend(range_elems(*o, fam.key_len));
                i += 1;
            }
            (Some(o), None) => {
                del.extend(range_elems(*o, fam.key_len));
                i += 1;
            }
            (_, Some(n)) => {
                add.extend(range_elems(*n, fam.key_len));
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
    (del, add)
}

/// The one batch of `deltas`: every deletion, then every addition.
pub(crate) fn batch(deltas: &[SetDelta]) -> Vec<Msg> {
    let mut msgs = Vec::new();
    for d in deltas {
        msgs.extend(nftnl::del_set_elems(Family::Inet, TABLE, &d.set, &d.del));
    }
    for d in deltas {
        msgs.extend(nftnl::add_set_elems(Family::Inet, TABLE, &d.set, &d.add));
    }
    msgs
}

/// The CIDRs that cover exactly what `elems` (as the kernel holds them) hold: how the
/// fake turns a set changed element by element back into a policy.
#[cfg(any(test, feature = "fake"))]
pub(crate) fn elems_to_cidrs(elems: &[Elem], key_len: usize) -> Vec<IpNetwork> {
    let top = u128::MAX >> (128 - 8 * key_len);
    let value = |k: &[u8]| k.iter().fold(0u128, |v, b| (v << 8) | u128::from(*b));
    let mut sorted: Vec<(u128, bool)> = elems.iter().map(|(k, e)| (value(k), *e)).collect();
    sorted.sort_unstable();
    let mut cidrs = Vec::new();
    let mut open: Option<u128> = None;
    for (key, end) in sorted {
        match (open, end) {
            (None, false) => open = Some(key),
            (Some(start), true) if key > start => {
                cover(start, key - 1, key_len, &mut cidrs);
                open = None;
            }
            _ => {}
        }
    }
    if let Some(start) = open {
        cover(start, top, key_len, &mut cidrs);
    }
    cidrs
}

/// The fewest CIDRs covering `start..=end`.
#[cfg(any(test, feature = "fake"))]
fn cover(mut start: u128, end: u128, key_len: usize, out: &mut Vec<IpNetwork>) {
    let bits = 8 * key_len as u32;
    let mask = |size: u32| u128::MAX.checked_shr(128 - size).filter(|_| size > 0);
    loop {
        // The largest block aligned at `start` that stays within `end`.
        let mut size = start.trailing_zeros().min(bits);
        while size > 0 && mask(size).is_some_and(|m| start | m > end) {
            size -= 1;
        }
        let last = start | mask(size).unwrap_or(0);
        let prefix = (bits - size) as u8;
        let net = if key_len == 4 {
            IpNetwork::new(std::net::Ipv4Addr::from(start as u32).into(), prefix)
        } else {
            IpNetwork::new(std::net::Ipv6Addr::from(start).into(), prefix)
        };
        out.push(net.expect("a valid prefix"));
        if last >= end {
            return;
        }
        start = last + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::FamilyPolicy;
    use super::super::firewall::interval_elems;
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNetwork> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn policy(nomasq: &[&str]) -> NodePolicy {
        NodePolicy {
            v4: Some(FamilyPolicy {
                pod_cidrs: nets(&["10.244.0.0/24"]),
                no_masquerade: nets(nomasq),
            }),
            v6: None,
            pods_on: "cni0".into(),
        }
    }

    /// What a set holding `old`'s elements holds after `delta`, applied as the kernel
    /// would: deletions of what it holds, then additions.
    fn applied(old: &[&str], new: &[&str]) -> Vec<Elem> {
        let (del, add) = delta(&nets(old), &nets(new), V4);
        let mut held = interval_elems(&nets(old), 4);
        for e in &del {
            let at = held
                .iter()
                .position(|h| h == e)
                .expect("deletes what is held");
            held.remove(at);
        }
        held.extend(add);
        held.sort();
        held
    }

    #[test]
    fn a_delta_makes_exactly_the_new_elements() {
        let cases: &[(&[&str], &[&str])] = &[
            (&[], &["10.0.0.0/24"]),
            (&["10.0.0.0/24"], &[]),
            // A range grows, merges two, splits in two, moves.
            (&["10.0.0.0/24"], &["10.0.0.0/24", "10.0.1.0/24"]),
            (&["10.0.0.0/24", "10.0.2.0/24"], &["10.0.0.0/22"]),
            (&["10.0.0.0/22"], &["10.0.0.0/24", "10.0.2.0/23"]),
            (
                &["10.0.0.0/24", "10.9.0.0/24"],
                &["10.1.0.0/24", "10.9.0.0/24"],
            ),
            // From zero (no marker) and to the top (no end).
            (&["10.0.0.0/8"], &["0.0.0.0/8", "10.0.0.0/8"]),
            (&["0.0.0.0/8"], &["10.0.0.0/8"]),
            (&["10.0.0.0/8"], &["10.0.0.0/8", "255.0.0.0/8"]),
            (&["128.0.0.0/1"], &["0.0.0.0/0"]),
        ];
        for (old, new) in cases {
            let mut want = interval_elems(&nets(new), 4);
            want.sort();
            assert_eq!(applied(old, new), want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn a_split_deletes_the_whole_old_range_before_adding() {
        let (del, add) = delta(
            &nets(&["10.0.0.0/22"]),
            &nets(&["10.0.0.0/24", "10.0.2.0/23"]),
            V4,
        );
        let key = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets().to_vec();
        assert_eq!(del, vec![(key("10.0.0.0"), false), (key("10.0.4.0"), true)]);
        assert_eq!(
            add,
            vec![
                (key("10.0.0.0"), false),
                (key("10.0.1.0"), true),
                (key("10.0.2.0"), false),
                (key("10.0.4.0"), true),
            ]
        );
    }

    #[test]
    fn only_no_masquerade_changes_are_deltas() {
        let from = policy(&["10.0.0.0/24"]);
        let to = policy(&["10.0.0.0/24", "10.0.5.0/24"]);
        let d = set_deltas(&from, &to).unwrap();
        assert_eq!((d.len(), d[0].set.name.as_str()), (1, "nomasq4"));
        assert_eq!((d[0].del.len(), d[0].add.len()), (0, 2));
        // The same ranges written otherwise: nothing to do.
        let same = policy(&["10.0.0.0/25", "10.0.0.128/25"]);
        assert_eq!(set_deltas(&from, &same), Some(vec![]));
        let mut other = to.clone();
        other.pods_on = "br0".into();
        assert_eq!(set_deltas(&from, &other), None);
        let mut other = to.clone();
        other.v4.as_mut().unwrap().pod_cidrs = nets(&["10.244.9.0/24"]);
        assert_eq!(set_deltas(&from, &other), None);
        let mut other = to.clone();
        other.v6 = Some(FamilyPolicy::default());
        assert_eq!(set_deltas(&from, &other), None);
    }

    #[test]
    fn elements_turn_back_into_the_ranges_they_hold() {
        for list in [
            &["10.0.0.0/24", "10.0.1.0/24", "192.168.0.4/30"][..],
            &["0.0.0.0/0"],
            &["0.0.0.0/8", "255.255.255.0/24"],
            &["10.0.0.3/32", "10.0.0.4/31"],
        ] {
            let elems = interval_elems(&nets(list), 4);
            let back = elems_to_cidrs(&elems, 4);
            assert_eq!(interval_elems(&back, 4), elems, "{list:?}: {back:?}");
        }
        let v6 = nets(&["fd00::/64", "fd00:0:0:1::/64", "ff00::/8"]);
        let elems = interval_elems(&v6, 16);
        assert_eq!(elems_to_cidrs(&elems, 16), nets(&["fd00::/63", "ff00::/8"]));
    }
}
