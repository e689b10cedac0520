//! The node's conflist: `bridge` with `host-local` on the node's own pod ranges, then
//! `portmap` for hostPorts.

use ipnetwork::IpNetwork;
use libcni::runtime::NetworkConfigList;
use libcni::types::{IpamConf, NetConf};
use serde_json::{Map, Value, json};

/// The network name runtimes see (results cache, host-local store dir).
pub const NETWORK_NAME: &str = "cni-rs";

pub struct Settings<'a> {
    pub cni_version: &'a str,
    pub bridge: &'a str,
    /// None: the bridge plugin's own default.
    pub mtu: Option<u32>,
    /// The bridge masquerades per pod: only when the agent does not (`--files-only`).
    pub ip_masq: bool,
    /// portmap's `backend` (None: portmap's own choice).
    pub portmap_backend: Option<&'a str>,
}

/// The conflist for `pod_cidrs` (one or two ranges, never empty), as written to disk.
///
/// Built from libcni's config types (the fields every plugin parses) and checked by
/// libcni's own loader before it is returned, so a runtime's libcni reads what we wrote.
/// The bridge masquerades nothing (`ipMasq: false`) unless asked: the agent masquerades at
/// the node, so pod-to-pod traffic between nodes keeps its source address.
pub fn render(settings: &Settings, pod_cidrs: &[IpNetwork]) -> Result<String, String> {
    if pod_cidrs.is_empty() {
        return Err("no podCIDRs to render a conflist for".into());
    }
    let ranges: Vec<_> = pod_cidrs
        .iter()
        .map(|net| json!([{ "subnet": net.to_string() }]))
        .collect();
    let routes: Vec<_> = pod_cidrs
        .iter()
        .map(|net| json!({ "dst": if net.is_ipv4() { "0.0.0.0/0" } else { "::/0" } }))
        .collect();
    let mut bridge = plugin("bridge")?;
    bridge.insert("bridge".into(), json!(settings.bridge));
    bridge.insert("isGateway".into(), json!(true));
    bridge.insert("ipMasq".into(), json!(settings.ip_masq));
    // A pod reaching itself through a Service comes back on its own port.
    bridge.insert("hairpinMode".into(), json!(true));
    if let Some(mtu) = settings.mtu {
        bridge.insert("mtu".into(), json!(mtu));
    }
    let mut ipam = serde_json::to_value(IpamConf {
        plugin_type: "host-local".into(),
    })
    .map_err(|e| e.to_string())?;
    ipam["ranges"] = json!(ranges);
    ipam["routes"] = json!(routes);
    bridge.insert("ipam".into(), ipam);
    // The chain: the bridge, then portmap for the pods' hostPorts (the runtime passes the
    // CRI's port mappings only to a plugin that declares the capability).
    let mut portmap = plugin("portmap")?;
    portmap.insert("capabilities".into(), json!({ "portMappings": true }));
    if let Some(backend) = settings.portmap_backend {
        portmap.insert("backend".into(), json!(backend));
    }
    let plugins = vec![Value::Object(bridge), Value::Object(portmap)];
    let conf = json!({
        "cniVersion": settings.cni_version,
        "name": NETWORK_NAME,
        "plugins": plugins,
    });
    let mut text = serde_json::to_string_pretty(&conf).map_err(|e| e.to_string())?;
    text.push('\n');
    let list = NetworkConfigList::from_bytes(text.as_bytes())
        .map_err(|e| format!("libcni refuses the conflist we rendered: {e}"))?;
    // What a plugin gets on stdin: its object with the list's name and version.
    for p in &list.plugins {
        let mut stdin = p.raw.clone();
        stdin.insert("name".into(), json!(list.name));
        stdin.insert("cniVersion".into(), json!(list.cni_version));
        let bytes = serde_json::to_vec(&stdin).map_err(|e| e.to_string())?;
        NetConf::parse(&bytes).map_err(|e| {
            format!(
                "plugin {} refuses its config: {}",
                p.network.plugin_type, e.msg
            )
        })?;
    }
    Ok(text)
}

/// A plugin entry with the fields libcni's `NetConf` has (the list's name and version are
/// the list's, not repeated per plugin).
fn plugin(kind: &str) -> Result<Map<String, Value>, String> {
    let conf = NetConf {
        plugin_type: kind.into(),
        ..NetConf::default()
    };
    match serde_json::to_value(conf).map_err(|e| e.to_string())? {
        Value::Object(m) => Ok(m),
        _ => Err("NetConf is not an object".into()),
    }
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
                ip_masq: false,
                portmap_backend: None,
            },
            &nets(&["10.244.1.0/24", "fd00:10:244:1::/64"]),
        )
        .unwrap();
        let want = json!({
            "cniVersion": "1.0.0",
            "name": "cni-rs",
            "plugins": [{
                "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
                "hairpinMode": true, "mtu": 1450,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:10:244:1::/64"}]],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
                }
            }, {
                "type": "portmap", "capabilities": {"portMappings": true}
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
                ip_masq: true,
                portmap_backend: Some("nftables"),
            },
            &nets(&["fd00:1::/64"]),
        )
        .unwrap();
        let conf: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(conf["cniVersion"], "0.4.0");
        let bridge = &conf["plugins"][0];
        assert_eq!(
            conf["plugins"][1],
            json!({"type": "portmap", "capabilities": {"portMappings": true}, "backend": "nftables"}),
            "portmap chained after the bridge, with the backend asked for"
        );
        assert_eq!(bridge["bridge"], "br9");
        assert_eq!(bridge["ipMasq"], true);
        assert!(bridge.get("mtu").is_none());
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "fd00:1::/64"}]])
        );
        assert_eq!(bridge["ipam"]["routes"], json!([{"dst": "::/0"}]));
    }
}

#[test]
fn no_range_is_an_error_not_a_panic() {
    let settings = Settings {
        cni_version: "1.0.0",
        bridge: "cni0",
        mtu: None,
        ip_masq: false,
        portmap_backend: None,
    };
    assert!(render(&settings, &[]).is_err());
}
