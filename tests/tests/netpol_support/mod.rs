//! The NetworkPolicy e2e suite's harness, modelled on upstream's
//! (kubernetes test/e2e/network/netpol): a cluster of three node namespaces, each running
//! the agent against the stub API server; the model's pods (x/a .. z/c) on them, each
//! serving TCP, UDP (and SCTP where the kernel has it) on 80 and 81; the objects sent to
//! the stub and kept in [`model::Objects`]. A case changes objects, then [`Suite::check`]
//! probes every source (pods, and the nodes) to every pod on every kind until the table
//! equals the oracle's truth table, or a bounded number of rounds; a mismatch is recorded
//! with both tables, and [`Suite::finish`] fails the test listing every failed case.

pub mod model;
pub mod probe;
pub mod table;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use netpol::addr::Family;
use netpol::validate::Protocol;
use serde_json::Value;

use crate::apiserver::{ApiServer, ObjectKind};
use crate::cluster_support::{Agent, ApiAccess, Cluster, Pod, readyz, wait_for, with_data_dir};
use model::*;
use table::{Kind, Source, Table};

pub const CLUSTER_CIDRS: &str = "10.244.0.0/16,fd00:10:244::/48";
/// Probe rounds before a case fails (policies take effect asynchronously).
const ROUNDS: u32 = 10;
const ROUND_PAUSE: Duration = Duration::from_millis(300);
/// How long a round waits for every agent's `/readyz` (its policies programmed).
const READY_WAIT: Duration = Duration::from_secs(10);

pub struct Suite<'a> {
    // Fields drop in this order: agents and servers before the pods' namespaces.
    agents: Vec<Agent>,
    servers: Vec<Server>,
    pods: BTreeMap<String, Pod>,
    c: &'a Cluster,
    api: &'a ApiServer,
    pub objects: Objects,
    sources: Vec<Source>,
    pub kinds: Vec<Kind>,
    passed: Vec<String>,
    failed: Vec<String>,
}

