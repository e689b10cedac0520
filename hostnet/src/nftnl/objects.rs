//! Tables, chains, sets, set elements and rules: the messages that make them and
//! the parsing of what the kernel lists back.

use super::attr::{self, Attrs};
use super::error::NftError;
use super::expr::{self, Expr};
use super::sets::NFT_MSG_DELSETELEM;
use super::socket::{Answer, Msg, NfSocket};

pub const NFT_MSG_NEWTABLE: u16 = 0;
pub const NFT_MSG_DELTABLE: u16 = 2;
pub const NFT_MSG_NEWCHAIN: u16 = 3;
pub const NFT_MSG_GETCHAIN: u16 = 4;
pub const NFT_MSG_NEWRULE: u16 = 6;
pub const NFT_MSG_GETRULE: u16 = 7;
pub const NFT_MSG_DELRULE: u16 = 8;
pub const NFT_MSG_NEWSET: u16 = 9;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
const NFT_MSG_GETGEN: u16 = 16;
/// `NFTA_GEN_ID` of the answer to `NFT_MSG_GETGEN`.
const NFTA_GEN_ID: u16 = 1;

const NLM_F_APPEND: u16 = 0x800;
const NLM_F_CREATE: u16 = 0x400;

/// The namespace's ruleset generation: every committed nf_tables transaction, of anyone,
/// moves it by one.
pub fn generation(nf: &mut NfSocket) -> Result<u32, NftError> {
    let what = "get the nf_tables ruleset generation";
    let answer = nf.get(NFT_MSG_GETGEN, 0, &Attrs::new(), what)?;
    attr::find(&attr::parse(&answer.attrs), NFTA_GEN_ID)
        .and_then(|v| attr::as_u32(&v))
        .ok_or_else(|| NftError::unexpected(what, "no generation in the answer"))
}

/// `NFPROTO_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Inet = 1,
    Ip = 2,
    Ip6 = 10,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }
}

/// Netfilter hooks (`NF_INET_*`).
#[derive(Debug, Clone, Copy)]
pub enum Hook {
    Forward = 2,
    Postrouting = 4,
}

/// A base chain's type, hook and priority.
#[derive(Debug, Clone, Copy)]
pub struct BaseChain {
    pub kind: &'static str,
    pub hook: Hook,
    pub priority: i32,
}

/// `NFT_SET_INTERVAL`.
const SET_INTERVAL: u32 = 4;
/// `NFT_SET_ELEM_INTERVAL_END`.
pub const ELEM_INTERVAL_END: u32 = 1;

/// `NFTNL_UDATA_RULE_COMMENT`: how nft and iptables-nft store a rule's comment.
const UDATA_RULE_COMMENT: u8 = 0;

/// Set elements that go into one message: well below a netlink attribute's 64 KiB.
const ELEMS_PER_MSG: usize = 1000;

fn msg(
    kind: u16,
    family: Family,
    flags: u16,
    attrs: Attrs,
    what: String,
    needs: &'static str,
) -> Msg {
    Msg {
        kind,
        family: family as u8,
        flags,
        attrs,
        what,
        needs,
    }
}

/// `add table FAMILY NAME` (no error when it exists).
pub fn new_table(family: Family, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, name);
    let what = format!("add table {} {name}", family.name());
    msg(NFT_MSG_NEWTABLE, family, NLM_F_CREATE, a, what, "")
}

/// `delete table FAMILY NAME`.
pub fn del_table(family: Family, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, name);
    let what = format!("delete table {} {name}", family.name());
    msg(NFT_MSG_DELTABLE, family, 0, a, what, "")
}

/// `add chain FAMILY TABLE NAME { type KIND hook HOOK priority P; policy accept; }`.
pub fn new_base_chain(family: Family, table: &str, name: &str, base: BaseChain) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(3, name);
    a.nested(4, |h| {
        h.u32(1, base.hook as u32).u32(2, base.priority as u32);
    });
    a.u32(5, 1).str(7, base.kind);
    let what = format!("add chain {} {table} {name}", family.name());
    let needs = if base.kind == "nat" {
        "nf_tables NAT chains (CONFIG_NFT_NAT)"
    } else {
        ""
    };
    msg(NFT_MSG_NEWCHAIN, family, NLM_F_CREATE, a, what, needs)
}

/// An interval set of addresses (`type ipv4_addr|ipv6_addr; flags interval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalSet {
    pub name: String,
    pub id: u32,
    /// 4 or 16.
    pub key_len: usize,
}

impl IntervalSet {
    /// nft's data types `ipv4_addr` (7) and `ipv6_addr` (8).
    fn key_type(&self) -> u32 {
        if self.key_len == 4 { 7 } else { 8 }
    }
}

