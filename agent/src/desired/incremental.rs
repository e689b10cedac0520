//! The desired state kept up to date per Node (issue 28): an event recomputes the Nodes it
//! touches, not all 5,001.
//!
//! The Nodes fall into groups, each closed under what makes one Node's outcome depend on
//! another's: ranges that overlap (the older keeps it) and an InternalIP inside a range (a
//! pod address). A group's share of the state (routes, overlay peers, warnings, trusted pod
//! ranges) is [`desired`] of this node's own Node plus the group: the same function, so the
//! same rules. An event removes the shares of the groups of the changed Nodes and computes
//! the groups around them again. This node's own Node, its addresses or a [`reset`] (the
//! agent's on-link answers asked afresh) recompute everything.
//!
//! Which Nodes can meet others is judged by the checks that need only the Node and this
//! node (the same as in [`desired`], minus on-link): a Node that fails one is refused
//! whatever the others say, and counting one that is refused anyway only makes its group
//! larger, never the result different.
//!
//! [`reset`]: Incremental::reset

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use hostnet::node::{OverlayPeer, PodRoute};
use ipnetwork::IpNetwork;

use super::{Desired, Local, Options, desired, desired_keeping, outside_cluster, span, underlay};
use super::{key, used_ips};
use crate::kube::nodes::NodeInfo;

/// A range as its first and last address ([`span`]).
type SpanKey = ((u8, u128), u128);

/// The desired state of node `me`, maintained across snapshots of the Node list.
#[derive(Default)]
pub struct Incremental {
    me: String,
    opts: Options,
    /// None: the next update computes everything.
    state: Option<State>,
}

/// One group's share of the state.
struct Group {
    members: Vec<Arc<NodeInfo>>,
    routes: Vec<PodRoute>,
    overlay: Vec<OverlayPeer>,
    /// Trusted pod ranges (beside this node's and the flags').
    masq: Vec<IpNetwork>,
    warnings: Vec<String>,
    /// A peer of it needs the overlay this node cannot have (`--mode auto`).
    no_overlay: bool,
}

struct State {
    /// Computed whole from a list that was not a snapshot: nothing to update.
    whole: bool,
    addrs: BTreeSet<IpAddr>,
    listed_me: Option<Arc<NodeInfo>>,
    /// The own Node the state was computed with: the listed one or the last good one.
    own: Option<Arc<NodeInfo>>,
    own_cidrs: Vec<IpNetwork>,
    /// Why this node cannot have the overlay, as [`desired`] words it.
    no_overlay_msg: Option<String>,
    /// Warnings that do not belong to a peer (the kept own Node, the overlay in vxlan).
    base_warnings: Vec<String>,
    /// Every other Node, by name.
    others: Vec<Arc<NodeInfo>>,
    by_name: HashMap<String, Arc<NodeInfo>>,
    /// The ranges and used InternalIPs of Nodes that may meet others.
    spans: BTreeMap<SpanKey, BTreeSet<String>>,
    ips: BTreeMap<(u8, u128), BTreeSet<String>>,
    /// Prefix lengths in `spans`, per family (the supernets worth looking up).
    prefixes: BTreeMap<(u8, u8), usize>,
    group_of: HashMap<String, u64>,
    groups: HashMap<u64, Group>,
    next_group: u64,
    /// Trusted ranges and the flags' ones, counted (a range leaves with its last holder).
    masq: BTreeMap<IpNetwork, usize>,
    /// `count` keeps the no-masquerade lists of `out` as `masq` (off while `build` adds
    /// 10,000 ranges: made once from `masq` at its end).
    keep_lists: bool,
    warnings: BTreeMap<String, usize>,
    no_overlay: usize,
    /// Nodes the last update passed to [`desired`] (what an event cost).
    recomputed: usize,
    out: Desired,
}

impl Incremental {
    pub fn new(me: &str, opts: Options) -> Incremental {
        Incremental {
            me: me.to_string(),
            opts,
            state: None,
        }
    }

