//! The incremental state against the whole computation (the oracle) after every event of
//! long random sequences (fixed seeds), and one event at 5,000 Nodes.

use std::collections::BTreeMap;

use super::*;
use crate::config::Mode;

const ME: &str = "me";

/// xorshift64*: the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }
}

fn node(name: &str, cidrs: &[String], ips: &[String], created: &str) -> Arc<NodeInfo> {
    Arc::new(
        NodeInfo::new(name.into(), "spec.podCIDRs", cidrs.to_vec(), ips.to_vec())
            .created_at(created.into()),
    )
}

/// A peer drawn from small pools, so ranges collide, nest, hold InternalIPs, and some
/// data is bad.
fn random_peer(rng: &mut Rng, name: &str) -> Arc<NodeInfo> {
    let mut cidrs = Vec::new();
    match rng.below(12) {
        0 => {}                                                           // no range yet
        1 => cidrs.push("nope".into()),                                   // unparsable
        2 => cidrs.push("10.99.0.0/24".into()), // outside --cluster-cidr when given
        3 => cidrs.push("10.244.0.0/16".into()), // holds this node's range
        4 => cidrs.push(format!("10.244.{}.0/23", 2 * rng.below(4) + 2)), // holds two /24s
        5 => cidrs.push(format!("10.244.{}.128/25", rng.below(8) + 1)),
        _ => cidrs.push(format!("10.244.{}.0/24", rng.below(8) + 1)),
    }
    if rng.below(3) > 0 {
        cidrs.push(format!("fd00:244:{:x}::/64", rng.below(8) + 1));
    }
    let mut ips = Vec::new();
    match rng.below(10) {
        0 => {}
        1 => ips.push("bogus".to_string()),
        2 => ips.push("192.168.0.1".into()), // this node's address
        3 => ips.push(format!("10.244.{}.5", rng.below(8) + 1)), // a pod address
        4 => ips.push(format!("192.168.9.{}", rng.below(4) + 2)), // not on-link
        _ => ips.push(format!("192.168.0.{}", rng.below(6) + 2)), // shared at times
    }
    if rng.below(3) > 0 {
        ips.push(format!("fd00:1::{:x}", rng.below(6) + 2));
    }
    let created = rng.pick(&["2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", ""]);
    node(name, &cidrs, &ips, created)
}

fn random_me(rng: &mut Rng) -> Option<Arc<NodeInfo>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let ips = s(&["192.168.0.1", "fd00:1::1"]);
    let created = "2024-01-01T00:00:00Z";
    match rng.below(6) {
        0 => None, // deleted, or absent from a re-list
        1 => Some(node(ME, &s(&["bad"]), &ips, created)),
        2 => Some(node(ME, &[], &ips, created)),
        3 => Some(node(
            ME,
            &s(&["10.244.1.0/24"]),
            &s(&["10.244.5.5"]),
            created,
        )),
        4 => Some(node(
            ME,
            &s(&["10.244.0.0/24"]),
            &s(&["192.168.0.7"]),
            created,
        )),
        _ => Some(node(
            ME,
            &s(&["10.244.0.0/24", "fd00:244::/64"]),
            &ips,
            created,
        )),
    }
}

fn addrs(all: bool) -> Vec<IpAddr> {
    let mut a = vec!["192.168.0.1", "10.244.0.1", "fd00:244::1"];
    if all {
        a.push("fd00:1::1");
    }
    a.iter().map(|s| s.parse().unwrap()).collect()
}

fn on_link(ip: IpAddr) -> bool {
    ["192.168.0.0/24", "fd00:1::/64", "10.244.0.0/24"]
        .iter()
        .any(|n| n.parse::<IpNetwork>().unwrap().contains(ip))
}

/// Warnings are a set to the agent (each logged once while it lasts): compared sorted.
fn normal(d: &Desired) -> String {
    let mut w = d.warnings.clone();
    w.sort();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        d.own_cidrs, d.own_error, d.routes, d.overlay, d.underlay, d.policy, w
    )
}

struct Check {
    inc: Incremental,
    opts: Options,
    last_inc: Option<Arc<NodeInfo>>,
    last_full: Option<Arc<NodeInfo>>,
    /// The routes of the last update (what `routes_changed` is relative to).
    last_routes: BTreeSet<PodRoute>,
    /// Updates that named their changed routes.
    noted: usize,
}

impl Check {
    fn new(opts: Options) -> Check {
        Check {
            inc: Incremental::new(ME, opts.clone()),
            opts,
            last_inc: None,
            last_full: None,
            last_routes: BTreeSet::new(),
            noted: 0,
        }
    }

    /// The incremental state equals the whole computation; returns the Nodes recomputed.
    fn step(&mut self, nodes: &[Arc<NodeInfo>], all_addrs: bool, what: &str) -> usize {
        let a = addrs(all_addrs);
        let mut f = on_link;
        let full = desired_keeping(
            ME,
            nodes,
            Local {
                addrs: &a,
                on_link: &mut f,
            },
            &self.opts,
            &mut self.last_full,
        );
        let mut f = on_link;
        let inc = self.inc.update(
            nodes,
            Local {
                addrs: &a,
                on_link: &mut f,
            },
            &mut self.last_inc,
        );
        assert_eq!(normal(inc), normal(&full), "after {what}");
        assert_eq!(self.last_inc, self.last_full, "last good after {what}");
        // Every route that came or went since the last update is among those named.
        if let Some(named) = &inc.routes_changed {
            let named: BTreeSet<&PodRoute> = named.iter().collect();
            let moved: Vec<&PodRoute> = inc
                .routes
                .symmetric_difference(&self.last_routes)
                .filter(|r| !named.contains(r))
                .collect();
            assert!(moved.is_empty(), "after {what}: not named: {moved:?}");
            self.noted += 1;
        }
        self.last_routes = inc.routes.clone();
        self.inc.state.as_ref().map_or(0, |s| s.recomputed)
    }
}

