//! What each frame a connection brings does: a Write's target checked and its payload
//! read next, a Post's signal set (the same for an RDMA immediate), Done epochs, scratch
//! sizes, Wants, failures, Close, and an Rdma frame's connect info. The connection state
//! machine that reads them is the parent module.

use super::{header, Conn, HeldWrite, Next, Rx, SCRATCH_AHEAD};
use crate::error::{AbortCause, DeviceError, PeerLoss};
use crate::host::launch::Shared;
use crate::host::tcp::early::{self, When};
use crate::host::tcp::TcpLinks;
use crate::ir::{Buf, Rank};
use crate::signal::{Posted, SET};
use crate::transport::put::checked_range;
use crate::transport::rdma::link::ConnectInfo;
use crate::transport::tcp::wire::{Frame, Target, HEADER_LEN};
use crate::transport::tcp::TcpError;
use std::sync::Arc;

/// Act on a frame header; a Write's payload is read next.
pub(super) fn frame(
    shared: &Arc<Shared>,
    links: &TcpLinks,
    conn: &mut Conn,
    buf: &[u8; HEADER_LEN],
) -> Result<(), Next> {
    let (from, slot, to) = conn.link.expect("frames follow the hello");
    conn.rx = header();
    let outcome = match Frame::decode(buf) {
        Err(bad) => Err(TcpError::BadFrame {
            from,
            to,
            what: bad.to_string(),
        }),
        Ok(frame) => apply(shared, links, conn, (from, slot, to), frame),
    };
    outcome.map_err(|err| {
        tracing::error!(%err, "a TCP peer sent a frame that was refused");
        let cause = AbortCause::PeerFailed {
            rank: from,
            error: Arc::new(DeviceError::Tcp(err)),
        };
        shared.stop(cause, None);
        Next::Drop
    })
}

fn apply(
    shared: &Arc<Shared>,
    links: &TcpLinks,
    conn: &mut Conn,
    (from, slot, to): (Rank, usize, Rank),
    frame: Frame,
) -> Result<(), TcpError> {
    let bad = |what: String| TcpError::BadFrame { from, to, what };
    if conn.reverse && matches!(frame, Frame::Write { .. } | Frame::Post { .. }) {
        return Err(bad(format!(
            "{frame:?} on the return direction of a connection rank {to} opened"
        )));
    }
    match frame {
        Frame::Write {
            target,
            offset,
            len,
            epoch: tag,
        } => {
            let at = write_target(shared, (from, slot, to), target, offset, len)?;
            // Within the target, so it fits in memory.
            let len = len as usize;
            let budget = || shared.memory.device_bytes(slot);
            let (when, epoch) = links.early.write(slot, tag, len, budget).map_err(bad)?;
            match when {
                When::Now if len > 0 => conn.rx = Rx::Payload { at, left: len },
                When::Now => {}
                When::Held => {
                    let mut data = vec![0u8; len].into_boxed_slice();
                    conn.rx = Rx::Payload {
                        at: data.as_mut_ptr(),
                        left: len,
                    };
                    conn.held = Some(HeldWrite {
                        epoch,
                        at: early::Target(at),
                        data,
                    });
                    if len == 0 {
                        conn.rx = header();
                        land_held(links, conn);
                    }
                }
            }
        }
        Frame::Post { word, epoch } => {
            if word >= u64::from(shared.layout.local_base()) {
                return Err(bad(format!("a post of word {word}, not a link signal")));
            }
            let when = links.early.post(slot, from, word, epoch);
            let when = when.map_err(bad)?;
            // Its sender started `epoch`, so it finished the one before: its Done for
            // that may never come (see `TcpLinks::publish_done`).
            if let Some(fence) = shared.fence_slot(from) {
                let before = epoch.saturating_sub(1);
                if shared.fences[fence].done() < before {
                    shared.fences[fence].advance(before);
                }
            }
            if when == When::Now {
                post(shared, (from, slot, to), word, epoch)?;
            }
        }
        Frame::Rdma { len } => {
            if len == 0 {
                return Err(bad("an Rdma frame without connect info".into()));
            }
            // At most MAX_RDMA_INFO (the header's decode checks it).
            conn.rx = Rx::Info {
                got: 0,
                buf: vec![0; len as usize],
            };
        }
        Frame::Want { until } if !conn.reverse => {
            links.wanted(slot, from, until, || shared.fences[slot].done());
        }
        Frame::Want { .. } => {
            return Err(bad(format!(
                "a Want on the return direction of a connection rank {to} opened"
            )));
        }
        Frame::Done { epoch } => {
            if let Some(fence) = shared.fence_slot(from) {
                if shared.fences[fence].done() < epoch {
                    shared.fences[fence].advance(epoch);
                }
            }
        }
        Frame::Scratch { id, bytes } => {
            // Every rank allocates the same scratch at the same call, but a peer that
            // never fences on this rank may run calls ahead of it: an honest peer is a
            // few allocations ahead at most, never SCRATCH_AHEAD. A larger id would size
            // the table from a peer's word.
            let next = shared.memory.scratch_sets();
            let id = usize::try_from(id)
                .ok()
                .filter(|&id| id < next.saturating_add(SCRATCH_AHEAD))
                .ok_or_else(|| bad(format!("scratch id {id}, when this rank made {next}")))?;
            links.scratch_announced(from, id, bytes);
        }
        Frame::Failed { origin, pid, died } => {
            let loss = match died {
                true => PeerLoss::Died,
                false => PeerLoss::Failed,
            };
            let origin = usize::try_from(origin).unwrap_or(from);
            let pid = u32::try_from(pid).unwrap_or(0);
            shared.stop(shared.config.lost(origin, Some(pid), loss), None);
        }
        Frame::Close => conn.closed = true,
    }
    Ok(())
}

