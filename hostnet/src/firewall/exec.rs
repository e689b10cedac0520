//! Running the firewall tools. The child inherits the calling thread's network
//! namespace, which is how tests (and a plugin running in a fake host netns)
//! direct rules to the right place.

use std::io::Write;
use std::process::{Child, Command, Stdio};

use super::error::{FirewallError, Result};

/// Run `program args...`, feeding `stdin` if given; return stdout on success.
pub(crate) fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    start(program, args, stdin.is_some())?.finish(stdin)
}

/// A tool started, not yet given its input: its start-up (loading, probing the kernel)
/// overlaps whatever the caller does meanwhile. Dropped unfinished, it is killed before it
/// read anything, so it changed nothing.
pub(crate) struct Started {
    child: Option<Child>,
    command: String,
}

/// Starts `program args...` (stdin piped when `with_stdin`, else empty).
pub(crate) fn start(program: &str, args: &[&str], with_stdin: bool) -> Result<Started> {
    let command = display(program, args);
    let mut cmd = Command::new(program);
    // A killed plugin must not leave a tool running that adds rules after the runtime's DEL.
    sysproc::tie::die_with_caller(&mut cmd);
    let child = cmd
        .args(args)
        .stdin(if with_stdin {
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
    Ok(Started {
        child: Some(child),
        command,
    })
}

impl Started {
    /// Feeds `stdin` (if the tool was started with one), waits; stdout on success.
    pub(crate) fn finish(mut self, stdin: Option<&str>) -> Result<String> {
        let command = std::mem::take(&mut self.command);
        let mut child = self.child.take().expect("a started tool finishes once");
        let spawn_error = |source| FirewallError::Spawn {
            command: command.clone(),
            source,
        };
        // Scripts are small (a few KiB), far below the pipe buffer the tool drains before
        // writing anything back, so writing first cannot deadlock. A tool that exited
        // without reading is still waited for: its status and stderr tell why.
        let written = match (stdin, child.stdin.take()) {
            (Some(input), Some(mut pipe)) => pipe.write_all(input.as_bytes()),
            _ => Ok(()),
        };
        let out = child.wait_with_output().map_err(spawn_error)?;
        if !out.status.success() {
            return Err(FirewallError::Failed {
                command,
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                script: stdin.map(str::to_string),
            });
        }
        written.map_err(spawn_error)?;
        String::from_utf8(out.stdout).map_err(|e| FirewallError::Parse {
            command,
            source: e.into(),
        })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_exits_without_reading_reports_its_own_failure() {
        let tool = start("sh", &["-c", "echo refused >&2; exit 3"], true).unwrap();
        // Far more than a pipe holds: the write fails once the tool is gone.
        let script = "x".repeat(1 << 20);
        match tool.finish(Some(&script)) {
            Err(FirewallError::Failed { status, stderr, .. }) => {
                assert_eq!((status.code(), stderr.as_str()), (Some(3), "refused"));
            }
            other => panic!("{other:?}"),
        }
    }
}
