//! NetworkPolicy through the whole agent, on the fake kernel (no root): the watches of
//! Pods, Namespaces and NetworkPolicies on the stub API server, the engine, the table in
//! the kernel, readiness. The table the agent leaves in the (fake) kernel is compared with
//! `netpol::compile` of the objects the stub serves, and packets are run through it.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cni_rs_agent::control::{agent, run};
use cni_rs_agent::kube::watcher::Shared;
use cni_rs_agent::policy::PolicyKernel;
use cni_rs_agent::serve::Metrics;
use hostnet::node::fake::FakeNodeNet;
use hostnet::node::{NodeNet, PolicyNet};
use netpol::eval::Packet;
use serde_json::{Value, json};
use support::apiserver::ObjectKind;
use support::{NODE, Node, StopOnDrop, args_with, eventually};

const TCP: u8 = 6;

fn fake() -> FakeNodeNet {
    FakeNodeNet::new(
        vec!["172.18.0.0/24".parse().unwrap()],
        vec!["172.18.0.2".parse().unwrap()],
    )
}

/// The agent on `net` (routes) and `policy` (its NetworkPolicy kernel) while `test` runs.
fn with_agent(
    node: &Node,
    net: &FakeNodeNet,
    policy: &Arc<FakeNodeNet>,
    test: impl FnOnce(&Metrics),
) {
    with_agent_writing_to(node, net, policy, Box::new(policy.clone()), test)
}

/// `with_agent`, its table written through `writes` (over `policy`).
fn with_agent_writing_to(
    node: &Node,
    net: &FakeNodeNet,
    policy: &Arc<FakeNodeNet>,
    writes: Box<dyn PolicyNet + Send>,
    test: impl FnOnce(&Metrics),
) {
    let args = args_with(node, &["--mtu=1400"]);
    let installer = cni_rs_agent::files::Installer::new(&args).unwrap();
    let client = run::client(&args).unwrap();
    let shared = Arc::new(Shared::default());
    let metrics = Arc::new(Metrics::default());
    std::thread::scope(|s| {
        let agent = {
            let (shared, metrics, args, installer) =
                (shared.clone(), metrics.clone(), &args, &installer);
            let (addrs, dumper) = (policy.clone(), policy.clone());
            let policy = PolicyKernel {
                net: writes,
                local_addrs: Box::new(move || addrs.local_addrs()),
                conntrack: Arc::new(move || dumper.conntrack()),
            };
            s.spawn(move || {
                agent::run(
                    args,
                    installer,
                    client,
                    Some(net as &dyn NodeNet),
                    Some(policy),
                    shared,
                    metrics,
                )
            })
        };
        let stop = StopOnDrop(shared.clone());
        test(&metrics);
        drop(stop);
        agent.join().unwrap().unwrap();
    });
}

fn namespace(name: &str) -> Value {
    json!({ "metadata": { "name": name, "labels": { "ns": name } } })
}

fn pod(ns: &str, name: &str, node: &str, ip: &str, label: &str) -> Value {
    json!({
        "metadata": { "name": name, "namespace": ns, "labels": { "pod": label } },
        "spec": { "nodeName": node, "containers": [{ "name": "c", "ports": [
            { "name": "serve-80", "containerPort": 80, "protocol": "TCP" }] }] },
        "status": { "phase": "Running", "podIPs": [{ "ip": ip }] }
    })
}

fn policy(ns: &str, name: &str, spec: Value) -> Value {
    json!({ "metadata": { "name": name, "namespace": ns }, "spec": spec })
}

/// The objects the stub serves, as the test put them.
#[derive(Default)]
struct World {
    namespaces: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
    policies: BTreeMap<String, Value>,
}

impl World {
    fn of(&mut self, kind: ObjectKind) -> &mut BTreeMap<String, Value> {
        match kind {
            ObjectKind::Pod => &mut self.pods,
            ObjectKind::Namespace => &mut self.namespaces,
            ObjectKind::NetworkPolicy => &mut self.policies,
        }
    }

