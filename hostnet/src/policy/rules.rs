//! A netpol rule as nf_tables expressions, the shapes `nft --debug=netlink` prints for
//! the same rule in an `inet` table, and back. An address match loads the address only
//! after `meta nfproto` says the family (once per rule): in an inet table the other
//! family's header would be read at that offset.

use std::collections::BTreeMap;

use netpol::addr::Family;
use netpol::program::{Field, ICMPV6, Match, ND_TYPES, Rule, SetKind, Verdict};

use crate::nftnl::{CmpOp, Expr, META_L4PROTO, NftError, PAYLOAD_TRANSPORT, REG_1, concat_reg};

/// The kinds of the sets rules may refer to, by name.
pub type Kinds = BTreeMap<String, SetKind>;

/// `NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED)`.
const CT_ESTABLISHED_RELATED: u32 = 0x6;

fn nfproto(f: Family) -> u8 {
    match f {
        Family::V4 => 2,
        Family::V6 => 10,
    }
}

fn addr_len(f: Family) -> u32 {
    match f {
        Family::V4 => 4,
        Family::V6 => 16,
    }
}

/// `ip saddr` is at 12, `ip daddr` at 16; `ip6 saddr` at 8, `ip6 daddr` at 24.
fn addr_load(field: Field, f: Family) -> Expr {
    let offset = match (f, field) {
        (Family::V4, Field::Saddr) => 12,
        (Family::V4, Field::Daddr) => 16,
        (Family::V6, Field::Saddr) => 8,
        (Family::V6, Field::Daddr) => 24,
    };
    Expr::Network {
        offset,
        len: addr_len(f),
    }
}

fn lookup(set: &str) -> Expr {
    Expr::Lookup {
        set: set.to_string(),
        set_id: 0,
        invert: false,
    }
}

/// `meta l4proto . th dport` after `len` bytes of key already loaded.
fn proto_port_loads(out: &mut Vec<Expr>, len: u32) {
    out.push(Expr::Meta {
        key: META_L4PROTO,
        dreg: concat_reg(len),
    });
    out.push(Expr::Payload {
        base: PAYLOAD_TRANSPORT,
        offset: 2,
        len: 2,
        dreg: concat_reg(len + 4),
    });
}

struct Encoder<'a> {
    kinds: &'a Kinds,
    chain: &'a str,
    out: Vec<Expr>,
    family: Option<Family>,
}

impl Encoder<'_> {
    fn kind(&self, set: &str) -> Result<SetKind, NftError> {
        self.kinds.get(set).copied().ok_or_else(|| {
            NftError::unexpected(
                format!("encode a rule of chain {}", self.chain),
                format!("it refers to set {set}, which is neither there nor added"),
            )
        })
    }

    fn family(&mut self, f: Family) {
        if self.family != Some(f) {
            self.out.push(Expr::MetaNfproto);
            self.out.push(Expr::Cmp(CmpOp::Eq, vec![nfproto(f)]));
            self.family = Some(f);
        }
    }

    fn wrong(&self, set: &str, kind: SetKind) -> NftError {
        NftError::unexpected(
            format!("encode a rule of chain {}", self.chain),
            format!("set {set} is of kind {kind:?}, not one this match can use"),
        )
    }

    fn matched(&mut self, m: &Match) -> Result<(), NftError> {
        match m {
            Match::Established => {
                self.out.push(Expr::CtState);
                let mask = CT_ESTABLISHED_RELATED.to_ne_bytes().to_vec();
                self.out.push(Expr::Mask(mask));
                self.out.push(Expr::Cmp(CmpOp::Neq, vec![0; 4]));
            }
            Match::NeighbourDiscovery => {
                // `icmpv6 type 133-136`: nft's l4proto dependency, then the type byte
                // compared with both ends (as nft writes a range of one field).
                self.family(Family::V6);
                self.out.push(Expr::Meta {
                    key: META_L4PROTO,
                    dreg: REG_1,
                });
                self.out.push(Expr::Cmp(CmpOp::Eq, vec![ICMPV6]));
                self.out.push(Expr::Payload {
                    base: PAYLOAD_TRANSPORT,
                    offset: 0,
                    len: 1,
                    dreg: REG_1,
                });
                self.out
                    .push(Expr::Cmp(CmpOp::Gte, vec![*ND_TYPES.start()]));
                self.out.push(Expr::Cmp(CmpOp::Lte, vec![*ND_TYPES.end()]));
            }
            Match::AddrIn(field, set) => {
                let f = match self.kind(set)? {
                    SetKind::Addrs(f) | SetKind::Ranges(f) => f,
                    k => return Err(self.wrong(set, k)),
                };
                self.family(f);
                self.out.push(addr_load(*field, f));
                self.out.push(lookup(set));
            }
            Match::ProtoPortIn(set) => {
                match self.kind(set)? {
                    SetKind::ProtoPorts => {}
                    k => return Err(self.wrong(set, k)),
                }
                proto_port_loads(&mut self.out, 0);
                self.out.push(lookup(set));
            }
            Match::DaddrProtoPortIn(set) => {
                let f = match self.kind(set)? {
                    SetKind::AddrProtoPorts(f) => f,
                    k => return Err(self.wrong(set, k)),
                };
                self.family(f);
                self.out.push(addr_load(Field::Daddr, f));
                proto_port_loads(&mut self.out, addr_len(f));
                self.out.push(lookup(set));
            }
        }
        Ok(())
    }

    fn verdict(&mut self, v: &Verdict) -> Result<(), NftError> {
        match v {
            Verdict::Accept => self.out.push(Expr::Accept),
            Verdict::Drop => self.out.push(Expr::Drop),
            Verdict::Jump(c) => self.out.push(Expr::Jump(c.clone())),
            Verdict::Map(field, map) => {
                let f = match self.kind(map)? {
                    SetKind::Dispatch(f) => f,
                    k => return Err(self.wrong(map, k)),
                };
                self.family(f);
                self.out.push(addr_load(*field, f));
                self.out.push(Expr::Vmap {
                    set: map.clone(),
                    set_id: 0,
                });
            }
            Verdict::PortMap(map) => {
                match self.kind(map)? {
                    SetKind::PortDispatch => {}
                    k => return Err(self.wrong(map, k)),
                }
                proto_port_loads(&mut self.out, 0);
                self.out.push(Expr::Vmap {
                    set: map.clone(),
                    set_id: 0,
                });
            }
        }
        Ok(())
    }
}

