//! The tests' stand-in API server as a program, for scripts/e2e-install.sh:
//! `stub-apiserver LISTEN_ADDR DIR NODE CIDR[,CIDR]` serves `NODE` with those podCIDRs,
//! writes the service-account files `DIR/token` and `DIR/ca.crt`, then `DIR/ready`,
//! and runs until killed.

#[path = "../tests/support/apiserver.rs"]
#[allow(dead_code)] // the tests use the rest
mod apiserver;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, dir, node, cidrs] = args.as_slice() else {
        eprintln!("usage: stub-apiserver LISTEN_ADDR DIR NODE CIDR[,CIDR]");
        std::process::exit(2);
    };
    let cidrs: Vec<&str> = cidrs.split(',').collect();
    let api = apiserver::ApiServer::start(listen, node, &cidrs);
    let dir = std::path::Path::new(dir);
    std::fs::write(dir.join("token"), &api.token).unwrap();
    std::fs::write(dir.join("ca.crt"), &api.ca_pem).unwrap();
    std::fs::write(dir.join("ready"), api.url()).unwrap();
    eprintln!("stub-apiserver: {} serving node {node}", api.url());
    loop {
        std::thread::park();
    }
}