pub fn new_set(family: Family, table: &str, set: &IntervalSet) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, &set.name).u32(3, SET_INTERVAL);
    a.u32(4, set.key_type())
        .u32(5, set.key_len as u32)
        .u32(10, set.id);
    let what = format!("add set {} {table} {}", family.name(), set.name);
    msg(
        NFT_MSG_NEWSET,
        family,
        NLM_F_CREATE,
        a,
        what,
        "nf_tables interval sets (CONFIG_NF_TABLES_SET)",
    )
}

/// One stored element: its key and whether it ends an interval.
pub type Elem = (Vec<u8>, bool);

/// The messages that add `elems` to `set`, made in the same batch (split so none grows
/// too large).
pub fn new_set_elems(family: Family, table: &str, set: &IntervalSet, elems: &[Elem]) -> Vec<Msg> {
    elem_msgs(family, table, set, elems, true, Some(set.id))
}

/// The messages that add `elems` to `set`, which exists.
pub fn add_set_elems(family: Family, table: &str, set: &IntervalSet, elems: &[Elem]) -> Vec<Msg> {
    elem_msgs(family, table, set, elems, true, None)
}

/// The messages that delete `elems` from `set`: one not there fails the batch (ENOENT).
pub fn del_set_elems(family: Family, table: &str, set: &IntervalSet, elems: &[Elem]) -> Vec<Msg> {
    elem_msgs(family, table, set, elems, false, None)
}

fn elem_msgs(
    family: Family,
    table: &str,
    set: &IntervalSet,
    elems: &[Elem],
    add: bool,
    id: Option<u32>,
) -> Vec<Msg> {
    let (kind, flags, verb) = if add {
        (NFT_MSG_NEWSETELEM, NLM_F_CREATE, "add elements to")
    } else {
        (NFT_MSG_DELSETELEM, 0, "delete elements from")
    };
    elems
        .chunks(ELEMS_PER_MSG)
        .map(|chunk| {
            let mut a = Attrs::new();
            a.str(1, table).str(2, &set.name);
            if let Some(id) = id {
                a.u32(4, id);
            }
            a.nested(3, |list| {
                for (key, end) in chunk {
                    list.nested(1, |e| {
                        e.nested(1, |k| {
                            k.bytes(1, key);
                        });
                        if *end {
                            e.u32(3, ELEM_INTERVAL_END);
                        }
                    });
                }
            });
            let what = format!("{verb} set {} {table} {}", family.name(), set.name);
            msg(kind, family, flags, a, what, "")
        })
        .collect()
}

/// A rule appended to (`append`) or inserted at the head of a chain, with an optional
/// comment.
pub fn new_rule(
    family: Family,
    table: &str,
    chain: &str,
    exprs: &[Expr],
    comment: Option<&str>,
    append: bool,
) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, chain);
    expr::encode_list(&mut a, 4, exprs);
    if let Some(c) = comment {
        let mut udata = vec![
            UDATA_RULE_COMMENT,
            u8::try_from(c.len() + 1).unwrap_or(u8::MAX),
        ];
        udata.extend_from_slice(c.as_bytes());
        udata.push(0);
        a.bytes(7, &udata);
    }
    let flags = NLM_F_CREATE | if append { NLM_F_APPEND } else { 0 };
    let what = format!("add rule {} {table} {chain}", family.name());
    let needs = "the nf_tables expressions payload, cmp, bitwise, lookup, fib, masq \
                 (CONFIG_NFT_FIB_INET, CONFIG_NFT_MASQ)";
    msg(NFT_MSG_NEWRULE, family, flags, a, what, needs)
}

/// `delete rule FAMILY TABLE CHAIN handle H`.
pub fn del_rule(family: Family, table: &str, chain: &str, handle: u64) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, chain).u64(3, handle);
    let what = format!(
        "delete rule {} {table} {chain} handle {handle}",
        family.name()
    );
    msg(NFT_MSG_DELRULE, family, 0, a, what, "")
}

/// The filter attributes of a get or dump: table, then chain or set name.
pub fn selector(table: &str, name_attr: u16, name: &str) -> Attrs {
    let mut a = Attrs::new();
    a.str(1, table).str(name_attr, name);
    a
}

/// A rule as listed: its handle and comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    pub handle: u64,
    pub comment: Option<String>,
}

pub fn parse_rule(answer: &Answer) -> Option<ListedRule> {
    let attrs = attr::parse(&answer.attrs);
    let handle = attr::as_u64(&attr::find(&attrs, 3)?)?;
    let comment = attr::find(&attrs, 7).and_then(|udata| parse_comment(&udata));
    Some(ListedRule { handle, comment })
}