    /// The next update computes everything again (the on-link answers were forgotten).
    pub fn reset(&mut self) {
        self.state = None;
    }

    /// [`desired_keeping`] of `nodes` (a watcher snapshot: by name, each name once; an
    /// unchanged Node shared as the same `Arc`), computing only what changed since the
    /// last update.
    pub fn update(
        &mut self,
        nodes: &[Arc<NodeInfo>],
        local: Local,
        last_good: &mut Option<Arc<NodeInfo>>,
    ) -> &Desired {
        let me = self.me.as_str();
        if !nodes.is_sorted_by(|a, b| a.name < b.name) {
            // Not a snapshot: nothing to compare with. Computed whole, and nothing kept.
            let d = desired_keeping(me, nodes, local, &self.opts, last_good);
            let st = self.state.insert(State::empty(d));
            st.whole = true;
            return &st.out;
        }
        let addrs: BTreeSet<IpAddr> = local.addrs.iter().copied().collect();
        let listed_me = nodes
            .binary_search_by(|n| n.name.as_str().cmp(me))
            .ok()
            .map(|i| nodes[i].clone());
        let same = |a: &Option<Arc<NodeInfo>>, b: &Option<Arc<NodeInfo>>| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        let fresh = match &self.state {
            Some(st) => {
                !st.whole
                    && st.addrs == addrs
                    && same(&st.listed_me, &listed_me)
                    && (last_good.is_none() || same(&st.own, last_good))
            }
            None => false,
        };
        if !fresh {
            let st = State::build(me, &self.opts, nodes, listed_me, addrs, local, last_good);
            let st = self.state.insert(st);
            return &st.out;
        }
        let st = self.state.as_mut().expect("checked above");
        st.recomputed = 0;
        // `count` notes every route it adds or removes from here.
        st.out.routes_changed = Some(Vec::new());
        st.apply(me, &self.opts, nodes, local);
        &st.out
    }
}

impl State {
    fn empty(out: Desired) -> State {
        State {
            whole: false,
            addrs: BTreeSet::new(),
            listed_me: None,
            own: None,
            own_cidrs: Vec::new(),
            no_overlay_msg: None,
            base_warnings: Vec::new(),
            others: Vec::new(),
            by_name: HashMap::new(),
            spans: BTreeMap::new(),
            ips: BTreeMap::new(),
            prefixes: BTreeMap::new(),
            group_of: HashMap::new(),
            groups: HashMap::new(),
            next_group: 0,
            masq: BTreeMap::new(),
            keep_lists: false,
            warnings: BTreeMap::new(),
            no_overlay: 0,
            recomputed: 0,
            out,
        }
    }

    /// Everything from scratch: this node's part, then every group.
    fn build(
        me: &str,
        opts: &Options,
        nodes: &[Arc<NodeInfo>],
        listed_me: Option<Arc<NodeInfo>>,
        addrs: BTreeSet<IpAddr>,
        local: Local,
        last_good: &mut Option<Arc<NodeInfo>>,
    ) -> State {
        let alone: Vec<Arc<NodeInfo>> = listed_me.iter().cloned().collect();
        let base = desired_keeping(
            me,
            &alone,
            Local {
                addrs: local.addrs,
                on_link: &mut *local.on_link,
            },
            opts,
            last_good,
        );
        // desired_keeping put the listed Node in last_good if valid, else kept the old one.
        let own = last_good.clone().or_else(|| listed_me.clone());
        let no_overlay_msg = own
            .as_ref()
            .and_then(|o| underlay(me, std::slice::from_ref(o), &addrs).err());
        let mut st = State::empty(Desired::default());
        st.masq = base
            .policy
            .v4
            .iter()
            .chain(&base.policy.v6)
            .flat_map(|f| f.no_masquerade.iter().map(|n| (*n, 1)))
            .collect();
        st.base_warnings = base.warnings.clone();
        st.out = base;
        st.own_cidrs = st.out.own_cidrs.clone();
        st.addrs = addrs;
        st.listed_me = listed_me;
        st.own = own;
        st.no_overlay_msg = no_overlay_msg;
        st.others = nodes.iter().filter(|n| n.name != me).cloned().collect();
        for n in st.others.clone() {
            st.by_name.insert(n.name.clone(), n.clone());
            st.index(&n, opts, true);
        }
        let names: Vec<String> = st.others.iter().map(|n| n.name.clone()).collect();
        st.regroup(me, opts, names, local);
        st.masq_lists();
        st.keep_lists = true;
        st
    }

