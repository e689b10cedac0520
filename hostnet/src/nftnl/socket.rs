//! A `NETLINK_NETFILTER` socket speaking nf_tables: batches (one transaction:
//! all of it or nothing), dumps and single gets.

use std::io;

use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;
use rtnetlink::sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

use super::attr::Attrs;
use super::error::NftError;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const HEADER_LEN: usize = 16;
const NFGEN_LEN: usize = 4;

/// The longest the kernel may take to answer before we give up (it answers in
/// microseconds; this only bounds a lost answer).
const ANSWER_TIMEOUT_SECS: i64 = 10;

/// One nf_tables message: `NFT_MSG_*` type, protocol family, extra netlink flags
/// (`NLM_F_CREATE` ...), attributes, and what it does (for errors).
#[derive(Debug, Clone)]
pub struct Msg {
    pub kind: u16,
    pub family: u8,
    pub flags: u16,
    pub attrs: Attrs,
    pub what: String,
    /// Kernel features this message needs (named in the error if the kernel lacks one).
    pub needs: &'static str,
}

/// An answer message: its `NFT_MSG_*` type and attributes.
#[derive(Debug)]
pub struct Answer {
    pub kind: u16,
    pub attrs: Vec<u8>,
}

pub struct NfSocket {
    sock: Socket,
    seq: u32,
}

impl std::fmt::Debug for NfSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NfSocket")
    }
}

/// The kernel's accounting of one queued ACK (its skb's truesize, rounded up).
const ACK_TRUESIZE: usize = 2048;
/// ACKs the default receive buffer (about 208 KiB) surely holds.
const ACKS_IN_DEFAULT_RCVBUF: usize = 64;
const MAX_RCVBUF: usize = 256 << 20;

fn header(buf: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16, body: &[u8]) {
    let len = u32::try_from(HEADER_LEN + NFGEN_LEN + body.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: family, NFNETLINK_V0, res_id (big endian).
    buf.push(family);
    buf.push(0);
    buf.extend_from_slice(&res_id.to_be_bytes());
    buf.extend_from_slice(body);
}

/// One received netlink message.
struct Received {
    ty: u16,
    flags: u16,
    seq: u32,
    /// For `NLMSG_ERROR`: the errno (0 for an ACK).
    errno: i32,
    /// After the nfgenmsg header.
    attrs: Vec<u8>,
}

fn split(datagram: &[u8]) -> Vec<Received> {
    let mut out = Vec::new();
    let mut rest = datagram;
    while rest.len() >= HEADER_LEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < HEADER_LEN || len > rest.len() {
            break;
        }
        let ty = u16::from_ne_bytes([rest[4], rest[5]]);
        let flags = u16::from_ne_bytes([rest[6], rest[7]]);
        let seq = u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let body = &rest[HEADER_LEN..len];
        let errno = match ty {
            NLMSG_ERROR | NLMSG_DONE if body.len() >= 4 => {
                -i32::from_ne_bytes([body[0], body[1], body[2], body[3]])
            }
            _ => 0,
        };
        let attrs = body.get(NFGEN_LEN..).unwrap_or_default().to_vec();
        out.push(Received {
            ty,
            flags,
            seq,
            errno,
            attrs,
        });
        rest = &rest[((len + 3) & !3).min(rest.len())..];
    }
    out
}

