//! The TCP connection to the API server, with keepalive: a peer that vanished (node
//! rebooted, NAT or conntrack state lost) is noticed in about `IDLE + COUNT * INTERVAL`
//! even while a watch has nothing to say; unacknowledged writes give up after
//! `USER_TIMEOUT`. ureq's own TCP connector sets neither (and does not hand out its
//! socket), so this is a small TCP transport of our own, after ureq's.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};
use ureq::{Error, Timeout};

use super::Requests;

/// Silence before the first probe, between probes, probes unanswered before the end.
const IDLE: Duration = Duration::from_secs(15);
const INTERVAL: Duration = Duration::from_secs(5);
const COUNT: u32 = 3;
/// Sent data unacknowledged this long ends the connection.
const USER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct KeepaliveTcp {
    requests: Arc<Requests>,
}

impl KeepaliveTcp {
    pub fn new(requests: Arc<Requests>) -> KeepaliveTcp {
        KeepaliveTcp { requests }
    }
}

impl Connector<()> for KeepaliveTcp {
    type Out = Tcp;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<Tcp>, Error> {
        let timeout = details.timeout.not_zero().map(|t| *t);
        let mut last = None;
        for addr in details.addrs.iter() {
            let attempt = match timeout {
                Some(t) => TcpStream::connect_timeout(addr, t),
                None => TcpStream::connect(addr),
            };
            match attempt {
                Ok(stream) => {
                    self.requests.connected();
                    stream.set_nodelay(true)?;
                    keepalive(&stream)?;
                    let config = details.config;
                    let buffers =
                        LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
                    return Ok(Some(Tcp { stream, buffers }));
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    last = Some(Error::Timeout(ureq::Timeout::Connect));
                }
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or(Error::ConnectionFailed))
    }
}

fn keepalive(stream: &TcpStream) -> std::io::Result<()> {
    let secs = |d: Duration| d.as_secs() as u32;
    setsockopt(stream, sockopt::KeepAlive, &true)?;
    setsockopt(stream, sockopt::TcpKeepIdle, &secs(IDLE))?;
    setsockopt(stream, sockopt::TcpKeepInterval, &secs(INTERVAL))?;
    setsockopt(stream, sockopt::TcpKeepCount, &COUNT)?;
    setsockopt(
        stream,
        sockopt::TcpUserTimeout,
        &(USER_TIMEOUT.as_millis() as u32),
    )?;
    Ok(())
}

/// A TCP connection as ureq's transport: blocking I/O under the socket timeouts ureq's
/// budget leaves for each read and write.
pub struct Tcp {
    stream: TcpStream,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for Tcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tcp")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

/// The time left, or the timeout error if none is.
fn left(timeout: NextTimeout) -> Result<Option<Duration>, Error> {
    if timeout.after.is_zero() {
        return Err(Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|t| *t))
}

fn io_error(e: std::io::Error, reason: Timeout) -> Error {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Error::Timeout(reason),
        _ => e.into(),
    }
}

impl Transport for Tcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        self.stream.set_write_timeout(left(timeout)?)?;
        let output = &self.buffers.output()[..amount];
        (&self.stream)
            .write_all(output)
            .map_err(|e| io_error(e, timeout.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        let budget = left(timeout)?;
        let started = Instant::now();
        self.stream.set_read_timeout(budget)?;
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&self.stream).read(input) {
                // A signal: read on with what is left of the budget (SO_RCVTIMEO reads
                // are not restarted).
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    if let Some(budget) = budget {
                        let rest = budget.saturating_sub(started.elapsed());
                        if rest.is_zero() {
                            return Err(Error::Timeout(timeout.reason));
                        }
                        self.stream.set_read_timeout(Some(rest))?;
                    }
                }
                result => break result.map_err(|e| io_error(e, timeout.reason))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    /// Whether a pooled connection can be used again: nothing unasked-for is waiting on
    /// it and the server has not closed it.
    fn is_open(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let open = matches!(
            (&self.stream).read(&mut [0u8]),
            Err(e) if e.kind() == ErrorKind::WouldBlock
        );
        open && self.stream.set_nonblocking(false).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;
    use std::net::TcpListener;

    #[test]
    fn keepalive_probes_a_silent_peer_well_within_a_minute() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        keepalive(&stream).unwrap();
        assert!(getsockopt(&stream, sockopt::KeepAlive).unwrap());
        let idle = getsockopt(&stream, sockopt::TcpKeepIdle).unwrap();
        let intvl = getsockopt(&stream, sockopt::TcpKeepInterval).unwrap();
        let cnt = getsockopt(&stream, sockopt::TcpKeepCount).unwrap();
        assert!(idle + intvl * cnt <= 30, "{idle} + {intvl} * {cnt}");
        let user = getsockopt(&stream, sockopt::TcpUserTimeout).unwrap();
        assert_eq!(user, 30_000);
    }
}