    fn put(&mut self, node: &Node, kind: ObjectKind, object: Value) {
        let meta = &object["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or("");
        let key = format!("{ns}/{}", meta["name"].as_str().unwrap());
        self.of(kind).insert(key, object.clone());
        node.api.put_object(kind, object);
    }

    fn delete(&mut self, node: &Node, kind: ObjectKind, ns: &str, name: &str) {
        self.of(kind).remove(&format!("{ns}/{name}"));
        node.api.delete_object(kind, ns, name);
    }

    /// `netpol::compile` of the objects, for this node: the table the kernel must hold.
    fn compiled(&self) -> netpol::program::Program {
        let namespaces: Vec<netpol::model::Namespace> = decode(&self.namespaces);
        let pods: Vec<netpol::model::Pod> = decode(&self.pods);
        let policies: Vec<netpol::model::NetworkPolicy> = decode(&self.policies);
        let cluster = netpol::cluster::Cluster::new(&namespaces, &pods, &policies, BTreeMap::new());
        netpol::compile::compile(&cluster, NODE)
    }
}

fn decode<T: serde::de::DeserializeOwned>(m: &BTreeMap<String, Value>) -> Vec<T> {
    m.values()
        .map(|v| serde_json::from_value(v.clone()).unwrap())
        .collect()
}

/// The kernel's table is exactly the compiled program (sets with elements, chains).
fn table_is(policy: &FakeNodeNet, want: &netpol::program::Program) -> bool {
    let held = policy.read_policy().unwrap().unwrap_or_default();
    let same = held.sets == want.sets && held.chains == want.chains;
    if !same && std::env::var_os("NETPOL_DEBUG").is_some() {
        eprintln!("{:#?}", netpol::diff::diff(&held, want));
    }
    same
}

fn passes(policy: &FakeNodeNet, src: &str, dst: &str, port: u16) -> bool {
    policy
        .policy_passes(&Packet {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto: TCP,
            port,
        })
        .unwrap()
}

#[test]
fn policies_pods_and_namespaces_are_enforced_as_they_change_and_gate_readiness() {
    let node = Node::new(&["10.244.1.0/24"]);
    let (net, kernel) = (fake(), Arc::new(fake()));
    let mut w = World::default();
    w.put(&node, ObjectKind::Namespace, namespace("x"));
    w.put(&node, ObjectKind::Namespace, namespace("y"));
    // a: this node's; b, c: another node's.
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "a", NODE, "10.244.1.5", "a"),
    );
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "b", "node-2", "10.244.2.5", "b"),
    );
    w.put(
        &node,
        ObjectKind::Pod,
        pod("y", "c", "node-2", "10.244.2.6", "c"),
    );
    // Deny all ingress to x's pods, before the agent starts.
    w.put(
        &node,
        ObjectKind::NetworkPolicy,
        policy("x", "deny", json!({ "podSelector": {} })),
    );
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert!(metrics.policy.in_place.load(Ordering::Relaxed));
        assert!(
            table_is(&kernel, &w.compiled()),
            "the table is not the compiled policies"
        );
        assert!(
            !passes(&kernel, "10.244.2.5", "10.244.1.5", 80),
            "deny-all let b reach a"
        );
        // a may still send (no egress policy).
        assert!(passes(&kernel, "10.244.1.5", "10.244.2.6", 80));

        // Allow from namespace y's pods labelled c, on the named port.
        w.put(
            &node,
            ObjectKind::NetworkPolicy,
            policy(
                "x",
                "from-c",
                json!({
                    "podSelector": { "matchLabels": { "pod": "a" } },
                    "ingress": [{ "from": [{ "namespaceSelector": { "matchLabels": { "ns": "y" } },
                                             "podSelector": { "matchLabels": { "pod": "c" } } }],
                                  "ports": [{ "port": "serve-80" }] }]
                }),
            ),
        );
        eventually("the new policy", || table_is(&kernel, &w.compiled()));
        assert!(passes(&kernel, "10.244.2.6", "10.244.1.5", 80));
        assert!(
            !passes(&kernel, "10.244.2.6", "10.244.1.5", 81),
            "a port not allowed"
        );
        assert!(
            !passes(&kernel, "10.244.2.5", "10.244.1.5", 80),
            "b is in x, not y"
        );

        // A pod relabelled: c is no longer a c.
        w.put(
            &node,
            ObjectKind::Pod,
            pod("y", "c", "node-2", "10.244.2.6", "other"),
        );
        eventually("c relabelled", || table_is(&kernel, &w.compiled()));
        assert!(!passes(&kernel, "10.244.2.6", "10.244.1.5", 80));

        // The pod back to c, then its namespace relabelled: y is no longer ns=y.
        w.put(
            &node,
            ObjectKind::Pod,
            pod("y", "c", "node-2", "10.244.2.6", "c"),
        );
        eventually("c a c again", || {
            table_is(&kernel, &w.compiled()) && passes(&kernel, "10.244.2.6", "10.244.1.5", 80)
        });
        w.put(
            &node,
            ObjectKind::Namespace,
            json!({ "metadata": { "name": "y", "labels": { "ns": "z" } } }),
        );
        eventually("y relabelled", || table_is(&kernel, &w.compiled()));
        assert!(!passes(&kernel, "10.244.2.6", "10.244.1.5", 80));

        // A new remote pod in y labelled c after y is ns=y again: allowed at once.
        w.put(&node, ObjectKind::Namespace, namespace("y"));
        w.put(
            &node,
            ObjectKind::Pod,
            pod("y", "d", "node-3", "10.244.3.7", "c"),
        );
        eventually("d started", || table_is(&kernel, &w.compiled()));
        assert!(passes(&kernel, "10.244.3.7", "10.244.1.5", 80));

        // Both policies deleted: nothing isolates a.
        w.delete(&node, ObjectKind::NetworkPolicy, "x", "deny");
        w.delete(&node, ObjectKind::NetworkPolicy, "x", "from-c");
        eventually("policies deleted", || table_is(&kernel, &w.compiled()));
        assert!(passes(&kernel, "10.244.2.5", "10.244.1.5", 81));
        assert!(metrics.ready());
        let rendered = metrics.render();
        assert!(rendered.contains("cni_rs_netpol_in_place 1"), "{rendered}");
        assert!(rendered.contains("cni_rs_netpol_pods 4"), "{rendered}");
    });
}