impl NfSocket {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> Result<NfSocket, NftError> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(NftError::socket)?;
        sock.bind_auto()
            .map_err(|e| NftError::io("bind netfilter socket", e))?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|e| NftError::io("connect netfilter socket", e))?;
        setsockopt(
            &sock,
            sockopt::ReceiveTimeout,
            &TimeVal::new(ANSWER_TIMEOUT_SECS, 0),
        )
        .map_err(|e| NftError::io("set netfilter socket timeout", e.into()))?;
        // Acks without a copy of the request (a batch of large set elements).
        let _ = sock.set_cap_ack(true);
        Ok(NfSocket { sock, seq: 0 })
    }

    /// The port id the kernel gave this socket: the sender it stamps on the notifications
    /// of our own batches.
    pub fn port_id(&self) -> Option<u32> {
        let mut addr = SocketAddr::new(0, 0);
        self.sock.get_address(&mut addr).ok()?;
        Some(addr.port_number())
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&self, buf: &[u8], what: &str) -> Result<(), NftError> {
        // A large batch must fit the send buffer whole (SO_SNDBUFFORCE needs CAP_NET_ADMIN,
        // which the agent has; without it the default buffer stays).
        let want = buf.len().saturating_mul(2);
        if want > 200_000 {
            let _ = setsockopt(&self.sock, sockopt::SndBufForce, &want);
        }
        self.sock
            .send(buf, 0)
            .map_err(|e| NftError::io(what, e))
            .map(drop)
    }

    fn receive(&self, what: &str) -> Result<Vec<Received>, NftError> {
        let (datagram, _) = self
            .sock
            .recv_from_full()
            .map_err(|e| NftError::io(what, e))?;
        Ok(split(&datagram))
    }

    /// Sends `msgs` as one transaction. The kernel applies all or none; the first
    /// refused message's error is returned, naming what it did.
    pub fn batch(&mut self, msgs: &[Msg]) -> Result<(), NftError> {
        let mut buf = Vec::new();
        let begin = self.next_seq();
        header(
            &mut buf,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        let mut pending = Vec::with_capacity(msgs.len());
        for m in msgs {
            let seq = self.next_seq();
            let ty = (NFNL_SUBSYS_NFTABLES << 8) | m.kind;
            header(
                &mut buf,
                ty,
                NLM_F_REQUEST | NLM_F_ACK | m.flags,
                seq,
                m.family,
                0,
                &m.attrs.0,
            );
            pending.push((seq, m.what.as_str(), m.needs));
        }
        let end = self.next_seq();
        header(
            &mut buf,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        // The kernel queues every message's ACK before we read one: at a few hundred
        // messages (1,000 policies' chains and rules) the default receive buffer
        // overflows (ENOBUFS) and the batch's outcome is lost. Room for all of them, as
        // nft does (SO_RCVBUFFORCE: CAP_NET_ADMIN, which the agent has).
        if msgs.len() > ACKS_IN_DEFAULT_RCVBUF {
            let want = msgs.len().saturating_mul(ACK_TRUESIZE).min(MAX_RCVBUF);
            let _ = setsockopt(&self.sock, sockopt::RcvBufForce, &want);
        }
        self.send(&buf, "send nf_tables batch")?;

        let mut first_error: Option<NftError> = None;
        while !pending.is_empty() {
            for r in self.receive("read nf_tables answers")? {
                if r.ty != NLMSG_ERROR {
                    continue;
                }
                if r.seq == begin || r.seq == end {
                    // The batch itself was refused: no nf_tables in this kernel.
                    return Err(NftError::batch(r.errno));
                }
                let Some(at) = pending.iter().position(|(s, _, _)| *s == r.seq) else {
                    continue;
                };
                let (_, what, needs) = pending.remove(at);
                if r.errno != 0 && first_error.is_none() {
                    first_error = Some(NftError::os(what, r.errno, needs));
                }
            }
            // After an error the kernel reports every message's fate but may stop short
            // (ENOMEM); the error is what matters.
            if first_error.is_some() && !self.more_waiting() {
                break;
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether an answer is already queued (without waiting).
    fn more_waiting(&self) -> bool {
        let mut probe = Vec::with_capacity(16);
        self.sock
            .recv(&mut probe, nix::libc::MSG_PEEK | nix::libc::MSG_DONTWAIT)
            .is_ok()
    }

    /// A dump (`NLM_F_DUMP`) of `kind` filtered by `attrs`: every answer message.
    pub fn dump(
        &mut self,
        kind: u16,
        family: u8,
        attrs: &Attrs,
        what: &str,
    ) -> Result<Vec<Answer>, NftError> {
        self.exchange(NFNL_SUBSYS_NFTABLES, kind, family, NLM_F_DUMP, attrs, what)
    }

    /// A single get: the object's message, or the kernel's error (ENOENT when absent).
    pub fn get(
        &mut self,
        kind: u16,
        family: u8,
        attrs: &Attrs,
        what: &str,
    ) -> Result<Answer, NftError> {
        self.exchange(NFNL_SUBSYS_NFTABLES, kind, family, NLM_F_ACK, attrs, what)?
            .into_iter()
            .next()
            .ok_or_else(|| NftError::unexpected(what, "the kernel answered with nothing"))
    }

    /// A dump of another nfnetlink subsystem's `kind` (conntrack's): every answer.
    pub(crate) fn dump_of(
        &mut self,
        subsys: u16,
        kind: u16,
        family: u8,
        what: &str,
    ) -> Result<Vec<Answer>, NftError> {
        self.exchange(subsys, kind, family, NLM_F_DUMP, &Attrs::new(), what)
    }

    /// A request of another nfnetlink subsystem that answers with an ack only.
    pub(crate) fn acked(
        &mut self,
        subsys: u16,
        kind: u16,
        family: u8,
        attrs: &Attrs,
        what: &str,
    ) -> Result<(), NftError> {
        self.exchange(subsys, kind, family, NLM_F_ACK, attrs, what)
            .map(drop)
    }

    fn exchange(
        &mut self,
        subsys: u16,
        kind: u16,
        family: u8,
        flags: u16,
        attrs: &Attrs,
        what: &str,
    ) -> Result<Vec<Answer>, NftError> {
        let seq = self.next_seq();
        let mut buf = Vec::new();
        let ty = (subsys << 8) | kind;
        header(
            &mut buf,
            ty,
            NLM_F_REQUEST | flags,
            seq,
            family,
            0,
            &attrs.0,
        );
        self.send(&buf, what)?;
        let mut out = Vec::new();
        loop {
            for r in self.receive(what)? {
                if r.seq != seq {
                    continue;
                }
                match r.ty {
                    NLMSG_ERROR | NLMSG_DONE if r.errno != 0 => {
                        return Err(NftError::os(what, r.errno, ""));
                    }
                    NLMSG_ERROR | NLMSG_DONE => return Ok(out),
                    ty => {
                        out.push(Answer {
                            kind: ty & 0xff,
                            attrs: r.attrs,
                        });
                        if r.flags & NLM_F_MULTI == 0 && flags & NLM_F_ACK == 0 {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }
}

impl From<io::Error> for NftError {
    fn from(e: io::Error) -> Self {
        NftError::io("netfilter socket", e)
    }
}
