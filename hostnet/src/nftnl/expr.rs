//! The nf_tables expressions our rules use, encoded as the kernel expects them
//! (`nft --debug=netlink` prints the same shapes).

use super::attr::{self, Attrs};

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// `NFT_REG_VERDICT` and `NFT_REG_1`.
const REG_VERDICT: u32 = 0;
pub const REG_1: u32 = 1;

/// `NF_ACCEPT`, `NF_DROP`, `NFT_JUMP` (-3).
const VERDICT_ACCEPT: u32 = 1;
const VERDICT_DROP: u32 = 0;
const VERDICT_JUMP: u32 = -3i32 as u32;
const NFTA_VERDICT_CHAIN: u16 = 2;

/// `NFT_PAYLOAD_NETWORK_HEADER`, `NFT_PAYLOAD_TRANSPORT_HEADER`.
const PAYLOAD_NETWORK: u32 = 1;
pub const PAYLOAD_TRANSPORT: u32 = 2;
/// `NFT_META_IIFNAME`, `NFT_META_NFPROTO`, `NFT_META_L4PROTO`.
const META_IIFNAME: u32 = 6;
const META_NFPROTO: u32 = 15;
pub const META_L4PROTO: u32 = 16;
/// `NFT_CT_STATE`.
const CT_STATE: u32 = 0;
/// `NFT_FIB_RESULT_ADDRTYPE`, `NFTA_FIB_F_DADDR`.
const FIB_RESULT_ADDRTYPE: u32 = 3;
const FIB_F_DADDR: u32 = 2;
/// `RTN_LOCAL`, as fib's address type lands in the register (host byte order).
pub const RTN_LOCAL: u32 = 2;
/// `NFTA_MASQ_FLAGS` and its `NF_NAT_RANGE_PROTO_RANDOM_FULLY`.
const MASQ_FLAGS: u16 = 1;
const NAT_RANDOM_FULLY: u32 = 1 << 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
    Lte = 3,
    Gte = 5,
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load nfproto => reg 1`
    MetaNfproto,
    /// `meta load iifname => reg 1`
    MetaIifname,
    /// `payload load LEN @ network header + OFFSET => reg 1`
    Network { offset: u32, len: u32 },
    /// `bitwise reg 1 = (reg 1 & MASK) ^ 0`
    Mask(Vec<u8>),
    /// `cmp OP reg 1 DATA`
    Cmp(CmpOp, Vec<u8>),
    /// `lookup reg 1 set NAME` (inverted: not in the set)
    Lookup {
        set: String,
        set_id: u32,
        invert: bool,
    },
    /// `fib daddr type => reg 1`
    FibDaddrType,
    /// `counter`
    Counter,
    /// `masq`, or `masq random-fully` (source ports drawn at random for every new
    /// connection, not the next free one after the original: concurrent connections of
    /// many pods to one destination otherwise race for the same port and lose packets).
    Masquerade { random_fully: bool },
    /// `immediate reg 0 accept`
    Accept,
    /// `immediate reg 0 drop`
    Drop,
    /// `immediate reg 0 jump -> CHAIN`
    Jump(String),
    /// `meta load KEY => reg DREG` (a key other than nfproto, or another register)
    Meta { key: u32, dreg: u32 },
    /// `payload load LEN @ BASE header + OFFSET => reg DREG` (one not [`Expr::Network`])
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    /// `ct load state => reg 1`
    CtState,
    /// `lookup reg 1 set NAME dreg 0`: a verdict map.
    Vmap { set: String, set_id: u32 },
}

/// The register nft loads the concatenation's part at `offset` bytes into: the
/// 16-byte `NFT_REG_n` when it starts one, else the 4-byte `NFT_REG32_nn`.
pub fn concat_reg(offset: u32) -> u32 {
    if offset.is_multiple_of(16) {
        REG_1 + offset / 16
    } else {
        8 + offset / 4
    }
}

fn data(a: &mut Attrs, ty: u16, value: &[u8]) {
    a.nested(ty, |d| {
        d.bytes(NFTA_DATA_VALUE, value);
    });
}

impl Expr {
    fn name(&self) -> &'static str {
        match self {
            Expr::MetaNfproto | Expr::MetaIifname => "meta",
            Expr::Network { .. } => "payload",
            Expr::Mask(_) => "bitwise",
            Expr::Cmp(..) => "cmp",
            Expr::Lookup { .. } => "lookup",
            Expr::FibDaddrType => "fib",
            Expr::Counter => "counter",
            Expr::Masquerade { .. } => "masq",
            Expr::Accept | Expr::Drop | Expr::Jump(_) => "immediate",
            Expr::Meta { .. } => "meta",
            Expr::Payload { .. } => "payload",
            Expr::CtState => "ct",
            Expr::Vmap { .. } => "lookup",
        }
    }

    fn encode_data(&self, a: &mut Attrs) {
        match self {
            Expr::MetaNfproto => {
                a.u32(1, REG_1).u32(2, META_NFPROTO);
            }
            Expr::MetaIifname => {
                a.u32(1, REG_1).u32(2, META_IIFNAME);
            }
            Expr::Network { offset, len } => {
                a.u32(1, REG_1)
                    .u32(2, PAYLOAD_NETWORK)
                    .u32(3, *offset)
                    .u32(4, *len);
            }
            Expr::Mask(mask) => {
                a.u32(1, REG_1).u32(2, REG_1);
                a.u32(3, u32::try_from(mask.len()).unwrap_or(0));
                data(a, 4, mask);
                data(a, 5, &vec![0; mask.len()]);
            }
            Expr::Cmp(op, value) => {
                a.u32(1, REG_1).u32(2, *op as u32);
                data(a, 3, value);
            }
            Expr::Lookup {
                set,
                set_id,
                invert,
            } => {
                a.str(1, set).u32(2, REG_1).u32(4, *set_id);
                a.u32(5, u32::from(*invert));
            }
            Expr::FibDaddrType => {
                a.u32(1, REG_1)
                    .u32(2, FIB_RESULT_ADDRTYPE)
                    .u32(3, FIB_F_DADDR);
            }
            Expr::Counter
            | Expr::Masquerade {
                random_fully: false,
            } => {}
            Expr::Masquerade { random_fully: true } => {
                a.u32(MASQ_FLAGS, NAT_RANDOM_FULLY);
            }
            Expr::Accept => verdict(a, VERDICT_ACCEPT, None),
            Expr::Drop => verdict(a, VERDICT_DROP, None),
            Expr::Jump(chain) => verdict(a, VERDICT_JUMP, Some(chain)),
            Expr::Meta { key, dreg } => {
                a.u32(1, *dreg).u32(2, *key);
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                a.u32(1, *dreg).u32(2, *base).u32(3, *offset).u32(4, *len);
            }
            Expr::CtState => {
                a.u32(1, REG_1).u32(2, CT_STATE);
            }
            Expr::Vmap { set, set_id } => {
                a.str(1, set).u32(2, REG_1).u32(3, REG_VERDICT);
                a.u32(4, *set_id);
            }
        }
    }
}

fn verdict(a: &mut Attrs, code: u32, chain: Option<&str>) {
    a.u32(1, REG_VERDICT).nested(2, |d| {
        d.nested(NFTA_DATA_VERDICT, |v| {
            v.u32(NFTA_VERDICT_CODE, code);
            if let Some(c) = chain {
                v.str(NFTA_VERDICT_CHAIN, c);
            }
        });
    });
}

/// A verdict as set elements and immediates carry it: `NFTA_DATA_VERDICT { code, chain }`.
pub fn encode_jump(a: &mut Attrs, ty: u16, chain: &str) {
    a.nested(ty, |d| {
        d.nested(NFTA_DATA_VERDICT, |v| {
            v.u32(NFTA_VERDICT_CODE, VERDICT_JUMP);
            v.str(NFTA_VERDICT_CHAIN, chain);
        });
    });
}

/// The chain of a `jump` verdict in `NFTA_DATA_*` attributes; None for any other verdict.
pub fn parse_jump(data: &[u8]) -> Option<String> {
    let verdict = attr::find(&attr::parse(data), NFTA_DATA_VERDICT)?;
    let v = attr::parse(&verdict);
    let code = attr::as_u32(&attr::find(&v, NFTA_VERDICT_CODE)?)?;
    if code != VERDICT_JUMP {
        return None;
    }
    attr::find(&v, NFTA_VERDICT_CHAIN).map(|c| attr::as_str(&c))
}

/// The expressions of a listed rule's `NFTA_RULE_EXPRESSIONS`, as [`Expr`]s; None when
/// one is of a kind or shape we never make (someone else's rule). Set ids are not
/// listed by the kernel: they come back as 0.
pub fn decode_list(list: &[u8]) -> Option<Vec<Expr>> {
    attr::parse(list)
        .into_iter()
        .map(|(_, elem)| {
            let elem = attr::parse(elem);
            let name = attr::as_str(&attr::find(&elem, NFTA_EXPR_NAME)?);
            let data = attr::find(&elem, NFTA_EXPR_DATA).unwrap_or_default();
            decode(&name, &attr::parse(&data))
        })
        .collect()
}

fn decode(name: &str, a: &[(u16, &[u8])]) -> Option<Expr> {
    let u = |ty| attr::find(a, ty).and_then(|v| attr::as_u32(&v));
    let value = |ty| {
        let d = attr::find(a, ty)?;
        attr::find(&attr::parse(&d), NFTA_DATA_VALUE)
    };
    Some(match name {
        "meta" => match (u(1)?, u(2)?) {
            (REG_1, META_NFPROTO) => Expr::MetaNfproto,
            (REG_1, META_IIFNAME) => Expr::MetaIifname,
            (dreg, key) => Expr::Meta { key, dreg },
        },
        "payload" => match (u(1)?, u(2)?, u(3)?, u(4)?) {
            (REG_1, PAYLOAD_NETWORK, offset, len) => Expr::Network { offset, len },
            (dreg, base, offset, len) => Expr::Payload {
                base,
                offset,
                len,
                dreg,
            },
        },
        "bitwise" if u(1)? == REG_1 && u(2)? == REG_1 => {
            let mask = value(4)?;
            (value(5)?.iter().all(|b| *b == 0)).then_some(Expr::Mask(mask))?
        }
        "cmp" if u(1)? == REG_1 => {
            let op = match u(2)? {
                0 => CmpOp::Eq,
                1 => CmpOp::Neq,
                3 => CmpOp::Lte,
                5 => CmpOp::Gte,
                _ => return None,
            };
            Expr::Cmp(op, value(3)?)
        }
        "lookup" if u(2)? == REG_1 => {
            let set = attr::as_str(&attr::find(a, 1)?);
            match u(3) {
                Some(REG_VERDICT) => Expr::Vmap { set, set_id: 0 },
                Some(_) => return None,
                None => Expr::Lookup {
                    set,
                    set_id: 0,
                    invert: u(5).unwrap_or(0) & 1 != 0,
                },
            }
        }
        "ct" if u(1)? == REG_1 && u(2)? == CT_STATE && u(3).is_none() => Expr::CtState,
        "immediate" if u(1)? == REG_VERDICT => {
            let data = attr::find(a, 2)?;
            let verdict = attr::find(&attr::parse(&data), NFTA_DATA_VERDICT)?;
            let v = attr::parse(&verdict);
            match attr::as_u32(&attr::find(&v, NFTA_VERDICT_CODE)?)? {
                VERDICT_ACCEPT => Expr::Accept,
                VERDICT_DROP => Expr::Drop,
                VERDICT_JUMP => Expr::Jump(attr::as_str(&attr::find(&v, NFTA_VERDICT_CHAIN)?)),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The `NFTA_RULE_EXPRESSIONS` list of `exprs`.
pub fn encode_list(a: &mut Attrs, ty: u16, exprs: &[Expr]) {
    a.nested(ty, |list| {
        for e in exprs {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.str(NFTA_EXPR_NAME, e.name());
                let mut inner = Attrs::new();
                e.encode_data(&mut inner);
                if !inner.0.is_empty() {
                    elem.nested(NFTA_EXPR_DATA, |d| d.0.extend_from_slice(&inner.0));
                }
            });
        }
    });
}
