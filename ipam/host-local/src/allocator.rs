//! Address allocation over a [`Store`]: the reference's round-robin walk, requested IPs,
//! the duplicate check, and all-or-nothing across range sets. No IO of its own.

use crate::ip;
use crate::range::Range;
use crate::range_set::RangeSet;
use crate::store::{Attachment, Store, StoreError};
use ipnetwork::IpNetwork;
use libcni::types::IpConfig;
use std::fmt;
use std::net::IpAddr;

/// An ADD that got no address; messages are the reference's.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("failed to allocate for range {set}: {source}")]
    Range {
        set: usize,
        #[source]
        source: SetError,
    },
    #[error("failed to allocate all requested IPs: {}", Spaced(.0))]
    Leftover(Vec<IpAddr>),
}

/// Why one range set gave no address.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("{ip} not in range set {set}")]
    NotInSet { ip: IpAddr, set: RangeSet },
    #[error("requested ip {0} is subnet's gateway")]
    Gateway(IpAddr),
    #[error("requested IP address {ip} is not available in range set {set}")]
    Taken { ip: IpAddr, set: RangeSet },
    #[error("{ip} has been allocated to {container_id}, duplicate allocation is not allowed")]
    Duplicate { ip: IpAddr, container_id: String },
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(RangeSet),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Addresses joined by spaces, as the reference prints the leftover requests.
struct Spaced<'a>(&'a [IpAddr]);

impl fmt::Display for Spaced<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ip) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{ip}")?;
        }
        Ok(())
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
) -> Result<IpConfig, SetError> {
    if let Some(ip) = requested {
        let r = set.range_for(ip).ok_or_else(|| SetError::NotInSet {
            ip,
            set: set.clone(),
        })?;
        if ip == r.gateway {
            return Err(SetError::Gateway(ip));
        }
        if !store.reserve(att, ip, idx)? {
            return Err(SetError::Taken {
                ip,
                set: set.clone(),
            });
        }
        return Ok(ip_config(ip, r));
    }
    // ADD is not idempotent in the reference: a second ADD of the same attachment fails.
    if let Some(ip) = held.iter().find(|ip| set.contains(**ip)) {
        return Err(SetError::Duplicate {
            ip: *ip,
            container_id: att.id.clone(),
        });
    }
    let last = store.last_reserved(idx);
    for (ip, r) in RangeIter::new(set, last) {
        if store.is_taken(ip) {
            continue;
        }
        if store.reserve(att, ip, idx)? {
            return Ok(ip_config(ip, r));
        }
    }
    Err(SetError::Exhausted(set.clone()))
}

/// One address per range set for `att`, honouring `requested` (each goes to the first
/// set containing it). On any failure everything reserved here is released again.
pub fn allocate(
    store: &mut dyn Store,
    sets: &[RangeSet],
    att: &Attachment,
    requested: &[IpAddr],
) -> Result<Vec<IpConfig>, AllocError> {
    let held = store.ips_of(att).map_err(|e| AllocError::Range {
        set: 0,
        source: e.into(),
    })?;
    let mut pending = requested.to_vec();
    let mut out: Vec<IpConfig> = Vec::with_capacity(sets.len());
    for (idx, set) in sets.iter().enumerate() {
        let req = pending
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|i| pending.remove(i));
        match allocate_in_set(store, set, idx, att, req, &held) {
            Ok(cfg) => out.push(cfg),
            Err(source) => {
                rollback(store, &out);
                return Err(AllocError::Range { set: idx, source });
            }
        }
    }
    if !pending.is_empty() {
        rollback(store, &out);
        return Err(AllocError::Leftover(pending));
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
