//! Command line: every setting is a flag and an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ipnetwork::IpNetwork;

/// How pod traffic reaches another node (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Mode {
    /// Direct routes only (`podCIDR via InternalIP`); a peer that is not on-link gets a
    /// warning and no route.
    HostGw,
    /// Every peer through the VXLAN overlay.
    Vxlan,
    /// A direct route to each on-link peer, the overlay for the others.
    #[default]
    Auto,
}

/// The firewall tool portmap uses for hostPorts (`--portmap-backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PortmapBackend {
    Iptables,
    Nftables,
}

impl PortmapBackend {
    /// The value of portmap's `backend` config field.
    pub fn as_str(self) -> &'static str {
        match self {
            PortmapBackend::Iptables => "iptables",
            PortmapBackend::Nftables => "nftables",
        }
    }
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "cni-rs-agent",
    version,
    about = "The cni-rs node agent: installs the plugins and routes between the nodes' pods.",
    long_about = "The cni-rs node agent: installs the plugins and routes between the nodes' pods.\n\n\
        Copies every binary of --source-dir into --bin-dir (atomically, unchanged files \
        skipped) and writes a bridge + host-local conflist for this node's spec.podCIDRs into \
        --conf-dir (never inventing a subnet: a node without a podCIDR is waited for). \
        Without --once or --uninstall it stays running as the node agent: it lists and \
        watches every Node and keeps, in the host's main table, one route per other node \
        and pod range via that node's InternalIP (route protocol 0xcb), the node-level \
        masquerade and forwarding rules (nf_tables table of its own) and IP forwarding on; \
        with --mode auto (the default) the peers that are not on-link, with --mode vxlan \
        every peer, are reached through one VXLAN device (cni-rs.vxlan) instead; \
        it frees host-local leases left from before the last reboot and serves /readyz, \
        /healthz and /metrics on --health-listen. SIGTERM exits cleanly, leaving everything \
        in place. Logs one line per action on stderr."
)]
pub struct Args {
    /// One pass, then exit: 0 when the node's files are in place, non-zero with the reason.
    #[arg(long, env = "CNI_RS_ONCE", conflicts_with = "uninstall")]
    pub once: bool,

    /// Remove our conflist, our binaries (those still identical to --source-dir's), our
    /// routes (protocol 0xcb), our VXLAN device and our firewall table, then exit.
    #[arg(long, env = "CNI_RS_UNINSTALL")]
    pub uninstall: bool,

    /// Binaries to install (every regular file in it).
    #[arg(long, env = "CNI_RS_SOURCE_DIR", default_value = "/opt/cni-rs/bin")]
    pub source_dir: PathBuf,

    /// The host's CNI bin dir, as mounted in this container.
    #[arg(long, env = "CNI_RS_BIN_DIR", default_value = "/host/opt/cni/bin")]
    pub bin_dir: PathBuf,

    /// The host's CNI conf dir, as mounted in this container.
    #[arg(long, env = "CNI_RS_CONF_DIR", default_value = "/host/etc/cni/net.d")]
    pub conf_dir: PathBuf,

    /// File name of our conflist in --conf-dir.
    #[arg(long, env = "CNI_RS_CONF_NAME", default_value = "10-cni-rs.conflist", value_parser = parse_conf_name)]
    pub conf_name: String,

    /// This node's name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// API server URL [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT].
    #[arg(long, env = "CNI_RS_API_SERVER")]
    pub api_server: Option<String>,

    /// Bearer token file (re-read for every request: kubelet rotates it).
    #[arg(
        long,
        env = "CNI_RS_TOKEN_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub token_file: PathBuf,

    /// CA bundle the API server's certificate must chain to.
    #[arg(
        long,
        env = "CNI_RS_CA_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub ca_file: PathBuf,

