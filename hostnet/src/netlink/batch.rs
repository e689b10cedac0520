//! Pipelined requests: many requests in one datagram, their answers read back in one go,
//! rather than a round trip through the connection per request.
//!
//! The kernel handles a datagram's messages one after the other inside the `sendto` and
//! answers each on its own (an error stops none of the others). So when the send returns
//! every answer is queued on our socket, or was dropped because the receive buffer was
//! full; a chunk is sized so that its answers fit.

use std::io;
use std::sync::atomic::Ordering;

use nix::sys::socket::{setsockopt, sockopt};
use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer, NetlinkMessage, NetlinkPayload,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::{AsyncSocket, AsyncSocketExt, SocketAddr, TokioSocket};

use super::{Netlink, NetlinkError, runtime};

/// At most this many requests per datagram.
const MAX_CHUNK: usize = 256;
/// At most this many bytes of requests per datagram (well under the send buffer).
const MAX_CHUNK_BYTES: usize = 64 * 1024;
/// What one answer may take of the receive buffer: the kernel allocates a route lookup's
/// answer at NLMSG_GOODSIZE (about a page), plus its bookkeeping.
const ANSWER_BUDGET: usize = 8 * 1024;
/// The receive buffer asked for while pipelining: 256 answers' worth. SO_RCVBUFFORCE needs
/// CAP_NET_ADMIN (which the agent has); without it the kernel's rmem_max caps SO_RCVBUF,
/// and chunks get smaller.
const RCVBUF: usize = MAX_CHUNK * ANSWER_BUDGET;
/// One received datagram: a route, an ACK or an error with its request.
const RECV_BUF: usize = 64 * 1024;

/// One request's answer while its chunk is read back.
enum Answer {
    Pending(Vec<RouteNetlinkMessage>),
    Done(Result<Vec<RouteNetlinkMessage>, NetlinkError>),
}

fn os_error(op: String, e: &io::Error) -> NetlinkError {
    NetlinkError::os(op, e.raw_os_error().unwrap_or(nix::libc::EIO))
}

impl Netlink {
    /// Sends each of `msgs` with `NLM_F_REQUEST | flags` (no dumps), pipelined, and returns
    /// each request's inner messages or its own error, in order. A request whose answer
    /// was lost to a receive-buffer overrun gets ENOBUFS: it may have been carried out.
    /// `op(i)` names request `i` for errors.
    pub(super) fn request_many(
        &self,
        op: &dyn Fn(usize) -> String,
        msgs: Vec<RouteNetlinkMessage>,
        flags: u16,
    ) -> Vec<Result<Vec<RouteNetlinkMessage>, NetlinkError>> {
        debug_assert!(flags & NLM_F_DUMP != NLM_F_DUMP, "dumps are not pipelined");
        let bytes = msgs
            .into_iter()
            .map(|msg| {
                let mut req = NetlinkMessage::from(msg);
                req.header.flags = NLM_F_REQUEST | flags;
                req.finalize();
                let mut b = vec![0; req.buffer_len()];
                req.serialize(&mut b);
                b
            })
            .collect();
        self.pipelined(op, bytes, flags & NLM_F_ACK != 0)
    }

    /// [`Self::request_many`] for requests already serialized (header flags included,
    /// `NLM_F_ACK` set), whose answers are only ACKs.
    pub(super) fn request_many_raw(
        &self,
        op: &dyn Fn(usize) -> String,
        msgs: Vec<Vec<u8>>,
    ) -> Vec<Result<(), NetlinkError>> {
        self.pipelined(op, msgs, true)
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }

    /// Sends the serialized requests `msgs`, numbered here, chunk by chunk.
    fn pipelined(
        &self,
        op: &dyn Fn(usize) -> String,
        msgs: Vec<Vec<u8>>,
        acked: bool,
    ) -> Vec<Result<Vec<RouteNetlinkMessage>, NetlinkError>> {
        let mut out = Vec::with_capacity(msgs.len());
        if msgs.is_empty() {
            return out;
        }
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => {
                let errno = e.errno().unwrap_or(nix::libc::EIO);
                return (0..msgs.len())
                    .map(|i| Err(NetlinkError::os(op(i), errno)))
                    .collect();
            }
        };
        // Nothing else uses the socket while we hold the connection: every earlier request
        // was answered in full, and a later one waits for the lock.
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let sock = conn.as_mut().get_mut().socket_mut();
        let chunk = receive_room(sock) / ANSWER_BUDGET;
        let chunk = chunk.clamp(1, MAX_CHUNK);
        let mut msgs = msgs.into_iter().peekable();
        let mut buf = Vec::new();
        while msgs.peek().is_some() {
            let first = out.len();
            let seq0 = self.seq.fetch_add(MAX_CHUNK as u32, Ordering::Relaxed);
            buf.clear();
            let mut n = 0;
            while n < chunk && buf.len() < MAX_CHUNK_BYTES {
                let Some(mut req) = msgs.next() else { break };
                // The sequence number: bytes 8..12 of the netlink header.
                req[8..12].copy_from_slice(&seq0.wrapping_add(n as u32).to_ne_bytes());
                // Each message starts 4-aligned (NLMSG_ALIGN).
                let start = buf.len().next_multiple_of(4);
                buf.resize(start, 0);
                buf.extend_from_slice(&req);
                n += 1;
            }
            let answers = send_and_read(rt, sock, &buf, seq0, n, acked);
            out.extend(answers.into_iter().enumerate().map(|(k, a)| match a {
                Ok(Answer::Done(r)) => r.map_err(|e| relabel(e, op(first + k))),
                Ok(Answer::Pending(_)) => Err(NetlinkError::os(op(first + k), nix::libc::ENOBUFS)),
                Err(e) => Err(os_error(op(first + k), &e)),
            }));
        }
        out
    }
}

