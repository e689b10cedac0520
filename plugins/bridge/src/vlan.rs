//! VLAN membership of a bridge port: which entries a config asks for. This kernel has no
//! bridge `vlan_filtering`, so the plan is unit-tested and the messages are tested in
//! hostnet at the byte level; applying them needs a kernel that supports it.

use crate::config::BridgeConf;
use hostnet::kernel::Links;
use hostnet::netlink::NetlinkError;

/// The bridge's default VLAN, which every new port gets as PVID.
const DEFAULT_VLAN: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlanOp {
    Del(u16),
    Add {
        vid: u16,
        pvid: bool,
        untagged: bool,
    },
}

/// The reference's order: drop the default VLAN unless preserved, the access VLAN as
/// PVID untagged, each trunk VLAN tagged, and VLAN 1 as native when trunking without one.
pub fn port_plan(conf: &BridgeConf) -> Vec<VlanOp> {
    let mut ops = Vec::new();
    if !conf.vlan_filtering() {
        return ops;
    }
    if !conf.preserve_default_vlan {
        ops.push(VlanOp::Del(DEFAULT_VLAN));
    }
    if conf.vlan != 0 {
        ops.push(VlanOp::Add {
            vid: conf.vlan,
            pvid: true,
            untagged: true,
        });
    }
    for &vid in &conf.vlan_trunk {
        ops.push(VlanOp::Add {
            vid,
            pvid: false,
            untagged: false,
        });
    }
    if conf.vlan == 0 && !conf.vlan_trunk.is_empty() {
        ops.push(VlanOp::Add {
            vid: DEFAULT_VLAN,
            pvid: true,
            untagged: true,
        });
    }
    ops
}

/// Applies [`port_plan`] to the port `index`. Removing an absent default VLAN is fine.
pub fn configure_port(nl: &dyn Links, index: u32, conf: &BridgeConf) -> Result<(), NetlinkError> {
    for op in port_plan(conf) {
        match op {
            VlanOp::Del(vid) => match nl.bridge_vlan_del(index, vid) {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            },
            VlanOp::Add {
                vid,
                pvid,
                untagged,
            } => nl.bridge_vlan_add(index, vid, pvid, untagged)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use VlanOp::*;

    fn plan(json: &str) -> Vec<VlanOp> {
        port_plan(&BridgeConf::load(json.as_bytes(), "").unwrap())
    }

    #[test]
    fn no_vlan_no_ops() {
        assert!(plan(r#"{"name":"n"}"#).is_empty());
    }

    #[test]
    fn access_vlan() {
        assert_eq!(
            plan(r#"{"name":"n","vlan":100}"#),
            vec![
                Del(1),
                Add {
                    vid: 100,
                    pvid: true,
                    untagged: true
                }
            ]
        );
        assert_eq!(
            plan(r#"{"name":"n","vlan":100,"preserveDefaultVlan":true}"#),
            vec![Add {
                vid: 100,
                pvid: true,
                untagged: true
            }]
        );
    }

    #[test]
    fn trunk_with_native_vlan() {
        assert_eq!(
            plan(r#"{"name":"n","vlanTrunk":[{"id":101},{"minID":200,"maxID":201}]}"#),
            vec![
                Del(1),
                Add {
                    vid: 101,
                    pvid: false,
                    untagged: false
                },
                Add {
                    vid: 200,
                    pvid: false,
                    untagged: false
                },
                Add {
                    vid: 201,
                    pvid: false,
                    untagged: false
                },
                Add {
                    vid: 1,
                    pvid: true,
                    untagged: true
                },
            ]
        );
    }

    #[test]
    fn access_plus_trunk() {
        assert_eq!(
            plan(r#"{"name":"n","vlan":100,"vlanTrunk":[{"id":101}],"preserveDefaultVlan":true}"#),
            vec![
                Add {
                    vid: 100,
                    pvid: true,
                    untagged: true
                },
                Add {
                    vid: 101,
                    pvid: false,
                    untagged: false
                }
            ]
        );
    }
}
