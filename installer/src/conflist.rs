//! The node's conflist: `bridge` with `host-local` on the node's own pod ranges.

use ipnetwork::IpNetwork;
use serde_json::json;

/// The network name runtimes see (results cache, host-local store dir).
pub const NETWORK_NAME: &str = "cni-rs";

pub struct Settings<'a> {
    pub cni_version: &'a str,
    pub bridge: &'a str,
    /// None: the bridge plugin's own default.
    pub mtu: Option<u32>,
}

/// The conflist for `pod_cidrs` (one or two ranges, never empty), as written to disk.
pub fn render(settings: &Settings, pod_cidrs: &[IpNetwork]) -> String {
    assert!(!pod_cidrs.is_empty(), "render needs the node's podCIDRs");
    let ranges: Vec<_> = pod_cidrs
        .iter()
        .map(|net| json!([{ "subnet": net.to_string() }]))
        .collect();
    let routes: Vec<_> = pod_cidrs
        .iter()
        .map(|net| json!({ "dst": if net.is_ipv4() { "0.0.0.0/0" } else { "::/0" } }))
        .collect();
    let mut bridge = json!({
        "type": "bridge",
        "bridge": settings.bridge,
        "isGateway": true,
        "ipMasq": true,
        // A pod reaching itself through a Service comes back on its own port.
        "hairpinMode": true,
    });
    if let Some(mtu) = settings.mtu {
        bridge["mtu"] = json!(mtu);
    }
    bridge["ipam"] = json!({ "type": "host-local", "ranges": ranges, "routes": routes });
    let conf = json!({
        "cniVersion": settings.cni_version,
        "name": NETWORK_NAME,
        "plugins": [bridge],
    });
    let mut text = serde_json::to_string_pretty(&conf).expect("JSON values serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(cidrs: &[&str]) -> Vec<IpNetwork> {
        cidrs.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn dual_stack_gets_a_range_set_and_default_route_per_family() {
        let text = render(
            &Settings {
                cni_version: "1.0.0",
                bridge: "cni0",
                mtu: Some(1450),
            },
            &nets(&["10.244.1.0/24", "fd00:10:244:1::/64"]),
        );
        let want = json!({
            "cniVersion": "1.0.0",
            "name": "cni-rs",
            "plugins": [{
                "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                "hairpinMode": true, "mtu": 1450,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:10:244:1::/64"}]],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
                }
            }]
        });
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            want
        );
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn single_family_and_no_mtu() {
        let text = render(
            &Settings {
                cni_version: "0.4.0",
                bridge: "br9",
                mtu: None,
            },
            &nets(&["fd00:1::/64"]),
        );
        let conf: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(conf["cniVersion"], "0.4.0");
        let bridge = &conf["plugins"][0];
        assert_eq!(bridge["bridge"], "br9");
        assert!(bridge.get("mtu").is_none());
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "fd00:1::/64"}]])
        );
        assert_eq!(bridge["ipam"]["routes"], json!([{"dst": "::/0"}]));
    }
}
