//! The rules of one attachment's mappings, as text: iptables lines in `iptables-save`
//! form (what the tool prints back, so "is it there" is a string comparison) and the nft
//! statements knftables writes for the reference. No tool runs here.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::{MarkChain, PortMaps, Protocol};
use crate::firewall::error::{FirewallError, Result};
use crate::firewall::names::iptables_prefixed_chain;

/// The shared chains; never deleted (every attachment's jumps go through them).
pub const TOP_DNAT: &str = "CNI-HOSTPORT-DNAT";
pub const SETMARK: &str = "CNI-HOSTPORT-SETMARK";
pub const MASQ: &str = "CNI-HOSTPORT-MASQ";

/// The attachment's chain of DNAT rules.
pub fn dnat_chain(network: &str, container_id: &str) -> String {
    iptables_prefixed_chain("DN-", network, container_id)
}

/// The chain versions before 0.7 made; removed by DEL when found.
pub fn old_snat_chain(network: &str, container_id: &str) -> String {
    iptables_prefixed_chain("SN-", network, container_id)
}

/// The entry rules' comment (`dnat name: "<network>" id: "<id>"`, no escaping, as Go's
/// `%s`), cut to iptables' 255 bytes as `trimComment` cuts it.
pub fn comment(network: &str, container_id: &str) -> String {
    let mut c = format!("dnat name: \"{network}\" id: \"{container_id}\"");
    if c.len() > 255 {
        let mut end = 253;
        while !c.is_char_boundary(end) {
            end -= 1;
        }
        c.truncate(end);
        c.push_str("...");
    }
    c
}

/// The container id of an entry rule's comment for `network`.
pub fn comment_id<'a>(comment: &'a str, network: &str) -> Option<&'a str> {
    comment
        .strip_prefix("dnat name: \"")?
        .strip_prefix(network)?
        .strip_prefix("\" id: \"")?
        .strip_suffix('"')
}

/// `--comment` argument as iptables-save prints (and iptables-restore reads) it.
pub fn save_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn mark(bit: u8) -> String {
    let v = 1u32 << bit;
    format!("{v:#x}/{v:#x}")
}

pub fn setmark_rule(bit: u8) -> String {
    format!(
        "-A {SETMARK} -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark {}",
        mark(bit)
    )
}

pub fn masq_rule(bit: u8) -> String {
    format!("-A {MASQ} -m mark --mark {} -j MASQUERADE", mark(bit))
}

/// Prepended (`-I POSTROUTING 1`) so the bridge's masquerade chains do not come first.
pub const MASQ_JUMP: &str =
    "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ";

pub fn top_jumps() -> [String; 2] {
    ["PREROUTING", "OUTPUT"].map(|c| format!("-A {c} -m addrtype --dst-type LOCAL -j {TOP_DNAT}"))
}

fn host_prefix(ip: &IpAddr) -> u8 {
    if ip.is_ipv6() { 128 } else { 32 }
}

fn ip_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

/// The attachment chain's rules for the container address `ip`, in Go's order: for each
/// mapping of the address's family, the hairpin and (IPv4) localhost marks, then the DNAT.
pub fn dnat_rules(maps: &PortMaps, ip: &IpNetwork) -> Vec<String> {
    let chain = dnat_chain(maps.network, maps.container_id);
    let v6 = ip.is_ipv6();
    let mark_chain = match &maps.mark {
        MarkChain::Own { .. } => SETMARK,
        MarkChain::External(name) => name.as_str(),
    };
    let mut rules = Vec::new();
    for m in maps.mappings {
        let Some(dst) = m.destination(v6) else {
            continue;
        };
        let dst = dst.map_or(String::new(), |d| format!(" -d {d}/{}", host_prefix(&d)));
        let p = m.protocol.as_str();
        let matches = format!("{dst} -p {p} -m {p} --dport {}", m.host_port);
        if maps.snat {
            // masqAll's 0.0.0.0/0 (::/0) is no match at all: iptables-save leaves it out.
            let hairpin = match maps.masq_all {
                true => String::new(),
                false => format!(" -s {}/{}", ip.network(), ip.prefix()),
            };
            rules.push(format!("-A {chain}{hairpin}{matches} -j {mark_chain}"));
            if !v6 && !maps.masq_all {
                rules.push(format!(
                    "-A {chain} -s 127.0.0.1/32{matches} -j {mark_chain}"
                ));
            }
        }
        rules.push(format!(
            "-A {chain}{matches} -j DNAT --to-destination {}",
            ip_port(ip.ip(), m.container_port)
        ));
    }
    rules
}

