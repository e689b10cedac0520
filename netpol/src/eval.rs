//! A small interpreter of a `Program` on the first packet of a connection, with the
//! nftables semantics the kernel session must produce: base chains of the forward hook
//! in priority order, each ending in its policy (accept); `accept` ends only the current
//! base chain, `drop` ends the packet; `jump` returns at the end of the callee; a verdict
//! map without the key gives no verdict. `ct state established,related` never matches
//! (a new connection).

use std::net::IpAddr;

use crate::addr::Family;
use crate::conntrack::CtEntry;
use crate::program::{Elem, Field, ICMPV6, Match, ND_TYPES, Program, SetKind, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    /// The destination port; for ICMP and ICMPv6 the message type.
    pub port: u16,
}

/// A program that refers to what it does not hold: a bug of `compile` or of a diff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("no set {0}")]
    NoSet(String),
    #[error("set {0} has the wrong type for its use")]
    SetKind(String),
    #[error("no chain {0}")]
    NoChain(String),
    #[error("jumps nest deeper than the kernel allows at chain {0}")]
    TooDeep(String),
}

enum Outcome {
    Accept,
    Drop,
    /// End of a chain, or no verdict: the caller goes on.
    Next,
}

impl Program {
    /// Whether this node's forward hook sees the packet: not when it is to or from the
    /// node itself (input / output hooks), nor a pod's traffic to itself (it stays in the
    /// pod's namespace).
    pub fn sees(&self, p: &Packet) -> bool {
        p.src != p.dst && !self.local.contains(&p.src) && !self.local.contains(&p.dst)
    }

    /// Whether the packet passes this node (true when the forward hook does not see it).
    pub fn passes(&self, p: &Packet) -> Result<bool, EvalError> {
        if !self.sees(p) {
            return Ok(true);
        }
        self.forward(p)
    }

    /// The base chains' decision on a packet the forward hook sees.
    fn forward(&self, p: &Packet) -> Result<bool, EvalError> {
        let mut bases: Vec<_> = self
            .chains
            .iter()
            .filter(|(_, c)| c.hook.is_some())
            .collect();
        bases.sort_by_key(|(_, c)| c.hook);
        for (name, _) in bases {
            if let Outcome::Drop = self.run(name, p, 0)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn run(&self, chain: &str, p: &Packet, depth: usize) -> Result<Outcome, EvalError> {
        // The kernel's limit on nested jumps (NFT_JUMP_STACK_SIZE).
        if depth > 16 {
            return Err(EvalError::TooDeep(chain.into()));
        }
        let c = self
            .chains
            .get(chain)
            .ok_or_else(|| EvalError::NoChain(chain.into()))?;
        for rule in &c.rules {
            let mut all = true;
            for m in &rule.matches {
                if !self.matches(m, p)? {
                    all = false;
                    break;
                }
            }
            if !all {
                continue;
            }
            let target = match &rule.verdict {
                Verdict::Accept => return Ok(Outcome::Accept),
                Verdict::Drop => return Ok(Outcome::Drop),
                Verdict::Jump(t) => Some(t.clone()),
                Verdict::Map(field, map) => self.lookup(*field, map, p)?,
                Verdict::PortMap(map) => self.port_lookup(map, p)?,
            };
            if let Some(t) = target {
                match self.run(&t, p, depth + 1)? {
                    Outcome::Next => {}
                    done => return Ok(done),
                }
            }
        }
        Ok(Outcome::Next)
    }

    fn set(&self, name: &str) -> Result<&crate::program::Set, EvalError> {
        self.sets
            .get(name)
            .ok_or_else(|| EvalError::NoSet(name.into()))
    }

    fn lookup(&self, field: Field, map: &str, p: &Packet) -> Result<Option<String>, EvalError> {
        let set = self.set(map)?;
        let SetKind::Dispatch(f) = set.kind else {
            return Err(EvalError::SetKind(map.into()));
        };
        let key = addr(field, p);
        if Family::of(key) != f {
            return Ok(None);
        }
        Ok(set.elems.iter().find_map(|e| match e {
            Elem::Jump(ip, chain) if *ip == key => Some(chain.clone()),
            _ => None,
        }))
    }

    /// `meta l4proto . th dport vmap @map`: the chain of the range holding the port.
    fn port_lookup(&self, map: &str, p: &Packet) -> Result<Option<String>, EvalError> {
        let set = self.set(map)?;
        if set.kind != SetKind::PortDispatch {
            return Err(EvalError::SetKind(map.into()));
        }
        Ok(set.elems.iter().find_map(|e| match e {
            Elem::PortJump(pr, a, b, chain) if *pr == p.proto && (*a..=*b).contains(&p.port) => {
                Some(chain.clone())
            }
            _ => None,
        }))
    }

    fn matches(&self, m: &Match, p: &Packet) -> Result<bool, EvalError> {
        let fam = Family::of(p.src);
        Ok(match m {
            Match::Established => false,
            Match::NeighbourDiscovery => {
                fam == Family::V6
                    && p.proto == ICMPV6
                    && u8::try_from(p.port).is_ok_and(|t| ND_TYPES.contains(&t))
            }
            Match::AddrIn(field, name) => {
                let set = self.set(name)?;
                let a = addr(*field, p);
                match set.kind {
                    SetKind::Addrs(f) => f == fam && set.elems.contains(&Elem::Addr(a)),
                    SetKind::Ranges(f) => {
                        f == fam
                            && set
                                .elems
                                .iter()
                                .any(|e| matches!(e, Elem::Range(r) if r.contains(a)))
                    }
                    _ => return Err(EvalError::SetKind(name.clone())),
                }
            }
            Match::ProtoPortIn(name) => {
                let set = self.set(name)?;
                if set.kind != SetKind::ProtoPorts {
                    return Err(EvalError::SetKind(name.clone()));
                }
                set.elems.iter().any(|e| {
                    matches!(e, Elem::ProtoPorts(pr, a, b) if *pr == p.proto && (*a..=*b).contains(&p.port))
                })
            }
            Match::DaddrProtoPortIn(name) => {
                let set = self.set(name)?;
                let SetKind::AddrProtoPorts(f) = set.kind else {
                    return Err(EvalError::SetKind(name.clone()));
                };
                f == fam
                    && set
                        .elems
                        .contains(&Elem::AddrProtoPort(p.dst, p.proto, p.port))
            }
        })
    }
}

/// The entries of `entries` whose connection `program` would not let in now: their first
/// packet ([`CtEntry::first_packet`]: a Service connection as its backend sees it) meets
/// a drop. Only connections through this node's forward hook to or from its isolated
/// pods can (the dispatch maps hold no other address); those to or from the node itself
/// never. A pod's connection to itself through its Service (hairpin) is forwarded, so it
/// is judged too.
pub fn denied(program: &Program, entries: &[CtEntry]) -> Result<Vec<CtEntry>, EvalError> {
    let mut out = Vec::new();
    for e in entries {
        let p = e.first_packet();
        let node = program.local.contains(&p.src) || program.local.contains(&p.dst);
        let hairpin = p.src == p.dst && e.orig.dst != e.reply.src;
        if node || (p.src == p.dst && !hairpin) {
            continue;
        }
        if !program.forward(&p)? {
            out.push(*e);
        }
    }
    Ok(out)
}

fn addr(field: Field, p: &Packet) -> IpAddr {
    match field {
        Field::Saddr => p.src,
        Field::Daddr => p.dst,
    }
}
