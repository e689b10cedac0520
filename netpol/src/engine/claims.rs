//! The pods claiming each address (`Pod::owns_against` decides who owns it): one pod
//! almost always, so that one is kept inline and only the rare others in a list (a list
//! per address was 35 MB at 150,000 dual-stack pods). One map per family: an `IpAddr`
//! key and its id take a 24-byte slot, an IPv4 address and its id 8 bytes (13 -> 7 MB of
//! slots at 150,000 dual-stack pods).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Default)]
pub(super) struct Claims {
    v4: HashMap<Ipv4Addr, u32>,
    v6: HashMap<Ipv6Addr, u32>,
    more: HashMap<IpAddr, Vec<u32>>,
}

impl Claims {
    /// Room for `pods` pods' IPv4 addresses (the family of every cluster but an
    /// IPv6-only one; the other grows to the same power-of-two table, rehashing on the way).
    pub(super) fn reserve(&mut self, pods: usize) {
        self.v4.reserve(pods);
    }

    fn first(&self, ip: &IpAddr) -> Option<u32> {
        match ip {
            IpAddr::V4(a) => self.v4.get(a),
            IpAddr::V6(a) => self.v6.get(a),
        }
        .copied()
    }

    /// Every pod claiming `ip`, in no particular order.
    pub(super) fn of(&self, ip: &IpAddr) -> impl Iterator<Item = u32> + '_ {
        let more = self.more.get(ip).into_iter().flatten().copied();
        self.first(ip).into_iter().chain(more)
    }

    /// Pod `id` claims `ip` (once: a pod reports one address per family).
    pub(super) fn add(&mut self, ip: IpAddr, id: u32) {
        let inline = match ip {
            IpAddr::V4(a) => put_first(&mut self.v4, a, id),
            IpAddr::V6(a) => put_first(&mut self.v6, a, id),
        };
        if !inline {
            self.more.entry(ip).or_default().push(id);
        }
    }

    pub(super) fn remove(&mut self, ip: IpAddr, id: u32) {
        if self.first(&ip) == Some(id) {
            let next = self.more.get_mut(&ip).and_then(Vec::pop);
            match ip {
                IpAddr::V4(a) => replace_first(&mut self.v4, a, next),
                IpAddr::V6(a) => replace_first(&mut self.v6, a, next),
            }
        } else if let Some(m) = self.more.get_mut(&ip) {
            m.retain(|&i| i != id);
        }
        if self.more.get(&ip).is_some_and(Vec::is_empty) {
            self.more.remove(&ip);
        }
    }
}

/// `id` as the inline claimer of `a`, unless it has one: false then.
fn put_first<A: Hash + Eq>(map: &mut HashMap<A, u32>, a: A, id: u32) -> bool {
    match map.entry(a) {
        Entry::Vacant(v) => {
            v.insert(id);
            true
        }
        Entry::Occupied(_) => false,
    }
}

/// `next` as the inline claimer of `a` (none: `a` has no claimer left).
fn replace_first<A: Hash + Eq>(map: &mut HashMap<A, u32>, a: A, next: Option<u32>) {
    match next {
        Some(id) => {
            map.insert(a, id);
        }
        None => {
            map.remove(&a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimers_come_and_go_in_any_order() {
        for ip in ["10.0.0.1", "fd00::1"] {
            claimers_of(ip.parse().unwrap());
        }
    }

    fn claimers_of(ip: IpAddr) {
        let mut c = Claims::default();
        let sorted = |c: &Claims| {
            let mut v: Vec<u32> = c.of(&ip).collect();
            v.sort();
            v
        };
        for id in [1, 2, 3] {
            c.add(ip, id);
        }
        assert_eq!(sorted(&c), [1, 2, 3]);
        c.remove(ip, 1); // the inline one: another takes its place
        assert_eq!(sorted(&c), [2, 3]);
        c.remove(ip, 3);
        c.remove(ip, 9); // not a claimer: nothing
        assert_eq!(sorted(&c), [2]);
        c.remove(ip, 2);
        assert_eq!(sorted(&c), Vec::<u32>::new());
        assert!(c.v4.is_empty() && c.v6.is_empty() && c.more.is_empty());
    }
}