/// The receive buffer, raised to [`RCVBUF`] where allowed.
fn receive_room(sock: &TokioSocket) -> usize {
    let raw = sock.socket_ref();
    if setsockopt(raw, sockopt::RcvBufForce, &RCVBUF).is_err() {
        let _ = setsockopt(raw, sockopt::RcvBuf, &RCVBUF);
    }
    // The kernel reports twice what it grants as payload room; half of it is the budget.
    raw.get_rx_buf_sz().map_or(0, |b| b / 2)
}

/// An error of the answers, with the operation's own name.
fn relabel(e: NetlinkError, op: String) -> NetlinkError {
    match e.errno() {
        Some(errno) => NetlinkError::os(op, errno),
        None => NetlinkError::unexpected(op, e.to_string()),
    }
}

/// Sends one datagram of `n` requests numbered from `seq0` and reads their answers: each
/// `Done`, or `Pending` if lost to an overrun; an error of the socket for all when the
/// send or a read failed. `acked`: each answer ends with an ACK (or is a NACK).
fn send_and_read(
    rt: &tokio::runtime::Runtime,
    sock: &TokioSocket,
    buf: &[u8],
    seq0: u32,
    n: usize,
    acked: bool,
) -> Vec<io::Result<Answer>> {
    let errno = |e: &io::Error| e.raw_os_error().unwrap_or(nix::libc::EIO);
    let fail = |e: io::Error| {
        (0..n)
            .map(|_| Err(io::Error::from_raw_os_error(errno(&e))))
            .collect::<Vec<_>>()
    };
    let raw = sock.socket_ref();
    if let Err(e) = raw.send_to(buf, &SocketAddr::new(0, 0), 0) {
        return fail(e);
    }
    let mut answers: Vec<Answer> = (0..n).map(|_| Answer::Pending(Vec::new())).collect();
    let mut pending = n;
    let mut overrun = false;
    let mut rbuf: Vec<u8> = Vec::with_capacity(RECV_BUF);
    while pending > 0 {
        rbuf.clear();
        let got = match raw.recv(&mut rbuf, nix::libc::MSG_DONTWAIT) {
            // All that was queued is read; what is missing was dropped.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && overrun => break,
            // Not expected (the kernel answers within the send); wait for it all the same.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => rt.block_on(sock.recv(&mut rbuf)),
            other => other.map(drop),
        };
        match got {
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOBUFS) => overrun = true,
            Err(e) => {
                for a in answers
                    .iter_mut()
                    .filter(|a| matches!(a, Answer::Pending(_)))
                {
                    *a = Answer::Done(Err(NetlinkError::os("read answers", errno(&e))));
                }
                break;
            }
            Ok(()) => pending -= take_datagram(&rbuf, seq0, acked, &mut answers),
        }
    }
    answers.into_iter().map(Ok).collect()
}

/// Files the messages of one datagram under their requests; returns how many requests
/// it completed.
fn take_datagram(mut data: &[u8], seq0: u32, acked: bool, answers: &mut [Answer]) -> usize {
    let mut done = 0;
    while let Ok(nb) = NetlinkBuffer::new_checked(data) {
        let len = nb.length() as usize;
        let seq = nb.sequence_number();
        let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[..len]);
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
        // Not one of this chunk's (there is none other: the socket had nothing queued).
        let Some(Answer::Pending(got)) = answers.get_mut(seq.wrapping_sub(seq0) as usize) else {
            continue;
        };
        let finished = match parsed {
            Err(e) => Some(Err(NetlinkError::unexpected("read answers", e.to_string()))),
            Ok(m) => match m.payload {
                NetlinkPayload::Error(e) => match e.code {
                    Some(code) => Some(Err(NetlinkError::os("", -code.get()))),
                    None => Some(Ok(std::mem::take(got))),
                },
                NetlinkPayload::InnerMessage(m) => {
                    got.push(m);
                    (!acked).then(|| Ok(std::mem::take(got)))
                }
                NetlinkPayload::Done(_) => Some(Ok(std::mem::take(got))),
                _ => None,
            },
        };
        if let Some(r) = finished {
            answers[seq.wrapping_sub(seq0) as usize] = Answer::Done(r);
            done += 1;
        }
    }
    done
}
