//! The `nft` tool: apply a script as one transaction, list objects as JSON.

use serde_json::Value;

use super::error::{FirewallError, Result};
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
        .map_err(|reason| FirewallError::Parse {
            command: format!("nft {}", args.join(" ")),
            reason,
        })
}

fn parse(out: &str) -> std::result::Result<Listing, String> {
    let doc: Value = serde_json::from_str(out).map_err(|e| e.to_string())?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or("no \"nftables\" array")?;
    let mut listing = Listing::default();
    for item in items {
        if let Some(chain) = item.get("chain") {
            if let Some(name) = chain.get("name").and_then(Value::as_str) {
                listing.chains.push(Chain {
                    name: name.to_string(),
                    handle: chain
                        .get("handle")
                        .and_then(Value::as_u64)
                        .ok_or("chain without handle")?,
                });
            }
        } else if let Some(rule) = item.get("rule") {
            let field = |k: &str| rule.get(k).and_then(Value::as_str).map(str::to_string);
            listing.rules.push(Rule {
                chain: field("chain").ok_or("rule without chain")?,
                handle: rule
                    .get("handle")
                    .and_then(Value::as_u64)
                    .ok_or("rule without handle")?,
                comment: field("comment"),
                expr: rule.get("expr").cloned().unwrap_or(Value::Null),
            });
        }
    }
    Ok(listing)
}

/// Apply `script` with `nft -f -`: one atomic transaction.
pub(crate) fn apply(script: &str) -> Result<()> {
    exec::run("nft", &["-f", "-"], Some(script)).map(|_| ())
}

/// List `what`, let `plan` compute a script from it, apply the script unless
/// empty. Another plugin process may delete a rule between our read and our
/// write (the delete by handle then fails), so a failed apply is re-planned once.
pub(crate) fn read_plan_apply(what: &[&str], plan: impl Fn(&Listing) -> String) -> Result<()> {
    let mut attempt = 0;
    loop {
        let listing = list(what)?.unwrap_or_default();
        let script = plan(&listing);
        if script.is_empty() {
            return Ok(());
        }
        match apply(&script) {
            Err(FirewallError::Failed { .. }) if attempt == 0 => attempt += 1,
            other => return other,
        }
    }
}

/// Names we put unquoted into nft scripts (chain names, interface names,
/// comments) must not be able to end the token or the line.
pub(crate) fn check_safe(what: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(FirewallError::InvalidName {
            what,
            value: value.to_string(),
        })
    }
}

/// A comment goes in double quotes: it may hold anything but `"` and line breaks.
pub(crate) fn check_comment(value: &str) -> Result<()> {
    if value.chars().any(|c| c == '"' || c.is_control()) {
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
}
