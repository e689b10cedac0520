//! An in-memory [`Store`] for unit tests of the allocator, STATUS and GC.

use super::{Attachment, Holder, Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

#[derive(Debug, Default)]
pub struct MemStore {
    pub files: BTreeMap<IpAddr, Holder>,
    pub last: HashMap<usize, IpAddr>,
}

impl MemStore {
    pub fn holding(&mut self, ip: &str, holder: Holder) -> &mut Self {
        self.files.insert(ip.parse().expect("test IP"), holder);
        self
    }
}

impl Store for MemStore {
    fn reserve(&mut self, att: &Attachment, ip: IpAddr, set: usize) -> Result<bool, StoreError> {
        if self.files.contains_key(&ip) {
            return Ok(false);
        }
        self.files.insert(ip, Holder::Attachment(att.clone()));
        self.last.insert(set, ip);
        Ok(true)
    }

    fn last_reserved(&mut self, set: usize) -> Option<IpAddr> {
        self.last.get(&set).copied()
    }

    fn is_taken(&mut self, ip: IpAddr) -> bool {
        self.files.contains_key(&ip)
    }

    fn held_by(&mut self, att: &Attachment, legacy: bool) -> Result<Vec<IpAddr>, StoreError> {
        Ok(self
            .files
            .iter()
            .filter(|(_, h)| h.is(att, legacy))
            .map(|(ip, _)| *ip)
            .collect())
    }

    fn release_ips(&mut self, ips: &[IpAddr]) -> Result<(), StoreError> {
        for ip in ips {
            self.files.remove(ip);
        }
        Ok(())
    }

    fn allocated(&mut self) -> Result<Vec<IpAddr>, StoreError> {
        Ok(self.files.keys().copied().collect())
    }

    fn holders(&mut self) -> Result<Vec<(IpAddr, Holder)>, StoreError> {
        Ok(self.files.iter().map(|(ip, h)| (*ip, h.clone())).collect())
    }
}