/// The jumps from `CNI-HOSTPORT-DNAT`: per protocol (sorted by name, as Go sorts), the
/// host ports of every mapping (any family, in order), 15 to a rule (multiport's limit).
/// Each is `(save form without conditions, line to write)`; they differ only when there
/// are conditions, whose place in the saved rule iptables decides.
pub fn entry_rules(maps: &PortMaps, v6: bool) -> Result<Vec<(String, String)>> {
    let chain = dnat_chain(maps.network, maps.container_id);
    let c = save_quote(&comment(maps.network, maps.container_id));
    let conditions = restore_words(maps.conditions(v6))?;
    let mut protos: Vec<Protocol> = maps.mappings.iter().map(|m| m.protocol).collect();
    protos.sort_by_key(|p| p.as_str());
    protos.dedup();
    let mut out = Vec::new();
    for proto in protos {
        let ports: Vec<String> = (maps.mappings.iter())
            .filter(|m| m.protocol == proto)
            .map(|m| m.host_port.to_string())
            .collect();
        for group in ports.chunks(15) {
            let head = format!(
                "-A {TOP_DNAT} -p {} -m comment --comment {c} -m multiport --dports {}",
                proto.as_str(),
                group.join(",")
            );
            out.push((
                format!("{head} -j {chain}"),
                format!("{head}{conditions} -j {chain}"),
            ));
        }
    }
    Ok(out)
}

/// Condition arguments as words of an iptables-restore line (each one argument, as Go
/// passes them to exec): quoted when they hold blanks; a quote, backslash or line break
/// (which would change the script's meaning) is refused.
fn restore_words(words: &[String]) -> Result<String> {
    let mut out = String::new();
    for w in words {
        if w.contains(['"', '\\', '\n', '\r']) {
            return Err(FirewallError::InvalidName {
                what: "iptables condition",
                value: w.clone(),
            });
        }
        match w.is_empty() || w.contains(char::is_whitespace) {
            true => out.push_str(&format!(" \"{w}\"")),
            false => out.push_str(&format!(" {w}")),
        }
    }
    Ok(out)
}

/// A name given for an iptables chain (`externalSetMarkChain`) that the script can carry.
pub fn check_chain_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 28 || name.contains(|c: char| c.is_whitespace()) {
        return Err(FirewallError::InvalidName {
            what: "iptables chain",
            value: name.to_string(),
        });
    }
    Ok(())
}

/// nftables: the table of each family and its chains, as the reference lays them out
/// since containernetworking/plugins #1210: both hooks jump to `hostports_all` only for
/// traffic to a local address (`fib daddr type local`, iptables' `--dst-type LOCAL`), and
/// `hostports_all` jumps to `hostports` (every mapping, a `hostIP` one with its `daddr`)
/// and to `hostip_hostports` (where earlier versions put the `hostIP` ones; kept so their
/// rules stay reachable, behind the same check, until their DEL).
pub const NFT_TABLE: &str = "cni_hostport";
pub const NFT_HOSTPORTS: &str = "hostports";
pub const NFT_HOSTIP_HOSTPORTS: &str = "hostip_hostports";
pub const NFT_HOSTPORTS_ALL: &str = "hostports_all";
pub const NFT_MASQUERADING: &str = "masquerading";
/// The base chains, rewritten by every ADD.
pub const NFT_HOOKS: [&str; 2] = ["prerouting", "output"];
/// The chains holding an attachment's rules.
pub const NFT_RULE_CHAINS: [&str; 3] = [NFT_HOSTPORTS, NFT_HOSTIP_HOSTPORTS, NFT_MASQUERADING];

