//! Address allocation over a [`Store`]: the reference's round-robin walk, requested IPs,
//! the duplicate check, and all-or-nothing across range sets. No IO of its own.

use crate::ip;
use crate::range::Range;
use crate::range_set::RangeSet;
use crate::store::{Attachment, Store};
use ipnetwork::IpNetwork;
use libcni::types::IpConfig;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("failed to allocate for range {0}: {1}")]
    Range(usize, String),
    #[error("failed to allocate all requested IPs: {0}")]
    Leftover(String),
}

impl From<AllocError> for libcni::Error {
    fn from(e: AllocError) -> libcni::Error {
        libcni::Error::internal(e)
    }
}

/// The candidates of one range set, in the reference's order: from the address after
/// the last reserved one (when it lies in the set, else from the first range's start),
/// range by range, wrapping, skipping gateways, until back at the first candidate.
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    idx: usize,
    cur: Option<IpAddr>,
    first: Option<IpAddr>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    pub fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> RangeIter<'a> {
        let resume = last_reserved.and_then(|last| {
            let idx = set.ranges().iter().position(|r| r.contains(last))?;
            Some((idx, last))
        });
        RangeIter {
            set,
            idx: resume.map_or(0, |(i, _)| i),
            cur: resume.map(|(_, last)| last),
            first: None,
            done: false,
        }
    }
}

impl<'a> Iterator for RangeIter<'a> {
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        let ranges = self.set.ranges();
        while !self.done {
            let mut r = &ranges[self.idx];
            let cur = match self.cur {
                None => {
                    self.first = Some(r.start);
                    r.start
                }
                Some(c) => {
                    let cur = if c == r.end {
                        self.idx = (self.idx + 1) % ranges.len();
                        r = &ranges[self.idx];
                        r.start
                    } else {
                        ip::next(c)
                    };
                    match self.first {
                        None => self.first = Some(cur),
                        Some(f) if f == cur => {
                            self.done = true;
                            return None;
                        }
                        Some(_) => {}
                    }
                    cur
                }
            };
            self.cur = Some(cur);
            if cur != r.gateway {
                return Some((cur, r));
            }
        }
        None
    }
}

fn ip_config(ip: IpAddr, r: &Range) -> IpConfig {
    IpConfig {
        interface: None,
        // The prefix comes from a validated subnet of the same family.
        address: IpNetwork::new(ip, r.subnet.prefix()).unwrap_or(r.subnet),
        gateway: Some(r.gateway),
    }
}

/// One address from range set `idx`: the requested one, or the next free one.
/// `held` is what the attachment already holds (for the duplicate check).
pub fn allocate_in_set(
    store: &mut dyn Store,
    set: &RangeSet,
    idx: usize,
    att: &Attachment,
    requested: Option<IpAddr>,
    held: &[IpAddr],
) -> Result<IpConfig, String> {
    if let Some(ip) = requested {
        let r = set.range_for(ip)?;
        if ip == r.gateway {
            return Err(format!("requested ip {ip} is subnet's gateway"));
        }
        if !store.reserve(att, ip, idx).map_err(|e| e.to_string())? {
            return Err(format!(
                "requested IP address {ip} is not available in range set {set}"
            ));
        }
        return Ok(ip_config(ip, r));
    }
    // ADD is not idempotent in the reference: a second ADD of the same attachment fails.
    if let Some(ip) = held.iter().find(|ip| set.contains(**ip)) {
        return Err(format!(
            "{ip} has been allocated to {}, duplicate allocation is not allowed",
            att.id
        ));
    }
    let last = store.last_reserved(idx);
    for (ip, r) in RangeIter::new(set, last) {
        if store.is_taken(ip) {
            continue;
        }
        if store.reserve(att, ip, idx).map_err(|e| e.to_string())? {
            return Ok(ip_config(ip, r));
        }
    }
    Err(format!("no IP addresses available in range set: {set}"))
}

/// One address per range set for `att`, honouring `requested` (each goes to the first
/// set containing it). On any failure everything reserved here is released again.
pub fn allocate(
    store: &mut dyn Store,
    sets: &[RangeSet],
    att: &Attachment,
    requested: &[IpAddr],
) -> Result<Vec<IpConfig>, AllocError> {
    let held = store
        .ips_of(att)
        .map_err(|e| AllocError::Range(0, e.to_string()))?;
    let mut pending = requested.to_vec();
    let mut out: Vec<IpConfig> = Vec::with_capacity(sets.len());
    for (idx, set) in sets.iter().enumerate() {
        let req = pending
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|i| pending.remove(i));
        match allocate_in_set(store, set, idx, att, req, &held) {
            Ok(cfg) => out.push(cfg),
            Err(msg) => {
                rollback(store, &out);
                return Err(AllocError::Range(idx, msg));
            }
        }
    }
    if !pending.is_empty() {
        rollback(store, &out);
        let ips: Vec<String> = pending.iter().map(IpAddr::to_string).collect();
        return Err(AllocError::Leftover(ips.join(" ")));
    }
    Ok(out)
}

fn rollback(store: &mut dyn Store, done: &[IpConfig]) {
    let ips: Vec<IpAddr> = done.iter().map(|c| c.address.ip()).collect();
    if let Err(e) = store.release_ips(&ips) {
        libcni::log!("host-local: releasing {ips:?} after a failed ADD: {e}");
    }
}

#[cfg(test)]
mod tests;
