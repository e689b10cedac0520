//! The verbs against hostnet's recording fake kernel and an IPAM stand-in (`ipam.rs`): ADD's order and rollback
//! after a failure at each step, DEL with each piece missing, CHECK's decisions, GC. No
//! root, no kernel: these run everywhere in milliseconds.

mod add;
mod check;
mod del;
mod ipam;

use crate::error::BridgeError;
use hostnet::kernel::fake::{FakeKernel, HOST};
use ipam::FakeIpam;
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use serde_json::Value;

/// The container's namespace.
const CTR: &str = "/run/netns/ctr";

/// A bridge config with ipMasq and the spoof check on, plus `extra` top-level fields.
fn conf_with(extra: &[(&str, Value)]) -> String {
    let mut conf: Value = serde_json::from_str(
        r#"{"cniVersion":"1.0.0","name":"net","type":"bridge","bridge":"cni0",
            "isGateway":true,"ipMasq":true,"macspoofchk":true,
            "ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}"#,
    )
    .unwrap();
    for (key, value) in extra {
        conf[*key] = value.clone();
    }
    conf.to_string()
}

fn conf() -> String {
    conf_with(&[])
}

/// `conf()` with the ADD result as prevResult (what the runtime sends to DEL and CHECK).
fn conf_prev(result: &CniResult) -> String {
    conf_with(&[("prevResult", result.to_value("1.0.0").unwrap())])
}

fn args(conf: &str) -> CmdArgs {
    CmdArgs {
        container_id: "c1".into(),
        netns: CTR.into(),
        ifname: "eth0".into(),
        args: String::new(),
        path: "/nonexistent".into(),
        stdin_data: conf.as_bytes().to_vec(),
        version: libcni::version::Version(1, 0, 0),
        opened_netns: Default::default(),
    }
}

/// The node the verbs see: the fake kernel (its state, log and failures are the node's,
/// through `Deref`) and the IPAM plugin.
struct Node {
    kernel: FakeKernel,
    ipam: FakeIpam,
}

impl std::ops::Deref for Node {
    type Target = FakeKernel;
    fn deref(&self) -> &FakeKernel {
        &self.kernel
    }
}

