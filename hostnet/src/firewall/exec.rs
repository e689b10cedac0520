//! Running the firewall tools. The child inherits the calling thread's network
//! namespace, which is how tests (and a plugin running in a fake host netns)
//! direct rules to the right place.

use std::io::Write;
use std::process::{Command, Stdio};

use super::error::{FirewallError, Result};

/// Run `program args...`, feeding `stdin` if given; return stdout on success.
pub(crate) fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let command = display(program, args);
    let mut cmd = Command::new(program);
    // A killed plugin must not leave a tool running that adds rules after the runtime's DEL.
    libcni::invoke::die_with_caller(&mut cmd);
    let mut child = cmd
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FirewallError::Spawn {
            command: command.clone(),
            source,
        })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Scripts are small (a few KiB), far below the pipe buffer the tool
        // drains before writing anything back, so writing first cannot deadlock.
        pipe.write_all(input.as_bytes())
            .map_err(|source| FirewallError::Spawn {
                command: command.clone(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| FirewallError::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(FirewallError::Failed {
            command,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            script: stdin.map(str::to_string),
        });
    }
    String::from_utf8(out.stdout).map_err(|e| FirewallError::Parse {
        command,
        source: e.into(),
    })
}

/// True when `err` is the tool saying the table/chain asked for does not exist.
pub(crate) fn is_no_such_object(err: &FirewallError) -> bool {
    matches!(err, FirewallError::Failed { stderr, .. }
        if stderr.contains("No such file or directory")
            || stderr.contains("does not exist"))
}

fn display(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}
