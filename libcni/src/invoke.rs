//! Finding and running plugins: CNI_PATH lookup, exec with env and stdin, decoding the
//! result or the plugin's error JSON, and delegation to an IPAM plugin.

use crate::error::Error;
use crate::file::{MAX_CONFIG, human};
use crate::types::CniResult;
use pipes::Stop;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod pipes;

/// Go `invoke.FindInPath`: the first `dir/plugin` that is a regular file.
pub fn find_in_path(plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
    if plugin.is_empty() {
        return Err(Error::internal("no plugin name provided"));
    }
    if plugin.contains('/') || plugin.contains('\\') {
        return Err(Error::internal(format!("invalid plugin name: {plugin}")));
    }
    if paths.is_empty() {
        return Err(Error::internal("no paths provided"));
    }
    paths
        .iter()
        .map(|dir| dir.join(plugin))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .ok_or_else(|| {
            let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            Error::internal(format!(
                "failed to find plugin {plugin:?} in path [{}]",
                list.join(" ")
            ))
        })
}

/// The directories of a CNI_PATH value (`:`-separated, empty entries skipped).
pub fn split_cni_path(cni_path: &str) -> Vec<PathBuf> {
    std::env::split_paths(cni_path)
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

/// How many times exec is retried while the binary is being replaced ("text file busy").
const BUSY_RETRIES: u32 = 5;

/// Runs a plugin with `env` added to (and overriding) the caller's environment and
/// `stdin` as input. Success yields stdout; failure yields the plugin's error JSON as is,
/// or a clear message when it printed nothing or garbage. The plugin's stderr is
/// passed through to ours once it has exited. A plugin printing more than [`MAX_CONFIG`] on
/// stdout or stderr is killed, with an error naming it and the limit.
pub fn exec_plugin(plugin: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Result<Vec<u8>, Error> {
    exec(plugin, stdin, env, Tie::Free)
}

/// Whether the plugin run dies with its caller (delegation: see `tie.rs`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tie {
    Free,
    DiesWithCaller,
}

fn exec(plugin: &Path, stdin: &[u8], env: &[(&str, &str)], tie: Tie) -> Result<Vec<u8>, Error> {
    exec_plugin_waiting(plugin, stdin, env, tie, &mut || {
        std::thread::sleep(Duration::from_secs(1))
    })
}

/// [`exec`], calling `wait_while_busy` before each retry after ETXTBSY.
fn exec_plugin_waiting(
    plugin: &Path,
    stdin: &[u8],
    env: &[(&str, &str)],
    tie: Tie,
    wait_while_busy: &mut dyn FnMut(),
) -> Result<Vec<u8>, Error> {
    let mut attempt = 0;
    let output = loop {
        match run_once(plugin, stdin, env, tie) {
            Err(Stop::Io(e))
                if e.raw_os_error() == Some(nix::libc::ETXTBSY) && attempt < BUSY_RETRIES =>
            {
                attempt += 1;
                wait_while_busy();
            }
            Err(Stop::Io(e)) => {
                return Err(Error::internal(format!(
                    "failed to execute {}: {e}",
                    plugin.display()
                )));
            }
            Err(Stop::TooMuch(stream)) => {
                return Err(Error::internal(format!(
                    "plugin {} printed more than {} on {stream} (the limit) and was killed",
                    plugin.display(),
                    human(MAX_CONFIG)
                )));
            }
            Ok(out) => break out,
        }
    };
    let _ = std::io::stderr().write_all(&output.stderr);
    if output.status.success() {
        return Ok(output.stdout);
    }
    Err(plugin_error(
        &output.status.to_string(),
        &output.stdout,
        &output.stderr,
    ))
}

fn run_once(
    plugin: &Path,
    stdin: &[u8],
    env: &[(&str, &str)],
    tie: Tie,
) -> Result<std::process::Output, Stop> {
    let mut cmd = Command::new(plugin);
    cmd.envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if tie == Tie::DiesWithCaller {
        sysproc::tie::die_with_caller(&mut cmd);
    }
    // Spawned and waited for on this thread: the tie is to the spawning thread.
    pipes::communicate(cmd.spawn()?, stdin)
}

/// Go `invoke.pluginErr`.
fn plugin_error(exit: &str, stdout: &[u8], stderr: &[u8]) -> Error {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        let stderr = String::from_utf8_lossy(stderr);
        return if stderr.trim().is_empty() {
            Error::new(0, format!("netplugin failed with no error message: {exit}"))
        } else {
            Error::new(
                0,
                format!("netplugin failed: {:?}: {exit}", stderr.trim_end()),
            )
        };
    }
    crate::gojson::from_slice::<Error>(stdout).unwrap_or_else(|e| {
        Error::new(
            0,
            format!(
                "netplugin failed but error parsing its diagnostic message {:?}: {e}",
                String::from_utf8_lossy(stdout)
            ),
        )
    })
}

/// Runs a plugin and decodes its result; a result without `cniVersion` gets the config's.
pub fn exec_plugin_with_result(
    plugin: &Path,
    netconf: &[u8],
    env: &[(&str, &str)],
) -> Result<CniResult, Error> {
    parse_result(plugin, netconf, exec_plugin(plugin, netconf, env)?)
}

fn parse_result(plugin: &Path, netconf: &[u8], out: Vec<u8>) -> Result<CniResult, Error> {
    if out.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::decoding(format!(
            "plugin {} printed no result",
            plugin.display()
        )));
    }
    CniResult::parse_bytes(&out, &config_version_of(netconf)).map_err(|e| {
        Error::decoding(format!(
            "plugin {} printed an invalid result: {}",
            plugin.display(),
            e.msg
        ))
    })
}

fn config_version_of(netconf: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "cniVersion", default)]
        cni_version: Option<serde_json::Value>,
    }
    crate::gojson::from_slice::<Head>(netconf)
        .ok()
        .and_then(|h| h.cni_version?.as_str().map(String::from))
        .unwrap_or_default()
}

/// Delegation to another plugin (IPAM) with the caller's own environment, only
/// CNI_COMMAND changed, and the caller's whole config on stdin.
pub struct Delegate<'a> {
    pub plugin_type: &'a str,
    /// Where to look for the plugin: the caller's CNI_PATH.
    pub cni_path: &'a str,
    pub netconf: &'a [u8],
}

impl Delegate<'_> {
    fn find(&self) -> Result<PathBuf, Error> {
        find_in_path(self.plugin_type, &split_cni_path(self.cni_path))
    }

    pub fn add(&self) -> Result<CniResult, Error> {
        let plugin = self.find()?;
        parse_result(&plugin, self.netconf, self.exec(&plugin, "ADD")?)
    }

    /// Runs a verb that has no result (DEL, CHECK, STATUS, GC).
    pub fn run(&self, command: &str) -> Result<(), Error> {
        self.exec(&self.find()?, command).map(|_| ())
    }

    fn exec(&self, plugin: &Path, command: &str) -> Result<Vec<u8>, Error> {
        let env = [("CNI_COMMAND", command)];
        exec(plugin, self.netconf, &env, Tie::DiesWithCaller)
    }
}

#[cfg(test)]
mod tests;
