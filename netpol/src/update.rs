//! A remote pod's event applied to a compiled program in place: only the sets whose
//! sources the pod's old or new version belongs to change, by elements. Equal to a full
//! `compile` of the cluster after the event (a test checks it on generated events).

use crate::cluster::{Cluster, Pod};
use crate::diff::Changes;
use crate::members::members;
use crate::program::{Elem, Program};

/// The event involves a pod of this node: its dispatch, ingress named ports and
/// selection chains depend on it, so the caller compiles the program again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a local pod changed: compile the node's program again")]
pub struct LocalPod;

/// `c` is the cluster after the event; `old`/`new` the pod before and after (`None`:
/// it did not exist / no longer does). Returns what changed, for the kernel: set
/// elements only.
pub fn pod_event(
    c: &Cluster,
    node: &str,
    prog: &mut Program,
    old: Option<&Pod>,
    new: Option<&Pod>,
) -> Result<Changes, LocalPod> {
    if old
        .into_iter()
        .chain(new)
        .any(|p| &*p.node == node && p.policed())
    {
        return Err(LocalPod);
    }
    let mut changes = Changes::default();
    for (name, src) in &prog.sources {
        let before = old.map(|p| members(c, src, p)).unwrap_or_default();
        let after = new.map(|p| members(c, src, p)).unwrap_or_default();
        if before == after {
            continue;
        }
        let Some(set) = prog.sets.get_mut(name) else {
            continue;
        };
        for e in before.iter().filter(|e| !after.contains(e)) {
            // Another pod may hold the same address (a stale status): it keeps the element.
            let ip = match e {
                Elem::Addr(ip) | Elem::AddrProtoPort(ip, ..) => *ip,
                _ => continue,
            };
            let held = c
                .pods
                .iter()
                .any(|q| q.ips.contains(&ip) && members(c, src, q).contains(e));
            if !held && set.elems.remove(e) {
                changes.del_elems.push((name.clone(), e.clone()));
            }
        }
        for e in after {
            if set.elems.insert(e.clone()) {
                changes.add_elems.push((name.clone(), e));
            }
        }
    }
    Ok(changes)
}
