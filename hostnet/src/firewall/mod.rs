//! Firewall rules: ipMasq (iptables and nftables backends) and macspoofchk.
//!
//! Everything shells out to the netfilter tools in batches (`iptables-restore
//! -w --noflush`, `nft -f -`, `nft -j -f -`), reading state with `iptables-save` / `nft -j
//! list`; no rule is ever added by a process of its own. Chain names, comments
//! and rule shapes are byte-identical to the Go reference plugins, so a node can
//! move between the Go plugins and ours without leaking rules. Tools run in
//! the calling thread's network namespace.
//!
//! Cost per call, per backend: one read plus at most one write (iptables: per
//! address family involved; nothing is written when nothing changes).

pub(crate) mod backend;
mod error;
mod exec;
pub mod iptables;
pub mod names;
mod nft;
pub mod nftables;
pub mod portmap;
pub mod spoofcheck;

#[cfg(test)]
mod tests;

use ipnetwork::IpNetwork;

use backend::{counted, iptables_usable, nftables_usable};

pub use backend::Backend;
pub use error::{FirewallError, OutputError, Result};

/// One attachment of a container to a network, the key of its ipMasq rules
/// (the iptables backend ignores `ifname`, as the reference does).
#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

/// Install masquerading for `ips` with `backend` (`None`: automatic choice,
/// see `auto`). Returns the backend used.
pub fn setup_ipmasq(
    backend: Option<Backend>,
    att: &Attachment,
    ips: &[IpNetwork],
) -> Result<Backend> {
    setup_ipmasq_with(backend, att, ips, None)
}

/// For a coming [`setup_ipmasq_with`] while the addresses are not known yet: the IPv4
/// restore tool started now, when `backend` is (or may be, automatic) iptables. A guess:
/// an IPv6-only attachment kills it unused. `None` when it could not start.
pub fn prestart_ipmasq(backend: Option<Backend>) -> Option<iptables::Prestarted> {
    match backend {
        Some(Backend::NfTables) => None,
        Some(Backend::IpTables) | None => iptables::prestart(iptables::Family::V4).ok(),
    }
}

/// [`setup_ipmasq`], using `pre` (from [`prestart_ipmasq`]) where it fits.
pub fn setup_ipmasq_with(
    backend: Option<Backend>,
    att: &Attachment,
    ips: &[IpNetwork],
    mut pre: Option<iptables::Prestarted>,
) -> Result<Backend> {
    // Whatever a failed iptables attempt left is removed by teardown, which runs both backends.
    auto(backend, |b| {
        match b {
            Backend::IpTables => {
                iptables::setup_with(att.network, att.container_id, ips, pre.take())?
            }
            Backend::NfTables => nftables::setup(att.network, att.ifname, att.container_id, ips)?,
        }
        Ok(b)
    })
}

/// Whether the rules `setup_ipmasq` installs with `backend` are present.
pub fn check_ipmasq(backend: Option<Backend>, att: &Attachment, ips: &[IpNetwork]) -> Result<bool> {
    auto(backend, |b| match b {
        Backend::IpTables => iptables::check(att.network, att.container_id, ips),
        Backend::NfTables => nftables::check(att.network, att.ifname, att.container_id, ips),
    })
}

/// Run `op` with `backend`, or the automatic choice (`backend::auto`, as
/// `SetupIPMasqForNetworks` decides).
fn auto<T>(backend: Option<Backend>, op: impl FnMut(Backend) -> Result<T>) -> Result<T> {
    backend::auto(backend::usable, backend, op)
}

/// Remove the attachment's masquerading from both backends (the container may
/// have been set up by another plugin version or config). `ips` may be empty
/// (container side gone, no prevResult): both backends find the rules
/// without them. A backend whose tool is unusable on this host is skipped.
pub fn teardown_ipmasq(att: &Attachment, ips: &[IpNetwork]) -> Result<()> {
    both_backends(
        || iptables::teardown(att.network, att.container_id, ips),
        || nftables::teardown(att.network, att.ifname, att.container_id),
    )
}

/// CNI GC for ipMasq: remove the rules of `network` whose attachment
/// (container id, ifname) is not in `valid`, in both backends.
pub fn gc_ipmasq(network: &str, valid: &[(&str, &str)]) -> Result<()> {
    both_backends(
        || iptables::gc(network, valid),
        || nftables::gc(network, valid),
    )
}

/// Run both backends, at once (each is a tool's process or two and neither needs the
/// other); an error counts only if that backend is usable here (probed only after a
/// failure).
fn both_backends(
    ipt: impl FnOnce() -> Result<()> + Send,
    nft: impl FnOnce() -> Result<()> + Send,
) -> Result<()> {
    let (ipt, nft) = std::thread::scope(|s| {
        let nft = sysproc::task::start(s, || counted(nft(), nftables_usable));
        (counted(ipt(), iptables_usable), nft.join())
    });
    FirewallError::collect([ipt, nft].into_iter().filter_map(Result::err).collect())
}