#[test]
fn a_refused_policy_isolates_its_pods_and_is_counted() {
    let node = Node::new(&["10.244.1.0/24"]);
    let (net, kernel) = (fake(), Arc::new(fake()));
    let mut w = World::default();
    w.put(&node, ObjectKind::Namespace, namespace("x"));
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "a", NODE, "10.244.1.5", "a"),
    );
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "b", "node-2", "10.244.2.5", "b"),
    );
    // An allow-all ingress with a protocol the API does not have: refused, deny-all.
    w.put(
        &node,
        ObjectKind::NetworkPolicy,
        policy(
            "x",
            "bad",
            json!({
                "podSelector": {},
                "ingress": [{ "ports": [{ "protocol": "ICMP", "port": 1 }] }]
            }),
        ),
    );
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert_eq!(metrics.policy.refused.load(Ordering::Relaxed), 1);
        assert!(table_is(&kernel, &w.compiled()));
        assert!(
            !passes(&kernel, "10.244.2.5", "10.244.1.5", 1),
            "a refused policy allowed"
        );
    });
}

#[test]
fn the_node_is_not_ready_while_the_kernel_refuses_the_table_and_recovers() {
    let node = Node::new(&["10.244.1.0/24"]);
    let (net, kernel) = (fake(), Arc::new(fake()));
    kernel.with(|s| s.fail.insert("replace_policy"));
    kernel.with(|s| s.fail.insert("apply_policy"));
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("a failed programming and the routes in place", || {
            metrics.policy.errors.load(Ordering::Relaxed) > 0
                && metrics.routes_ok.load(Ordering::Relaxed)
        });
        assert!(!metrics.ready(), "ready without the policy table");
        assert!(
            metrics.routes_ok.load(Ordering::Relaxed),
            "routes wait for policies"
        );
        kernel.with(|s| s.fail.remove("replace_policy"));
        kernel.with(|s| s.fail.remove("apply_policy"));
        eventually("ready after the retry", || metrics.ready());
        assert!(table_is(&kernel, &World::default().compiled()));
    });
}

