//! Port mappings, iptables backend (`iptables-*` for IPv4, `ip6tables-*` for IPv6): per
//! family one `iptables-save -t nat` and one `iptables-restore -w --noflush`.
//!
//! The shared chains are created with `-N`, which fails (the whole restore, changing
//! nothing) when another plugin created them since our read; the script is then planned
//! again from a fresh read. So two ADDs at once never flush each other's jumps.

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;

use super::rules::{self, MASQ, MASQ_JUMP, SETMARK, TOP_DNAT};
use super::{MarkChain, PortMaps};
use crate::firewall::error::{FirewallError, Result};
use crate::firewall::exec;
// Saved-rule readers shared with the masquerade rules.
use crate::firewall::iptables::{
    rule_chain, rule_comment as saved_comment, rule_target as target, unavailable,
};

fn save_tool(v6: bool) -> &'static str {
    if v6 {
        "ip6tables-save"
    } else {
        "iptables-save"
    }
}

fn restore_tool(v6: bool) -> &'static str {
    if v6 {
        "ip6tables-restore"
    } else {
        "iptables-restore"
    }
}

/// The `nat` table as `iptables-save -t nat` prints it.
#[derive(Debug, Default)]
struct Nat {
    chains: BTreeSet<String>,
    /// `-A <chain> ...` lines, in order.
    rules: Vec<String>,
}

impl Nat {
    fn read(v6: bool) -> Result<Nat> {
        let out = exec::run(save_tool(v6), &["-t", "nat"], None)?;
        Ok(Nat::parse(&out))
    }

    fn parse(saved: &str) -> Nat {
        let mut nat = Nat::default();
        for line in saved.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                nat.chains
                    .extend(decl.split_whitespace().next().map(str::to_string));
            } else if line.starts_with("-A ") {
                nat.rules.push(line.to_string());
            }
        }
        nat
    }

    fn has(&self, rule: &str) -> bool {
        self.rules.iter().any(|r| r == rule)
    }

    /// Deletions of every rule jumping to `chain`.
    fn jumps_to<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = String> + 'a {
        (self.rules.iter())
            .filter(move |r| target(r) == Some(chain))
            .map(|r| format!("-D{}", &r[2..]))
    }

    /// Lines removing `chain` and every jump to it.
    fn removal_of(&self, chain: &str) -> Vec<String> {
        let mut lines: Vec<String> = self.jumps_to(chain).collect();
        if self.chains.contains(chain) {
            lines.push(format!("-F {chain}"));
            lines.push(format!("-X {chain}"));
        }
        lines
    }
}

/// Reads the table, plans a script, applies it unless empty. A restore that fails because
/// the table changed since the read (another plugin's `-N` won, a rule to delete went) is
/// planned again from a fresh read, twice at most.
fn read_plan_apply(
    v6: bool,
    removing: bool,
    plan: impl Fn(&Nat) -> Result<Vec<String>>,
) -> Result<()> {
    // iptables-nft checks `-N` against the table it read when it started, and its batch's
    // "add chain" succeeds on an existing chain: two restores planned from one state both
    // commit, doubling the shared jumps. One portmap writer per family at a time.
    let _serial = lock_family(v6)?;
    let mut attempt = 0;
    loop {
        let nat = match Nat::read(v6) {
            Err(e) if removing && unavailable(&e) => return Ok(()),
            other => other?,
        };
        let lines = plan(&nat)?;
        if lines.is_empty() {
            return Ok(());
        }
        let script = format!("*nat\n{}\nCOMMIT\n", lines.join("\n"));
        match exec::run(restore_tool(v6), &["-w", "--noflush"], Some(&script)) {
            Err(FirewallError::Failed { .. }) if attempt < 2 => attempt += 1,
            other => return other.map(drop),
        }
    }
}

