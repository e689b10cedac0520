//! GC (the reference has none): with `cni.dev/valid-attachments`, release every lease of
//! this network held by an attachment not in the list. Legacy ID-only leases stay while
//! any valid attachment has that container ID. Empty (zero-length) lease files are
//! released too: every writer (the Go plugin and ours) creates and fills a lease under
//! the store lock GC holds, so an empty one was left by a writer killed in between and
//! belongs to no attachment. Non-empty unreadable or foreign leases are left alone (and
//! said so on stderr). An empty (or `null`) list releases all but those; a missing key
//! releases nothing. `lock`, `last_reserved_ip.*` and anything not named like an address are
//! never touched.

use crate::store::{Attachment, Holder, Store, StoreError};
use libcni::Error;
use libcni::skel::CmdArgs;
use libcni::types::{GcAttachment, NetConf};
use std::collections::HashSet;
use std::net::IpAddr;

pub fn run(args: &CmdArgs) -> Result<(), Error> {
    let store_at = super::load_store_location(args)?;
    let net = NetConf::parse(&args.stdin_data)?;
    let Some(valid) = net.gc_attachments() else {
        return Ok(());
    };
    if let Some(mut store) = super::open_store(&store_at, false)? {
        collect(&mut store, valid)?;
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
            Holder::Empty => {
                libcni::log!("host-local: GC releases empty lease {ip}: its writer never finished");
                true
            }
            Holder::Unknown => {
                libcni::log!("host-local: GC leaves lease {ip} alone: unreadable content");
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
            .holding("10.0.0.7", Holder::Unknown)
            .holding("10.0.0.8", Holder::Empty);
        s
    }

    fn left(s: &MemStore) -> Vec<String> {
        s.files.keys().map(ToString::to_string).collect()
    }

    #[test]
    fn keeps_valid_attachments_and_their_legacy_files() {
        let mut s = store();
        let gone = collect(&mut s, &[gca("a", "eth0")]).unwrap();
        assert_eq!(gone.len(), 4);
        assert!(gone.contains(&"10.0.0.8".parse().unwrap()));
        assert_eq!(left(&s), ["10.0.0.2", "10.0.0.5", "10.0.0.7"]);
    }

    #[test]
    fn empty_list_releases_everything_but_unreadable() {
        let mut s = store();
        collect(&mut s, &[]).unwrap();
        assert_eq!(left(&s), ["10.0.0.7"]);
    }

    /// Over the real store: an empty lease file goes, a foreign one and the valid
    /// attachment's stay, and the freed address can be reserved again.
    #[test]
    fn disk_store_releases_empty_leases() {
        use crate::store::disk::DiskStore;
        let data = testkit::TempDir::new("hl-gc-empty");
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let a = Attachment::new("a", "eth0");
        let mut s = DiskStore::open(data.path(), "net", true).unwrap().unwrap();
        s.reserve(&a, ip("10.0.0.2"), 0).unwrap();
        let dir = s.dir().to_path_buf();
        std::fs::write(dir.join("10.0.0.3"), "").unwrap();
        std::fs::write(dir.join("10.0.0.4"), "not a lease").unwrap();
        assert!(!s.reserve(&a, ip("10.0.0.3"), 0).unwrap());
        let gone = collect(&mut s, &[gca("a", "eth0")]).unwrap();
        assert_eq!(gone, [ip("10.0.0.3")]);
        assert!(!dir.join("10.0.0.3").exists());
        assert!(dir.join("10.0.0.2").exists() && dir.join("10.0.0.4").exists());
        assert!(
            s.reserve(&Attachment::new("b", "eth0"), ip("10.0.0.3"), 0)
                .unwrap()
        );
    }
}
