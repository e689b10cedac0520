//! Chains as a whole: regular chains, deleting and flushing them, and reading back a
//! table's chains and rules (the rules' expressions decoded).

use super::attr::{self, Attrs};
use super::expr::{self, Expr};
use super::objects::Family;
use super::socket::{Answer, Msg};

pub const NFT_MSG_GETTABLE: u16 = 1;
pub const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_DELRULE: u16 = 8;
const NLM_F_CREATE: u16 = 0x400;

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

/// `add chain FAMILY TABLE NAME` without a hook (reached by `jump` only).
pub fn add_chain(family: Family, table: &str, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(3, name);
    let what = format!("add chain {} {table} {name}", family.name());
    msg(NFT_MSG_NEWCHAIN, family, NLM_F_CREATE, a, what)
}

/// `delete chain`: its rules go with it; a chain still jumped to is refused (EBUSY).
pub fn del_chain(family: Family, table: &str, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(3, name);
    let what = format!("delete chain {} {table} {name}", family.name());
    msg(NFT_MSG_DELCHAIN, family, 0, a, what)
}

/// `flush chain`: a rule deletion naming the chain and no handle.
pub fn flush_chain(family: Family, table: &str, name: &str) -> Msg {
    let mut a = Attrs::new();
    a.str(1, table).str(2, name);
    let what = format!("flush chain {} {table} {name}", family.name());
    msg(NFT_MSG_DELRULE, family, 0, a, what)
}

/// A chain as listed: its table, name, and hook and priority if it is a base chain
/// (with its type and whether its policy is accept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedChain {
    pub table: String,
    pub name: String,
    pub hook: Option<ListedHook>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedHook {
    pub hooknum: u32,
    pub priority: i32,
    pub kind: String,
    pub policy_accept: bool,
}

pub fn parse_chain(answer: &Answer) -> Option<ListedChain> {
    let a = attr::parse(&answer.attrs);
    let hook = match attr::find(&a, 4) {
        None => None,
        Some(h) => {
            let h = attr::parse(&h);
            Some(ListedHook {
                hooknum: attr::as_u32(&attr::find(&h, 1)?)?,
                priority: attr::as_u32(&attr::find(&h, 2)?)? as i32,
                kind: attr::find(&a, 7)
                    .map(|t| attr::as_str(&t))
                    .unwrap_or_default(),
                policy_accept: attr::find(&a, 5).and_then(|p| attr::as_u32(&p)) == Some(1),
            })
        }
    };
    Some(ListedChain {
        table: attr::as_str(&attr::find(&a, 1)?),
        name: attr::as_str(&attr::find(&a, 3)?),
        hook,
    })
}

/// A listed rule's chain and expressions (None: an expression we never make).
pub fn parse_rule_exprs(answer: &Answer) -> Option<(String, Option<Vec<Expr>>)> {
    let a = attr::parse(&answer.attrs);
    let chain = attr::as_str(&attr::find(&a, 2)?);
    let exprs = attr::find(&a, 4).and_then(|list| expr::decode_list(&list));
    Some((chain, exprs))
}