    /// The next snapshot: the Nodes that differ from the last one, and their groups.
    fn apply(&mut self, me: &str, opts: &Options, nodes: &[Arc<NodeInfo>], local: Local) {
        let next: Vec<Arc<NodeInfo>> = nodes.iter().filter(|n| n.name != me).cloned().collect();
        let mut changed: Vec<String> = Vec::new();
        let (mut i, mut j) = (0, 0);
        let old = std::mem::take(&mut self.others);
        while i < old.len() || j < next.len() {
            let (a, b) = (old.get(i), next.get(j));
            match (a, b) {
                // The same object: the same Node (most of a snapshot).
                (Some(a), Some(b)) if Arc::ptr_eq(a, b) => {
                    i += 1;
                    j += 1;
                }
                (Some(a), Some(b)) if a.name == b.name => {
                    if a != b {
                        changed.push(a.name.clone());
                    }
                    i += 1;
                    j += 1;
                }
                (Some(a), Some(b)) if a.name < b.name => {
                    changed.push(a.name.clone());
                    i += 1;
                }
                (Some(a), None) => {
                    changed.push(a.name.clone());
                    i += 1;
                }
                (_, Some(b)) => {
                    changed.push(b.name.clone());
                    j += 1;
                }
                (None, None) => unreachable!(),
            }
        }
        for name in &changed {
            if let Some(old) = self.by_name.remove(name) {
                self.index(&old, opts, false);
            }
            // `next` is sorted by name (a snapshot).
            if let Ok(k) = next.binary_search_by(|n| n.name.as_str().cmp(name)) {
                let new = next[k].clone();
                self.index(&new, opts, true);
                self.by_name.insert(name.clone(), new);
            }
        }
        self.others = next;
        if !changed.is_empty() {
            self.regroup(me, opts, changed, local);
        }
    }

    /// The ranges and used InternalIPs of `node` in (or out of) the indexes, when it may
    /// meet other Nodes.
    fn index(&mut self, node: &NodeInfo, opts: &Options, add: bool) {
        let Some((cidrs, ips)) = may_meet(node, &self.own_cidrs, &self.addrs, opts) else {
            return;
        };
        let name = &node.name;
        for net in cidrs {
            let fam = key(net.network()).0;
            let p = self.prefixes.entry((fam, net.prefix())).or_default();
            let set = self.spans.entry(span(net)).or_default();
            if add {
                *p += 1;
                set.insert(name.clone());
            } else {
                *p -= 1;
                set.remove(name);
            }
            if *p == 0 {
                self.prefixes.remove(&(fam, net.prefix()));
            }
            if set.is_empty() {
                self.spans.remove(&span(net));
            }
        }
        for ip in ips.into_iter().flatten() {
            let set = self.ips.entry(key(ip)).or_default();
            if add {
                set.insert(name.clone());
            } else {
                set.remove(name);
            }
            if set.is_empty() {
                self.ips.remove(&key(ip));
            }
        }
    }

    /// The Nodes whose outcome may depend on `node`'s: overlapping ranges, an InternalIP
    /// of one inside a range of the other.
    fn neighbours(&self, node: &NodeInfo, opts: &Options, out: &mut Vec<String>) {
        let Some((cidrs, ips)) = may_meet(node, &self.own_cidrs, &self.addrs, opts) else {
            return;
        };
        let mut add = |set: &BTreeSet<String>| out.extend(set.iter().cloned());
        for net in cidrs {
            let ((fam, start), last) = span(net);
            // Ranges inside it (CIDRs are nested or disjoint), then those around it.
            for (_, set) in self
                .spans
                .range(((fam, start), 0)..=((fam, last), u128::MAX))
            {
                add(set);
            }
            for set in self.around(net.network(), net.prefix()) {
                add(set);
            }
            for (_, set) in self.ips.range((fam, start)..=(fam, last)) {
                add(set);
            }
        }
        for ip in ips.into_iter().flatten() {
            let bits = if ip.is_ipv4() { 32 } else { 128 };
            for set in self.around(ip, bits) {
                add(set);
            }
        }
    }