    /// cniVersion of the conflist (containerd 1.6's libcni speaks up to 1.0.0).
    #[arg(long, env = "CNI_RS_CNI_VERSION", default_value = "1.0.0",
          value_parser = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])]
    pub cni_version: String,

    /// Name of the bridge the pods attach to.
    #[arg(long, env = "CNI_RS_BRIDGE", default_value = "cni0", value_parser = parse_ifname)]
    pub bridge: String,

    /// MTU of the bridge and pod interfaces [default: the MTU of the host's default-route interface].
    #[arg(long, env = "CNI_RS_MTU", value_parser = clap::value_parser!(u32).range(68..=65535))]
    pub mtu: Option<u32>,

    /// Seconds between two checks of this node's own state (files, routes, rules) when
    /// nothing changed; the API server is watched, never polled.
    #[arg(long, env = "CNI_RS_INTERVAL", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: u64,

    /// The cluster's pod range (one per family, repeatable or comma-separated): a Node's
    /// podCIDR outside it is refused [default: no such check].
    #[arg(long, env = "CNI_RS_CLUSTER_CIDR", value_delimiter = ',', value_parser = parse_cidr)]
    pub cluster_cidr: Vec<IpNetwork>,

    /// A destination never masqueraded besides every node's podCIDRs (repeatable or
    /// comma-separated), e.g. the Service range or a network of the nodes.
    #[arg(long, env = "CNI_RS_NO_MASQUERADE_CIDR", value_delimiter = ',', value_parser = parse_cidr)]
    pub no_masquerade_cidr: Vec<IpNetwork>,

    /// Address of /readyz, /healthz and /metrics: loopback or the node's IP, never 0.0.0.0.
    #[arg(long, env = "CNI_RS_HEALTH_LISTEN", default_value = "127.0.0.1:9277", value_parser = parse_listen)]
    pub health_listen: SocketAddr,

    /// Only the files: no routes, no firewall table, no forwarding; the conflist's bridge
    /// then masquerades per pod (ipMasq), as when the cluster routes pod ranges another way
    /// (cloud routes).
    #[arg(long, env = "CNI_RS_FILES_ONLY")]
    pub files_only: bool,

    /// Enforce Kubernetes NetworkPolicy on this node (watches Pods, Namespaces and
    /// NetworkPolicies cluster-wide; table `inet cni-rs-netpol`). `false`: policies are
    /// not enforced and the table is removed.
    #[arg(
        long,
        env = "CNI_RS_NETWORK_POLICY",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub network_policy: bool,

    /// The firewall portmap writes hostPort rules with (its `backend` field): iptables or
    /// nftables. Unset, portmap picks for itself (iptables when it works, else nftables), as
    /// the Go portmap does; nft-only nodes may want nftables set outright.
    #[arg(long, env = "CNI_RS_PORTMAP_BACKEND", value_enum)]
    pub portmap_backend: Option<PortmapBackend>,

    /// How pods reach other nodes: host-gw (direct routes: every node on one L2 segment),
    /// vxlan (every peer through the VXLAN overlay), auto (a direct route to each on-link
    /// peer, the overlay for the others).
    #[arg(long, env = "CNI_RS_MODE", value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,

    /// VXLAN network identifier of the overlay; the same on every node. Not flannel's 1:
    /// the kernel allows one device per VNI and port, and a node migrated from flannel may
    /// still hold `flannel.1` (203 is 0xcb, the mark of our routes).
    #[arg(long, env = "CNI_RS_VXLAN_VNI", default_value_t = 203,
          value_parser = clap::value_parser!(u32).range(1..=16_777_215))]
    pub vxlan_vni: u32,

    /// UDP port of the overlay: IANA's VXLAN port, not flannel's 8472 (Linux's default);
    /// the same on every node, open between the nodes.
    #[arg(long, env = "CNI_RS_VXLAN_PORT", default_value_t = 4789,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub vxlan_port: u16,

    /// host-local's dataDir, as mounted in this container (lease cleanup after a reboot).
    #[arg(
        long,
        env = "CNI_RS_IPAM_DATA_DIR",
        default_value = "/host/var/lib/cni/networks"
    )]
    pub ipam_data_dir: PathBuf,

    /// Where the host's sysctls are, as mounted in this container: its own /proc/sys is
    /// read-only, so the DaemonSet binds the node's /proc/sys/net under /host/proc/sys.
    #[arg(long, env = "CNI_RS_SYSCTL_DIR", default_value = "/proc/sys")]
    pub sysctl_dir: PathBuf,

    /// Seconds --once waits for the node to get a podCIDR (and for the API server to answer).
    #[arg(long, env = "CNI_RS_WAIT", default_value_t = 300)]
    pub wait: u64,
}

impl Args {
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval)
    }

    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.wait)
    }

    /// --api-server, or the in-cluster service address (an IPv6 host in brackets).
    pub fn api_server(&self) -> Result<String, String> {
        if let Some(url) = &self.api_server {
            return Ok(url.trim_end_matches('/').to_string());
        }
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    format!("--api-server not given and {name} is not set (not running in a pod?)")
                })
        };
        Ok(in_cluster_url(
            &var("KUBERNETES_SERVICE_HOST")?,
            &var("KUBERNETES_SERVICE_PORT")?,
        ))
    }

    pub fn node_name(&self) -> Result<&str, String> {
        let name = self
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                "--node-name / NODE_NAME is not set: give the pod NODE_NAME from the \
             downward API (fieldRef spec.nodeName)"
                    .to_string()
            })?;
        // A DNS subdomain, as Kubernetes requires; it goes into the request path.
        let valid = name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return Err(format!(
                "--node-name {name:?} is not a Kubernetes node name"
            ));
        }
        Ok(name)
    }
}

fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    crate::kube::podcidr::parse_network(s).map_err(|why| format!("{s:?} {why}"))
}

/// The health endpoint's address: not a wildcard (it would serve every interface).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s
        .parse()
        .map_err(|e| format!("{s:?} is not ADDRESS:PORT: {e}"))?;
    if addr.ip().is_unspecified() {
        return Err(
            "a wildcard address would serve every interface: give loopback or the node's IP".into(),
        );
    }
    Ok(addr)
}

/// A file name ending in `.conflist` (libcni reads other extensions as a single config).
fn parse_conf_name(name: &str) -> Result<String, String> {
    if name.contains('/')
        || name.starts_with('.')
        || !name.ends_with(".conflist")
        || name == ".conflist"
    {
        return Err("a file name ending in .conflist, without '/' or a leading '.'".into());
    }
    Ok(name.to_string())
}

/// A Linux interface name: 1 to 15 bytes, no '/', ':' or whitespace.
fn parse_ifname(name: &str) -> Result<String, String> {
    let bad = |c: char| c == '/' || c == ':' || c.is_whitespace();
    if name.is_empty() || name.len() > 15 || name.contains(bad) || name == "." || name == ".." {
        return Err("not a Linux interface name (1-15 bytes, no '/', ':' or spaces)".into());
    }
    Ok(name.to_string())
}

fn in_cluster_url(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_url_brackets_ipv6_hosts() {
        assert_eq!(in_cluster_url("10.96.0.1", "443"), "https://10.96.0.1:443");
        assert_eq!(in_cluster_url("fd00::1", "6443"), "https://[fd00::1]:6443");
        assert_eq!(in_cluster_url("[fd00::1]", "443"), "https://[fd00::1]:443");
    }

    #[test]
    fn defaults_are_the_service_account_files() {
        let args = Args::try_parse_from(["cni-rs-agent"]).unwrap();
        assert_eq!(
            args.token_file,
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/token")
        );
        assert_eq!(
            args.ca_file,
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
        );
        assert_eq!(args.conf_name, "10-cni-rs.conflist");
        assert_eq!(args.cni_version, "1.0.0");
        assert_eq!(
            (args.mode, args.vxlan_vni, args.vxlan_port),
            (Mode::Auto, 203, 4789),
            "not flannel's VNI 1 and port 8472"
        );
        let args = Args::try_parse_from(["cni-rs-agent", "--mode", "host-gw"]).unwrap();
        assert_eq!(args.mode, Mode::HostGw);
    }

    #[test]
    fn bad_bridge_name_or_cni_version_is_refused() {
        for args in [
            &["--bridge", "a-bridge-name-too-long"][..],
            &["--bridge", "br/0"],
            &["--bridge", ""],
            &["--cni-version", "2.0.0"],
            &["--conf-name", "10-x.conf"],
            &["--conf-name", "../10-x.conflist"],
            &["--mtu", "0"],
            &["--interval", "0"],
            &["--cluster-cidr", "10.0.0.1/8"],
            &["--cluster-cidr", "10.0.0.0/255.0.0.0"],
            &["--cluster-cidr", "10.0.0.0"],
            &["--no-masquerade-cidr", "nonsense"],
            &["--health-listen", "0.0.0.0:9277"],
            &["--mode", "bgp"],
            &["--vxlan-vni", "0"],
            &["--vxlan-vni", "16777216"],
            &["--vxlan-port", "0"],
        ] {
            let err = Args::try_parse_from(["cni-rs-agent"].iter().chain(args)).unwrap_err();
            assert!(err.to_string().contains(args[0]), "{args:?}: {err}");
        }
    }

    #[test]
    fn repeatable_cidrs() {
        let args = Args::try_parse_from([
            "cni-rs-agent",
            "--no-masquerade-cidr",
            "10.96.0.0/12,fd00:96::/108",
            "--no-masquerade-cidr",
            "192.168.0.0/16",
        ])
        .unwrap();
        assert_eq!(args.no_masquerade_cidr.len(), 3);
        assert!(args.cluster_cidr.is_empty());
    }

    #[test]
    fn once_and_uninstall_exclude_each_other() {
        assert!(Args::try_parse_from(["cni-rs-agent", "--once", "--uninstall"]).is_err());
    }

    #[test]
    fn command_is_well_formed() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }
}