/// A held Write's payload is all read: hand it to [`early`](crate::host::tcp::early).
pub(super) fn land_held(links: &TcpLinks, conn: &mut Conn) {
    if let (Some(held), Some((_, slot, _))) = (conn.held.take(), conn.link) {
        links.early.landed(slot, held.epoch, held.at, held.data);
    }
}

/// Post link word `word` of local rank `to` (slot `slot`) for rank `from`'s call of
/// `epoch`, as a Post frame or an RDMA immediate asks.
pub(crate) fn post(
    shared: &Shared,
    (from, slot, to): (Rank, usize, Rank),
    word: u64,
    epoch: u64,
) -> Result<(), TcpError> {
    let bad = |what: String| TcpError::BadFrame { from, to, what };
    let w = usize::try_from(word)
        .ok()
        .filter(|&w| w < shared.layout.local_base() as usize)
        .and_then(|w| shared.banks[slot].word(w))
        .ok_or_else(|| bad(format!("a post of word {word}, not a link signal")))?;
    let desc = || {
        shared.layout.describe(crate::ir::NotifyId {
            rank: to,
            index: word as u32,
        })
    };
    match w.post() {
        Posted::Set => {
            // The owner marks its epoch ended before it looks for words left set: one of
            // the two sees the other (see `launch.rs`). A word found clear again was
            // taken by a wait of the epoch before the owner ended it.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if shared.fences[slot].ended() >= epoch && w.state() == SET {
                return Err(bad(format!(
                    "a post of {} for operation {epoch}, which rank {to} already \
                     ended: nothing waits for it, so it would be left set",
                    desc()
                )));
            }
        }
        Posted::Woke((launch, s)) => launch.wake_from_afar(s),
        Posted::AlreadySet => {
            return Err(bad(format!(
                "a post of {}, which was already set (a lost wakeup)",
                desc()
            )));
        }
    }
    Ok(())
}

/// An Rdma frame's connect info came: on a connection a peer opened, it opens an RDMA
/// link to a local rank; on the return direction of one a local rank opened, it answers
/// that rank's link (or adds a scratch region to it).
pub(super) fn connect_info(
    shared: &Arc<Shared>,
    links: &TcpLinks,
    conn: &mut Conn,
    bytes: &[u8],
) -> Result<(), Next> {
    let (from, slot, to) = conn.link.expect("frames follow the hello");
    let result = match ConnectInfo::decode(bytes) {
        Err(what) => Err(DeviceError::Tcp(TcpError::BadFrame {
            from,
            to,
            what: format!("RDMA connect info: {what}"),
        })),
        Ok(info) if conn.reverse => match &links.rdma {
            Some(rdma) => rdma.answered(shared, (from, slot), info),
            None => Err(DeviceError::Tcp(TcpError::BadFrame {
                from,
                to,
                what: "an RDMA answer to a device without RDMA".into(),
            })),
        },
        Ok(info) => links.rdma_opened(shared, (from, slot, to), &info),
    };
    result.map_err(|err| {
        tracing::error!(%err, from, to, "an RDMA link could not be made");
        let cause = AbortCause::PeerFailed {
            rank: from,
            error: Arc::new(err),
        };
        shared.stop(cause, None);
        Next::Drop
    })
}

/// Take the posts RDMA immediates carried; a refused one stops the device, as a refused
/// Post frame does.
pub(super) fn take_rdma_posts(shared: &Arc<Shared>, links: &TcpLinks) {
    let Some(rdma) = &links.rdma else {
        return;
    };
    let taken = rdma.drain(shared, |(from, slot, to), p| {
        post(shared, (from, slot, to), p.word, p.epoch).map_err(DeviceError::Tcp)
    });
    if let Err(err) = taken {
        tracing::error!(%err, "an RDMA post was refused");
        let rank = shared.config.local_ranks.first().copied().unwrap_or(0);
        let cause = AbortCause::PeerFailed {
            rank,
            error: Arc::new(err),
        };
        shared.stop(cause, None);
    }
}

/// Where a Write of `len` bytes at `offset` of local rank `to`'s `target` goes, after
/// checking that it lies within the buffer.
fn write_target(
    shared: &Shared,
    (from, slot, to): (Rank, usize, Rank),
    target: Target,
    offset: u64,
    len: u64,
) -> Result<*mut u8, TcpError> {
    let (buf, scratch) = match target {
        Target::CclIn => (Buf::CclIn, None),
        Target::CclOut => (Buf::CclOut, None),
        Target::Scratch(id) => (
            Buf::Scratch,
            Some(usize::try_from(id).unwrap_or(usize::MAX)),
        ),
    };
    let region = shared
        .memory
        .device_region(slot, buf, scratch)
        .map_err(|fault| TcpError::BadFrame {
            from,
            to,
            what: format!("a write into {target}: {fault}"),
        })?;
    let out_of_bounds = TcpError::OutOfBounds {
        from,
        to,
        target,
        offset,
        len,
        target_len: region.len,
    };
    let inside = checked_range(offset, len, region.len as u64).is_some();
    if !inside || !region.writable {
        return Err(out_of_bounds);
    }
    // SAFETY: `offset + len <= region.len`, so the offset lies within the region.
    Ok(unsafe { region.ptr.add(offset as usize) })
}
