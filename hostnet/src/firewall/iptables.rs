//! ipMasq, iptables backend (IPv4 via `iptables-*`, IPv6 via `ip6tables-*`),
//! rule-for-rule what the Go plugin's `pkg/ip/ipmasq_iptables_linux.go` makes:
//!
//! ```text
//! -A CNI-<hash> -d <net>/<prefix> -m comment --comment "<c>" -j ACCEPT
//! -A CNI-<hash> ! -d 224.0.0.0/4 -m comment --comment "<c>" -j MASQUERADE   (v6: ff00::/8)
//! -A POSTROUTING -s <ip>/32 -m comment --comment "<c>" -j CNI-<hash>        (v6: /128)
//! ```
//!
//! Lines are written in `iptables-save` canonical form, so "is this rule there"
//! is a string comparison against the saved table. Each operation is one
//! `iptables-save -t nat` plus (only when something changes) one
//! `iptables-restore -w --noflush`, per address family involved; setup of a new
//! attachment and teardown with its IPs first try one name-addressed restore alone.

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;
use sysproc::{step, task};

use super::error::{FirewallError, Result};
use super::exec;
use super::names::{go_unquote, iptables_chain, iptables_comment};

/// Address family: selects the tool pair and the multicast range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];

    fn of(ip: &IpNetwork) -> Family {
        match ip {
            IpNetwork::V4(_) => Family::V4,
            IpNetwork::V6(_) => Family::V6,
        }
    }

    fn save_tool(self) -> &'static str {
        match self {
            Family::V4 => "iptables-save",
            Family::V6 => "ip6tables-save",
        }
    }

    fn restore_tool(self) -> &'static str {
        match self {
            Family::V4 => "iptables-restore",
            Family::V6 => "ip6tables-restore",
        }
    }

    fn multicast(self) -> &'static str {
        match self {
            Family::V4 => "224.0.0.0/4",
            Family::V6 => "ff00::/8",
        }
    }

    fn host_prefix(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

/// The `nat` table as `iptables-save -t nat` shows it.
#[derive(Debug, Default)]
pub(crate) struct NatTable {
    chains: BTreeSet<String>,
    /// Rule lines, `-A <chain> ...`, in order.
    rules: Vec<String>,
}

impl NatTable {
    fn read(family: Family) -> Result<NatTable> {
        let out = exec::run(family.save_tool(), &["-t", "nat"], None)?;
        let mut table = NatTable::default();
        for line in out.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                if let Some(name) = decl.split_whitespace().next() {
                    table.chains.insert(name.to_string());
                }
            } else if line.starts_with("-A ") {
                table.rules.push(line.to_string());
            }
        }
        Ok(table)
    }

    fn has_rule(&self, line: &str) -> bool {
        self.rules.iter().any(|r| r == line)
    }

    /// Script lines removing `chain`: every POSTROUTING jump to it (whatever
    /// its `-s` form), then flush and delete the chain itself.
    fn removal_of(&self, chain: &str) -> Vec<String> {
        let mut lines: Vec<String> = self
            .rules
            .iter()
            .filter(|r| rule_chain(r) == "POSTROUTING" && rule_target(r) == Some(chain))
            .map(|r| format!("-D{}", &r[2..]))
            .collect();
        if self.chains.contains(chain) {
            lines.push(format!("-F {chain}"));
            lines.push(format!("-X {chain}"));
        }
        lines
    }
}

/// `-A <chain> ...` => `<chain>`.
pub(super) fn rule_chain(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or("")
}

/// The jump target: the word after the last ` -j `.
pub(super) fn rule_target(line: &str) -> Option<&str> {
    let (_, rest) = line.rsplit_once(" -j ")?;
    rest.split_whitespace().next()
}

