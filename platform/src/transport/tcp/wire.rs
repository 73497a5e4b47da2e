//! The TCP transport's wire format: a hello that opens each connection, then frames.
//!
//! Every integer is little-endian. A connection carries one direction, from rank `from`
//! to rank `to`, both named in its hello; the receiver checks the secret before it reads
//! anything else, so a claimed rank is never trusted without it.
//!
//! Hello ([`HELLO_LEN`] bytes): magic `OXCCLtcp`, version (u32), the job's secret (16
//! bytes), `from`, `to` and the rank count (u32 each), the CCL buffer size and the count
//! of link signal words (u64 each), so that two ranks configured differently are refused
//! at connect time rather than corrupt each other's buffers.
//!
//! Frame header ([`HEADER_LEN`] bytes): kind (u8), buffer (u8), six bytes that are zero
//! except in a Write (its epoch's low 48 bits, [`EPOCH_TAG`]), then three u64 fields whose
//! meaning depends on the kind (see [`Frame`]). A Write is followed by its `len` payload
//! bytes, an Rdma frame by its `len` bytes of connect info.

use std::fmt;

/// The first bytes of every connection.
pub const MAGIC: [u8; 8] = *b"OXCCLtcp";
/// Bumped whenever the wire format changes.
pub const VERSION: u32 = 5;
/// The most bytes of connect info an Rdma frame may announce.
pub const MAX_RDMA_INFO: u64 = 64 << 10;
/// Bytes of a hello.
pub const HELLO_LEN: usize = 8 + 4 + 16 + 4 * 3 + 8 * 2;
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 32;
/// The bits of a Write's epoch its header carries: the receiver knows the epoch within
/// two of it (see `host::tcp::early`), so the low bits name it.
pub const EPOCH_TAG: u64 = (1 << 48) - 1;

/// What opens a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub secret: [u8; 16],
    pub from: u32,
    pub to: u32,
    pub ranks: u32,
    pub ccl_bytes: u64,
    pub link_words: u64,
}

/// Why a hello was refused: said in the receiver's log, never to the stranger.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HelloFault {
    /// Not oxccl's magic or not this version.
    NotOxccl,
    /// The secret differs from the job's.
    WrongSecret,
}

impl Hello {
    /// The hello's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..28].copy_from_slice(&self.secret);
        b[28..32].copy_from_slice(&self.from.to_le_bytes());
        b[32..36].copy_from_slice(&self.to.to_le_bytes());
        b[36..40].copy_from_slice(&self.ranks.to_le_bytes());
        b[40..48].copy_from_slice(&self.ccl_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.link_words.to_le_bytes());
        b
    }

    /// Read a hello, checking magic, version and then the secret (in time independent of
    /// where the secrets differ) before any other field is taken.
    pub fn decode(b: &[u8; HELLO_LEN], secret: &[u8; 16]) -> Result<Hello, HelloFault> {
        if b[..8] != MAGIC || u32_at(b, 8) != VERSION {
            return Err(HelloFault::NotOxccl);
        }
        let differs = b[12..28]
            .iter()
            .zip(secret)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y));
        if differs != 0 {
            return Err(HelloFault::WrongSecret);
        }
        Ok(Hello {
            secret: *secret,
            from: u32_at(b, 28),
            to: u32_at(b, 32),
            ranks: u32_at(b, 36),
            ccl_bytes: u64_at(b, 40),
            link_words: u64_at(b, 48),
        })
    }
}

pub use crate::transport::put::Target;

/// One message of a connection, from its `from` rank to its `to` rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// `len` bytes follow, for `[offset, offset + len)` of the target buffer, from the
    /// sender's call of `epoch` (its low 48 bits, [`EPOCH_TAG`], on the wire).
    Write {
        target: Target,
        offset: u64,
        len: u64,
        epoch: u64,
    },
    /// Post link signal word `word` of the receiving rank, for the sender's call of
    /// `epoch` (a Post for an epoch the receiver already ended is late: nothing is left to
    /// consume it).
    Post { word: u64, epoch: u64 },
    /// The sending rank finished every call up to `epoch` (its fence).
    Done { epoch: u64 },
    /// The sending rank allocated scratch `id` of `bytes` bytes.
    Scratch { id: u64, bytes: u64 },
    /// The sending rank stopped: the failure started at rank `origin` (process `pid`),
    /// which `died` or failed on an error of its own.
    Failed { origin: u64, pid: u64, died: bool },
    /// The sending rank goes away in order; the end of the stream that follows is no
    /// failure.
    Close,
    /// `len` bytes of RDMA connect info follow (see `transport::rdma::link::ConnectInfo`):
    /// on a connection's own direction, the opener's queue pair endpoint; on its return
    /// direction, the receiver's endpoint and the buffers the opener may write (again
    /// later, for a new scratch allocation). At most [`MAX_RDMA_INFO`].
    Rdma { len: u64 },
    /// The sending rank fences on the receiving rank: send it every Done epoch up to
    /// `until`, and the last one now. Sent on a connection's own direction.
    Want { until: u64 },
}

/// A frame header that is not one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BadFrame {
    pub kind: u8,
    pub buf: u8,
}

impl fmt::Display for BadFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no frame of kind {} (buffer {})", self.kind, self.buf)
    }
}

const WRITE: u8 = 1;
const POST: u8 = 2;
const DONE: u8 = 3;
const SCRATCH: u8 = 4;
const FAILED: u8 = 5;
const CLOSE: u8 = 6;
const RDMA: u8 = 7;
const WANT: u8 = 8;