/// How long a portmap waits for another one's read-plan-apply (each takes milliseconds).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Takes `/run/cni-rs-portmap-ipv{4,6}.lock` (released when the file closes, also when the
/// process dies), waiting at most [`LOCK_WAIT`].
fn lock_family(v6: bool) -> Result<std::fs::File> {
    let path = if v6 {
        "/run/cni-rs-portmap-ipv6.lock"
    } else {
        "/run/cni-rs-portmap-ipv4.lock"
    };
    let fail = |reason: String| FirewallError::Lock {
        path: path.to_string(),
        reason,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| fail(e.to_string()))?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(fail(format!(
                    "held by another portmap for over {} s",
                    LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(fail(e.to_string())),
        }
    }
}

/// The script installing `maps` for the container address `ip` over `nat`: the shared
/// chains and jumps where missing, the attachment's chain created or emptied, its old
/// jumps replaced.
fn add_script(nat: &Nat, maps: &PortMaps, ip: &IpNetwork) -> Result<Vec<String>> {
    let v6 = ip.is_ipv6();
    let chain = rules::dnat_chain(maps.network, maps.container_id);
    let mut new_chains = Vec::new();
    let mut lines = Vec::new();
    let mut ensure_chain = |name: &str, lines: &mut Vec<String>| {
        if !nat.chains.contains(name) {
            new_chains.push(format!("-N {name}"));
        } else if name == chain {
            lines.push(format!("-F {name}"));
        }
    };
    if let (true, MarkChain::Own { bit }) = (maps.snat, &maps.mark) {
        ensure_chain(SETMARK, &mut lines);
        ensure_chain(MASQ, &mut lines);
        for rule in [rules::setmark_rule(*bit), rules::masq_rule(*bit)] {
            if !nat.has(&rule) {
                lines.push(rule);
            }
        }
        if !nat.has(MASQ_JUMP) {
            lines.push(MASQ_JUMP.replacen("-A POSTROUTING", "-I POSTROUTING 1", 1));
        }
    }
    ensure_chain(TOP_DNAT, &mut lines);
    lines.extend(rules::top_jumps().into_iter().filter(|j| !nat.has(j)));
    ensure_chain(&chain, &mut lines);
    lines.extend(nat.jumps_to(&chain));
    lines.extend(rules::dnat_rules(maps, ip));
    lines.extend(
        rules::entry_rules(maps, v6)?
            .into_iter()
            .map(|(_, write)| write),
    );
    new_chains.extend(lines);
    Ok(new_chains)
}

/// Refuses what the config gives that a script cannot carry.
pub fn validate(maps: &PortMaps, v6: bool) -> Result<()> {
    if let MarkChain::External(name) = &maps.mark {
        rules::check_chain_name(name)?;
    }
    rules::entry_rules(maps, v6).map(drop)
}

pub fn add(maps: &PortMaps, ip: &IpNetwork) -> Result<()> {
    read_plan_apply(ip.is_ipv6(), false, |nat| add_script(nat, maps, ip))
}

/// Every rule of the attachment's chain and every jump to it is there. A jump with
/// conditions is matched without them (iptables decides where they go in the saved rule).
pub fn check(maps: &PortMaps, ip: &IpNetwork) -> Result<bool> {
    let v6 = ip.is_ipv6();
    let nat = Nat::read(v6)?;
    let chain = rules::dnat_chain(maps.network, maps.container_id);
    if !nat.chains.contains(&chain) {
        return Ok(false);
    }
    let conditional = !maps.conditions(v6).is_empty();
    let entries = rules::entry_rules(maps, v6)?;
    let entry_there = |saved: &str| match conditional {
        false => nat.has(saved),
        true => {
            let (head, _) = saved.rsplit_once(" -j ").unwrap_or((saved, ""));
            let (_, matches) = head.split_once(" -p ").unwrap_or((head, ""));
            (nat.rules.iter()).any(|r| {
                rule_chain(r) == TOP_DNAT
                    && target(r) == Some(chain.as_str())
                    && r.contains(&format!(" -p {matches}"))
            })
        }
    };
    Ok(rules::dnat_rules(maps, ip).iter().all(|r| nat.has(r))
        && entries.iter().all(|(saved, _)| entry_there(saved)))
}

/// Removes the attachment's chain (and the pre-0.7 SNAT one) with every jump to them, in
/// both families at once; a family whose nat table cannot exist here has nothing.
pub fn remove(network: &str, container_id: &str) -> Result<()> {
    let chains = [
        rules::dnat_chain(network, container_id),
        rules::old_snat_chain(network, container_id),
    ];
    let plan = |nat: &Nat| Ok(chains.iter().flat_map(|c| nat.removal_of(c)).collect());
    both_families(|v6| read_plan_apply(v6, true, plan))
}

/// Removes the chains of `network`'s attachments whose container is not in `valid`. A
/// chain is the attachment's when a jump to it carries the attachment's comment and the
/// chain's name is the hash of that network and container.
pub fn gc(network: &str, valid: &[&str]) -> Result<()> {
    let plan = |nat: &Nat| {
        let stale: BTreeSet<String> = (nat.rules.iter())
            .filter(|r| rule_chain(r) == TOP_DNAT)
            .filter_map(|r| {
                let comment = saved_comment(r)?;
                let id = rules::comment_id(&comment, network)?;
                let chain = rules::dnat_chain(network, id);
                (target(r) == Some(chain.as_str()) && !valid.contains(&id)).then_some(chain)
            })
            .collect();
        Ok(stale.iter().flat_map(|c| nat.removal_of(c)).collect())
    };
    both_families(|v6| read_plan_apply(v6, true, plan))
}

fn both_families(op: impl Fn(bool) -> Result<()> + Sync) -> Result<()> {
    let (v4, v6) = std::thread::scope(|s| {
        let v6 = sysproc::task::start(s, || op(true));
        (op(false), v6.join())
    });
    FirewallError::collect([v4, v6].into_iter().filter_map(Result::err).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::portmap::{PortMapping, Protocol};

    #[test]
    fn add_script_on_an_empty_table_and_on_a_second_add() {
        let mappings = [PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }];
        let maps = PortMaps {
            network: "pmnet",
            container_id: "pm1",
            mappings: &mappings,
            snat: true,
            masq_all: false,
            mark: MarkChain::Own { bit: 13 },
            conditions_v4: &[],
            conditions_v6: &[],
        };
        let ip: IpNetwork = "10.249.0.5/24".parse().unwrap();
        let script = add_script(&Nat::default(), &maps, &ip).unwrap();
        let chain = "CNI-DN-052f95871406991a21dc1";
        assert_eq!(
            &script[..4],
            [
                "-N CNI-HOSTPORT-SETMARK".to_string(),
                "-N CNI-HOSTPORT-MASQ".into(),
                "-N CNI-HOSTPORT-DNAT".into(),
                format!("-N {chain}"),
            ]
        );
        assert!(script.contains(&MASQ_JUMP.replacen("-A POSTROUTING", "-I POSTROUTING 1", 1)));
        // Applied, then read back: a second ADD replaces the attachment's rules only.
        let saved: Vec<String> = script
            .iter()
            .filter_map(|l| {
                l.strip_prefix("-N ")
                    .map(|c| format!(":{c} - [0:0]"))
                    .or_else(|| l.starts_with("-A ").then(|| l.clone()))
                    .or_else(|| {
                        l.strip_prefix("-I POSTROUTING 1")
                            .map(|r| format!("-A POSTROUTING{r}"))
                    })
            })
            .collect();
        let nat = Nat::parse(&saved.join("\n"));
        let again = add_script(&nat, &maps, &ip).unwrap();
        assert_eq!(again[0], format!("-F {chain}"));
        let jump = format!(
            "-D CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"pmnet\\\" id: \\\"pm1\\\"\" -m multiport --dports 8080 -j {chain}"
        );
        assert_eq!(again[1], jump);
        assert!(
            !again
                .iter()
                .any(|l| l.starts_with("-N ") || l.contains("POSTROUTING"))
        );
        // DEL of that table removes exactly the attachment's chain and jump.
        assert_eq!(
            nat.removal_of(chain),
            vec![jump, format!("-F {chain}"), format!("-X {chain}")]
        );
    }

    #[test]
    fn saved_comments_and_targets() {
        let line = r#"-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"n\" id: \"c1\"" -m multiport --dports 80 -j CNI-DN-x"#;
        assert_eq!(target(line), Some("CNI-DN-x"));
        assert_eq!(rule_chain(line), TOP_DNAT);
        let c = saved_comment(line).unwrap();
        assert_eq!(rules::comment_id(&c, "n"), Some("c1"));
        assert_eq!(rules::comment_id(&c, "m"), None);
    }
}