    /// The indexed ranges holding `addr`/`prefix`: one lookup per prefix length in use.
    fn around(&self, addr: IpAddr, prefix: u8) -> impl Iterator<Item = &BTreeSet<String>> {
        let fam = key(addr).0;
        self.prefixes
            .range((fam, 0)..=(fam, prefix))
            .filter_map(move |((_, p), _)| IpNetwork::new(addr, *p).ok())
            .filter_map(|net| self.spans.get(&span(&net)))
    }

    /// Removes the groups of `seeds` and computes the groups around them again.
    fn regroup(&mut self, me: &str, opts: &Options, seeds: Vec<String>, local: Local) {
        let mut queue: Vec<String> = Vec::new();
        for name in &seeds {
            if let Some(g) = self.group_of.get(name).copied() {
                self.remove_group(g, &mut queue);
            }
        }
        queue.extend(seeds);
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut scratch = Vec::new();
        while let Some(seed) = queue.pop() {
            if done.contains(&seed) || !self.by_name.contains_key(&seed) {
                continue;
            }
            // One group: everything reachable from `seed`, its old groups' shares removed.
            let mut members: Vec<Arc<NodeInfo>> = Vec::new();
            let mut todo = vec![seed];
            while let Some(name) = todo.pop() {
                if !done.insert(name.clone()) {
                    continue;
                }
                let Some(node) = self.by_name.get(&name).cloned() else {
                    continue;
                };
                if let Some(g) = self.group_of.get(&name).copied() {
                    self.remove_group(g, &mut todo);
                }
                scratch.clear();
                self.neighbours(&node, opts, &mut scratch);
                todo.extend(scratch.drain(..).filter(|n| !done.contains(n)));
                members.push(node);
            }
            members.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            self.add_group(
                me,
                opts,
                members,
                Local {
                    addrs: local.addrs,
                    on_link: &mut *local.on_link,
                },
            );
        }
        self.finish();
    }

    fn add_group(&mut self, me: &str, opts: &Options, members: Vec<Arc<NodeInfo>>, local: Local) {
        let list: Vec<&NodeInfo> = self
            .own
            .iter()
            .map(|o| o.as_ref())
            .chain(members.iter().map(|m| m.as_ref()))
            .collect();
        self.recomputed += members.len();
        let d = desired(me, &list, local, opts);
        let mut warnings = d.warnings;
        let before = warnings.len();
        if let Some(msg) = &self.no_overlay_msg {
            warnings.retain(|w| w != msg);
        }
        let masq: Vec<IpNetwork> = d
            .policy
            .v4
            .iter()
            .chain(&d.policy.v6)
            .flat_map(|f| f.no_masquerade.iter().copied())
            .filter(|n| !self.own_cidrs.contains(n))
            .filter(|n| !opts.cluster_cidrs.contains(n) && !opts.no_masquerade.contains(n))
            .collect();
        let group = Group {
            routes: d.routes.into_iter().collect(),
            overlay: d.overlay.into_iter().collect(),
            masq,
            no_overlay: warnings.len() != before,
            warnings,
            members,
        };
        self.count(&group, true);
        let id = self.next_group;
        self.next_group += 1;
        for m in &group.members {
            self.group_of.insert(m.name.clone(), id);
        }
        self.groups.insert(id, group);
    }