impl<'a> Suite<'a> {
    /// Agents on every node, then the model's namespaces and pods (with their servers).
    pub fn start(c: &'a Cluster, api: &'a ApiServer, access: &ApiAccess) -> Suite<'a> {
        let agents: Vec<Agent> = (c.nodes.iter())
            .map(|n| Agent::start(n, access, &["--cluster-cidr", CLUSTER_CIDRS]))
            .collect();
        for (node, agent) in c.nodes.iter().zip(&agents) {
            wait_for(
                &format!("{} ready", node.name),
                || readyz(node) == Some(200),
                || agent.log(),
            );
        }
        let mut s = Suite {
            agents,
            servers: Vec::new(),
            pods: BTreeMap::new(),
            c,
            api,
            objects: Objects::default(),
            sources: Vec::new(),
            kinds: Vec::new(),
            passed: Vec::new(),
            failed: Vec::new(),
        };
        for ns in NAMESPACES {
            s.label_namespace(ns, default_namespace_labels(ns));
        }
        let mut bridges: BTreeMap<String, [IpAddr; 2]> = BTreeMap::new();
        for (key, n) in PLACEMENT {
            let (node, agent) = (&c.nodes[n], &s.agents[n]);
            let id = format!("np-{}", key.replace('/', "-"));
            let pod = node.add_pod(&id, &with_data_dir(agent.bridge_conf(), node));
            // As the runtime's loopback plugin would: a pod reaches its own address.
            pod.ns.exec_in(&["ip", "link", "set", "lo", "up"]);
            s.servers.push(Server::start(&pod, key));
            bridges.insert(node.name.clone(), gateways(&pod.result));
            let labels = default_pod_labels(split(key).1);
            let object = pod_object(key, labels, &node.name, [pod.ip4.into(), pod.ip6.into()]);
            s.api.put_object(ObjectKind::Pod, object.clone());
            s.objects.pods.insert(key.to_string(), object);
            s.pods.insert(key.to_string(), pod);
        }
        s.sources = pod_keys().into_iter().map(Source::Pod).collect();
        for node in &c.nodes {
            let lan = [node.ip4.into(), node.ip6.into()];
            let bridge = bridges[&node.name];
            s.objects
                .nodes
                .insert(node.name.clone(), [lan, bridge].concat());
            s.sources.push(Source::Node {
                name: node.name.clone(),
                lan,
                bridge,
            });
        }
        let sctp = probe::sctp_available(&s.pods["x/a"].ns);
        if !sctp {
            println!("SCTP: this kernel has none (EPROTONOSUPPORT); SCTP probes are skipped");
        }
        let protos = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];
        for proto in protos.into_iter().filter(|p| sctp || *p != Protocol::Sctp) {
            for port in PORTS {
                for family in Family::BOTH {
                    s.kinds.push(Kind {
                        proto,
                        port,
                        family,
                    });
                }
            }
        }
        s
    }

    /// A pod of the model by key (`x/a`): its namespace and addresses.
    pub fn pod(&self, key: &str) -> &Pod {
        &self.pods[key]
    }

    pub fn put_policy(&mut self, ns: &str, name: &str, spec: Value) {
        let object = policy_object(ns, name, spec);
        self.api
            .put_object(ObjectKind::NetworkPolicy, object.clone());
        self.objects.policies.insert(format!("{ns}/{name}"), object);
    }

    pub fn delete_policy(&mut self, ns: &str, name: &str) {
        self.api.delete_object(ObjectKind::NetworkPolicy, ns, name);
        self.objects.policies.remove(&format!("{ns}/{name}"));
    }

    pub fn label_pod(&mut self, key: &str, labels: Value) {
        let object = self.objects.pods.get_mut(key).expect("a pod of the model");
        object["metadata"]["labels"] = labels;
        self.api.put_object(ObjectKind::Pod, object.clone());
    }

    pub fn label_namespace(&mut self, ns: &str, labels: Value) {
        let object = namespace_object(ns, labels);
        self.api.put_object(ObjectKind::Namespace, object.clone());
        self.objects.namespaces.insert(ns.to_string(), object);
    }

    /// Back to the model as started: no policies, the default labels.
    pub fn reset(&mut self) {
        let keys: Vec<String> = self.objects.policies.keys().cloned().collect();
        for key in keys {
            let (ns, name) = split(&key);
            self.delete_policy(ns, name);
        }
        for ns in NAMESPACES {
            if self.objects.namespaces[ns]["metadata"]["labels"] != default_namespace_labels(ns) {
                self.label_namespace(ns, default_namespace_labels(ns));
            }
        }
        for key in pod_keys() {
            let labels = default_pod_labels(split(&key).1);
            if self.objects.pods[&key]["metadata"]["labels"] != labels {
                self.label_pod(&key, labels);
            }
        }
    }

    /// One case from the model as started: `setup` changes objects (and may `check`
    /// intermediate steps itself); then the table must equal the truth, which must deny
    /// something (else the case tests nothing).
    pub fn case(&mut self, name: &str, setup: impl FnOnce(&mut Suite)) {
        self.reset();
        setup(self);
        let truth = self.truth();
        assert!(
            truth.cells.values().flatten().flatten().any(|ok| !ok),
            "case {name:?}: the truth table denies nothing, the case tests nothing"
        );
        self.check(name);
    }

    pub fn truth(&self) -> Table {
        Table::truth(&self.objects, &self.sources, &pod_keys(), &self.kinds)
    }

    /// Probes until the table equals the truth table, at most [`ROUNDS`] rounds; records
    /// the outcome under `name`.
    pub fn check(&mut self, name: &str) {
        let truth = self.truth();
        let sources: Vec<(String, &cni_tests::NamedNetns)> = (self.sources.iter())
            .map(|s| {
                let ns = match s {
                    Source::Pod(key) => &self.pods[key].ns,
                    Source::Node { name, .. } => {
                        &self
                            .c
                            .nodes
                            .iter()
                            .find(|n| n.name == *name)
                            .expect("a node")
                            .ns
                    }
                };
                (s.label().to_string(), ns)
            })
            .collect();
        let dests: Vec<probe::Dest> = (pod_keys().into_iter())
            .map(|key| {
                let p = &self.pods[&key];
                probe::Dest {
                    ips: [p.ip4.into(), p.ip6.into()],
                    key,
                }
            })
            .collect();
        let started = Instant::now();
        let mut observed = None;
        let mut unready = Vec::new();
        for round in 1..=ROUNDS {
            unready = self.unready_nodes();
            let got = probe::observe(&sources, &dests, &self.kinds);
            if got == truth {
                println!(
                    "case {name:?}: as the truth table ({} denied of {}) in round {round}, {:?}",
                    denied(&truth),
                    cells(&truth),
                    started.elapsed()
                );
                self.passed.push(name.to_string());
                return;
            }
            observed = Some(got);
            std::thread::sleep(ROUND_PAUSE);
        }
        let observed = observed.expect("at least one round");
        let report = format!(
            "case {name:?}: {} of {} probes differ from the truth table after {ROUNDS} rounds \
             (not ready at the last: {unready:?})\n{}",
            truth.mismatches(&observed),
            cells(&truth),
            truth.explain(&observed)
        );
        eprintln!("{report}");
        self.failed.push(report);
    }

    /// A flow of `proto` (TCP or UDP) from pod `from` to pod `to`'s `port` over `family`,
    /// echoing now.
    pub fn flow(
        &self,
        proto: Protocol,
        from: &str,
        to: &str,
        family: Family,
        port: u16,
    ) -> probe::Flow {
        let dst = &self.pods[to];
        let ip: IpAddr = match family {
            Family::V4 => dst.ip4.into(),
            Family::V6 => dst.ip6.into(),
        };
        let (ns, dst) = (&self.pods[from].ns, std::net::SocketAddr::new(ip, port));
        let flow = match proto {
            Protocol::Tcp => probe::Flow::tcp(ns, dst),
            Protocol::Udp => probe::Flow::udp(ns, dst),
            Protocol::Sctp => unimplemented!("an SCTP flow"),
        }
        .unwrap_or_else(|| panic!("{proto:?} {from} -> {to}:{port} ({family:?}) with no policy"));
        assert!(
            flow.echoes(),
            "{proto:?} {from} -> {to}:{port} ({family:?}) with no policy echoes"
        );
        flow
    }

    /// Records `name` passed when `holds` does within [`ROUNDS`] tries, else failed with
    /// `detail`.
    pub fn eventually(&mut self, name: &str, mut holds: impl FnMut() -> bool, detail: &str) {
        for _ in 0..ROUNDS {
            if holds() {
                println!("case {name:?}: holds");
                self.passed.push(name.to_string());
                return;
            }
            std::thread::sleep(ROUND_PAUSE);
        }
        let report = format!("case {name:?}: does not hold after {ROUNDS} tries: {detail}");
        eprintln!("{report}");
        self.failed.push(report);
    }

    /// The nodes whose agent's `/readyz` is not 200 after [`READY_WAIT`].
    fn unready_nodes(&self) -> Vec<String> {
        let deadline = Instant::now() + READY_WAIT;
        let mut waiting: Vec<&crate::cluster_support::Node> = self.c.nodes.iter().collect();
        while !waiting.is_empty() && Instant::now() < deadline {
            waiting.retain(|n| readyz(n) != Some(200));
            if !waiting.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        waiting.iter().map(|n| n.name.clone()).collect()
    }

    /// The baseline: no policies, everything connects, and the oracle agrees.
    pub fn baseline(&mut self) {
        self.reset();
        let truth = self.truth();
        assert_eq!(
            denied(&truth),
            0,
            "the oracle with no policies denies something"
        );
        self.check("no policies");
    }

    /// Fails the test when a case failed, naming each (details were printed as they came),
    /// with each agent's log.
    pub fn finish(self) {
        println!("passed: {:?}", self.passed);
        if self.failed.is_empty() {
            return;
        }
        for (node, agent) in self.c.nodes.iter().zip(&self.agents) {
            eprintln!(
                "--- {} agent log (tail) ---\n{}",
                node.name,
                tail(&agent.log(), 40)
            );
        }
        let names: Vec<&str> = (self.failed.iter())
            .map(|r| r.lines().next().unwrap_or_default())
            .collect();
        panic!(
            "{} case(s) failed:\n{}",
            self.failed.len(),
            names.join("\n")
        );
    }
}