fn sequence(seed: u64, opts: Options, events: usize) {
    let mut rng = Rng(seed);
    let mut check = Check::new(opts);
    let mut nodes: BTreeMap<String, Arc<NodeInfo>> = BTreeMap::new();
    let mut all_addrs = true;
    let names: Vec<String> = (0..30).map(|i| format!("n{i:02}")).collect();
    for e in 0..events {
        let what = match rng.below(20) {
            0..=9 => {
                let name = &names[rng.below(names.len())];
                nodes.insert(name.clone(), random_peer(&mut rng, name));
                format!("event {e}: {name} added or changed")
            }
            10..=14 => {
                let name = &names[rng.below(names.len())];
                nodes.remove(name);
                format!("event {e}: {name} deleted")
            }
            15 | 16 => {
                match random_me(&mut rng) {
                    Some(n) => nodes.insert(ME.into(), n),
                    None => nodes.remove(ME),
                };
                format!("event {e}: this node's Node changed")
            }
            17 => {
                // A re-list: equal Nodes, new objects.
                for n in nodes.values_mut() {
                    *n = Arc::new((**n).clone());
                }
                format!("event {e}: re-list")
            }
            18 => {
                check.inc.reset();
                format!("event {e}: reset")
            }
            _ => {
                all_addrs = rng.below(4) > 0;
                format!("event {e}: this node's addresses")
            }
        };
        let snapshot: Vec<Arc<NodeInfo>> = nodes.values().cloned().collect();
        check.step(&snapshot, all_addrs, &what);
    }
    // Most events are a peer's: updated in place, their routes named.
    assert!(
        check.noted > events / 2,
        "{} of {events} named",
        check.noted
    );
}

fn opts(mode: Mode, cluster: bool) -> Options {
    Options {
        cluster_cidrs: if cluster {
            vec!["10.244.0.0/16".parse().unwrap()]
        } else {
            vec![]
        },
        no_masquerade: vec!["10.96.0.0/12".parse().unwrap()],
        mode,
        bridge: "cni0".into(),
    }
}

#[test]
fn equals_the_whole_computation_after_every_event() {
    for (i, mode) in [Mode::HostGw, Mode::Auto, Mode::Vxlan]
        .into_iter()
        .enumerate()
    {
        for cluster in [false, true] {
            for seed in 1..=4u64 {
                sequence(
                    seed * 7919 + i as u64 * 31 + u64::from(cluster),
                    opts(mode, cluster),
                    1500,
                );
            }
        }
    }
}

fn peer_n(i: usize) -> Arc<NodeInfo> {
    let v4 = format!("10.{}.{}.0/24", 100 + i / 256, i % 256);
    let v6 = format!("fd01:0:0:{:x}::/64", i + 1);
    let ip4 = format!("192.168.{}.{}", i / 250, i % 250 + 2);
    let ip6 = format!("fd00:1::{:x}", i + 2);
    node(
        &format!("node{i:05}"),
        &[v4, v6],
        &[ip4, ip6],
        "2024-01-01T00:00:00Z",
    )
}

#[test]
fn one_event_at_5000_nodes_recomputes_only_the_nodes_it_touches() {
    let opts = opts(Mode::Auto, false);
    let mut check = Check::new(opts);
    let own = node(
        ME,
        &["10.244.0.0/24".into(), "fd00:244::/64".into()],
        &["192.168.0.1".into(), "fd00:1::1".into()],
        "2024-01-01T00:00:00Z",
    );
    let mut nodes: BTreeMap<String, Arc<NodeInfo>> =
        (0..5000).map(peer_n).map(|n| (n.name.clone(), n)).collect();
    nodes.insert(ME.into(), own);
    let snap =
        |nodes: &BTreeMap<String, Arc<NodeInfo>>| nodes.values().cloned().collect::<Vec<_>>();
    assert_eq!(check.step(&snap(&nodes), true, "the first list"), 5000);
    let added = peer_n(5000);
    nodes.insert(added.name.clone(), added);
    assert_eq!(check.step(&snap(&nodes), true, "one added"), 1);
    nodes.remove("node00042");
    assert_eq!(check.step(&snap(&nodes), true, "one deleted"), 0);
    // A Node claiming a range another holds: the two are computed together.
    let thief = node(
        "node00007",
        &["10.100.8.0/24".into()],
        &["192.168.0.9".into()],
        "2025-01-01T00:00:00Z",
    );
    nodes.insert(thief.name.clone(), thief);
    assert_eq!(check.step(&snap(&nodes), true, "an overlapping claim"), 2);
    assert_eq!(check.step(&snap(&nodes), true, "nothing changed"), 0);
}
