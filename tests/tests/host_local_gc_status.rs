//! GC and STATUS, which the reference host-local never implemented.

mod host_local_support;

use host_local_support::*;
use serde_json::json;

fn gc_conf(net: &Net, valid: Option<serde_json::Value>) -> String {
    let extra = match valid {
        Some(v) => json!({"cni.dev/valid-attachments": v}),
        None => json!({}),
    };
    net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
        extra,
    )
}

/// Runs GC; returns its stderr.
fn gc(net: &Net, valid: Option<serde_json::Value>) -> String {
    let out = plugin(&ours(), "GC", &gc_conf(net, valid)).run();
    out.assert_success();
    out.stderr_str()
}

#[test]
fn gc_releases_what_is_not_valid() {
    let net = Net::new("hl-gc");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    for id in ["a", "b", "c"] {
        add_ok(&ours(), id, &conf);
    }
    call(&ours(), "ADD", "a", "eth1", &conf).assert_success();
    // legacy ID-only leases of a valid and of a gone container, a corrupt one and an
    // empty one (its writer was killed between creating and writing it)
    std::fs::write(net.store().join("10.1.2.100"), "a").unwrap();
    std::fs::write(net.store().join("10.1.2.101"), "gone").unwrap();
    std::fs::write(net.store().join("10.1.2.102"), "not a lease").unwrap();
    std::fs::write(net.store().join("10.1.2.103"), "").unwrap();
    let before: Vec<String> = net.names();

    // no key: nothing released
    gc(&net, None);
    assert_eq!(net.names(), before);

    let stderr = gc(
        &net,
        Some(
            json!([{"containerID": "a", "ifname": "eth0"}, {"containerID": "c", "ifname": "eth0"}]),
        ),
    );
    assert!(stderr.contains("leaves lease 10.1.2.102 alone"), "{stderr}");
    let left: Vec<String> = net.leases().into_keys().collect();
    assert_eq!(left, ["10.1.2.100", "10.1.2.102", "10.1.2.2", "10.1.2.4"]);
    assert!(net.store().join("lock").exists());
    assert!(net.store().join("last_reserved_ip.0").exists());
    // what GC released is free again, and what it kept still belongs to its owner
    call(&ours(), "CHECK", "a", "eth0", &conf).assert_success();
    call(&ours(), "CHECK", "b", "eth0", &conf).assert_failure();

    // an empty list releases every readable lease
    gc(&net, Some(json!([])));
    assert_eq!(net.leases().into_keys().collect::<Vec<_>>(), ["10.1.2.102"]);
}

/// Go's libcni sends an empty list of valid attachments as `null`, under both keys (CRI-O
/// does at every start on a node with no pod): the empty list, every readable lease goes
/// and the addresses can be leased again. `[]` under both keys the same.
#[test]
fn gc_reads_null_lists_as_empty() {
    for list in [json!(null), json!([])] {
        let net = Net::new("hl-gc-null");
        let conf = net.simple("1.1.0", "10.1.2.0/24");
        for id in ["a", "b"] {
            add_ok(&ours(), id, &conf);
        }
        std::fs::write(net.store().join("10.1.2.102"), "not a lease").unwrap();
        let lists = json!({"cni.dev/valid-attachments": list, "cni.dev/attachments": list});
        let gc = net.conf(
            "1.1.0",
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
            lists,
        );
        plugin(&ours(), "GC", &gc).run().assert_success();
        let left: Vec<String> = net.leases().into_keys().collect();
        assert_eq!(left, ["10.1.2.102"], "{list}");
        call_args(&ours(), "ADD", "c", "eth0", &conf, "IP=10.1.2.2").assert_success();
    }
}

/// A host-local (Go or ours) killed between creating a lease (O_EXCL) and writing it
/// leaves an empty file: taken for ADD while it exists, released by GC with a valid list.
#[test]
fn gc_releases_an_empty_lease_left_by_a_crashed_writer() {
    let net = Net::new("hl-gc-empty");
    // .1 is the gateway: .2, .3 and .4 are the whole range
    let conf = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.2.4"}]]}),
        json!({}),
    );
    assert_eq!(add_ok(&ours(), "a", &conf), "10.1.2.2");
    let empty = net.store().join("10.1.2.3");
    std::fs::write(&empty, "").unwrap();
    let never_handed_out = || {
        let e = call_args(&ours(), "ADD", "x", "eth0", &conf, "IP=10.1.2.3").assert_failure();
        assert!(e["msg"].as_str().unwrap().contains("10.1.2.3"), "{e}");
        assert!(std::fs::read(&empty).unwrap().is_empty());
    };
    never_handed_out();
    assert_eq!(add_ok(&ours(), "b", &conf), "10.1.2.4");
    call(&ours(), "ADD", "c", "eth0", &conf).assert_failure();
    never_handed_out();

    // no key: nothing released, the address stays taken
    gc(&net, None);
    assert!(empty.exists());
    call(&ours(), "ADD", "c", "eth0", &conf).assert_failure();

    let valid =
        json!([{"containerID": "a", "ifname": "eth0"}, {"containerID": "b", "ifname": "eth0"}]);
    gc(&net, Some(valid));
    assert!(!empty.exists());
    let leases = net.leases();
    assert_eq!(leases.keys().collect::<Vec<_>>(), ["10.1.2.2", "10.1.2.4"]);
    assert_eq!(leases["10.1.2.2"], "a\r\neth0");
    assert_eq!(leases["10.1.2.4"], "b\r\neth0");
    call(&ours(), "CHECK", "a", "eth0", &conf).assert_success();
    call(&ours(), "CHECK", "b", "eth0", &conf).assert_success();
    // the address is usable again
    assert_eq!(add_ok(&ours(), "c", &conf), "10.1.2.3");
}

