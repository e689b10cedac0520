//! GC (the reference has none): with `cni.dev/valid-attachments`, release every lease of
//! this network held by an attachment not in the list. Legacy ID-only leases stay while
//! any valid attachment has that container ID; unreadable leases are left alone. An
//! empty list releases all; a missing key releases nothing. `lock`,
//! `last_reserved_ip.*` and anything not named like an address are never touched.

use crate::store::{Attachment, Holder, Store, StoreError};
use libcni::Error;
use libcni::skel::CmdArgs;
use libcni::types::{GcAttachment, NetConf};
use std::collections::HashSet;
use std::net::IpAddr;

pub fn run(args: &CmdArgs) -> Result<(), Error> {
    let conf = super::load(args)?;
    let Some(valid) = NetConf::parse(&args.stdin_data)?.valid_attachments else {
        return Ok(());
    };
    if let Some(mut store) = super::open_store(&conf, false)? {
        collect(&mut store, &valid)?;
    }
    Ok(())
}

/// Releases the stale leases; returns their addresses.
pub fn collect(store: &mut dyn Store, valid: &[GcAttachment]) -> Result<Vec<IpAddr>, StoreError> {
    let keep: HashSet<Attachment> = valid
        .iter()
        .map(|v| Attachment::new(&v.container_id, &v.ifname))
        .collect();
    let ids: HashSet<&str> = keep.iter().map(|a| a.id.as_str()).collect();
    let stale: Vec<IpAddr> = store
        .holders()?
        .into_iter()
        .filter(|(ip, h)| match h {
            Holder::Attachment(a) => !keep.contains(a),
            Holder::Legacy(id) => !ids.contains(id.as_str()),
            Holder::Unknown => {
                eprintln!("host-local: GC leaves lease {ip} alone: unreadable content");
                false
            }
        })
        .map(|(ip, _)| ip)
        .collect();
    store.release_ips(&stale)?;
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    fn gca(id: &str, ifname: &str) -> GcAttachment {
        GcAttachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    fn store() -> MemStore {
        let mut s = MemStore::default();
        s.holding("10.0.0.2", Holder::Attachment(Attachment::new("a", "eth0")))
            .holding("10.0.0.3", Holder::Attachment(Attachment::new("a", "eth1")))
            .holding("10.0.0.4", Holder::Attachment(Attachment::new("b", "eth0")))
            .holding("10.0.0.5", Holder::Legacy("a".into()))
            .holding("10.0.0.6", Holder::Legacy("c".into()))
            .holding("10.0.0.7", Holder::Unknown);
        s
    }

    fn left(s: &MemStore) -> Vec<String> {
        s.files.keys().map(ToString::to_string).collect()
    }

    #[test]
    fn keeps_valid_attachments_and_their_legacy_files() {
        let mut s = store();
        let gone = collect(&mut s, &[gca("a", "eth0")]).unwrap();
        assert_eq!(gone.len(), 3);
        assert_eq!(left(&s), ["10.0.0.2", "10.0.0.5", "10.0.0.7"]);
    }

    #[test]
    fn empty_list_releases_everything_readable() {
        let mut s = store();
        collect(&mut s, &[]).unwrap();
        assert_eq!(left(&s), ["10.0.0.7"]);
    }
}