impl Frame {
    /// The frame's header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let tag = match *self {
            Frame::Write { epoch, .. } => epoch & EPOCH_TAG,
            _ => 0,
        };
        let (kind, buf, a, b, c) = match *self {
            Frame::Write {
                target,
                offset,
                len,
                ..
            } => {
                let (buf, id) = match target {
                    Target::CclIn => (0, 0),
                    Target::CclOut => (1, 0),
                    Target::Scratch(id) => (2, id),
                };
                (WRITE, buf, id, offset, len)
            }
            Frame::Post { word, epoch } => (POST, 0, word, epoch, 0),
            Frame::Done { epoch } => (DONE, 0, epoch, 0, 0),
            Frame::Scratch { id, bytes } => (SCRATCH, 0, id, bytes, 0),
            Frame::Failed { origin, pid, died } => (FAILED, 0, origin, pid, u64::from(died)),
            Frame::Close => (CLOSE, 0, 0, 0, 0),
            Frame::Rdma { len } => (RDMA, 0, len, 0, 0),
            Frame::Want { until } => (WANT, 0, until, 0, 0),
        };
        let mut h = [0u8; HEADER_LEN];
        h[0] = kind;
        h[1] = buf;
        h[2..8].copy_from_slice(&tag.to_le_bytes()[..6]);
        h[8..16].copy_from_slice(&a.to_le_bytes());
        h[16..24].copy_from_slice(&b.to_le_bytes());
        h[24..32].copy_from_slice(&c.to_le_bytes());
        h
    }

    /// Read a frame header.
    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Frame, BadFrame> {
        let (a, b, c) = (u64_at(h, 8), u64_at(h, 16), u64_at(h, 24));
        let bad = BadFrame {
            kind: h[0],
            buf: h[1],
        };
        if h[0] != WRITE && (h[1] != 0 || h[2..8] != [0; 6]) {
            return Err(bad);
        }
        let mut tag = [0u8; 8];
        tag[..6].copy_from_slice(&h[2..8]);
        Ok(match h[0] {
            WRITE => Frame::Write {
                target: match h[1] {
                    0 if a == 0 => Target::CclIn,
                    1 if a == 0 => Target::CclOut,
                    2 => Target::Scratch(a),
                    _ => return Err(bad),
                },
                offset: b,
                len: c,
                epoch: u64::from_le_bytes(tag),
            },
            POST if c == 0 => Frame::Post { word: a, epoch: b },
            DONE => Frame::Done { epoch: a },
            SCRATCH => Frame::Scratch { id: a, bytes: b },
            FAILED if c <= 1 => Frame::Failed {
                origin: a,
                pid: b,
                died: c == 1,
            },
            CLOSE => Frame::Close,
            RDMA if a <= MAX_RDMA_INFO && b == 0 && c == 0 => Frame::Rdma { len: a },
            WANT if b == 0 && c == 0 => Frame::Want { until: a },
            _ => return Err(bad),
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(v)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Write {
                target: Target::Scratch(7),
                offset: u64::MAX,
                len: 3,
                epoch: EPOCH_TAG,
            },
            Frame::Write {
                target: Target::CclIn,
                offset: 0,
                len: 0,
                epoch: 0,
            },
            Frame::Write {
                target: Target::CclOut,
                offset: 12,
                len: 1 << 40,
                epoch: 1,
            },
            Frame::Post { word: 5, epoch: 9 },
            Frame::Done { epoch: 1 << 50 },
            Frame::Scratch { id: 2, bytes: 9 },
            Frame::Failed {
                origin: 3,
                pid: 77,
                died: true,
            },
            Frame::Close,
            Frame::Rdma { len: 48 },
            Frame::Want { until: 70 },
        ];
        for f in frames {
            assert_eq!(Frame::decode(&f.encode()), Ok(f));
        }
    }

    #[test]
    fn a_write_carries_its_epochs_low_bits() {
        let write = |epoch| Frame::Write {
            target: Target::CclIn,
            offset: 0,
            len: 1,
            epoch,
        };
        let sent = write((7 << 48) | 5).encode();
        assert_eq!(Frame::decode(&sent), Ok(write(5)));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut h = Frame::Close.encode();
        h[0] = 99;
        assert!(Frame::decode(&h).is_err());
        let mut h = Frame::Post { word: 1, epoch: 1 }.encode();
        h[1] = 1;
        assert!(Frame::decode(&h).is_err());
        let mut h = Frame::Write {
            target: Target::CclIn,
            offset: 0,
            len: 1,
            epoch: 2,
        }
        .encode();
        h[1] = 3;
        assert!(Frame::decode(&h).is_err());
        let mut h = Frame::Done { epoch: 1 }.encode();
        h[5] = 1;
        assert!(Frame::decode(&h).is_err());
        let too_long = Frame::Rdma {
            len: MAX_RDMA_INFO + 1,
        };
        assert!(
            Frame::decode(&too_long.encode()).is_err(),
            "a peer cannot size a buffer"
        );
    }

    #[test]
    fn a_hello_needs_the_secret() {
        let hello = Hello {
            secret: [7; 16],
            from: 1,
            to: 2,
            ranks: 4,
            ccl_bytes: 1 << 20,
            link_words: 64,
        };
        let bytes = hello.encode();
        assert_eq!(Hello::decode(&bytes, &[7; 16]), Ok(hello));
        let mut other = [7; 16];
        other[15] = 8;
        assert_eq!(Hello::decode(&bytes, &other), Err(HelloFault::WrongSecret));
        let mut wrong = bytes;
        wrong[0] = b'x';
        assert_eq!(Hello::decode(&wrong, &[7; 16]), Err(HelloFault::NotOxccl));
    }
}