/// The comment of a saved rule, unescaped (iptables-save writes
/// `--comment "..."` with `\"` and `\\` escaped).
pub(super) fn rule_comment(line: &str) -> Option<String> {
    let (_, rest) = line.split_once(" --comment \"")?;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// `--comment` argument as iptables-save prints (and iptables-restore reads) it.
fn save_quote(comment: &str) -> String {
    let mut out = String::from("\"");
    for c in comment.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The rules one attachment needs in one family, in save form and Go order
/// (all ACCEPTs first so a second same-family subnet is not masqueraded).
fn desired_rules(chain: &str, comment: &str, ips: &[IpNetwork], family: Family) -> Vec<String> {
    let c = save_quote(comment);
    let ips: Vec<&IpNetwork> = ips.iter().filter(|ip| Family::of(ip) == family).collect();
    let mut rules: Vec<String> = ips
        .iter()
        .map(|ip| {
            format!(
                "-A {chain} -d {}/{} -m comment --comment {c} -j ACCEPT",
                ip.network(),
                ip.prefix()
            )
        })
        .collect();
    rules.push(format!(
        "-A {chain} ! -d {} -m comment --comment {c} -j MASQUERADE",
        family.multicast()
    ));
    rules.extend(ips.iter().map(|ip| {
        format!(
            "-A POSTROUTING -s {}/{} -m comment --comment {c} -j {chain}",
            ip.ip(),
            family.host_prefix()
        )
    }));
    rules
}

fn families_of(ips: &[IpNetwork]) -> Vec<Family> {
    Family::BOTH
        .into_iter()
        .filter(|f| ips.iter().any(|ip| Family::of(ip) == *f))
        .collect()
}

/// Read the table, let `plan` compute the script body, apply it if non-empty.
/// Another plugin process may change the table between our read and our
/// write, making a `-D` miss; so a failed apply is re-planned once.
/// With `removing`, a family whose nat table cannot be read at all (tool
/// missing, IPv6 or nat not available in this kernel) has nothing to remove:
/// teardown without IPs must not fail on a v4-only host.
fn read_plan_apply(
    family: Family,
    removing: bool,
    plan: impl Fn(&NatTable) -> Vec<String>,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        let table = match NatTable::read(family) {
            Err(e) if removing && unavailable(&e) => return Ok(()),
            other => other?,
        };
        let lines = plan(&table);
        if lines.is_empty() {
            return Ok(());
        }
        let mut script = String::from("*nat\n");
        for line in &lines {
            script.push_str(line);
            script.push('\n');
        }
        script.push_str("COMMIT\n");
        match exec::run(family.restore_tool(), RESTORE_ARGS, Some(&script)) {
            Err(FirewallError::Failed { .. }) if attempt == 0 => attempt += 1,
            other => return other.map(|_| ()),
        }
    }
}

/// The error says the table cannot exist here, rather than that reading failed.
pub(super) fn unavailable(err: &FirewallError) -> bool {
    err.is_tool_missing()
        || matches!(err, FirewallError::Failed { stderr, .. }
            if ["does not exist", "insmod", "not supported", "Protocol not available"]
                .iter()
                .any(|m| stderr.contains(m)))
}

/// Install the masquerade rules for `ips` (AppendUnique: nothing is added
/// twice, rules already there — ours or the Go plugin's — are kept).
pub fn setup(network: &str, container_id: &str, ips: &[IpNetwork]) -> Result<()> {
    setup_with(network, container_id, ips, None)
}

/// A restore tool started before the addresses are known (`setup_with` gives it its
/// script; unused, it is killed when dropped, having read nothing).
pub struct Prestarted {
    family: Family,
    tool: exec::Started,
}

/// Starts `family`'s restore tool for a coming [`setup_with`]: about a third of its run is
/// start-up, which then overlaps the caller's other work (IPAM, in the bridge's ADD).
pub fn prestart(family: Family) -> Result<Prestarted> {
    Ok(Prestarted {
        family,
        tool: exec::start(family.restore_tool(), RESTORE_ARGS, true)?,
    })
}

/// [`setup`], feeding the script of `pre`'s family, if given, to that started tool.
pub fn setup_with(
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
    mut pre: Option<Prestarted>,
) -> Result<()> {
    let chain = iptables_chain(network, container_id);
    let comment = iptables_comment(network, container_id);
    let families: Vec<_> = families_of(ips)
        .into_iter()
        .map(|family| (family, pre.take_if(|p| p.family == family).map(|p| p.tool)))
        .collect();
    // `pre` of a family not wanted is dropped here: killed, having read nothing.
    drop(pre);
    at_once(families, |(family, tool)| {
        let wanted = desired_rules(&chain, &comment, ips, family);
        // A new attachment costs one process: `-N` makes the restore fail, atomically and
        // changing nothing, when the chain exists; then we merge with what is there.
        if create_fresh(family, &chain, &wanted, tool).is_err() {
            read_plan_apply(family, false, |table| {
                let mut lines = Vec::new();
                if !table.chains.contains(&chain) {
                    lines.push(format!(":{chain} - [0:0]"));
                }
                for rule in &wanted {
                    if !table.has_rule(rule) && !lines.contains(rule) {
                        lines.push(rule.clone());
                    }
                }
                lines
            })?;
        }
        step::point("firewall.iptables-family-set")?;
        Ok(())
    })
}

/// Runs `op` for each family's item, the two families at once (each is a table and a tool
/// of its own); every failure is returned.
fn at_once<T: Send>(items: Vec<T>, op: impl Fn(T) -> Result<()> + Sync) -> Result<()> {
    let results: Vec<_> = if items.len() == 1 {
        items.into_iter().map(&op).collect()
    } else {
        std::thread::scope(|s| {
            let op = &op;
            let started: Vec<_> = items
                .into_iter()
                .map(|item| task::start(s, move || op(item)))
                .collect();
            started.into_iter().map(task::Started::join).collect()
        })
    };
    FirewallError::collect(results.into_iter().filter_map(Result::err).collect())
}

/// How every restore runs: waiting for the xtables lock, keeping what is there.
const RESTORE_ARGS: &[&str] = &["-w", "--noflush"];

/// Creates the chain with all its rules and jumps in one transaction, failing if it exists;
/// through `tool` when one was started for it.
fn create_fresh(
    family: Family,
    chain: &str,
    rules: &[String],
    tool: Option<exec::Started>,
) -> Result<()> {
    let mut script = format!("*nat\n-N {chain}\n");
    for rule in rules {
        script.push_str(rule);
        script.push('\n');
    }
    script.push_str("COMMIT\n");
    let tool = match tool {
        Some(tool) => tool,
        None => exec::start(family.restore_tool(), RESTORE_ARGS, true)?,
    };
    tool.finish(Some(&script)).map(drop)
}

/// Remove the attachment's chain and every POSTROUTING jump to it (current
/// `-s <ip>/32` and legacy `-s <net>/<prefix>` forms alike). The jumps are
/// found by listing, so `ips` only selects the families to clean; with no IPs
/// (container side gone, no prevResult) both families are cleaned. Missing
/// chains and rules are not an error.
pub fn teardown(network: &str, container_id: &str, ips: &[IpNetwork]) -> Result<()> {
    let chain = iptables_chain(network, container_id);
    let comment = iptables_comment(network, container_id);
    let families = if ips.is_empty() {
        Family::BOTH.to_vec()
    } else {
        families_of(ips)
    };
    at_once(families, |family| {
        // The common case costs one process and no table dump (which grows with the pods).
        let removed = !ips.is_empty() && remove_exactly(family, &chain, &comment, ips).is_ok();
        if !removed {
            read_plan_apply(family, true, |table| table.removal_of(&chain))?;
        }
        step::point("firewall.iptables-family-removed")?;
        Ok(())
    })
}

/// Removes, by name, the jumps `setup` made for `ips` and then the chain, in one
/// transaction. It fails, changing nothing, when anything else is found or missing: a jump
/// of another form still refers to the chain (`-X` refuses), a rule or the chain is gone.
fn remove_exactly(family: Family, chain: &str, comment: &str, ips: &[IpNetwork]) -> Result<()> {
    let mut script = String::from("*nat\n");
    for rule in desired_rules(chain, comment, ips, family) {
        if rule_chain(&rule) == "POSTROUTING" {
            script.push_str(&format!("-D{}\n", &rule[2..]));
        }
    }
    script.push_str(&format!("-F {chain}\n-X {chain}\nCOMMIT\n"));
    exec::run(family.restore_tool(), RESTORE_ARGS, Some(&script)).map(drop)
}

/// Whether every rule `setup` would install is present.
pub fn check(network: &str, container_id: &str, ips: &[IpNetwork]) -> Result<bool> {
    let chain = iptables_chain(network, container_id);
    let comment = iptables_comment(network, container_id);
    for family in families_of(ips) {
        let table = NatTable::read(family)?;
        if !table.chains.contains(&chain) {
            return Ok(false);
        }
        let wanted = desired_rules(&chain, &comment, ips, family);
        if !wanted.iter().all(|rule| table.has_rule(rule)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Remove the chains (and their POSTROUTING jumps) of `network` whose
/// container id is not in `valid` (pairs of container id and ifname; the
/// iptables rules do not carry the ifname). A chain is ours when a rule in
/// it, or jumping to it, has comment `name: "<network>" id: "<id>"` and the
/// chain is exactly `CNI-<hash(network+id)>`; this keeps e.g. portmap's
/// chains, which use the same comment format, out of reach.
pub fn gc(network: &str, valid: &[(&str, &str)]) -> Result<()> {
    let keep: BTreeSet<String> = valid
        .iter()
        .map(|(id, _)| iptables_chain(network, id))
        .collect();
    let mut errs = Vec::new();
    for family in Family::BOTH {
        let result = read_plan_apply(family, true, |table| {
            stale_chains(table, network, &keep)
                .iter()
                .flat_map(|chain| table.removal_of(chain))
                .collect()
        });
        if let Err(e) = result {
            errs.push(e);
        }
    }
    FirewallError::collect(errs)
}

fn stale_chains(table: &NatTable, network: &str, keep: &BTreeSet<String>) -> BTreeSet<String> {
    let mut stale = BTreeSet::new();
    for rule in &table.rules {
        let Some(id) = rule_comment(rule).and_then(|c| comment_id(&c, network)) else {
            continue;
        };
        let ours = iptables_chain(network, &id);
        let chain = rule_chain(rule);
        let names_ours = chain == ours || rule_target(rule) == Some(ours.as_str());
        if names_ours && !keep.contains(&ours) {
            stale.insert(ours);
        }
    }
    stale
}

/// The container id out of `name: "<network>" id: "<id>"`, if the comment is
/// for `network`.
fn comment_id(comment: &str, network: &str) -> Option<String> {
    let prefix = format!("name: {} id: ", super::names::go_quote(network));
    go_unquote(comment.strip_prefix(&prefix)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_tool_is_the_one_given_the_script() {
        let dir = testkit::TempDir::new("iptables-started");
        let out = dir.join("script");
        let cat = format!("cat > '{}'", out.display());
        let tool = exec::start("sh", &["-c", &cat], true).unwrap();
        let rules = ["-A CNI-x -j ACCEPT".to_string()];
        create_fresh(Family::V4, "CNI-x", &rules, Some(tool)).unwrap();
        assert_eq!(
            std::fs::read_to_string(out).unwrap(),
            "*nat\n-N CNI-x\n-A CNI-x -j ACCEPT\nCOMMIT\n"
        );
    }

    #[test]
    fn desired_rules_in_save_form() {
        let ips: Vec<IpNetwork> = vec![
            "10.1.0.5/16".parse().unwrap(),
            "fd00::5/64".parse().unwrap(),
        ];
        let c = r#""name: \"net\" id: \"x\"""#;
        assert_eq!(
            desired_rules("CNI-abc", r#"name: "net" id: "x""#, &ips, Family::V4),
            vec![
                format!("-A CNI-abc -d 10.1.0.0/16 -m comment --comment {c} -j ACCEPT"),
                format!("-A CNI-abc ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE"),
                format!("-A POSTROUTING -s 10.1.0.5/32 -m comment --comment {c} -j CNI-abc"),
            ]
        );
        assert_eq!(
            desired_rules("CNI-abc", r#"name: "net" id: "x""#, &ips, Family::V6)[2],
            format!("-A POSTROUTING -s fd00::5/128 -m comment --comment {c} -j CNI-abc")
        );
    }

    #[test]
    fn parse_saved_rule() {
        let line = r#"-A POSTROUTING -s 10.2.0.5/32 -m comment --comment "name: \"n2\" id: \"y\"" -j CNI-def"#;
        assert_eq!(rule_chain(line), "POSTROUTING");
        assert_eq!(rule_target(line), Some("CNI-def"));
        let comment = rule_comment(line).unwrap();
        assert_eq!(comment, r#"name: "n2" id: "y""#);
        assert_eq!(comment_id(&comment, "n2").as_deref(), Some("y"));
        assert_eq!(comment_id(&comment, "n"), None);
        assert_eq!(save_quote(&comment), r#""name: \"n2\" id: \"y\"""#);
    }
}
