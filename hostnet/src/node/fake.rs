//! An in-memory [`NodeNet`]: routes (ours and someone else's), local addresses, on-link
//! prefixes, the firewall policy, a log of every change and failures on request.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Mutex;

use ipnetwork::IpNetwork;

use super::{NodeNet, NodeNetError, NodePolicy, PodRoute, libc_errno};

#[derive(Debug, Default)]
pub struct FakeState {
    /// Our routes (protocol ROUTE_PROTO).
    pub ours: BTreeSet<PodRoute>,
    /// Destinations held by routes that are not ours.
    pub foreign: BTreeSet<IpNetwork>,
    /// Connected prefixes: an address in one of them is on-link.
    pub connected: Vec<IpNetwork>,
    pub local: Vec<IpAddr>,
    pub firewall: Option<NodePolicy>,
    pub forwarding: (bool, bool),
    /// One line per change: `add 10.1.0.0/24 via 192.168.0.2`, `firewall`, ...
    pub log: Vec<String>,
    /// Operation names (`add_route`, `apply_firewall`, ...) that fail until removed.
    pub fail: BTreeSet<&'static str>,
}

#[derive(Debug, Default)]
pub struct FakeNodeNet {
    pub state: Mutex<FakeState>,
}

impl FakeNodeNet {
    pub fn new(connected: Vec<IpNetwork>, local: Vec<IpAddr>) -> Self {
        FakeNodeNet {
            state: Mutex::new(FakeState {
                connected,
                local,
                ..FakeState::default()
            }),
        }
    }

    /// Runs `f` on the state (setup and assertions in tests).
    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn op(&self, name: &'static str) -> Result<std::sync::MutexGuard<'_, FakeState>, NodeNetError> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.fail.contains(name) {
            return Err(NodeNetError {
                op: name.to_string(),
                reason: "injected failure".to_string(),
                errno: None,
            });
        }
        Ok(state)
    }
}

fn exists(op: &str) -> NodeNetError {
    NodeNetError {
        op: op.to_string(),
        reason: "File exists".to_string(),
        errno: Some(libc_errno::EEXIST),
    }
}

fn not_found(op: &str) -> NodeNetError {
    NodeNetError {
        op: op.to_string(),
        reason: "No such process".to_string(),
        errno: Some(libc_errno::ESRCH),
    }
}

impl NodeNet for FakeNodeNet {
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError> {
        Ok(self.op("our_routes")?.ours.iter().cloned().collect())
    }

    fn add_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("add_route")?;
        if s.foreign.contains(&route.dst) || s.ours.iter().any(|r| r.dst == route.dst) {
            return Err(exists("add_route"));
        }
        s.ours.insert(route.clone());
        s.log
            .push(format!("add {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn replace_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("replace_route")?;
        s.ours.retain(|r| r.dst != route.dst);
        s.ours.insert(route.clone());
        s.log
            .push(format!("replace {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn del_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("del_route")?;
        if !s.ours.remove(route) {
            return Err(not_found("del_route"));
        }
        s.log
            .push(format!("del {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn on_link(&self, addr: IpAddr) -> Result<bool, NodeNetError> {
        Ok(self
            .op("on_link")?
            .connected
            .iter()
            .any(|n| n.contains(addr)))
    }

    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError> {
        Ok(self.op("local_addrs")?.local.clone())
    }

    fn apply_firewall(&self, policy: &NodePolicy) -> Result<(), NodeNetError> {
        let mut s = self.op("apply_firewall")?;
        s.firewall = Some(policy.clone());
        s.log.push("firewall".to_string());
        Ok(())
    }

    fn firewall_matches(&self, policy: &NodePolicy) -> Result<bool, NodeNetError> {
        Ok(self.op("firewall_matches")?.firewall.as_ref() == Some(policy))
    }

    fn remove_firewall(&self) -> Result<(), NodeNetError> {
        let mut s = self.op("remove_firewall")?;
        if s.firewall.take().is_some() {
            s.log.push("remove firewall".to_string());
        }
        Ok(())
    }

    fn enable_forwarding(&self, v4: bool, v6: bool) -> Result<(), NodeNetError> {
        let mut s = self.op("enable_forwarding")?;
        s.forwarding = (s.forwarding.0 || v4, s.forwarding.1 || v6);
        Ok(())
    }
}
