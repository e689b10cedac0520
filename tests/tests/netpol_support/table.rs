//! Reachability tables: for each kind of probe (protocol, port, family), a matrix of
//! sources (the pods, then the nodes) by destination pods. The truth comes from
//! `netpol::oracle::allowed` over the objects; the observed table from the prober. They
//! print as upstream's reachability matrices: `.` connects, `X` does not.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use netpol::addr::Family;
use netpol::oracle::{Endpoint, allowed};
use netpol::validate::Protocol;

use super::model::{Objects, split};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Kind {
    pub proto: Protocol,
    pub port: u16,
    pub family: Family,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.proto {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        };
        let family = match self.family {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        };
        write!(f, "{proto}/{} {family}", self.port)
    }
}

/// Who sends a probe: a pod (`ns/name`) or a node from its own namespace.
#[derive(Debug, Clone)]
pub enum Source {
    Pod(String),
    Node {
        name: String,
        /// Its lan addresses (v4, v6): the source towards other nodes' pods.
        lan: [IpAddr; 2],
        /// Its bridge's addresses: the source towards its own pods (the connected route).
        bridge: [IpAddr; 2],
    },
}

impl Source {
    pub fn label(&self) -> &str {
        match self {
            Source::Pod(k) => k,
            Source::Node { name, .. } => name,
        }
    }
}

fn pick(ips: [IpAddr; 2], family: Family) -> IpAddr {
    match family {
        Family::V4 => ips[0],
        Family::V6 => ips[1],
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub sources: Vec<String>,
    pub dests: Vec<String>,
    /// `cells[kind][source][dest]`: connects.
    pub cells: BTreeMap<Kind, Vec<Vec<bool>>>,
}

impl Table {
    /// What the oracle says of every probe.
    pub fn truth(objects: &Objects, sources: &[Source], dests: &[String], kinds: &[Kind]) -> Table {
        let c = objects.cluster();
        let pod = |key: &str| {
            let (ns, name) = split(key);
            c.pod(ns, name)
                .unwrap_or_else(|| panic!("pod {key} in the model"))
        };
        let cells = kinds
            .iter()
            .map(|k| {
                let rows = sources
                    .iter()
                    .map(|s| {
                        dests
                            .iter()
                            .map(|d| {
                                let dst = pod(d);
                                let src = match s {
                                    Source::Pod(key) => Endpoint::Pod(pod(key)),
                                    Source::Node { name, lan, bridge } => {
                                        let own = *dst.node == **name;
                                        Endpoint::Outside(pick(
                                            if own { *bridge } else { *lan },
                                            k.family,
                                        ))
                                    }
                                };
                                allowed(
                                    &c,
                                    src,
                                    Endpoint::Pod(dst),
                                    k.family,
                                    k.proto.number(),
                                    k.port,
                                )
                                .unwrap_or_else(|| panic!("{} -> {d}: no {} address", s.label(), k))
                            })
                            .collect()
                    })
                    .collect();
                (*k, rows)
            })
            .collect();
        Table {
            sources: sources.iter().map(|s| s.label().to_string()).collect(),
            dests: dests.to_vec(),
            cells,
        }
    }

    /// How many cells differ from `other` (same shape).
    pub fn mismatches(&self, other: &Table) -> usize {
        self.cells
            .iter()
            .map(|(k, rows)| {
                let theirs = &other.cells[k];
                rows.iter()
                    .flatten()
                    .zip(theirs.iter().flatten())
                    .filter(|(a, b)| a != b)
                    .count()
            })
            .sum()
    }

    /// For every kind where `observed` differs from this (expected) table: both
    /// matrices and the comparison (`X` where they differ).
    pub fn explain(&self, observed: &Table) -> String {
        let mut out = String::new();
        for (kind, want) in &self.cells {
            let got = &observed.cells[kind];
            if want == got {
                continue;
            }
            let diff: Vec<Vec<bool>> = want
                .iter()
                .zip(got)
                .map(|(w, g)| w.iter().zip(g).map(|(a, b)| a == b).collect())
                .collect();
            let _ = writeln!(out, "{kind}, expected:\n{}", self.matrix(want));
            let _ = writeln!(out, "{kind}, observed:\n{}", self.matrix(got));
            let _ = writeln!(
                out,
                "{kind}, comparison (X: differs):\n{}",
                self.matrix(&diff)
            );
        }
        out
    }

    /// Upstream's layout: a header of destinations, a row per source, tab-separated.
    fn matrix(&self, rows: &[Vec<bool>]) -> String {
        let mut out = String::from("-");
        for d in &self.dests {
            let _ = write!(out, "\t{d}");
        }
        for (s, row) in self.sources.iter().zip(rows) {
            let _ = write!(out, "\n{s}");
            for &ok in row {
                out.push_str(if ok { "\t." } else { "\tX" });
            }
        }
        out
    }
}