#[test]
fn a_fresh_node_gets_the_whole_table_and_a_restart_only_the_difference() {
    let node = Node::new(&["10.244.1.0/24"]);
    let mut w = World::default();
    w.put(&node, ObjectKind::Namespace, namespace("x"));
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "a", NODE, "10.244.1.5", "a"),
    );
    let deny = json!({ "podSelector": {}, "policyTypes": ["Ingress"] });
    w.put(&node, ObjectKind::NetworkPolicy, policy("x", "deny", deny));
    // The first write of each run: the whole table, or a difference applied.
    let first_write = |kernel: &FakeNodeNet| {
        kernel.with(|s| {
            let writes = ["replace_policy", "apply_policy"];
            let first = s
                .log
                .iter()
                .find(|op| writes.contains(&op.as_str()))
                .cloned();
            s.log.clear();
            first
        })
    };
    // Nothing held: the whole table in one write, no difference from nothing.
    let (net, kernel) = (fake(), Arc::new(fake()));
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert!(table_is(&kernel, &w.compiled()));
    });
    assert_eq!(first_write(&kernel).as_deref(), Some("replace_policy"));
    // The table held (a restart): only what differs, no replacement.
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "b", NODE, "10.244.1.6", "b"),
    );
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert!(table_is(&kernel, &w.compiled()));
    });
    assert_eq!(first_write(&kernel).as_deref(), Some("apply_policy"));
}

fn tcp_entry(src: &str, dst: &str, port: u16) -> netpol::conntrack::CtEntry {
    use netpol::conntrack::{CtEntry, L4, Tuple};
    let (src, dst) = (src.parse().unwrap(), dst.parse().unwrap());
    CtEntry {
        orig: Tuple {
            src,
            dst,
            proto: TCP,
            l4: L4::Ports {
                src: 40000,
                dst: port,
            },
        },
        reply: Tuple {
            src: dst,
            dst: src,
            proto: TCP,
            l4: L4::Ports {
                src: port,
                dst: 40000,
            },
        },
        zone: 0,
        id: None,
    }
}

#[test]
fn a_new_policy_ends_the_connections_it_denies_and_only_those() {
    let node = Node::new(&["10.244.1.0/24"]);
    let (net, kernel) = (fake(), Arc::new(fake()));
    let mut w = World::default();
    w.put(&node, ObjectKind::Namespace, namespace("x"));
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "a", NODE, "10.244.1.5", "a"),
    );
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "b", "node-2", "10.244.2.5", "b"),
    );
    // b -> a on 80 and 81, and the node itself -> a (kubelet's probe).
    let (to80, to81) = (
        tcp_entry("10.244.2.5", "10.244.1.5", 80),
        tcp_entry("10.244.2.5", "10.244.1.5", 81),
    );
    let probe = tcp_entry("172.18.0.2", "10.244.1.5", 81);
    kernel.with(|s| s.conntrack = vec![to80, to81, probe]);
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert_eq!(
            kernel.with(|s| s.conntrack.len()),
            3,
            "no policy denied anything"
        );
        // a admits only port 80.
        w.put(
            &node,
            ObjectKind::NetworkPolicy,
            policy(
                "x",
                "only-80",
                json!({
                    "podSelector": {},
                    "ingress": [{ "ports": [{ "port": 80 }] }]
                }),
            ),
        );
        eventually("the denied connection ended", || {
            kernel.with(|s| s.conntrack.len()) == 2
        });
        let left = kernel.with(|s| s.conntrack.clone());
        assert!(left.contains(&to80) && left.contains(&probe), "{left:?}");
        assert_eq!(
            metrics.policy.connections_forgotten.load(Ordering::Relaxed),
            1
        );
    });
}

#[test]
fn without_br_netfilter_the_node_is_not_ready_and_says_why() {
    let node = Node::new(&["10.244.1.0/24"]);
    let (net, kernel) = (fake(), Arc::new(fake()));
    kernel.with(|s| s.bridge_nf.loaded = false);
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("a failed attempt", || {
            metrics.policy.errors.load(Ordering::Relaxed) > 0
        });
        assert!(!metrics.ready());
        assert!(
            metrics
                .render()
                .contains("cni_rs_netpol_bridge_netfilter 0")
        );
        kernel.with(|s| s.bridge_nf.loaded = true);
        eventually("ready once the module is there", || metrics.ready());
        assert!(kernel.with(|s| s.bridge_nf.call_iptables && s.bridge_nf.call_ip6tables));
    });
}