    /// Takes group `g`'s share out; its members (still listed) go to `queue`.
    fn remove_group(&mut self, g: u64, queue: &mut Vec<String>) {
        let Some(group) = self.groups.remove(&g) else {
            return;
        };
        self.count(&group, false);
        for m in &group.members {
            self.group_of.remove(&m.name);
            queue.push(m.name.clone());
        }
    }

    fn count(&mut self, g: &Group, add: bool) {
        let out = &mut self.out;
        for r in &g.routes {
            let changed = if add {
                out.routes.insert(r.clone())
            } else {
                out.routes.remove(r)
            };
            if changed && let Some(noted) = &mut out.routes_changed {
                noted.push(r.clone());
            }
        }
        for p in &g.overlay {
            if add {
                out.overlay.insert(p.clone());
            } else {
                out.overlay.remove(p);
            }
        }
        for n in &g.masq {
            let c = self.masq.entry(*n).or_default();
            if add {
                *c += 1;
            } else {
                *c -= 1;
            }
            // A range comes or goes: its family's list (sorted) changes by that one.
            let (came, gone) = (add && *c == 1, *c == 0);
            if gone {
                self.masq.remove(n);
            }
            let fam = if n.is_ipv4() {
                &mut out.policy.v4
            } else {
                &mut out.policy.v6
            };
            if let Some(list) = fam.as_mut().map(|f| &mut f.no_masquerade)
                && self.keep_lists
            {
                match list.binary_search(n) {
                    Err(at) if came => list.insert(at, *n),
                    Ok(at) if gone => {
                        list.remove(at);
                    }
                    _ => {}
                }
            }
        }
        for w in &g.warnings {
            let c = self.warnings.entry(w.clone()).or_default();
            if add {
                *c += 1;
            } else {
                *c -= 1;
            }
            if *c == 0 {
                self.warnings.remove(w);
            }
        }
        if g.no_overlay {
            if add {
                self.no_overlay += 1;
            } else {
                self.no_overlay -= 1;
            }
        }
    }

    /// The no-masquerade lists as the counted ranges (sorted, as `count` keeps them).
    fn masq_lists(&mut self) {
        let out = &mut self.out;
        for (fam, v4) in [(&mut out.policy.v4, true), (&mut out.policy.v6, false)] {
            if let Some(f) = fam {
                f.no_masquerade = self
                    .masq
                    .keys()
                    .filter(|n| n.is_ipv4() == v4)
                    .copied()
                    .collect();
            }
        }
    }

    /// The warnings counted over every group.
    fn finish(&mut self) {
        let out = &mut self.out;
        out.warnings = self.base_warnings.clone();
        if self.no_overlay > 0
            && let Some(msg) = &self.no_overlay_msg
            && !out.warnings.contains(msg)
        {
            out.warnings.push(msg.clone());
        }
        for (w, n) in &self.warnings {
            out.warnings.extend(std::iter::repeat_n(w.clone(), *n));
        }
    }
}

/// The ranges and used InternalIPs of a Node that passes every check [`desired`] makes of
/// a Node on its own and against this node, on-link aside; None for one it refuses
/// whatever the other Nodes say (or that has no range yet).
fn may_meet<'a>(
    node: &'a NodeInfo,
    own: &[IpNetwork],
    addrs: &BTreeSet<IpAddr>,
    opts: &Options,
) -> Option<(&'a [IpNetwork], [Option<IpAddr>; 2])> {
    let cidrs = node.ranges.as_deref().ok()?;
    if cidrs.is_empty()
        || cidrs
            .iter()
            .any(|n| outside_cluster(n, &opts.cluster_cidrs))
    {
        return None;
    }
    let ips = used_ips(node.ips.as_deref().ok()?);
    if ips.iter().flatten().any(|ip| addrs.contains(ip)) {
        return None;
    }
    let refused = cidrs.iter().any(|net| {
        own.iter()
            .any(|o| o.contains(net.network()) || net.contains(o.network()))
            || addrs.iter().any(|a| net.contains(*a))
            || ips.iter().flatten().any(|ip| net.contains(*ip))
    });
    (!refused).then_some((cidrs, ips))
}

#[cfg(test)]
mod tests;
