//! The put-only protocol that every transport between hosts speaks, whatever carries it.
//!
//! A put-only link ([`crate::LinkAccess::Put`]) does two things for the sender, and no
//! more: it writes bytes into one of the receiver's registered buffers (a **data hop**),
//! and it posts one of the receiver's link signal words. The protocol's rules, which the
//! analyzer's programs rely on, are the same on every wire:
//!
//! - a hop names its target buffer ([`Target`]) and a byte range of it; the range is
//!   checked against the buffer's registered bounds before a byte moves (by the receiver
//!   over TCP, by the sender and the receiving NIC over RDMA), so a faulty or hostile peer
//!   cannot write outside the buffers a rank registered;
//! - a post travels after the writes sent before it on the same link and is seen only
//!   once they are in place (a TCP stream keeps its order; an RDMA reliable connection
//!   completes a WRITE_WITH_IMM at the receiver only after the WRITEs before it landed);
//! - a post carries the sender's call epoch, so a post for a call the receiver has ended
//!   is recognised as late;
//! - when [`PutWire::put`] returns, the source bytes may be reused (TCP: they are in the
//!   kernel's socket buffer; RDMA: the WRITE completed).
//!
//! [`PutWire`] is that protocol as a trait. The TCP transport implements it with frames on
//! a stream ([`crate::transport::tcp::wire`]); the RDMA transport with work requests on a
//! queue pair ([`crate::transport::rdma`]). Everything above the wire (which hop goes
//! where, what completes a call) is written once, against the trait.

use std::fmt;

/// A registered buffer of the receiving rank that a hop may target.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    CclIn,
    CclOut,
    /// Scratch allocation `id`.
    Scratch(u64),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::CclIn => f.write_str("CclIn"),
            Target::CclOut => f.write_str("CclOut"),
            Target::Scratch(id) => write!(f, "scratch {id}"),
        }
    }
}

/// One data hop: `bytes` at `offset` of the receiver's `target`, then, with `then_post`,
/// a post of that link word for the sender's call `epoch`.
#[derive(Copy, Clone, Debug)]
pub struct Hop<'a> {
    pub target: Target,
    pub offset: u64,
    pub bytes: &'a [u8],
    pub then_post: Option<u64>,
    pub epoch: u64,
}

/// The sending side of one put-only link (see the module's rules).
pub trait PutWire {
    type Error;

    /// Send `hop`; the source bytes may be reused when this returns.
    fn put(&mut self, hop: Hop<'_>) -> Result<(), Self::Error>;

    /// Post link word `word` of the receiver for the sender's call `epoch`, after every
    /// hop sent before it.
    fn post(&mut self, word: u64, epoch: u64) -> Result<(), Self::Error>;
}

/// The range `offset..offset + len` of a buffer of `size` bytes, or `None` when it does
/// not fit (arithmetic checked: an offset near `u64::MAX` is refused, not wrapped).
pub fn checked_range(offset: u64, len: u64, size: u64) -> Option<std::ops::Range<u64>> {
    let end = offset.checked_add(len)?;
    (end <= size).then_some(offset..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_must_fit_its_buffer_without_wrapping() {
        assert_eq!(checked_range(0, 8, 8), Some(0..8));
        assert_eq!(checked_range(8, 0, 8), Some(8..8));
        assert_eq!(checked_range(4, 5, 8), None);
        assert_eq!(checked_range(9, 0, 8), None);
        assert_eq!(checked_range(u64::MAX, 2, u64::MAX), None);
    }
}
