//! The two sides a scenario runs on, each arranging what it is asked as the kernel would.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::Arrange;
use crate::netlink::{FdbEntry, RouteSpec};
use crate::node::fake::FakeNodeNet;
use crate::node::tests::{Ns, ip, net};
use crate::node::{HostNodeNet, NodeNet, OverlayPeer, PolicyNet, VXLAN_DEVICE, vtep_mac};

/// The fake, arranged as the kernel would be.
pub(super) struct OnFake {
    net: FakeNodeNet,
}

impl OnFake {
    pub(super) fn new() -> OnFake {
        OnFake {
            net: FakeNodeNet::default(),
        }
    }
}

/// The unspecified address of `cidr`'s family.
fn unspecified(cidr: &IpNetwork) -> IpAddr {
    if cidr.is_ipv4() {
        ip("0.0.0.0")
    } else {
        ip("::")
    }
}

impl Arrange for OnFake {
    fn net(&self) -> &dyn NodeNet {
        &self.net
    }

    fn link(&self, _name: &str, addrs: &[&str]) {
        self.net.with(|s| {
            for a in addrs {
                let a = net(a);
                let connected = IpNetwork::new(a.network(), a.prefix()).unwrap();
                s.connected.push(connected);
                s.local.push(a.ip());
            }
        });
    }

    fn foreign_route(&self, dst: &str, _gw: &str, _metric: u32) {
        self.net.with(|s| s.foreign.insert(net(dst)));
    }

    fn delete_vxlan_device(&self) {
        self.net.with(|s| {
            s.vxlan = None;
            s.overlay.clear();
        });
    }

    fn foreign_vxlan(&self, name: &str, vni: u32, port: u16) {
        let device = (name.to_string(), vni, port, false);
        self.net.with(|s| s.other_vxlan.push(device));
    }

    fn drop_fdb(&self, node_ip: IpAddr) {
        self.net.with(|s| {
            let Some(gone) = s.overlay.remove(&node_ip) else {
                return;
            };
            for cidr in gone.pod_cidrs {
                let stray = unspecified(&cidr);
                let p = s
                    .overlay
                    .entry(stray)
                    .or_insert_with(|| OverlayPeer::new(stray, vec![]));
                *p = OverlayPeer::new(stray, [p.pod_cidrs.clone(), vec![cidr]].concat());
            }
        });
    }

    fn drop_overlay_route(&self, cidr: &str) {
        let cidr = net(cidr);
        self.net.with(|s| {
            for p in s.overlay.values_mut() {
                p.pod_cidrs.retain(|c| *c != cidr);
            }
        });
    }

    fn drop_firewall_pod_range(&self, cidr: &str) {
        let cidr = net(cidr);
        self.net.with(|s| {
            if let Some(p) = &mut s.firewall {
                for f in [&mut p.v4, &mut p.v6].into_iter().flatten() {
                    f.pod_cidrs.retain(|c| *c != cidr);
                }
            }
        });
    }

    fn drop_firewall_table(&self) {
        self.net.with(|s| s.firewall = None);
    }

    fn policy(&self) -> &dyn PolicyNet {
        &self.net
    }

    fn udp_flow(&self, from: &str, to: &str) {
        use netpol::conntrack::{CtEntry, L4, Tuple};
        let (from, to): (std::net::SocketAddr, std::net::SocketAddr) =
            (from.parse().unwrap(), to.parse().unwrap());
        let t = |a: std::net::SocketAddr, b: std::net::SocketAddr| Tuple {
            src: a.ip(),
            dst: b.ip(),
            proto: 17,
            l4: L4::Ports {
                src: a.port(),
                dst: b.port(),
            },
        };
        self.net.with(|s| {
            let id = u32::try_from(s.conntrack.len()).unwrap() + 1;
            s.conntrack.push(CtEntry {
                orig: t(from, to),
                reply: t(to, from),
                zone: 0,
                id: Some(id),
            });
        });
    }

    fn nft_usable(&self, _test: &str) -> bool {
        true
    }
}

/// The kernel: a namespace of the test's own; each link a veth whose far end is in a
/// second namespace (this kernel may lack the dummy module).
pub(super) struct OnKernel {
    ns: Ns,
    far: Ns,
    net: HostNodeNet,
}

impl OnKernel {
    pub(super) fn new() -> OnKernel {
        let ns = Ns::new();
        let net = ns.node();
        OnKernel {
            ns,
            far: Ns::new(),
            net,
        }
    }

    fn vxlan_index(&self) -> u32 {
        let link = self.ns.nl.link_by_name(VXLAN_DEVICE).unwrap();
        link.expect("our device").index
    }
}

impl Arrange for OnKernel {
    fn net(&self) -> &dyn NodeNet {
        &self.net
    }

    fn link(&self, name: &str, addrs: &[&str]) {
        self.ns.link(name, addrs, &self.far, name, &[]);
    }

    fn foreign_route(&self, dst: &str, gw: &str, metric: u32) {
        self.ns
            .nl
            .add_route(&RouteSpec {
                dst: net(dst),
                gateway: Some(ip(gw)),
                oif: None,
                priority: Some(metric),
                table: None,
                scope: None,
            })
            .unwrap();
    }

    fn delete_vxlan_device(&self) {
        self.ns.nl.delete_link(self.vxlan_index()).unwrap();
    }

    fn foreign_vxlan(&self, name: &str, vni: u32, port: u16) {
        let (vni, port) = (vni.to_string(), port.to_string());
        let args = [
            "link", "add", name, "type", "vxlan", "id", &vni, "dstport", &port,
        ];
        self.ns.sh(
            "ip",
            &[&args[..], &["local", "192.168.50.1", "nolearning"]].concat(),
        );
    }

    fn drop_fdb(&self, node_ip: IpAddr) {
        let entry = FdbEntry {
            mac: vtep_mac(node_ip),
            dst: node_ip,
        };
        self.ns.nl.del_fdb(self.vxlan_index(), &entry).unwrap();
    }

    fn drop_overlay_route(&self, cidr: &str) {
        self.ns
            .sh("ip", &["route", "del", cidr, "dev", VXLAN_DEVICE]);
    }

    fn drop_firewall_pod_range(&self, cidr: &str) {
        let set = if net(cidr).is_ipv4() {
            "pods4"
        } else {
            "pods6"
        };
        let elem = format!("{{ {cidr} }}");
        self.ns.sh(
            "nft",
            &["delete", "element", "inet", "cni-rs", set, elem.as_str()],
        );
    }

    fn drop_firewall_table(&self) {
        self.ns.sh("nft", &["delete", "table", "inet", "cni-rs"]);
    }

    fn policy(&self) -> &dyn PolicyNet {
        &self.net
    }

    fn udp_flow(&self, from: &str, to: &str) {
        self.ns
            .ns
            .run(|| {
                let s = std::net::UdpSocket::bind(from).unwrap();
                s.send_to(b"x", to).unwrap();
            })
            .unwrap();
    }

    fn nft_usable(&self, test: &str) -> bool {
        testkit::available(
            test,
            "nft (apt-get install nftables)",
            self.ns.run("nft", &["--version"]).is_some(),
        )
    }
}
