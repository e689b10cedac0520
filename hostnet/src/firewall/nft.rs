//! The `nft` tool: apply a script as one transaction, list objects as JSON.

use serde_json::Value;

use super::error::{FirewallError, OutputError, Result};
use super::exec;

/// A rule as `nft -j list` shows it.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub chain: String,
    pub handle: u64,
    pub comment: Option<String>,
    pub expr: Value,
}

/// A chain as `nft -j list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chain {
    pub name: String,
    pub handle: u64,
}

/// What a `nft -j list table|chain` returned.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub chains: Vec<Chain>,
    pub rules: Vec<Rule>,
}

impl Listing {
    pub fn has_chain(&self, name: &str) -> bool {
        self.chain_handle(name).is_some()
    }

    /// The handle of chain `name`: scripts can name a chain by handle, which works for
    /// names the nft language cannot spell (the Go plugins write JSON, where any name goes).
    pub fn chain_handle(&self, name: &str) -> Option<u64> {
        self.chains
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.handle)
    }

    pub fn rules_in<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.chain == chain)
    }
}

/// `nft -j list <what...>`; `None` when the table or chain does not exist.
pub(crate) fn list(what: &[&str]) -> Result<Option<Listing>> {
    let mut args = vec!["-j", "list"];
    args.extend_from_slice(what);
    let out = match exec::run("nft", &args, None) {
        Ok(out) => out,
        Err(e) if exec::is_no_such_object(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    parse(&out)
        .map(Some)
        .map_err(|source| FirewallError::Parse {
            command: format!("nft {}", args.join(" ")),
            source,
        })
}

fn parse(out: &str) -> std::result::Result<Listing, OutputError> {
    let doc: Value = serde_json::from_str(out)?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or(OutputError::Missing("no \"nftables\" array"))?;
    let mut listing = Listing::default();
    for item in items {
        if let Some(chain) = item.get("chain") {
            if let Some(name) = chain.get("name").and_then(Value::as_str) {
                listing.chains.push(Chain {
                    name: name.to_string(),
                    handle: chain
                        .get("handle")
                        .and_then(Value::as_u64)
                        .ok_or(OutputError::Missing("chain without handle"))?,
                });
            }
        } else if let Some(rule) = item.get("rule") {
            let field = |k: &str| rule.get(k).and_then(Value::as_str).map(str::to_string);
            listing.rules.push(Rule {
                chain: field("chain").ok_or(OutputError::Missing("rule without chain"))?,
                handle: rule
                    .get("handle")
                    .and_then(Value::as_u64)
                    .ok_or(OutputError::Missing("rule without handle"))?,
                comment: field("comment"),
                expr: rule.get("expr").cloned().unwrap_or(Value::Null),
            });
        }
    }
    Ok(listing)
}

/// One `nft` transaction: a text script (`nft -f -`) or JSON commands
/// (`nft -j -f -`, where any name is a plain JSON string: the form the Go
/// spoofcheck writes, needed for interface names the text syntax cannot spell).
pub(crate) trait Batch {
    fn is_empty(&self) -> bool;
    fn apply(&self) -> Result<()>;
}

impl Batch for String {
    fn is_empty(&self) -> bool {
        str::is_empty(self)
    }

    fn apply(&self) -> Result<()> {
        exec::run("nft", &["-f", "-"], Some(self)).map(|_| ())
    }
}

impl Batch for Vec<Value> {
    fn is_empty(&self) -> bool {
        <[Value]>::is_empty(self)
    }

    fn apply(&self) -> Result<()> {
        let doc = serde_json::json!({ "nftables": self }).to_string() + "\n";
        exec::run("nft", &["-j", "-f", "-"], Some(&doc)).map(|_| ())
    }
}

/// List `what`, let `plan` compute a batch from it, apply the batch unless
/// empty. Another plugin process may delete a rule between our read and our
/// write (the delete by handle then fails), so a failed apply is re-planned once.
pub(crate) fn read_plan_apply<B: Batch>(what: &[&str], plan: impl Fn(&Listing) -> B) -> Result<()> {
    let mut attempt = 0;
    loop {
        let listing = list(what)?.unwrap_or_default();
        let batch = plan(&listing);
        if batch.is_empty() {
            return Ok(());
        }
        match batch.apply() {
            Err(FirewallError::Failed { .. }) if attempt == 0 => attempt += 1,
            other => return other,
        }
    }
}

/// A name as a JSON string nft takes literally. nft reads a string ending in
/// `*` as a wildcard (as an iifname match, and a jump target then fails) unless
/// the `*` is escaped, and unescaping then drops every backslash of the string;
/// a leading `@` names a set. Such names are refused rather than misread.
pub(crate) fn json_literal(what: &'static str, value: &str) -> Result<String> {
    let invalid = || FirewallError::InvalidName {
        what,
        value: value.to_string(),
    };
    if value.is_empty() || value.starts_with('@') {
        return Err(invalid());
    }
    match value.strip_suffix('*') {
        Some(_) if value.contains('\\') => Err(invalid()),
        Some(stem) => Ok(format!("{stem}\\*")),
        None => Ok(value.to_string()),
    }
}

/// A comment goes in double quotes: it may hold anything but `"` and line
/// breaks (nft 1.0.6 keeps every other byte, control characters included).
pub(crate) fn check_comment(value: &str) -> Result<()> {
    if value.contains(['"', '\n']) {
        return Err(FirewallError::InvalidName {
            what: "comment",
            value: value.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listing() {
        let out = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
            {"chain": {"family": "inet", "table": "t", "name": "c", "handle": 1}},
            {"rule": {"family": "inet", "table": "t", "chain": "c", "handle": 6,
              "comment": "x", "expr": [{"masquerade": null}]}}]}"#;
        let l = parse(out).unwrap();
        assert_eq!(
            l.chains,
            vec![Chain {
                name: "c".into(),
                handle: 1
            }]
        );
        assert_eq!(l.rules[0].handle, 6);
        assert_eq!(l.rules[0].comment.as_deref(), Some("x"));
        assert_eq!(l.rules_in("c").count(), 1);
    }

    #[test]
    fn json_literals() {
        assert_eq!(json_literal("x", "e@0").unwrap(), "e@0");
        assert_eq!(json_literal("x", "e\\x").unwrap(), "e\\x");
        assert_eq!(json_literal("x", "e*").unwrap(), "e\\*");
        assert!(json_literal("x", "e\\*").is_err());
        assert!(json_literal("x", "@e").is_err());
        assert!(json_literal("x", "").is_err());
    }
}
