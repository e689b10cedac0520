//! Named sets and maps of any key, and their elements: hash sets, interval sets,
//! concatenations (with the per-field lengths the kernel's pipapo backend needs for an
//! interval concatenation), verdict maps. The shapes are nft's (`nft --debug=mnl`).

use super::attr::{self, Attrs};
use super::expr;
use super::objects::Family;
use super::socket::{Answer, Msg};

pub const NFT_MSG_GETSET: u16 = 10;
pub const NFT_MSG_DELSET: u16 = 11;
pub const NFT_MSG_DELSETELEM: u16 = 14;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NLM_F_CREATE: u16 = 0x400;

/// `NFT_SET_INTERVAL`, `NFT_SET_MAP`, `NFT_SET_CONCAT`.
pub const SET_INTERVAL: u32 = 0x4;
pub const SET_MAP: u32 = 0x8;
pub const SET_CONCAT: u32 = 0x80;
/// `NFT_DATA_VERDICT`: a map's data type when its values are verdicts.
const DATA_VERDICT: u32 = 0xffff_ff00;
const ELEM_INTERVAL_END: u32 = 1;

/// Bytes of elements per message: a netlink attribute holds at most 64 KiB.
const ELEM_BYTES_PER_MSG: usize = 32 * 1024;

/// A set's definition as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSpec {
    pub name: String,
    /// `SET_*` flags.
    pub flags: u32,
    /// nft's data type number (for `nft list`; the kernel does not interpret it).
    pub key_type: u32,
    /// Bytes; each part of a concatenation takes a multiple of 4.
    pub key_len: u32,
    /// The parts' own lengths (`NFTA_SET_DESC_CONCAT`), for an interval concatenation.
    pub fields: Vec<u32>,
    /// A verdict map.
    pub verdicts: bool,
}

/// One element: key, the end of its range (an interval concatenation), whether it closes
/// an interval (an interval set of single keys), and a map's `jump` target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SetElem {
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub interval_end: bool,
    pub jump: Option<String>,
}

fn msg(kind: u16, family: Family, flags: u16, attrs: Attrs, what: String) -> Msg {
    Msg {
        kind,
        family: family as u8,
        flags,
        attrs,
        what,
        needs: "",
    }
}

/// `add set` / `add map` (no error when it exists with this definition). `room`, when
/// not 0, is `NFTA_SET_DESC_SIZE`: the kernel then makes a hash set a fixed-size table
/// for that many elements (an unsized one starts with a few buckets and is rehashed,
/// in a worker, each time it doubles: at 220,000 elements in one transaction most of
/// the kernel's time went to inserting into tables waiting for their rehash), and
/// refuses more (`ENFILE`). Not read back: a program does not say it.
pub fn add_set(family: Family, table: &str, set: &SetSpec, id: u32, room: u32) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, &set.name).u32(3, set.flags);
    a.u32(4, set.key_type).u32(5, set.key_len);
    if set.verdicts {
        a.u32(6, DATA_VERDICT).u32(7, 0);
    }
    if room != 0 || !set.fields.is_empty() {
        a.nested(9, |desc| {
            if room != 0 {
                desc.u32(1, room);
            }
            if !set.fields.is_empty() {
                desc.nested(2, |concat| {
                    for len in &set.fields {
                        concat.nested(1, |f| {
                            f.u32(1, *len);
                        });
                    }
                });
            }
        });
    }
    a.u32(10, id);
    let what = format!("add set {} {table} {}", family.name(), set.name);
    let mut m = msg(NFT_MSG_NEWSET, family, NLM_F_CREATE, a, what);
    m.needs = "nf_tables sets (CONFIG_NF_TABLES_SET; interval concatenations need Linux 5.6)";
    m
}

/// `delete set` (with its elements; no rule may still refer to it).
pub fn del_set(family: Family, table: &str, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, name);
    let what = format!("delete set {} {table} {name}", family.name());
    msg(NFT_MSG_DELSET, family, 0, a, what)
}

fn encode_elem(list: &mut Attrs, e: &SetElem) {
    list.nested(1, |el| {
        el.nested(1, |k| {
            k.bytes(1, &e.key);
        });
        if let Some(end) = &e.key_end {
            el.nested(10, |k| {
                k.bytes(1, end);
            });
        }
        if e.interval_end {
            el.u32(3, ELEM_INTERVAL_END);
        }
        if let Some(chain) = &e.jump {
            expr::encode_jump(el, 2, chain);
        }
    });
}

