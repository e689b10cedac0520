//! The node agent's requests to the API server (issue 27), for BENCHMARKS.md:
//! `bench-api LABEL=BIN [LABEL=BIN...]` runs each `cni-rs-agent` binary as the agent
//! (`--files-only`) against the stub API server (in this process) serving `NODES` (env,
//! default 5,000) Nodes, one fresh stub per scenario, and prints what the stub saw:
//! - steady state: the stub ends each watch after 2 s; requests and TLS connections per
//!   watch cycle, and per hour at the timeoutSeconds the agent itself asked for;
//! - an API server restart (10 s down, then a fresh watch cache): requests in the 120 s
//!   after it;
//! - a server that ends every watch at once, and one that answers every watch 410 (from
//!   a dropped watch connection on): requests in 30 s.
//!
//! Connection attempts refused while the stub is down never reach it and are not counted.

#[path = "../tests/support/apiserver.rs"]
#[allow(dead_code)] // the tests use the rest
mod apiserver;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::{ApiServer, Counts, StubNode, WatchMode};

const CYCLES: u32 = 5;
const CAP: Duration = Duration::from_secs(2);
const DOWN: Duration = Duration::from_secs(10);
const AFTER_RESTART: Duration = Duration::from_secs(120);
const MISBEHAVING: Duration = Duration::from_secs(30);

struct Run {
    api: ApiServer,
    dir: PathBuf,
    agent: Child,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.agent.kill();
        let _ = self.agent.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The agent `bin` on a fresh stub with `nodes` other Nodes and its watches capped to
/// `cap`, once it watches.
fn start(bin: &Path, nodes: u32, n: u32, cap: Option<Duration>) -> Run {
    let api = ApiServer::start("127.0.0.1:0", "node-1", &["10.244.0.0/24"]);
    api.set_watch_cap(cap);
    api.put_nodes_quietly((1..=nodes).map(|i| {
        let (x, y) = (i / 256, i % 256);
        let node = StubNode {
            pod_cidrs: vec![format!("10.{}.{y}.0/24", 100 + x)],
            internal_ips: vec![format!("10.255.{x}.{y}")],
        };
        (format!("node-bench-{i}"), node)
    }));
    let dir = std::env::temp_dir().join(format!("bench-api-{}-{n}", std::process::id()));
    for sub in ["src", "bin", "net.d", "sa"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for name in ["bridge", "host-local", "loopback"] {
        std::fs::write(dir.join("src").join(name), format!("#!/bin/false {name}\n")).unwrap();
    }
    std::fs::write(dir.join("sa/token"), &api.token).unwrap();
    std::fs::write(dir.join("sa/ca.crt"), &api.ca_pem).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let agent = Command::new(bin)
        .env_clear()
        .env("CNI_RS_SOURCE_DIR", dir.join("src"))
        .env("CNI_RS_BIN_DIR", dir.join("bin"))
        .env("CNI_RS_CONF_DIR", dir.join("net.d"))
        .env("NODE_NAME", "node-1")
        .env("CNI_RS_API_SERVER", api.url())
        .env("CNI_RS_MTU", "1400")
        .env("CNI_RS_TOKEN_FILE", dir.join("sa/token"))
        .env("CNI_RS_CA_FILE", dir.join("sa/ca.crt"))
        .args([
            "--files-only",
            "--health-listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = Run { api, dir, agent };
    wait_for(&run.api, 1);
    run
}

/// Until the stub has seen `watches` watch requests.
fn wait_for(api: &ApiServer, watches: u32) {
    let end = Instant::now() + Duration::from_secs(120);
    while api.watches() < watches {
        assert!(Instant::now() < end, "no watch {watches} from the agent");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the stub saw between two snapshots.
struct Delta {
    requests: u32,
    watches: u32,
    lists: u32,
    quorum_lists: u32,
    connections: u32,
}

fn delta(a: &Counts, b: &Counts) -> Delta {
    let quorum = |c: &Counts| c.list_rvs.iter().filter(|rv| rv.is_none()).count() as u32;
    Delta {
        requests: b.requests - a.requests,
        watches: b.watches - a.watches,
        lists: b.lists - a.lists,
        quorum_lists: quorum(b) - quorum(a),
        connections: b.connections - a.connections,
    }
}

fn show(label: &str, what: &str, d: &Delta) {
    println!(
        "{label}: {what}: requests={} watches={} list_pages={} quorum_list_pages={} tls_connections={}",
        d.requests, d.watches, d.lists, d.quorum_lists, d.connections
    );
}

fn main() {
    let nodes: u32 = std::env::var("NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let agents: Vec<(String, PathBuf)> = std::env::args()
        .skip(1)
        .map(|a| {
            let (label, bin) = a.split_once('=').expect("usage: bench-api LABEL=BIN...");
            (label.to_string(), PathBuf::from(bin))
        })
        .collect();
    println!("{nodes} other Nodes on the stub");
    let mut n = 0;
    for (label, bin) in &agents {
        // Steady state: the start, then CYCLES watch cycles of CAP each.
        n += 1;
        let run = start(bin, nodes, n, Some(CAP));
        show(
            label,
            "start (first list and watch)",
            &delta(&Counts::default(), &run.api.counts()),
        );
        let before = run.api.counts();
        wait_for(&run.api, before.watches + CYCLES);
        let after = run.api.counts();
        let d = delta(&before, &after);
        let timeouts: Vec<f64> = after
            .watch_queries
            .iter()
            .filter_map(|q| q.get("timeoutSeconds")?.parse().ok())
            .collect();
        let mean = timeouts.iter().sum::<f64>() / timeouts.len() as f64;
        let per_cycle = f64::from(d.requests) / f64::from(CYCLES);
        let conns = f64::from(d.connections) / f64::from(CYCLES);
        println!(
            "{label}: steady: per watch cycle requests={per_cycle:.2} tls_connections={conns:.2} \
             lists={:.2}; timeoutSeconds asked mean={mean:.1} (of {:?}); per hour \
             requests={:.0} tls_connections={:.0}",
            f64::from(d.lists) / f64::from(CYCLES),
            timeouts,
            per_cycle * 3600.0 / mean,
            conns * 3600.0 / mean,
        );
        drop(run);

        // An API server restart.
        n += 1;
        let run = start(bin, nodes, n, None);
        let before = run.api.counts();
        run.api.restart(DOWN);
        std::thread::sleep(AFTER_RESTART);
        show(
            label,
            &format!(
                "{} s after a restart ({} s down)",
                AFTER_RESTART.as_secs(),
                DOWN.as_secs()
            ),
            &delta(&before, &run.api.counts()),
        );
        drop(run);

        for (mode, what) in [
            (WatchMode::EndAtOnce, "every watch ended at once"),
            (WatchMode::Gone, "every watch answered 410"),
        ] {
            n += 1;
            let run = start(bin, nodes, n, None);
            let before = run.api.counts();
            // From the end of the open watch on.
            run.api.set_watch_mode(mode);
            run.api.drop_watches();
            std::thread::sleep(MISBEHAVING);
            let what = format!("{what}, {} s", MISBEHAVING.as_secs());
            show(label, &what, &delta(&before, &run.api.counts()));
        }
    }
}