/// The expressions of `rule` in `chain` (named in errors).
pub fn encode(rule: &Rule, chain: &str, kinds: &Kinds) -> Result<Vec<Expr>, NftError> {
    let mut e = Encoder {
        kinds,
        chain,
        out: Vec::new(),
        family: None,
    };
    for m in &rule.matches {
        e.matched(m)?;
    }
    e.verdict(&rule.verdict)?;
    Ok(e.out)
}

fn field_of(offset: u32) -> Option<Field> {
    match offset {
        12 | 8 => Some(Field::Saddr),
        16 | 24 => Some(Field::Daddr),
        _ => None,
    }
}

/// The rule these expressions are, if they are exactly what [`encode`] makes of it.
pub fn decode(exprs: &[Expr], kinds: &Kinds) -> Option<Rule> {
    let mut matches = Vec::new();
    let mut rest = exprs;
    let verdict = loop {
        match rest {
            [Expr::CtState, Expr::Mask(_), Expr::Cmp(..), tail @ ..] => {
                matches.push(Match::Established);
                rest = tail;
            }
            [Expr::MetaNfproto, Expr::Cmp(CmpOp::Eq, _), tail @ ..] => rest = tail,
            [
                Expr::Meta { .. },
                Expr::Cmp(CmpOp::Eq, _),
                Expr::Payload { .. },
                Expr::Cmp(CmpOp::Gte, _),
                Expr::Cmp(CmpOp::Lte, _),
                tail @ ..,
            ] => {
                matches.push(Match::NeighbourDiscovery);
                rest = tail;
            }
            [
                Expr::Network { offset, .. },
                Expr::Lookup { set, .. },
                tail @ ..,
            ] => {
                matches.push(Match::AddrIn(field_of(*offset)?, set.clone()));
                rest = tail;
            }
            [
                Expr::Network { .. },
                Expr::Meta { .. },
                Expr::Payload { .. },
                Expr::Lookup { set, .. },
                tail @ ..,
            ] => {
                matches.push(Match::DaddrProtoPortIn(set.clone()));
                rest = tail;
            }
            [
                Expr::Meta { .. },
                Expr::Payload { .. },
                Expr::Lookup { set, .. },
                tail @ ..,
            ] => {
                matches.push(Match::ProtoPortIn(set.clone()));
                rest = tail;
            }
            [Expr::Network { offset, .. }, Expr::Vmap { set, .. }] => {
                break Verdict::Map(field_of(*offset)?, set.clone());
            }
            [
                Expr::Meta { .. },
                Expr::Payload { .. },
                Expr::Vmap { set, .. },
            ] => {
                break Verdict::PortMap(set.clone());
            }
            [Expr::Accept] => break Verdict::Accept,
            [Expr::Drop] => break Verdict::Drop,
            [Expr::Jump(c)] => break Verdict::Jump(c.clone()),
            _ => return None,
        }
    };
    let rule = Rule { matches, verdict };
    // Registers, offsets, family checks and values: only what encode makes.
    (encode(&rule, "", kinds).ok()? == exprs).then_some(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> Kinds {
        [
            ("p4", SetKind::Addrs(Family::V4)),
            ("b6", SetKind::Ranges(Family::V6)),
            ("ports", SetKind::ProtoPorts),
            ("named4", SetKind::AddrProtoPorts(Family::V4)),
            ("named6", SetKind::AddrProtoPorts(Family::V6)),
            ("eg4", SetKind::Dispatch(Family::V4)),
            ("sel-ports", SetKind::PortDispatch),
        ]
        .into_iter()
        .map(|(n, k)| (n.to_string(), k))
        .collect()
    }

    #[test]
    fn rules_are_what_nft_makes_of_them() {
        // nft --debug=netlink for `ip6 saddr @b6 ip6 daddr . meta l4proto . th dport
        // @named6 accept` in an inet table: one nfproto check, the address at network
        // header + 24 into reg 1, l4proto into reg 2, the port into reg 13.
        let rule = Rule {
            matches: vec![
                Match::AddrIn(Field::Saddr, "b6".into()),
                Match::DaddrProtoPortIn("named6".into()),
            ],
            verdict: Verdict::Accept,
        };
        let exprs = encode(&rule, "c", &kinds()).unwrap();
        assert_eq!(
            exprs,
            vec![
                Expr::MetaNfproto,
                Expr::Cmp(CmpOp::Eq, vec![10]),
                Expr::Network { offset: 8, len: 16 },
                lookup("b6"),
                Expr::Network {
                    offset: 24,
                    len: 16
                },
                Expr::Meta {
                    key: META_L4PROTO,
                    dreg: 2
                },
                Expr::Payload {
                    base: PAYLOAD_TRANSPORT,
                    offset: 2,
                    len: 2,
                    dreg: 13
                },
                lookup("named6"),
                Expr::Accept,
            ]
        );
        assert_eq!(decode(&exprs, &kinds()), Some(rule));
    }

    #[test]
    fn neighbour_discovery_is_a_range_of_icmpv6_types() {
        // nft --debug=netlink for `meta nfproto ipv6 icmpv6 type 133-136 accept` in an
        // inet table (the family check: an IPv4 packet of protocol 58 is no neighbour
        // discovery); nft lists it as `icmpv6 type 133-136 accept`.
        let rule = Rule {
            matches: vec![Match::NeighbourDiscovery],
            verdict: Verdict::Accept,
        };
        let exprs = encode(&rule, "c", &Kinds::new()).unwrap();
        assert_eq!(
            exprs,
            vec![
                Expr::MetaNfproto,
                Expr::Cmp(CmpOp::Eq, vec![10]),
                Expr::Meta {
                    key: META_L4PROTO,
                    dreg: 1
                },
                Expr::Cmp(CmpOp::Eq, vec![58]),
                Expr::Payload {
                    base: PAYLOAD_TRANSPORT,
                    offset: 0,
                    len: 1,
                    dreg: 1
                },
                Expr::Cmp(CmpOp::Gte, vec![133]),
                Expr::Cmp(CmpOp::Lte, vec![136]),
                Expr::Accept,
            ]
        );
        assert_eq!(decode(&exprs, &Kinds::new()), Some(rule));
        let mut other = exprs.clone();
        other[5] = Expr::Cmp(CmpOp::Gte, vec![128]);
        assert_eq!(decode(&other, &Kinds::new()), None, "not ours");
    }

    #[test]
    fn every_match_and_verdict_decodes_and_a_foreign_shape_does_not() {
        let rules = [
            Rule {
                matches: vec![Match::Established],
                verdict: Verdict::Accept,
            },
            Rule {
                matches: vec![Match::NeighbourDiscovery],
                verdict: Verdict::Accept,
            },
            Rule {
                matches: vec![],
                verdict: Verdict::Map(Field::Saddr, "eg4".into()),
            },
            Rule {
                matches: vec![
                    Match::AddrIn(Field::Daddr, "p4".into()),
                    Match::ProtoPortIn("ports".into()),
                ],
                verdict: Verdict::Jump("x".into()),
            },
            Rule {
                matches: vec![Match::DaddrProtoPortIn("named4".into())],
                verdict: Verdict::Drop,
            },
            Rule {
                matches: vec![],
                verdict: Verdict::PortMap("sel-ports".into()),
            },
        ];
        for r in rules {
            let exprs = encode(&r, "c", &kinds()).unwrap();
            assert_eq!(decode(&exprs, &kinds()), Some(r.clone()));
            // Without the family check it is not ours (and would read IPv6 as IPv4).
            if exprs[0] == Expr::MetaNfproto {
                assert_eq!(decode(&exprs[2..], &kinds()), None);
            }
        }
        let wrong = Rule {
            matches: vec![Match::AddrIn(Field::Saddr, "ports".into())],
            verdict: Verdict::Accept,
        };
        assert!(encode(&wrong, "c", &kinds()).is_err());
        assert!(encode(&wrong, "c", &Kinds::new()).is_err());
    }
}