pub fn nft_family(v6: bool) -> &'static str {
    if v6 { "ip6" } else { "ip" }
}

/// The table, its chains and their jumps as knftables writes them for the reference.
/// The hooks and `hostports_all` are flushed and written again, which also repairs a table
/// of the earlier layout (whose `prerouting` jumped to the mappings for any destination,
/// so forwarded traffic to a mapped port was DNATed into the pod).
pub fn nft_base(maps: &PortMaps, v6: bool) -> Result<String> {
    let t = format!("{} {NFT_TABLE}", nft_family(v6));
    let conds = nft_words(maps.conditions(v6))?;
    let all = NFT_HOSTPORTS_ALL;
    let mut lines = vec![
        format!("add table {t} {{ comment \"CNI portmap plugin\" ; }}"),
        format!("add chain {t} {NFT_HOSTPORTS}"),
        format!("add chain {t} {NFT_HOSTIP_HOSTPORTS}"),
        format!("add chain {t} {all}"),
        format!("flush chain {t} {all}"),
        format!("add rule {t} {all} jump {NFT_HOSTIP_HOSTPORTS}"),
        format!("add rule {t} {all} jump {NFT_HOSTPORTS}"),
    ];
    for hook in NFT_HOOKS {
        lines.extend([
            format!("add chain {t} {hook} {{ type nat hook {hook} priority -100 ; }}"),
            format!("flush chain {t} {hook}"),
            format!("add rule {t} {hook}{conds} fib daddr type local jump {all}"),
        ]);
    }
    if maps.snat {
        lines.push(format!(
            "add chain {t} {NFT_MASQUERADING} {{ type nat hook postrouting priority 100 ; }}"
        ));
    }
    Ok(lines.join("\n") + "\n")
}

/// The attachment's nft rules for the container address `ip` (comment: the container ID),
/// every mapping in `hostports`.
pub fn nft_rules(maps: &PortMaps, ip: &IpNetwork) -> Vec<String> {
    let v6 = ip.is_ipv6();
    let f = nft_family(v6);
    let t = format!("{f} {NFT_TABLE}");
    let c = maps.container_id;
    let to = ip.ip();
    let mut out = Vec::new();
    for m in maps.mappings {
        let Some(dst) = m.destination(v6) else {
            continue;
        };
        let dst = dst.map_or(String::new(), |d| format!(" {f} daddr {d}"));
        let (p, hp) = (m.protocol.as_str(), m.host_port);
        let to = ip_port(to, m.container_port);
        out.push(format!(
            "add rule {t} {NFT_HOSTPORTS}{dst} {p} dport {hp} dnat to {to} comment \"{c}\""
        ));
    }
    if maps.snat {
        out.push(format!(
            "add rule {t} {NFT_MASQUERADING} {f} saddr {to} {f} daddr {to} masquerade comment \"{c}\""
        ));
        if !v6 {
            out.push(format!(
                "add rule {t} {NFT_MASQUERADING} {f} saddr 127.0.0.1 {f} daddr {to} masquerade comment \"{c}\""
            ));
        }
    }
    out
}

/// How many rules of the attachment each chain holds after [`nft_rules`] (CHECK).
pub fn nft_expected(maps: &PortMaps, ip: &IpNetwork) -> [(&'static str, usize); 2] {
    let v6 = ip.is_ipv6();
    let mapped = (maps.mappings.iter())
        .filter(|m| m.destination(v6).is_some())
        .count();
    let masq = match (maps.snat, v6) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => 2,
    };
    [(NFT_HOSTPORTS, mapped), (NFT_MASQUERADING, masq)]
}

/// nft conditions joined into a rule; a line break or `;` (another statement) is refused.
fn nft_words(words: &[String]) -> Result<String> {
    let mut out = String::new();
    for w in words {
        if w.contains(['\n', '\r', ';']) {
            return Err(FirewallError::InvalidName {
                what: "nftables condition",
                value: w.clone(),
            });
        }
        out.push(' ');
        out.push_str(w);
    }
    Ok(out)
}
