//! A range set: disjoint ranges of one family; an ADD takes exactly one address per set.

use crate::range::{Range, RangeError, RawRange};
use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeSetError {
    #[error("empty range set")]
    Empty,
    #[error("mixed address families")]
    MixedFamilies,
    #[error("subnets {0} and {1} overlap")]
    Overlap(Box<Range>, Box<Range>),
    #[error(transparent)]
    Range(#[from] RangeError),
}

impl RangeSet {
    /// Validates every range, then the set as a whole (one family, no overlaps).
    pub fn canonicalize(raw: &[RawRange]) -> Result<RangeSet, RangeSetError> {
        let mut ranges = Vec::with_capacity(raw.len());
        for r in raw {
            let r = r.canonicalize()?;
            if ranges
                .first()
                .is_some_and(|f: &Range| f.is_ipv4() != r.is_ipv4())
            {
                return Err(RangeSetError::MixedFamilies);
            }
            ranges.push(r);
        }
        if ranges.is_empty() {
            return Err(RangeSetError::Empty);
        }
        for (i, a) in ranges.iter().enumerate() {
            if let Some(b) = ranges[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(RangeSetError::Overlap(
                    Box::new(a.clone()),
                    Box::new(b.clone()),
                ));
            }
        }
        Ok(RangeSet(ranges))
    }

    pub fn ranges(&self) -> &[Range] {
        &self.0
    }

    /// The range holding `ip`.
    pub fn range_for(&self, ip: IpAddr) -> Option<&Range> {
        self.0.iter().find(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|r| r.contains(ip))
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    pub fn is_ipv4(&self) -> bool {
        self.0.first().is_some_and(Range::is_ipv4)
    }

    /// Whether `ip` is an address this set hands out (in a range, not that range's gateway).
    pub fn allocatable(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|r| r.contains(ip) && r.gateway != ip)
    }

    pub fn capacity(&self) -> u128 {
        self.0
            .iter()
            .fold(0u128, |acc, r| acc.saturating_add(r.capacity()))
    }
}

#[cfg(test)]
impl RangeSet {
    /// A valid set of whole subnets with the defaults (unit tests).
    pub fn of_subnets(subnets: &[&str]) -> RangeSet {
        let raw: Vec<RawRange> = subnets
            .iter()
            .map(|s| RawRange {
                subnet: Some(s.to_string()),
                ..Default::default()
            })
            .collect();
        RangeSet::canonicalize(&raw).expect("test subnets")
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(subnet: &str) -> RawRange {
        RawRange {
            subnet: Some(subnet.into()),
            ..Default::default()
        }
    }

    #[test]
    fn membership_and_its_error() {
        let set = RangeSet::canonicalize(&[raw("192.168.0.0/24"), raw("172.16.1.0/24")]).unwrap();
        assert!(set.contains("192.168.0.5".parse().unwrap()));
        assert!(set.contains("172.16.1.254".parse().unwrap()));
        assert!(!set.contains("172.16.1.255".parse().unwrap()));
        assert_eq!(
            set.to_string(),
            "192.168.0.1-192.168.0.254,172.16.1.1-172.16.1.254"
        );
        let ip = "192.168.99.99".parse().unwrap();
        assert!(set.range_for(ip).is_none());
        assert_eq!(
            crate::allocator::SetError::NotInSet {
                ip,
                set: set.clone()
            }
            .to_string(),
            "192.168.99.99 not in range set 192.168.0.1-192.168.0.254,172.16.1.1-172.16.1.254"
        );
        assert_eq!(
            set.range_for("172.16.1.9".parse().unwrap()),
            Some(&set.ranges()[1])
        );
        assert_eq!(set.capacity(), 2 * 253);
        assert!(!set.allocatable("192.168.0.1".parse().unwrap()));
    }

    #[test]
    fn overlap_within_and_across_sets() {
        let err = RangeSet::canonicalize(&[raw("10.1.0.0/22"), raw("10.1.2.0/24")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
        );
        let a = RangeSet::canonicalize(&[raw("10.1.0.0/24")]).unwrap();
        let b = RangeSet::canonicalize(&[raw("10.2.0.0/24"), raw("10.1.0.0/25")]).unwrap();
        let c = RangeSet::canonicalize(&[raw("10.3.0.0/24")]).unwrap();
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&c));
    }

    #[test]
    fn empty_and_mixed() {
        assert_eq!(
            RangeSet::canonicalize(&[]).unwrap_err(),
            RangeSetError::Empty
        );
        assert_eq!(
            RangeSet::canonicalize(&[raw("10.1.0.0/24"), raw("2001:db8::/64")]).unwrap_err(),
            RangeSetError::MixedFamilies
        );
    }
}
