//! A pod's event: the stored pod, its addresses' ownership (an address two pods claim
//! is one pod's, `Pod::owns_against`; the event may move an address to or from another
//! pod, which then changes too), the peer sets that follow it, and for a pod of this
//! node its policing (`local`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::tx::Tx;
use super::{Engine, Entry, State};
use crate::cluster::Pod;
use crate::diff::Changes;

impl Engine {
    pub(super) fn pod_event(&mut self, key: (String, String), new: Option<Pod>) -> Changes {
        let old_id = self.st.id_of(&key.0, &key.1);
        if old_id.is_none() && new.is_none() {
            return Changes::default();
        }
        let id = old_id.unwrap_or_else(|| self.st.alloc(&key));
        // Unclaim the old addresses, claim the new: who else claimed them may change.
        let old_claims = old_id
            .map(|i| {
                self.st.pods[i as usize]
                    .as_ref()
                    .expect("live")
                    .claimed
                    .clone()
            })
            .unwrap_or_default();
        let new_claims: Vec<IpAddr> = match &new {
            Some(p) if p.policed() => p.ips.clone(),
            _ => vec![],
        };
        for ip in &old_claims {
            self.st.unclaim(*ip, id);
        }
        let mut affected: BTreeSet<u32> = BTreeSet::new();
        for ip in old_claims.iter().chain(&new_claims) {
            affected.extend(self.st.claims.of(ip));
        }
        for ip in &new_claims {
            self.st.claims.add(*ip, id);
        }
        // Every pod's view before and after, then two passes: addresses lost first, so a
        // pod taking one over adds it after its old owner took it out.
        let before = old_id.map(|_| self.st.pod(id).clone());
        let removed = new.is_none();
        if let Some(p) = new {
            let claimed = new_claims;
            self.st.pods[id as usize] = Some(Box::new(Entry { pod: p, claimed }));
        }
        affected.remove(&id);
        let mut steps = vec![(id, before, (!removed).then(|| self.st.owned_view(id)))];
        for other in affected {
            let before = Some(self.st.pod(other).clone());
            let now = Some(self.st.owned_view(other));
            if before != now {
                steps.push((other, before, now));
            }
        }
        let mut tx = Tx::new(&mut self.prog);
        let mut dirty = BTreeSet::new();
        let mut mids = vec![];
        for (id, before, now) in &steps {
            let mid = before.clone().map(|mut b| {
                let keep = now.as_ref().map_or(&[][..], |n| &n.ips[..]);
                b.ips.retain(|ip| keep.contains(ip));
                b
            });
            let (st, local, node) = (&mut self.st, &mut self.local, &self.node);
            st.replace(
                local,
                &mut tx,
                node,
                *id,
                before.clone(),
                mid.clone(),
                &mut dirty,
            );
            mids.push(mid);
        }
        for ((id, _, now), mid) in steps.into_iter().zip(mids) {
            let (st, local, node) = (&mut self.st, &mut self.local, &self.node);
            st.replace(local, &mut tx, node, id, mid, now, &mut dirty);
        }
        if removed {
            self.st.release(&key, id);
        }
        self.local
            .settle(&self.st, &mut tx, dirty, &mut self.unfilled.as_mut());
        tx.finish()
    }
}

impl State {
    fn alloc(&mut self, key: &(String, String)) -> u32 {
        let id = self.free.pop().unwrap_or_else(|| {
            self.pods.push(None);
            (self.pods.len() - 1) as u32
        });
        self.ids.insert(&key.0, &key.1, id);
        id
    }

    fn release(&mut self, key: &(String, String), id: u32) {
        self.ids.remove(&key.0, &key.1, id);
        self.pods[id as usize] = None;
        self.free.push(id);
    }

    fn id_of(&self, ns: &str, name: &str) -> Option<u32> {
        let pods = &self.pods;
        self.ids.get(ns, name, |id| {
            let p = &pods[id as usize].as_ref().expect("live id").pod;
            (&*p.namespace, p.name.as_str())
        })
    }

    fn unclaim(&mut self, ip: IpAddr, id: u32) {
        self.claims.remove(ip, id);
    }

    /// The stored pod `id` with only the addresses it owns.
    fn owned_view(&self, id: u32) -> Pod {
        let e = self.pods[id as usize].as_ref().expect("live");
        let mut pod = e.pod.clone();
        if pod.policed() {
            let raw = |i: u32| &self.pods[i as usize].as_ref().expect("live").pod;
            pod.ips = e
                .claimed
                .iter()
                .copied()
                .filter(|ip| {
                    self.claims
                        .of(ip)
                        .all(|o| o == id || raw(id).owns_against(raw(o)))
                })
                .collect();
        }
        pod
    }

    /// Pod `id` goes from `before` to `now` (as owned views): the stored view and the
    /// namespace index, the peer sets, its policing if it is or was this node's.
    #[allow(clippy::too_many_arguments)]
    fn replace(
        &mut self,
        local: &mut super::Local,
        tx: &mut Tx,
        node: &str,
        id: u32,
        before: Option<Pod>,
        now: Option<Pod>,
        dirty: &mut BTreeSet<(super::Key, crate::validate::Direction)>,
    ) {
        patch_peers(self, tx, before.as_ref(), now.as_ref());
        if let Some(b) = before.as_ref().filter(|b| b.policed()) {
            let gone = self.by_ns.get_mut(&b.namespace).is_some_and(|s| {
                s.remove(&id);
                s.is_empty()
            });
            if gone {
                self.by_ns.remove(&b.namespace);
            }
        }
        if let Some(n) = now.as_ref().filter(|n| n.policed()) {
            self.by_ns
                .entry(n.namespace.clone())
                .or_default()
                .insert(id);
        }
        if let (Some(n), Some(e)) = (&now, self.pods[id as usize].as_mut()) {
            e.pod.ips = n.ips.clone();
        }
        let is_local = |p: &Option<Pod>| p.as_ref().is_some_and(|p| &*p.node == node);
        if is_local(&before) || is_local(&now) {
            local.refresh(
                self,
                tx,
                id,
                now.as_ref().filter(|p| &*p.node == node),
                dirty,
            );
        }
    }
}

/// The elements of the sets following pods, from `before`'s to `now`'s. Each element
/// is one pod's (its owned address), so no other pod holds it.
fn patch_peers(st: &State, tx: &mut Tx, before: Option<&Pod>, now: Option<&Pod>) {
    let mut edits = vec![];
    for (name, src) in &tx.prog.sources {
        let b = before
            .map(|p| st.source_members(src, p))
            .unwrap_or_default();
        let a = now.map(|p| st.source_members(src, p)).unwrap_or_default();
        if a != b {
            edits.push((name.clone(), b, a));
        }
    }
    for (name, b, a) in edits {
        b.iter()
            .filter(|e| !a.contains(e))
            .for_each(|e| tx.remove(&name, e));
        a.into_iter()
            .filter(|e| !b.contains(e))
            .for_each(|e| tx.insert(&name, e));
    }
}
