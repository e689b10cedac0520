//! Throwaway named network namespaces under `/run/netns`, the way
//! `ip netns add` makes them, but without forking: a helper thread unshares
//! a new netns and bind-mounts its `/proc/thread-self/ns/net` onto an empty
//! file. `ip netns list/exec/del` see them.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use sysproc::netns::Netns;

const NETNS_RUN_DIR: &str = "/run/netns";

/// A named netns `cnirs-<prefix>-<pid>-<n>`, unmounted and unlinked on drop
/// (also when the test panics). Needs root.
#[derive(Debug)]
pub struct NamedNetns {
    name: String,
    // Field order: close the fd before the mount goes (not required, tidy).
    ns: Netns,
    mount: Mountpoint,
}

impl NamedNetns {
    /// Create a new, empty netns (loopback down, like `ip netns add`).
    ///
    /// # Panics
    /// On any failure (tests only), after cleaning up what was made.
    pub fn new(prefix: &str) -> NamedNetns {
        assert!(
            prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "netns prefix {prefix:?}: use [A-Za-z0-9_-]"
        );
        prepare_run_dir();
        let (name, mount) = loop {
            let name = crate::unique_name(&format!("cnirs-{prefix}"));
            let path = Path::new(NETNS_RUN_DIR).join(&name);
            // create_new: a leftover of an earlier run with our pid is never reused.
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => break (name, Mountpoint { path }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("creating {}: {e}", path.display()),
            }
        };
        bind_new_netns(&mount.path)
            .unwrap_or_else(|e| panic!("creating netns {}: {e}", mount.path.display()));
        let ns = Netns::open(&mount.path).unwrap_or_else(|e| panic!("{e}"));
        NamedNetns { name, ns, mount }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`, for `CNI_NETNS`.
    pub fn path(&self) -> &Path {
        &self.mount.path
    }

    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// Run `f` on a thread inside this netns (see [`Netns::run`]).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.ns
            .run(f)
            .unwrap_or_else(|e| panic!("entering {}: {e}", self.name))
    }

    /// Run `cmd` to completion inside this netns; the status is not checked.
    /// The child is forked from a thread that joined the netns, so it
    /// inherits it (no `ip netns exec`, no /sys remount: use netlink tools).
    pub fn run_in(&self, mut cmd: Command) -> Output {
        self.run(move || cmd.output())
            .unwrap_or_else(|e| panic!("running a command in {}: {e}", self.name))
    }

    /// Run `argv` inside this netns, panic unless it succeeds, return stdout.
    /// E.g. `ns.exec_in(&["ip", "-j", "link", "show"])`.
    pub fn exec_in(&self, argv: &[&str]) -> String {
        let (program, args) = argv.split_first().expect("exec_in needs a program");
        let mut cmd = Command::new(program);
        cmd.args(args);
        let out = self.run_in(cmd);
        assert!(
            out.status.success(),
            "{argv:?} in {} failed ({}): {}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("command output is UTF-8")
    }
}

/// The bind-mount file; its drop undoes `NamedNetns::new` step by step.
#[derive(Debug)]
struct Mountpoint {
    path: PathBuf,
}

impl Drop for Mountpoint {
    fn drop(&mut self) {
        // Loop: if /run/netns was bind-mounted onto itself after we mounted
        // (a concurrent `ip netns add`), our mount is stacked twice, and
        // unlink says EBUSY until both are gone.
        for _ in 0..4 {
            match umount2(&self.path, MntFlags::MNT_DETACH) {
                Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
                Err(e) => eprintln!("warning: umount {}: {e}", self.path.display()),
            }
            match std::fs::remove_file(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::NotFound => return,
                Err(e) if e.raw_os_error() == Some(Errno::EBUSY as i32) => continue,
                Err(e) => {
                    eprintln!("warning: removing {}: {e}", self.path.display());
                    return;
                }
            }
        }
        eprintln!("warning: {} still busy, left behind", self.path.display());
    }
}

/// Unshare a netns on a helper thread (the caller's thread never moves) and
/// pin it by bind-mounting it onto `target`.
fn bind_new_netns(target: &Path) -> nix::Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| {
            unshare(CloneFlags::CLONE_NEWNET)?;
            mount(
                Some("/proc/thread-self/ns/net"),
                target,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Make /run/netns a shared mount point, as `ip netns add` does, so netns
/// mounts propagate into other mount namespaces and `ip netns` interoperates.
/// Once per process.
fn prepare_run_dir() {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        std::fs::create_dir_all(NETNS_RUN_DIR).map_err(|e| format!("mkdir: {e}"))?;
        let shared = MsFlags::MS_SHARED | MsFlags::MS_REC;
        let none = None::<&str>;
        match mount(none, NETNS_RUN_DIR, none, shared, none) {
            Ok(()) => Ok(()),
            // Not a mount point yet: bind it onto itself (recursively, to
            // carry existing netns mounts), then share it.
            Err(Errno::EINVAL) => mount(
                Some(NETNS_RUN_DIR),
                NETNS_RUN_DIR,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            )
            .and_then(|()| mount(none, NETNS_RUN_DIR, none, shared, none))
            .map_err(|e| format!("bind-mount: {e}")),
            Err(e) => Err(format!("make-rshared: {e}")),
        }
    });
    if let Err(e) = ready {
        panic!("preparing {NETNS_RUN_DIR}: {e}");
    }
}
