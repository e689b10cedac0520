//! br_netfilter: whether traffic bridged between two pods of one node reaches the
//! netfilter hooks (forward, where the NetworkPolicy table is; prerouting, where
//! kube-proxy DNATs a pod's connection to a Service whose backend is on the same bridge).
//! The sysctls are per network namespace (Linux 5.3 on); the module is the node's: the
//! agent's image cannot load it.

use std::path::Path;

use crate::sysctl::{self, SysctlError};

/// `net.bridge.bridge-nf-call-iptables` (IPv4) and `-ip6tables` (IPv6); the nftables
/// `inet` hooks obey them too.
const CALL_IPTABLES: &str = "bridge-nf-call-iptables";
const CALL_IP6TABLES: &str = "bridge-nf-call-ip6tables";

/// What the node's kernel does with bridged pod traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgeNf {
    /// `/proc/sys/net/bridge` exists: module br_netfilter is loaded.
    pub loaded: bool,
    /// Bridged IPv4 goes through the IPv4 (and inet) hooks.
    pub call_iptables: bool,
    /// Bridged IPv6 goes through the IPv6 (and inet) hooks.
    pub call_ip6tables: bool,
}

impl BridgeNf {
    /// Whether policy between pods of one node is enforced, both families.
    pub fn polices_bridged_traffic(&self) -> bool {
        self.loaded && self.call_iptables && self.call_ip6tables
    }
}

fn knob(name: &str) -> Result<std::path::PathBuf, SysctlError> {
    sysctl::path(&["net", "bridge", name])
}

fn is_on(name: &str) -> Result<bool, SysctlError> {
    Ok(sysctl::read_path(&knob(name)?)?.trim() == "1")
}

/// The state in the calling thread's network namespace.
pub fn read() -> Result<BridgeNf, SysctlError> {
    let dir = sysctl::path(&["net", "bridge"])?;
    if !Path::new(&dir).is_dir() {
        return Ok(BridgeNf::default());
    }
    Ok(BridgeNf {
        loaded: true,
        call_iptables: is_on(CALL_IPTABLES)?,
        call_ip6tables: is_on(CALL_IP6TABLES)?,
    })
}

/// Sets both sysctls to 1 in the calling thread's namespace (br_netfilter loaded).
pub fn enable() -> Result<(), SysctlError> {
    // NetworkPolicy between two pods of this node: their traffic crosses the bridge,
    // below IP, and meets our forward hook only through br_netfilter. kube-proxy needs
    // the same for a Service whose client and backend share the bridge.
    for name in [CALL_IPTABLES, CALL_IP6TABLES] {
        sysctl::ensure_path(&knob(name)?, "1")?;
    }
    Ok(())
}
