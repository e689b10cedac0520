//! Talking to a running plugin: its stdin is fed while its stdout and stderr are read, in
//! one poll loop. Writing all of stdin first would deadlock with a plugin that prints more
//! than a pipe buffer (64 KiB) before it has read a stdin larger than one (Go feeds stdin
//! from a goroutine for the same reason). Of each output at most [`MAX_CONFIG`] is kept: a
//! result is the next plugin's prevResult, on stdin, where that is the limit anyway, and
//! diagnostics need no more. A plugin printing more is killed, so one printing without end
//! cannot grow its caller (the runtime, or a plugin delegating to IPAM) without bound.

use crate::file::MAX_CONFIG;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Output};

/// Why a run has no output.
#[derive(Debug)]
pub(super) enum Stop {
    /// Starting or talking to the process failed.
    Io(io::Error),
    /// The plugin printed more than [`MAX_CONFIG`] on this stream (`"stdout"`, `"stderr"`).
    TooMuch(&'static str),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Io(e)
    }
}

/// Feeds `input` to `child` and collects its stdout and stderr until both are closed, then
/// waits for it. Like Go's `exec.Cmd.Wait`, this waits as long as the plugin (or a child it
/// left holding its stdout or stderr) keeps running: bounding a plugin's time is the
/// runtime's timeout, which kills it. On any failure the plugin is killed; it is always
/// reaped, so no zombie is left.
pub(super) fn communicate(mut child: Child, input: &[u8]) -> Result<Output, Stop> {
    let pumped = pump(&mut child, input);
    if pumped.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let (stdout, stderr) = pumped?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// One output of the plugin: the pipe while it is open, what came so far.
struct Sink {
    pipe: Option<File>,
    bytes: Vec<u8>,
    name: &'static str,
}

impl Sink {
    fn new(pipe: Option<impl Into<OwnedFd>>, name: &'static str) -> Sink {
        let pipe = pipe.map(|p| File::from(p.into()));
        Sink {
            pipe,
            bytes: Vec::new(),
            name,
        }
    }

    /// One read, after poll said the pipe is readable (so it does not block).
    fn read_some(&mut self, chunk: &mut [u8]) -> Result<(), Stop> {
        let Some(pipe) = &mut self.pipe else {
            return Ok(());
        };
        match pipe.read(chunk) {
            Ok(0) => self.pipe = None,
            Ok(n) if (self.bytes.len() + n) as u64 > MAX_CONFIG => {
                return Err(Stop::TooMuch(self.name));
            }
            Ok(n) => self.bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// The loop of [`communicate`], until stdout and stderr are closed (stdin not yet written
/// then is dropped: nobody could read an answer to it). Returning drops (closes) all three
/// pipes: after a kill, a process the plugin left behind then gets EPIPE instead of holding us.
fn pump(child: &mut Child, mut input: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Stop> {
    let mut stdin = child.stdin.take().map(|p| File::from(OwnedFd::from(p)));
    if let Some(pipe) = &stdin {
        // Write only what fits: a full pipe must not stop us reading.
        fcntl(pipe, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    }
    let mut out = Sink::new(child.stdout.take(), "stdout");
    let mut err = Sink::new(child.stderr.take(), "stderr");
    let mut chunk = vec![0; 64 << 10];
    while out.pipe.is_some() || err.pipe.is_some() {
        if input.is_empty() {
            stdin = None; // EOF for the plugin
        }
        let ready = {
            let pipes = [
                stdin.as_ref().map(|p| (p, PollFlags::POLLOUT)),
                out.pipe.as_ref().map(|p| (p, PollFlags::POLLIN)),
                err.pipe.as_ref().map(|p| (p, PollFlags::POLLIN)),
            ];
            let mut fds: Vec<PollFd> = pipes
                .iter()
                .flatten()
                .map(|(p, events)| PollFd::new(p.as_fd(), *events))
                .collect();
            match poll(&mut fds, PollTimeout::NONE) {
                Err(Errno::EINTR) => continue,
                r => r.map_err(io::Error::from)?,
            };
            // Flags nix does not know (None) count as ready: the read or write will tell.
            let mut revents = fds.iter().map(|fd| fd.any() != Some(false));
            pipes.map(|p| p.is_some() && revents.next() == Some(true))
        };
        if ready[0] {
            match stdin.as_mut().map(|p| p.write(input)) {
                Some(Ok(n)) => input = &input[n..],
                Some(Err(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                // EPIPE: the plugin exited (or closed stdin) without reading it all; its
                // exit status tells what happened.
                _ => stdin = None,
            }
        }
        if ready[1] {
            out.read_some(&mut chunk)?;
        }
        if ready[2] {
            err.read_some(&mut chunk)?;
        }
    }
    Ok((out.bytes, err.bytes))
}
