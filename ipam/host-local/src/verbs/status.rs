//! STATUS (the reference has none): code 50 when an ADD could not succeed, because the
//! store cannot be written or a range set has no free address (ADD needs one from each);
//! code 11 when the store lock stays held for a second. Cheap: one read of the index
//! under the lock.

use crate::error::{HostLocalError, Unavailable};
use crate::range_set::RangeSet;
use crate::store::disk::DiskStore;
use crate::store::{Store, StoreError, lock};
use libcni::Error;
use libcni::skel::CmdArgs;
use nix::unistd::{AccessFlags, access};

pub fn run(args: &CmdArgs) -> Result<(), Error> {
    Ok(check(args)?)
}

fn check(args: &CmdArgs) -> Result<(), HostLocalError> {
    let conf = super::load(args)?;
    // Runtimes poll STATUS: it waits for the lock a second at most, and a lock still held
    // then is "try again later", not "unavailable".
    let at = &conf.store;
    let mut store = DiskStore::open_waiting(&at.data_dir, &at.name, true, lock::status_wait())
        .map_err(|e| match e {
            e @ StoreError::Busy { .. } => HostLocalError::Store(e),
            e => Unavailable::Store(e).into(),
        })?
        .ok_or(Unavailable::StoreVanished)?;
    access(store.dir(), AccessFlags::W_OK).map_err(|source| Unavailable::NotWritable {
        dir: store.dir().to_path_buf(),
        source,
    })?;
    if let Some(set) = exhausted(&mut store, &conf.ranges)? {
        return Err(Unavailable::Exhausted(conf.ranges[set].clone()).into());
    }
    Ok(())
}

/// The first range set every address of which is allocated.
pub fn exhausted(store: &mut dyn Store, sets: &[RangeSet]) -> Result<Option<usize>, StoreError> {
    let mut used = vec![0u128; sets.len()];
    for ip in store.allocated()? {
        if let Some(i) = sets.iter().position(|s| s.allocatable(ip)) {
            used[i] += 1;
        }
    }
    Ok(sets.iter().zip(used).position(|(s, n)| n >= s.capacity()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Holder;
    use crate::store::mem::MemStore;

    #[test]
    fn exhaustion_of_any_set() {
        let sets = [
            RangeSet::of_subnets(&["10.1.2.0/30"]),
            RangeSet::of_subnets(&["2001:db8::/64"]),
        ];
        let mut store = MemStore::default();
        assert_eq!(exhausted(&mut store, &sets).unwrap(), None);
        // outside every range, or the gateway: not counted
        store.holding("10.9.9.9", Holder::Unknown);
        store.holding("10.1.2.1", Holder::Unknown);
        assert_eq!(exhausted(&mut store, &sets).unwrap(), None);
        store.holding("10.1.2.2", Holder::Legacy("x".into()));
        assert_eq!(exhausted(&mut store, &sets).unwrap(), Some(0));
    }
}