fn cells(t: &Table) -> usize {
    t.cells.values().flatten().flatten().count()
}

fn denied(t: &Table) -> usize {
    t.cells
        .values()
        .flatten()
        .flatten()
        .filter(|ok| !**ok)
        .count()
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The bridge's addresses (v4, v6) as a pod's ADD result names its gateways.
fn gateways(result: &Value) -> [IpAddr; 2] {
    let gws: Vec<IpAddr> = (result["ips"].as_array().into_iter().flatten())
        .filter_map(|ip| ip["gateway"].as_str()?.parse().ok())
        .collect();
    let find = |v6: bool| {
        *gws.iter()
            .find(|g| g.is_ipv6() == v6)
            .unwrap_or_else(|| panic!("no gateway of each family in {result}"))
    };
    [find(false), find(true)]
}

/// `netpol-server 80 81` in a pod; killed on drop.
struct Server {
    child: std::process::Child,
}

impl Server {
    fn start(pod: &Pod, key: &str) -> Server {
        let mut cmd = std::process::Command::new(cni_tests::bin_path("netpol-server"));
        cmd.args(PORTS.map(|p| p.to_string()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped());
        // Forked from a thread inside the pod's namespace, it lives there.
        let mut child = pod.ns.run(|| cmd.spawn()).expect("start netpol-server");
        let mut line = String::new();
        let out = child.stdout.take().expect("piped");
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let server = Server { child };
        assert!(
            line.starts_with("ready"),
            "netpol-server in {key} did not start (said {line:?})"
        );
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
