//! cni-install: the DaemonSet container that puts the cni-rs plugins and this node's
//! conflist onto the host and keeps them there.

// Unsafe code only where it is allowed by name: the signal syscalls in `signals`.
#![deny(unsafe_code)]

mod api;
mod atomic;
mod binaries;
mod config;
mod conflist;
mod host_mtu;
mod podcidr;
mod run;
#[allow(unsafe_code)]
mod signals;

use std::process::ExitCode;

use clap::Parser;

/// One line per action on stderr.
fn log(msg: &str) {
    eprintln!("cni-install: {msg}");
}

fn main() -> ExitCode {
    let args = config::Args::parse();
    // Before anything else: every later wait must end on SIGTERM.
    let stop = match signals::Stop::install() {
        Ok(stop) => stop,
        Err(e) => {
            log(&format!("error: blocking SIGTERM: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = if args.uninstall {
        run::uninstall(&args)
    } else if args.once {
        run::once(&args, &stop)
    } else {
        run::daemon(&args, &stop)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}
