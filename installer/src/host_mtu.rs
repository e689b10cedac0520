//! The MTU of the host's default-route interface (the conflist's default MTU).
//!
//! With `hostNetwork: true` this container's /proc/net and /sys/class/net are the host's.

use std::path::Path;

/// MTU of the interface holding the IPv4 default route, else the IPv6 one; None when the
/// host has no default route (the bridge plugin then uses its own default).
pub fn default_route_mtu(proc_net: &Path, sys_class_net: &Path) -> Option<u32> {
    let v4 = std::fs::read_to_string(proc_net.join("route")).unwrap_or_default();
    let v6 = std::fs::read_to_string(proc_net.join("ipv6_route")).unwrap_or_default();
    let ifname = default_v4_ifname(&v4).or_else(|| default_v6_ifname(&v6))?;
    std::fs::read_to_string(sys_class_net.join(ifname).join("mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// /proc/net/route: `Iface Destination Gateway Flags RefCnt Use Metric Mask ...` in hex;
/// the default route has destination and mask 0, the lowest metric wins.
fn default_v4_ifname(table: &str) -> Option<&str> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let up = u32::from_str_radix(f.get(3)?, 16).ok()? & 1 != 0;
            (up && f[1] == "00000000" && *f.get(7)? == "00000000")
                .then(|| Some((f.get(6)?.parse::<u32>().ok()?, f[0])))
                .flatten()
        })
        .min()
        .map(|(_, ifname)| ifname)
}

/// /proc/net/ipv6_route: `dst dst_len src src_len nexthop metric refcnt use flags ifname`;
/// the default route is ::/0 (not the `lo` unreachable entry), the lowest metric wins.
fn default_v6_ifname(table: &str) -> Option<&str> {
    table
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ifname = *f.get(9)?;
            (f[0].bytes().all(|b| b == b'0') && f[1] == "00" && ifname != "lo")
                .then(|| Some((u32::from_str_radix(f[5], 16).ok()?, ifname)))
                .flatten()
        })
        .min()
        .map(|(_, ifname)| ifname)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_lowest_metric_default_route() {
        let v4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  wlan0\t00000000\t0102A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
                  eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                  eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_v4_ifname(v4), Some("eth0"));
        assert_eq!(default_v4_ifname("Iface\tDestination\n"), None);
    }

    #[test]
    fn ipv6_default_route_skips_the_lo_unreachable_entry() {
        let v6 = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth1\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth1\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n";
        assert_eq!(default_v6_ifname(v6), Some("eth1"));
    }

    #[test]
    fn reads_the_interface_mtu() {
        let dir = testkit::TempDir::new("cni-install-mtu");
        std::fs::create_dir_all(dir.join("net")).unwrap();
        std::fs::create_dir_all(dir.join("sys/ens3")).unwrap();
        std::fs::write(
            dir.join("net/route"),
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
             ens3\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\n",
        )
        .unwrap();
        std::fs::write(dir.join("sys/ens3/mtu"), "8951\n").unwrap();
        assert_eq!(
            default_route_mtu(&dir.join("net"), &dir.join("sys")),
            Some(8951)
        );
        assert_eq!(default_route_mtu(&dir.join("none"), &dir.join("sys")), None);
    }
}