/// The fake kernel, and after each write the verdicts on `probes` there; the next
/// `apply_policy` calls refused as `refusals` says (then nothing is recorded).
struct Tap {
    kernel: Arc<FakeNodeNet>,
    probes: Vec<Packet>,
    seen: Arc<std::sync::Mutex<Vec<Vec<bool>>>>,
    refusals: Arc<std::sync::Mutex<std::collections::VecDeque<bool>>>,
}

impl Tap {
    fn record(
        &self,
        written: Result<(), hostnet::node::NodeNetError>,
    ) -> Result<(), hostnet::node::NodeNetError> {
        if written.is_ok() {
            let verdicts = self
                .probes
                .iter()
                .map(|p| self.kernel.policy_passes(p).unwrap());
            self.seen.lock().unwrap().push(verdicts.collect());
        }
        written
    }
}

impl PolicyNet for Tap {
    fn replace_policy(
        &self,
        p: &netpol::program::Program,
    ) -> Result<(), hostnet::node::NodeNetError> {
        self.record(self.kernel.replace_policy(p))
    }
    fn apply_policy(&self, c: &netpol::diff::Changes) -> Result<(), hostnet::node::NodeNetError> {
        if self.refusals.lock().unwrap().pop_front() == Some(true) {
            use hostnet::node::{NodeNetError, Op, Refusal};
            return Err(NodeNetError::new(Op::ApplyPolicy, Refusal::Injected));
        }
        self.record(self.kernel.apply_policy(c))
    }
    fn remove_policy(&self) -> Result<(), hostnet::node::NodeNetError> {
        self.kernel.remove_policy()
    }
    fn policy_matches(
        &self,
        p: &netpol::program::Program,
    ) -> Result<bool, hostnet::node::NodeNetError> {
        self.kernel.policy_matches(p)
    }
    fn read_policy(&self) -> Result<Option<netpol::program::Program>, hostnet::node::NodeNetError> {
        self.kernel.read_policy()
    }
    fn conntrack(&self) -> Result<Vec<netpol::conntrack::CtEntry>, hostnet::node::NodeNetError> {
        self.kernel.conntrack()
    }
    fn forget_connections(
        &self,
        e: &[netpol::conntrack::CtEntry],
    ) -> Result<usize, hostnet::node::NodeNetError> {
        self.kernel.forget_connections(e)
    }
    fn bridge_netfilter(&self) -> Result<hostnet::node::BridgeNf, hostnet::node::NodeNetError> {
        self.kernel.bridge_netfilter()
    }
    fn enable_bridge_netfilter(&self) -> Result<(), hostnet::node::NodeNetError> {
        self.kernel.enable_bridge_netfilter()
    }
}

