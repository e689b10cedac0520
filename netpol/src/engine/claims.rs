//! The pods claiming each address (`Pod::owns_against` decides who owns it): one pod
//! almost always, so that one is kept inline and only the rare others in a list (a list
//! per address was 35 MB at 150,000 dual-stack pods).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;

#[derive(Default)]
pub(super) struct Claims {
    first: HashMap<IpAddr, u32>,
    more: HashMap<IpAddr, Vec<u32>>,
}

impl Claims {
    pub(super) fn reserve(&mut self, addresses: usize) {
        self.first.reserve(addresses);
    }

    /// Every pod claiming `ip`, in no particular order.
    pub(super) fn of(&self, ip: &IpAddr) -> impl Iterator<Item = u32> + '_ {
        let more = self.more.get(ip).into_iter().flatten().copied();
        self.first.get(ip).copied().into_iter().chain(more)
    }

    /// Pod `id` claims `ip` (once: a pod reports one address per family).
    pub(super) fn add(&mut self, ip: IpAddr, id: u32) {
        match self.first.entry(ip) {
            Entry::Vacant(v) => {
                v.insert(id);
            }
            Entry::Occupied(_) => self.more.entry(ip).or_default().push(id),
        }
    }

    pub(super) fn remove(&mut self, ip: IpAddr, id: u32) {
        if self.first.get(&ip) == Some(&id) {
            let next = self.more.get_mut(&ip).and_then(Vec::pop);
            match next {
                Some(next) => {
                    self.first.insert(ip, next);
                }
                None => {
                    self.first.remove(&ip);
                }
            }
        } else if let Some(m) = self.more.get_mut(&ip) {
            m.retain(|&i| i != id);
        }
        if self.more.get(&ip).is_some_and(Vec::is_empty) {
            self.more.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimers_come_and_go_in_any_order() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
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
        assert!(c.first.is_empty() && c.more.is_empty());
    }
}