impl Node {
    /// ADD, and the result it prints.
    fn add(&self, args: &CmdArgs) -> Result<Added, BridgeError> {
        let json = crate::add::add(&self.kernel, &self.ipam, args)?;
        let result = CniResult::parse_bytes(json.as_bytes(), &args.version.to_string())
            .expect("ADD prints a result of its version");
        Ok(Added { result })
    }
    fn del(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        crate::del::del(&self.kernel, &self.ipam, args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        crate::check::check(&self.kernel, &self.ipam, args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        crate::gc::gc(&self.kernel, &self.ipam, args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        crate::status::status(&self.kernel, &self.ipam, args)
    }
}

/// What ADD printed.
#[derive(Debug)]
struct Added {
    result: CniResult,
}

/// A node with a container namespace and an IPAM handing out 10.1.0.5/24.
fn node() -> Node {
    let result = CniResult::parse_bytes(
        br#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}],
             "routes":[{"dst":"0.0.0.0/0"}]}"#,
        "1.0.0",
    )
    .unwrap();
    let kernel = FakeKernel::new();
    kernel.add_netns(CTR);
    let ipam = FakeIpam::new(&kernel, result);
    Node { kernel, ipam }
}

/// A node after a successful ADD of `c1`/`eth0`, its log emptied.
fn added() -> (Node, CniResult) {
    let k = node();
    let result = k.add(&args(&conf())).expect("ADD").result;
    k.take_log();
    (k, result)
}

/// The host end's name in a result.
fn host_veth(result: &CniResult) -> String {
    result.interfaces[1].name.clone()
}

/// Each of `want` (prefixes) matches an entry of `log`, in this order.
#[track_caller]
fn assert_in_order(log: &[String], want: &[&str]) {
    let mut at = 0;
    for w in want {
        match log[at..].iter().position(|l| l.starts_with(w)) {
            Some(i) => at += i + 1,
            None => panic!("{w:?} not found in order in {log:#?}"),
        }
    }
}

/// Nothing of the attachment is left: no veth either side, no rule, no lease.
#[track_caller]
fn assert_clean(k: &Node) {
    let st = k.state();
    let host: Vec<&str> = st.namespaces[HOST]
        .links
        .iter()
        .filter(|l| l.kind.as_deref() != Some("bridge"))
        .map(|l| l.name.as_str())
        .collect();
    assert!(host.is_empty(), "host links left: {host:?}");
    assert!(st.namespaces.get(CTR).is_none_or(|ns| ns.links.is_empty()));
    assert!(st.rules.is_empty(), "rules left: {:?}", st.rules);
    assert!(!k.ipam.leased(), "the IP is still leased");
}

#[test]
fn gc_removes_invalid_attachments_and_reports_every_failure() {
    let (k, _) = added();
    k.state().rules.insert("ipmasq net c2 eth0".into());
    k.state().rules.insert("spoofcheck c2 eth0".into());
    let gc = |k: &Node| {
        let valid = serde_json::json!([{"containerID": "c1", "ifname": "eth0"}]);
        let conf = conf_with(&[("cni.dev/valid-attachments", valid)]);
        k.gc(&args(&conf))
    };
    gc(&k).unwrap();
    let rules: Vec<String> = k.state().rules.iter().cloned().collect();
    assert_eq!(rules, ["ipmasq net c1 eth0", "spoofcheck c1 eth0"]);
    assert_eq!(k.take_log().last().map(String::as_str), Some("ipam: GC"));

    k.fail("fw: gc ipmasq");
    k.fail("ipam: GC");
    let e = libcni::Error::from(gc(&k).unwrap_err());
    assert_eq!(e.code, 999);
    assert_eq!(
        e.msg,
        "failed to collect masquerade rules: failed to run fw: gc ipmasq net: \
         Operation not permitted (os error 1); fake IPAM GC failure"
    );
    // The step between the two failures ran.
    assert_eq!(k.take_log(), ["fw: gc spoofcheck"]);
}

/// Go's libcni sends an empty list as `null` under both keys (CRI-O on a node with no
/// pod): every attachment's rules go, and GC still reaches the IPAM plugin.
#[test]
fn gc_reads_null_lists_as_empty() {
    for list in [Value::Null, serde_json::json!([])] {
        let (k, _) = added();
        k.state().rules.insert("ipmasq net c2 eth0".into());
        let conf = conf_with(&[
            ("cni.dev/valid-attachments", list.clone()),
            ("cni.dev/attachments", list.clone()),
        ]);
        k.gc(&args(&conf)).unwrap();
        assert!(k.state().rules.is_empty(), "{list}: {:?}", k.state().rules);
        assert_eq!(k.take_log().last().map(String::as_str), Some("ipam: GC"));
    }
}

#[test]
fn status_needs_the_bridge_name_free_or_a_bridge() {
    let k = node();
    k.status(&args(&conf())).unwrap();
    k.add(&args(&conf())).unwrap();
    k.status(&args(&conf())).unwrap();
    // A link that is no bridge holds the name.
    let other = conf_with(&[("bridge", "eth0".into())]);
    let k = node();
    let eth0 = hostnet::netlink::Link {
        name: "eth0".into(),
        ..lo()
    };
    k.state().namespaces.get_mut(HOST).unwrap().links.push(eth0);
    let e = libcni::Error::from(k.status(&args(&other)).unwrap_err());
    assert_eq!(
        (e.code, e.msg.as_str()),
        (50, "\"eth0\" already exists but is not a bridge")
    );
}

fn lo() -> hostnet::netlink::Link {
    hostnet::netlink::Link {
        index: 1,
        name: "lo".into(),
        kind: None,
        mac: None,
        mtu: 65536,
        admin_up: true,
        oper_up: true,
        oper_state: "unknown".into(),
        master: None,
        peer_index: None,
        peer_netns_id: None,
        promisc: false,
        hairpin: None,
        isolated: None,
    }
}
