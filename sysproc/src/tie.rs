//! A delegated plugin dies with the plugin that runs it. A bridge killed during its IPAM
//! ADD (node pressure, a runtime's timeout) would otherwise leave host-local running on
//! its own: it may lease an address after the runtime's DEL has released the container's,
//! and nothing would ever release it. With the tie, the kernel SIGKILLs the IPAM plugin
//! as the bridge's exit begins, before the runtime can see that exit and send DEL; the
//! store lock, held until the IPAM plugin is gone, orders that DEL after anything it did.
//!
//! The firewall tools a plugin runs (`iptables-restore`, `nft`) are tied the same way, so
//! a killed bridge cannot add rules after the runtime's DEL removed them; each tool's
//! commit is one atomic transaction, so killing it leaves all or nothing.
//!
//! The runtime side (`cnitool`, the list operations) does not tie the plugins it runs: a
//! plugin left alone by a dying runtime finishes its verb, as the Go runtime's do.

// The one unsafe call of the library: a `pre_exec` hook.
#![allow(unsafe_code)]

use nix::sys::prctl;
use nix::sys::signal::Signal;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd`'s process get SIGKILL when the thread spawning it ends (the caller waits
/// for it on that thread, so in effect: when the caller dies).
pub fn die_with_caller(cmd: &mut Command) {
    let caller = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before exec, and calls only prctl(2) and
    // getppid(2): async-signal-safe, no allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The caller may have died between fork and prctl: then no signal will come.
            if nix::unistd::getppid() != caller {
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command};

    #[test]
    fn the_child_is_killed_when_the_spawning_thread_ends() {
        let mut child: Child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            super::die_with_caller(&mut cmd);
            cmd.spawn().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(9));
    }
}