/// The messages that add (`add`) or delete `elems` in set `set`, split by size.
pub fn set_elems(family: Family, table: &str, set: &str, elems: &[SetElem], add: bool) -> Vec<Msg> {
    let (kind, flags, verb) = if add {
        (NFT_MSG_NEWSETELEM, NLM_F_CREATE, "add elements to")
    } else {
        (NFT_MSG_DELSETELEM, 0, "delete elements from")
    };
    let mut out = Vec::new();
    let mut rest = elems;
    while !rest.is_empty() {
        let mut list = Attrs::new();
        let mut taken = 0;
        for e in rest {
            if list.0.len() >= ELEM_BYTES_PER_MSG {
                break;
            }
            encode_elem(&mut list, e);
            taken += 1;
        }
        rest = &rest[taken..];
        let mut a = Attrs::new();
        a.str(1, table).str(2, set);
        a.nested(3, |l| l.0.extend_from_slice(&list.0));
        let what = format!("{verb} set {} {table} {set}", family.name());
        out.push(msg(kind, family, flags, a, what));
    }
    out
}

/// A set of a `GETSET` answer; None for one we could not read.
pub fn parse_set(answer: &Answer) -> Option<(String, SetSpec)> {
    let a = attr::parse(&answer.attrs);
    let u = |ty| attr::find(&a, ty).and_then(|v| attr::as_u32(&v));
    let table = attr::as_str(&attr::find(&a, 1)?);
    let fields = attr::find(&a, 9)
        .and_then(|desc| attr::find(&attr::parse(&desc), 2))
        .map(|concat| {
            attr::parse(&concat)
                .into_iter()
                .filter_map(|(_, f)| attr::as_u32(&attr::find(&attr::parse(f), 1)?))
                .collect()
        })
        .unwrap_or_default();
    let spec = SetSpec {
        name: attr::as_str(&attr::find(&a, 2)?),
        flags: u(3).unwrap_or(0),
        key_type: u(4).unwrap_or(0),
        key_len: u(5)?,
        fields,
        verdicts: u(6) == Some(DATA_VERDICT),
    };
    Some((table, spec))
}

/// The elements of one `GETSETELEM` answer; None when one is unreadable (a map value
/// that is no `jump`, say).
pub fn parse_elems(answer: &Answer) -> Option<Vec<SetElem>> {
    let a = attr::parse(&answer.attrs);
    let Some(list) = attr::find(&a, 3) else {
        return Some(Vec::new());
    };
    let value = |e: &[(u16, &[u8])], ty| attr::find(&attr::parse(&attr::find(e, ty)?), 1);
    attr::parse(&list)
        .into_iter()
        .map(|(_, el)| {
            let e = attr::parse(el);
            let flags = attr::find(&e, 3)
                .and_then(|f| attr::as_u32(&f))
                .unwrap_or(0);
            let jump = match attr::find(&e, 2) {
                Some(data) => Some(expr::parse_jump(&data)?),
                None => None,
            };
            Some(SetElem {
                key: value(&e, 1)?,
                key_end: value(&e, 10),
                interval_end: flags & ELEM_INTERVAL_END != 0,
                jump,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_split_by_size_and_parse_back() {
        let elems: Vec<SetElem> = (0..5000u32)
            .map(|i| SetElem {
                key: [i.to_be_bytes(), [0; 4], [0; 4], [0; 4]].concat(),
                jump: Some(format!("sel-{i:016x}-eg")),
                ..SetElem::default()
            })
            .collect();
        let msgs = set_elems(Family::Inet, "t", "m", &elems, true);
        assert!(msgs.len() > 5, "{}", msgs.len());
        let mut back = Vec::new();
        for m in &msgs {
            assert!(m.attrs.0.len() < 60_000);
            let answer = Answer {
                kind: NFT_MSG_NEWSETELEM,
                attrs: m.attrs.0.clone(),
            };
            back.extend(parse_elems(&answer).unwrap());
        }
        assert_eq!(back, elems);
    }

    #[test]
    fn an_interval_concatenation_names_its_fields_as_nft_does() {
        let spec = SetSpec {
            name: "ports".into(),
            flags: SET_INTERVAL | SET_CONCAT,
            key_type: 12 << 6 | 13,
            key_len: 8,
            fields: vec![1, 2],
            verdicts: false,
        };
        let m = add_set(Family::Inet, "t", &spec, 2, 0);
        // What nft -f sends for `type inet_proto . inet_service; flags interval`
        // (`nft --debug=mnl`): flags 0x84, key type 0x30d, desc { concat { 1, 2 } }.
        let a = attr::parse(&m.attrs.0);
        assert_eq!(attr::find(&a, 3).unwrap(), 0x84u32.to_be_bytes());
        assert_eq!(attr::find(&a, 4).unwrap(), 0x30du32.to_be_bytes());
        let desc = attr::find(&a, 9).unwrap();
        assert_eq!(
            desc,
            [
                &[28, 0, 2, 0x80][..],
                &[12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 1],
                &[12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 2],
            ]
            .concat()
        );
        let answer = Answer {
            kind: NFT_MSG_NEWSET,
            attrs: m.attrs.0.clone(),
        };
        assert_eq!(parse_set(&answer), Some(("t".into(), spec)));
    }
}