/// Pod x/a starts on this node, the first its policy (ingress from namespace y's 300 pods
/// on another node) selects, with the `apply_policy` calls from then on refused as
/// `refusals` says. The kernel's verdicts after each write from then on (from y's last
/// pod, from z's pod, to a), whether the enforce latency was at most the sync one, and
/// whether the whole table was written again.
fn a_starts(refusals: &[bool]) -> (Vec<Vec<bool>>, bool, bool) {
    let node = Node::new(&["10.244.1.0/24"]);
    let mut w = World::default();
    for ns in ["x", "y", "z"] {
        w.put(&node, ObjectKind::Namespace, namespace(ns));
    }
    let peers: Vec<Value> = (0..300u32)
        .map(|i| {
            let ip = format!("10.245.{}.{}", i / 250, i % 250 + 1);
            pod("y", &format!("p{i}"), "node-2", &ip, "p")
        })
        .collect();
    node.api.put_objects_quietly(ObjectKind::Pod, peers.clone());
    for p in peers {
        w.of(ObjectKind::Pod)
            .insert(format!("y/{}", p["metadata"]["name"].as_str().unwrap()), p);
    }
    w.put(
        &node,
        ObjectKind::Pod,
        pod("z", "q", "node-2", "10.244.2.9", "q"),
    );
    let from_y = json!({ "podSelector": { "matchLabels": { "pod": "a" } },
        "ingress": [{ "from": [{ "namespaceSelector": { "matchLabels": { "ns": "y" } } }] }] });
    w.put(
        &node,
        ObjectKind::NetworkPolicy,
        policy("x", "from-y", from_y),
    );
    let probe = |src: &str| Packet {
        src: src.parse().unwrap(),
        dst: "10.244.1.5".parse().unwrap(),
        proto: TCP,
        port: 80,
    };
    let (net, kernel) = (fake(), Arc::new(fake()));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let refused = Arc::new(std::sync::Mutex::new(Default::default()));
    let tap = Tap {
        kernel: kernel.clone(),
        probes: vec![probe("10.245.1.50"), probe("10.244.2.9")],
        seen: seen.clone(),
        refusals: refused.clone(),
    };
    let mut within = false;
    with_agent_writing_to(&node, &net, &kernel, Box::new(tap), |metrics| {
        eventually("ready", || metrics.ready());
        seen.lock().unwrap().clear();
        kernel.with(|s| s.log.clear());
        refused.lock().unwrap().extend(refusals);
        let p = &metrics.policy;
        p.last_latency_us.store(u64::MAX, Ordering::SeqCst);
        w.put(
            &node,
            ObjectKind::Pod,
            pod("x", "a", NODE, "10.244.1.5", "a"),
        );
        eventually("a's policy in place", || table_is(&kernel, &w.compiled()));
        eventually("its latency", || {
            p.last_latency_us.load(Ordering::SeqCst) != u64::MAX
        });
        let enforce = p.last_enforce_latency_us.load(Ordering::SeqCst);
        within = enforce <= p.last_latency_us.load(Ordering::SeqCst);
    });
    let writes = seen.lock().unwrap().clone();
    let replaced = kernel.with(|s| s.log.iter().any(|op| op == "replace_policy"));
    (writes, within, replaced)
}

#[test]
fn a_new_pod_is_isolated_before_its_peer_set_is_filled() {
    let (writes, within, _) = a_starts(&[]);
    // First a isolated with y's pods not yet in (both denied), then y's pods allowed;
    // z's pod never passes from the first write on.
    assert_eq!(writes, [vec![false, false], vec![true, false]]);
    assert!(within);
}

#[test]
fn a_refused_fill_is_followed_by_the_whole_table() {
    // The isolating write goes in, the fill is refused: the whole table replaces it.
    let (writes, _, replaced) = a_starts(&[false, true]);
    assert_eq!(writes, [vec![false, false], vec![true, false]]);
    assert!(
        replaced,
        "the refused fill was not followed by the whole table"
    );
}

