//! Sharing one store with the Go host-local (v1.1.1, spec <= 1.0.0): each sees, honours
//! and releases the other's leases, and concurrent ADDs never collide.

mod host_local_support;

use host_local_support::*;
use std::collections::HashSet;
use std::sync::Arc;

#[test]
fn go_leases_are_seen_and_released_by_us() {
    let net = Net::new("hl-go2rs");
    let conf = net.simple("1.0.0", "10.1.2.0/24");
    assert_eq!(add_ok(&go(), "go1", &conf), "10.1.2.2");
    // our ADD continues Go's round-robin and refuses a duplicate of Go's attachment
    assert_eq!(add_ok(&ours(), "rs1", &conf), "10.1.2.3");
    let e = call(&ours(), "ADD", "go1", "eth0", &conf).assert_failure();
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("10.1.2.2 has been allocated to go1"),
        "{e}"
    );
    call(&ours(), "CHECK", "go1", "eth0", &conf).assert_success();
    call(&ours(), "DEL", "go1", "eth0", &conf).assert_success();
    assert!(!net.leases().contains_key("10.1.2.2"));
    // Go continues ours
    assert_eq!(add_ok(&go(), "go2", &conf), "10.1.2.4");
    assert_eq!(add_ok(&ours(), "rs2", &conf), "10.1.2.5");
}

#[test]
fn our_leases_are_seen_and_released_by_go() {
    let net = Net::new("hl-rs2go");
    let conf = net.simple("1.0.0", "10.1.2.0/24");
    assert_eq!(add_ok(&ours(), "rs1", &conf), "10.1.2.2");
    call(&go(), "CHECK", "rs1", "eth0", &conf).assert_success();
    let e = call(&go(), "ADD", "rs1", "eth0", &conf).assert_failure();
    assert!(
        e["msg"].as_str().unwrap().contains("duplicate allocation"),
        "{e}"
    );
    assert_eq!(add_ok(&go(), "go1", &conf), "10.1.2.3");
    call(&go(), "DEL", "rs1", "eth0", &conf).assert_success();
    // our index must notice Go's removal and Go's addition
    call(&ours(), "CHECK", "rs1", "eth0", &conf).assert_failure();
    call(&ours(), "CHECK", "go1", "eth0", &conf).assert_success();
    call(&ours(), "DEL", "go1", "eth0", &conf).assert_success();
    assert!(net.leases().is_empty(), "{:?}", net.names());
    // a requested address Go holds is refused by us
    call_args(&go(), "ADD", "go2", "eth0", &conf, "IP=10.1.2.50").assert_success();
    let e = call_args(&ours(), "ADD", "rs2", "eth0", &conf, "IP=10.1.2.50").assert_failure();
    assert!(
        e["msg"].as_str().unwrap().contains("is not available"),
        "{e}"
    );
}

#[test]
fn concurrent_adds_from_both_never_collide() {
    let net = Net::new("hl-both");
    let conf = Arc::new(net.simple("1.0.0", "10.1.2.0/24"));
    let n = 60;
    let c = conf.clone();
    let ips = all_at_once(n, move |i| {
        let bin = if i % 2 == 0 { ours() } else { go() };
        add_ok(&bin, &format!("c{i}"), &c)
    });
    let distinct: HashSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), n, "{ips:?}");
    assert_eq!(net.leases().len(), n);
    // and DELs from the other side release them all
    all_at_once(n, move |i| {
        let bin = if i % 2 == 0 { go() } else { ours() };
        call(&bin, "DEL", &format!("c{i}"), "eth0", &conf).assert_success();
    });
    assert!(net.leases().is_empty(), "{:?}", net.names());
}
