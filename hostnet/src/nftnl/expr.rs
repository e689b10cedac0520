//! The nf_tables expressions our rules use, encoded as the kernel expects them
//! (`nft --debug=netlink` prints the same shapes).

use super::attr::Attrs;

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// `NFT_REG_VERDICT` and `NFT_REG_1`.
const REG_VERDICT: u32 = 0;
pub const REG_1: u32 = 1;

/// `NF_ACCEPT`.
const VERDICT_ACCEPT: u32 = 1;

/// `NFT_PAYLOAD_NETWORK_HEADER`.
const PAYLOAD_NETWORK: u32 = 1;
/// `NFT_META_IIFNAME`, `NFT_META_NFPROTO`.
const META_IIFNAME: u32 = 6;
const META_NFPROTO: u32 = 15;
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
            Expr::Accept => "immediate",
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
            Expr::Accept => {
                a.u32(1, REG_VERDICT).nested(2, |d| {
                    d.nested(NFTA_DATA_VERDICT, |v| {
                        v.u32(NFTA_VERDICT_CODE, VERDICT_ACCEPT);
                    });
                });
            }
        }
    }
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