/// The first pod list is loaded into the engine as it is read (before the other kinds are
/// listed); a list that fails midway leaves nothing of it: a pod it had read, gone by the
/// list that succeeds, is in no set.
#[test]
fn a_first_pod_list_that_fails_midway_leaves_nothing_of_it() {
    use cni_rs_agent::kube::collection::{Namespaces, NetworkPolicies, Pods};
    use cni_rs_agent::kube::watcher::Cache;
    use cni_rs_agent::policy::{dumps, enforce::Enforcer, inbox::Inbox};
    use cni_rs_agent::serve::PolicyMetrics;
    let kernel = Arc::new(fake());
    let inbox = Arc::new(Inbox::default());
    let (addrs, dumper) = (kernel.clone(), kernel.clone());
    let pk = PolicyKernel {
        net: Box::new(kernel.clone()),
        local_addrs: Box::new(move || addrs.local_addrs()),
        conntrack: Arc::new(move || dumper.conntrack()),
    };
    let metrics = PolicyMetrics::default();
    let dumps = dumps::start(pk.conntrack.clone(), inbox.clone()).unwrap();
    let mut enforcer = Enforcer::new(NODE, &pk, &metrics, dumps);
    let take = || inbox.take(std::time::Duration::ZERO);
    let listed = |p: &Value| {
        let p = netpol::cluster::Pod::from_object(&serde_json::from_value(p.clone()).unwrap());
        assert!(Cache::<Pods>::listed(&*inbox, p).unwrap().is_none());
    };
    // a: this node's; its policy admits the pods labelled peer.
    let a = pod("x", "a", NODE, "10.244.1.5", "a");
    let gone = pod("x", "gone", "node-2", "10.244.2.9", "peer");
    let b = pod("x", "b", "node-2", "10.244.2.5", "peer");
    listed(&a);
    listed(&gone);
    enforcer.step(take(), false);
    Cache::<Pods>::list_failed(&*inbox);
    // The list again, after gone ended and b started.
    listed(&a);
    listed(&b);
    Cache::<Pods>::replace(&*inbox, vec![]).unwrap();
    let mut w = World::default();
    w.pods.insert("x/a".into(), a);
    w.pods.insert("x/b".into(), b);
    w.namespaces.insert("x".into(), namespace("x"));
    let np = policy(
        "x",
        "from-peers",
        json!({ "podSelector": { "matchLabels": { "pod": "a" } },
                "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "pod": "peer" } } }] }] }),
    );
    w.policies.insert("x/from-peers".into(), np.clone());
    Cache::<Namespaces>::replace(&*inbox, decode(&w.namespaces)).unwrap();
    let np: netpol::model::NetworkPolicy = serde_json::from_value(np).unwrap();
    let checked = netpol::validate::Policy::from_object(&np);
    Cache::<NetworkPolicies>::replace(&*inbox, vec![checked]).unwrap();
    enforcer.step(take(), false);
    assert!(metrics.in_place.load(Ordering::Relaxed));
    assert!(table_is(&kernel, &w.compiled()));
    assert!(passes(&kernel, "10.244.2.5", "10.244.1.5", 80));
    assert!(
        !passes(&kernel, "10.244.2.9", "10.244.1.5", 80),
        "the failed list's pod is a peer"
    );
}

#[test]
fn a_set_that_outgrows_its_room_gets_the_whole_table_again_with_room() {
    let node = Node::new(&["10.244.1.0/24"]);
    let mut w = World::default();
    w.put(&node, ObjectKind::Namespace, namespace("x"));
    w.put(
        &node,
        ObjectKind::Pod,
        pod("x", "server", NODE, "10.244.1.5", "server"),
    );
    let from_clients = json!({ "podSelector": { "matchLabels": { "pod": "server" } },
        "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "pod": "client" } } }] }] });
    w.put(
        &node,
        ObjectKind::NetworkPolicy,
        policy("x", "in", from_clients),
    );
    let client = |i: usize| {
        let ip = format!("10.245.{}.{}", i / 200, 1 + i % 200);
        pod("x", &format!("c{i}"), "other", &ip, "client")
    };
    w.put(&node, ObjectKind::Pod, client(0));
    let (net, kernel) = (fake(), Arc::new(fake()));
    let replaced = |kernel: &FakeNodeNet| {
        kernel.with(|s| s.log.iter().filter(|op| *op == "replace_policy").count())
    };
    // The clients' set, made with the whole table, has room for 1 + 256.
    let most_room = |kernel: &FakeNodeNet| kernel.with(|s| s.netpol_room.values().max().copied());
    with_agent(&node, &net, &kernel, |metrics| {
        eventually("ready", || metrics.ready());
        assert!(table_is(&kernel, &w.compiled()));
        assert_eq!((replaced(&kernel), most_room(&kernel)), (1, Some(257)));
        for i in 1..300 {
            w.put(&node, ObjectKind::Pod, client(i));
        }
        eventually("the clients in the kernel", || {
            table_is(&kernel, &w.compiled())
        });
        assert!(passes(&kernel, "10.245.1.99", "10.244.1.5", 80));
        assert!(!passes(&kernel, "10.246.0.1", "10.244.1.5", 80));
        // Refused when full (ENFILE), then written whole again with room for more
        // than the 300 (half as much again as the set then held, 256 more).
        assert_eq!(replaced(&kernel), 2);
        assert!(most_room(&kernel).is_some_and(|room| room > 300 + 256));
        assert!(metrics.ready());
    });
}
