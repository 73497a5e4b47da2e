//! The bootstrap's messages on the wire.
//!
//! A rank opens one TCP connection to the root and writes a fixed **preamble** — an
//! 8-byte magic with the protocol version, then the job's 16-byte secret — and then one
//! frame: a little-endian `u32` length and that many bytes of JSON ([`Hello`]). The root
//! answers with one frame ([`Answer`]) and closes. The root reads the preamble before
//! anything else and drops a connection whose secret is wrong without reading on, so a
//! stranger can make it neither allocate nor parse. Frames have a ceiling
//! ([`MAX_HELLO`], [`MAX_ANSWER`]) checked before the body is read.

use super::error::BootstrapError;
use super::id::SECRET_BYTES;
use super::{JobTable, RankInfo, Refusal};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{Read, Write};

/// The first bytes of every bootstrap connection: `OXBS`, then the version.
pub(crate) const MAGIC: [u8; 8] = *b"OXBS\x00\x01\x00\x00";

/// Bytes of the preamble.
pub(crate) const PREAMBLE: usize = MAGIC.len() + SECRET_BYTES;

/// Largest hello a rank may send.
pub(crate) const MAX_HELLO: usize = 64 << 10;

/// Largest answer the root may send: a table of a large job.
pub(crate) const MAX_ANSWER: usize = 256 << 20;

/// What a rank tells the root.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    /// The rank count this rank was started with.
    pub ranks: usize,
    pub info: RankInfo,
}

/// What the root answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Answer {
    Table(JobTable),
    Refused(Refusal),
}

impl Answer {
    /// True for the answers the root sends every rank at its end (not a refusal of one
    /// connection's claim).
    pub(crate) fn is_for_everyone(&self) -> bool {
        matches!(
            self,
            Answer::Table(_) | Answer::Refused(Refusal::Digests { .. } | Refusal::Missing { .. })
        )
    }
}

/// Write the preamble and one frame.
pub(crate) fn send_hello(
    stream: &mut impl Write,
    secret: &[u8; SECRET_BYTES],
    hello: &Hello,
    peer: &str,
) -> Result<(), BootstrapError> {
    let mut preamble = [0u8; PREAMBLE];
    preamble[..MAGIC.len()].copy_from_slice(&MAGIC);
    preamble[MAGIC.len()..].copy_from_slice(secret);
    stream
        .write_all(&preamble)
        .map_err(|e| BootstrapError::io(peer, "sending the preamble", e))?;
    send_frame(stream, hello, peer)
}

/// Write one frame.
pub(crate) fn send_frame(
    stream: &mut impl Write,
    value: &impl Serialize,
    peer: &str,
) -> Result<(), BootstrapError> {
    let body = serde_json::to_vec(value).map_err(|e| BootstrapError::Protocol {
        peer: peer.to_string(),
        reason: format!("cannot encode a message: {e}"),
    })?;
    let len = u32::try_from(body.len()).map_err(|_| BootstrapError::Protocol {
        peer: peer.to_string(),
        reason: format!("a message of {} bytes is too long to frame", body.len()),
    })?;
    stream
        .write_all(&len.to_le_bytes())
        .and_then(|()| stream.write_all(&body))
        .and_then(|()| stream.flush())
        .map_err(|e| BootstrapError::io(peer, "sending a message", e))
}

/// Read one frame of at most `max` bytes.
pub(crate) fn read_frame<T: DeserializeOwned>(
    stream: &mut impl Read,
    max: usize,
    peer: &str,
) -> Result<T, BootstrapError> {
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .map_err(|e| BootstrapError::io(peer, "reading a message's length", e))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(BootstrapError::Protocol {
            peer: peer.to_string(),
            reason: format!("a message of {len} bytes is over the limit of {max}"),
        });
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|e| BootstrapError::io(peer, "reading a message", e))?;
    serde_json::from_slice(&body).map_err(|e| BootstrapError::Protocol {
        peer: peer.to_string(),
        reason: format!("cannot decode a message: {e}"),
    })
}

/// Split a preamble into (magic is right, secret bytes).
pub(crate) fn parse_preamble(preamble: &[u8; PREAMBLE]) -> (bool, &[u8]) {
    let (magic, secret) = preamble.split_at(MAGIC.len());
    (magic == MAGIC, secret)
}
