//! The tests' stand-in API server as a program, for scripts/e2e-install.sh and
//! scripts/bench-agent.sh: `stub-apiserver LISTEN_ADDR DIR NODE CIDR[,CIDR]` serves `NODE`
//! with those podCIDRs, writes the service-account files `DIR/token` and `DIR/ca.crt`,
//! then `DIR/ready`, and runs until killed.
//!
//! `STUB_NODES=N` adds N other nodes (`node-bench-I`, 10.X.Y.0/24 and fd01:0:0:I::/64, contiguous as
//! kube-controller-manager allocates them, via
//! 10.255.X.Y and fd00:ff::I). Commands on stdin, one per line, for tests:
//! `put NAME CIDR[,CIDR] IP[,IP]` (also for `NODE`: its InternalIPs are otherwise a
//! placeholder), `del NAME`, `expire`, `drop`; and for NetworkPolicy `object KIND JSON`
//! (KIND `pod`, `namespace` or `networkpolicy`; the object's JSON on the rest of the line)
//! and `delete KIND NAMESPACE NAME` (`-` as a Namespace's namespace).
//!
//! `STUB_NETPOL=PODS,NAMESPACES,POLICIES_PER_NS` adds the NetworkPolicy scale
//! benchmark's cluster (support/netpol_cluster.rs), its pods spread over NODE and the
//! STUB_NODES, as if there before any watch.

#[path = "../tests/support/apiserver.rs"]
#[allow(dead_code)] // the tests use the rest
mod apiserver;
#[path = "support/netpol_cluster.rs"]
#[allow(dead_code)] // bench-netpol uses the rest
mod netpol_cluster;

use std::io::BufRead;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, dir, node, cidrs] = args.as_slice() else {
        eprintln!("usage: stub-apiserver LISTEN_ADDR DIR NODE CIDR[,CIDR]");
        std::process::exit(2);
    };
    let cidrs: Vec<&str> = cidrs.split(',').collect();
    let api = apiserver::ApiServer::start(listen, node, &cidrs);
    let n: u32 = std::env::var("STUB_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    api.put_nodes_quietly((1..=n).map(|i| {
        let (x, y) = (i / 256, i % 256);
        (
            format!("node-bench-{i}"),
            apiserver::StubNode {
                pod_cidrs: vec![
                    format!("10.{}.{y}.0/24", 100 + x),
                    format!("fd01:0:0:{i:x}::/64"),
                ],
                internal_ips: vec![format!("10.255.{x}.{y}"), format!("fd00:ff::{i:x}")],
            },
        )
    }));
    if let Ok(spec) = std::env::var("STUB_NETPOL") {
        let Some(scale) = netpol_cluster::Scale::parse(n, &spec) else {
            eprintln!("stub-apiserver: STUB_NETPOL={spec:?}: want PODS,NAMESPACES,POLICIES_PER_NS");
            std::process::exit(2);
        };
        use apiserver::ObjectKind;
        api.put_objects_quietly(ObjectKind::Namespace, scale.namespaces_json());
        api.put_objects_quietly(ObjectKind::NetworkPolicy, scale.policies_json());
        api.put_objects_quietly(ObjectKind::Pod, scale.pods_json(node));
    }
    let dir = std::path::Path::new(dir);
    std::fs::write(dir.join("token"), &api.token).unwrap();
    std::fs::write(dir.join("ca.crt"), &api.ca_pem).unwrap();
    // Whole or not at all: a reader polling for the file must not see half the URL.
    std::fs::write(dir.join("ready.tmp"), api.url()).unwrap();
    std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
    eprintln!(
        "stub-apiserver: {} serving node {node} and {n} others",
        api.url()
    );
    let kind = |k: &str| match k {
        "pod" => Some(apiserver::ObjectKind::Pod),
        "namespace" => Some(apiserver::ObjectKind::Namespace),
        "networkpolicy" => Some(apiserver::ObjectKind::NetworkPolicy),
        _ => None,
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix("object ")
            && let Some((k, json)) = rest.split_once(' ')
        {
            match (kind(k), serde_json::from_str(json)) {
                (Some(k), Ok(object)) => api.put_object(k, object),
                _ => eprintln!("stub-apiserver: bad object command {line:?}"),
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["put", name, cidrs, ips] => {
                let cidrs: Vec<&str> = cidrs.split(',').collect();
                let ips: Vec<&str> = ips.split(',').collect();
                if name == node {
                    api.set(|b| {
                        b.pod_cidrs = cidrs.iter().map(|s| s.to_string()).collect();
                        b.internal_ips = ips.iter().map(|s| s.to_string()).collect();
                    });
                } else {
                    api.put_node(name, &cidrs, &ips);
                }
            }
            ["del", name] => api.delete_node(name),
            ["delete", k, ns, name] if kind(k).is_some() => {
                let ns = if *ns == "-" { "" } else { ns };
                api.delete_object(kind(k).unwrap(), ns, name)
            }
            ["expire"] => api.expire_watches(),
            ["drop"] => api.drop_watches(),
            [] => {}
            _ => eprintln!("stub-apiserver: unknown command {line:?}"),
        }
    }
    // stdin closed (or none: /dev/null): keep serving until killed.
    loop {
        std::thread::park();
    }
}
