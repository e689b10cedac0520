//! Many plugin processes at once against one store.

mod host_local_support;

use host_local_support::*;
use std::collections::HashSet;
use std::sync::Arc;

#[test]
fn hundred_adds_then_hundred_dels() {
    let net = Net::new("hl-conc");
    let conf = Arc::new(net.simple("1.0.0", "10.1.2.0/24"));
    let c = conf.clone();
    let ips = all_at_once(100, move |i| add_ok(&ours(), &format!("c{i}"), &c));
    let distinct: HashSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), 100, "{ips:?}");
    assert_eq!(net.leases().len(), 100);
    let c = conf.clone();
    all_at_once(100, move |i| {
        call(&ours(), "DEL", &format!("c{i}"), "eth0", &c).assert_success();
    });
    assert!(net.is_empty_store(), "{:?}", net.names());
}