fn parse_comment(mut udata: &[u8]) -> Option<String> {
    while udata.len() >= 2 {
        let (ty, len) = (udata[0], usize::from(udata[1]));
        let value = udata.get(2..2 + len)?;
        if ty == UDATA_RULE_COMMENT {
            return Some(attr::as_str(value));
        }
        udata = &udata[2 + len..];
    }
    None
}

/// The elements of one `NEWSETELEM` answer.
pub fn parse_set_elems(answer: &Answer) -> Vec<Elem> {
    let attrs = attr::parse(&answer.attrs);
    let Some(list) = attr::find(&attrs, 3) else {
        return Vec::new();
    };
    attr::parse(&list)
        .into_iter()
        .filter_map(|(_, elem)| {
            let elem = attr::parse(elem);
            let key = attr::find(&attr::parse(&attr::find(&elem, 1)?), 1)?;
            let flags = attr::find(&elem, 3)
                .and_then(|f| attr::as_u32(&f))
                .unwrap_or(0);
            Some((key, flags & ELEM_INTERVAL_END != 0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_comment_is_stored_as_nft_and_iptables_read_it() {
        let m = new_rule(
            Family::Ip,
            "filter",
            "FORWARD",
            &[Expr::Accept],
            Some("cni-rs"),
            false,
        );
        let attrs = attr::parse(&m.attrs.0);
        let udata = attr::find(&attrs, 7).unwrap();
        // nft --debug=netlink prints iptables' own comment as { \x00\x0ccni-rs pods\x00 }.
        assert_eq!(udata, b"\x00\x07cni-rs\x00");
        assert_eq!(parse_comment(&udata).as_deref(), Some("cni-rs"));
        assert_eq!(m.flags, NLM_F_CREATE, "inserted at the head, not appended");
    }

    #[test]
    fn set_elements_are_split_and_parsed_back() {
        let set = IntervalSet {
            name: "s".into(),
            id: 1,
            key_len: 4,
        };
        let elems: Vec<Elem> = (0..2500u32)
            .map(|i| (i.to_be_bytes().to_vec(), i % 2 == 1))
            .collect();
        let msgs = new_set_elems(Family::Inet, "t", &set, &elems);
        assert_eq!(msgs.len(), 3);
        let back: Vec<Elem> = msgs
            .iter()
            .flat_map(|m| {
                parse_set_elems(&Answer {
                    kind: NFT_MSG_NEWSETELEM,
                    attrs: m.attrs.0.clone(),
                })
            })
            .collect();
        assert_eq!(back, elems);
    }
}

#[cfg(test)]
mod kernel_tests {
    use super::*;
    use crate::nftnl::{NfSocket, NftError};
    use crate::testnet::in_netns;

    fn table_exists(nf: &mut NfSocket, name: &str) -> bool {
        let sel = selector(name, 3, "c");
        match nf.get(NFT_MSG_GETCHAIN, Family::Inet as u8, &sel, "get chain") {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    #[ignore = "needs root"]
    fn a_batch_is_all_or_nothing_and_its_error_names_the_refused_message() {
        if !testkit::privileged("a_batch_is_all_or_nothing_and_its_error_names_the_refused_message")
        {
            return;
        }
        in_netns(|| {
            let mut nf = NfSocket::open().unwrap();
            let chain = |table| {
                new_base_chain(
                    Family::Inet,
                    table,
                    "c",
                    BaseChain {
                        kind: "filter",
                        hook: Hook::Forward,
                        priority: 0,
                    },
                )
            };
            nf.batch(&[new_table(Family::Inet, "old"), chain("old")])
                .unwrap();
            // Replaces "old" and adds "new", then a rule that looks up a set that is not
            // there: the kernel refuses it, and so nothing of the batch happens.
            let bad = Expr::Lookup {
                set: "missing".into(),
                set_id: 99,
                invert: false,
            };
            let err = nf
                .batch(&[
                    new_table(Family::Inet, "old"),
                    del_table(Family::Inet, "old"),
                    new_table(Family::Inet, "new"),
                    chain("new"),
                    new_rule(
                        Family::Inet,
                        "new",
                        "c",
                        &[Expr::Network { offset: 12, len: 4 }, bad],
                        None,
                        true,
                    ),
                ])
                .unwrap_err();
            assert!(matches!(err, NftError::Os { .. }), "{err:?}");
            assert!(
                err.to_string().starts_with("add rule inet new c: "),
                "{err}"
            );
            assert!(err.errno().is_some());
            assert!(table_exists(&mut nf, "old"), "the old table stays whole");
            assert!(!table_exists(&mut nf, "new"), "nothing of the failed batch");
        });
    }
}
