//! Address families and disjoint address ranges: the shape of an nftables interval set
//! (the kernel refuses overlapping intervals, so a set's elements are kept merged).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];

    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// `4` or `6`, as set names end.
    pub fn suffix(self) -> char {
        match self {
            Family::V4 => '4',
            Family::V6 => '6',
        }
    }

    fn max(self) -> u128 {
        match self {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        }
    }

    fn addr(self, n: u128) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// An inclusive address range of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    pub first: IpAddr,
    pub last: IpAddr,
}

impl Range {
    pub fn contains(&self, ip: IpAddr) -> bool {
        Family::of(ip) == Family::of(self.first)
            && (to_u128(self.first)..=to_u128(self.last)).contains(&to_u128(ip))
    }
}

/// A set of addresses of one family under construction: add ranges, cut ranges, then
/// read it back as sorted, disjoint, non-adjacent ranges (one canonical form, so two
/// equal sets have equal elements and a diff sees only real changes).
#[derive(Debug, Clone)]
pub struct RangeSet {
    family: Family,
    spans: Vec<(u128, u128)>,
}

impl RangeSet {
    pub fn new(family: Family) -> RangeSet {
        RangeSet {
            family,
            spans: Vec::new(),
        }
    }

    /// Adds `net` if it is of this set's family.
    pub fn add_net(&mut self, net: IpNetwork) {
        if let Some(s) = self.span(net) {
            self.spans.push(s);
        }
    }

    pub fn add_ip(&mut self, ip: IpAddr) {
        if Family::of(ip) == self.family {
            let n = to_u128(ip);
            self.spans.push((n, n));
        }
    }

    /// Adds `net` without the addresses of `except`.
    pub fn add_net_except(&mut self, net: IpNetwork, except: &[IpNetwork]) {
        let Some(span) = self.span(net) else { return };
        let mut parts = vec![span];
        for e in except.iter().filter_map(|e| self.span(*e)) {
            parts = parts.into_iter().flat_map(|p| cut(p, e)).collect();
        }
        self.spans.extend(parts);
    }

    fn span(&self, net: IpNetwork) -> Option<(u128, u128)> {
        if Family::of(net.ip()) != self.family {
            return None;
        }
        let bits = match self.family {
            Family::V4 => 32,
            Family::V6 => 128,
        };
        let host = bits - u32::from(net.prefix());
        let size_minus_one = if host == 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        };
        let first = to_u128(net.network());
        Some((first, (first + size_minus_one).min(self.family.max())))
    }

    pub fn into_ranges(mut self) -> Vec<Range> {
        self.spans.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(self.spans.len());
        for (a, b) in self.spans {
            match merged.last_mut() {
                Some((_, end)) if a <= end.saturating_add(1) => *end = (*end).max(b),
                _ => merged.push((a, b)),
            }
        }
        let f = self.family;
        merged
            .into_iter()
            .map(|(a, b)| Range {
                first: f.addr(a),
                last: f.addr(b),
            })
            .collect()
    }
}

/// `span` without `hole`: zero, one or two pieces.
fn cut(span: (u128, u128), hole: (u128, u128)) -> Vec<(u128, u128)> {
    let (a, b) = span;
    let (h0, h1) = hole;
    if h1 < a || h0 > b {
        return vec![span];
    }
    let mut out = Vec::with_capacity(2);
    if h0 > a {
        out.push((a, h0 - 1));
    }
    if h1 < b {
        out.push((h1 + 1, b));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    fn show(r: Vec<Range>) -> Vec<String> {
        r.iter()
            .map(|r| format!("{}-{}", r.first, r.last))
            .collect()
    }

    #[test]
    fn except_cuts_holes_and_neighbours_merge() {
        let mut s = RangeSet::new(Family::V4);
        s.add_net_except(
            net("10.0.0.0/24"),
            &[net("10.0.0.16/28"), net("10.0.0.128/25")],
        );
        s.add_ip("10.0.0.20".parse().unwrap());
        s.add_ip("10.0.1.0".parse().unwrap());
        // Touches the kept 10.0.0.32-10.0.0.127 from above: merged.
        s.add_ip("10.0.0.128".parse().unwrap());
        assert_eq!(
            show(s.into_ranges()),
            [
                "10.0.0.0-10.0.0.15",
                "10.0.0.20-10.0.0.20",
                "10.0.0.32-10.0.0.128",
                "10.0.1.0-10.0.1.0"
            ]
        );
    }

    #[test]
    fn whole_spaces_and_other_families() {
        let mut s = RangeSet::new(Family::V6);
        s.add_net(net("0.0.0.0/0"));
        s.add_net_except(net("::/0"), &[net("::/1")]);
        assert_eq!(
            show(s.into_ranges()),
            ["8000::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
        );
        let mut s = RangeSet::new(Family::V4);
        s.add_net(net("0.0.0.0/0"));
        assert_eq!(show(s.into_ranges()), ["0.0.0.0-255.255.255.255"]);
    }
}