#[test]
fn gc_of_a_network_never_used_is_a_no_op() {
    let net = Net::new("hl-gc-none");
    gc(&net, Some(json!([])));
    assert!(!net.store().exists());
}

fn status(conf: &str) -> cni_tests::PluginOutput {
    plugin(&ours(), "STATUS", conf).run()
}

#[test]
fn status_reports_exhaustion_of_a_small_range() {
    let net = Net::new("hl-status");
    // .1 is the gateway: .2 and .3 are the whole range
    let conf = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.2.3"}], [{"subnet": "2001:db8::/64"}]]}),
        json!({}),
    );
    status(&conf).assert_success();
    add_ok(&ours(), "a", &conf);
    status(&conf).assert_success();
    add_ok(&ours(), "b", &conf);
    let e = status(&conf).assert_failure();
    assert_eq!(e["code"], 50);
    assert_eq!(
        e["msg"],
        "no IP addresses available in range set: 10.1.2.1-10.1.2.3"
    );
    let e = call(&ours(), "ADD", "c", "eth0", &conf).assert_failure();
    assert_eq!(
        e["msg"],
        "failed to allocate for range 0: no IP addresses available in range set: 10.1.2.1-10.1.2.3"
    );
    call(&ours(), "DEL", "a", "eth0", &conf).assert_success();
    status(&conf).assert_success();
}

#[test]
fn status_fails_when_the_store_cannot_be_written() {
    let net = Net::new("hl-status-ro");
    // dataDir is a regular file: the store can never be created
    std::fs::write(net.data_dir(), "not a dir").unwrap();
    let e = status(&net.simple("1.1.0", "10.1.2.0/24")).assert_failure();
    assert_eq!(e["code"], 50, "{e}");
    // and config errors stay config errors
    let e = status(&net.simple("1.1.0", "10.1.2.1/24")).assert_failure();
    assert_eq!(e["code"], 7);
}

/// A store on a read-only filesystem (a read-only bind mount in a private mount
/// namespace of a child process; the machine's mounts are never touched): STATUS is 50,
/// CHECK still reads, ADD fails, DEL of a held lease fails (the runtime retries) while
/// DEL of an unknown attachment succeeds, and nothing is written.
#[test]
#[ignore = "needs root"]
fn status_is_50_on_a_read_only_store() {
    if !testkit::privileged("status_is_50_on_a_read_only_store") {
        return;
    }
    let net = Net::new("hl-status-rofs");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    add_ok(&ours(), "a", &conf);
    let before = net.leases();
    let data = net.data_dir();
    let script = format!(
        "mount --bind -o ro {d} {d} && for c in $CMDS; do \
           printf '%s' \"$CONF\" | CNI_COMMAND=$c CNI_CONTAINERID=$ID CNI_NETNS={ns} \
           CNI_IFNAME=eth0 CNI_PATH=/nonexistent {bin} | tr -d '\\n'; echo \" rc=$?\"; done",
        d = data.display(),
        ns = FAKE_NETNS,
        bin = ours().display()
    );
    let run = |id: &str, cmds: &str| {
        let out = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env("CONF", &conf)
            .env("ID", id)
            .env("CMDS", cmds)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let lines: Vec<String> = run("a", "STATUS CHECK ADD")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let status_json = lines[0].rsplit_once(" rc=").unwrap().0;
    let status_err: serde_json::Value = serde_json::from_str(status_json).unwrap();
    assert_eq!(status_err["code"], 50, "{lines:?}");
    assert!(lines[1].ends_with(" rc=0"), "CHECK reads: {lines:?}");
    let lines: Vec<String> = run("b", "STATUS CHECK ADD")
        .lines()
        .map(str::to_string)
        .collect();
    let add_json = lines[2].rsplit_once(" rc=").unwrap().0;
    let add_err: serde_json::Value = serde_json::from_str(add_json).unwrap();
    assert!(
        add_err["msg"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{lines:?}"
    );
    let del = run("a", "DEL");
    let del_json = del.trim_end().rsplit_once(" rc=").unwrap().0;
    let del_err: serde_json::Value = serde_json::from_str(del_json).unwrap();
    assert_eq!(del_err["code"], 5, "{del}");
    assert!(
        del_err["msg"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{del}"
    );
    assert!(run("b", "DEL").ends_with(" rc=0\n"), "DEL of nobody");
    assert_eq!(net.leases(), before);
}
