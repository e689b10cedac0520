//! cni-rs-agent: the plugins' installer and the node agent (see the library).

use std::process::ExitCode;

use clap::Parser;
use cni_rs_agent::control::{run, signals};
use cni_rs_agent::{config, log};
use hostnet::node::{HostNodeNet, NodeNet};

fn main() -> ExitCode {
    let args = config::Args::parse();
    // Before anything else (and before any thread): every later wait must end on SIGTERM.
    let stop = match signals::Stop::install() {
        Ok(stop) => stop,
        Err(e) => {
            log(&format!("error: blocking SIGTERM: {e}"));
            return ExitCode::FAILURE;
        }
    };
    hostnet::sysctl::set_root(args.sysctl_dir.clone());
    let result = if args.uninstall {
        match HostNodeNet::current() {
            Ok(net) => run::uninstall(&args, Ok(&net as &dyn NodeNet), Some(&net)),
            Err(e) => run::uninstall(&args, Err(e), None),
        }
    } else if args.once {
        run::once(&args, &stop)
    } else {
        run::daemon(&args, stop)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}
