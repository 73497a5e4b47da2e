//! The sending side of an RDMA link: the put protocol as work requests on one queue pair,
//! and the connect info two ranks exchange to set a link up.

use super::verbs::{Completion, QpEndpoint, QpId, Registered, SendOp, Status, Verbs, WorkRequest};
use super::{encode_imm, RdmaError, RemoteRegion};
use crate::ir::Rank;
use crate::transport::put::{checked_range, Hop, PutWire, Target};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most bytes one WRITE carries (a work request's length is 32 bits; a larger hop
/// is several writes, in order).
pub const MAX_WRITE: u64 = 1 << 30;
/// Empty polls of the completion queue before a waiting link yields its core.
const SPINS: u32 = 64;

/// What a request was for, to name it when its completion says it failed.
#[derive(Copy, Clone, Debug)]
struct Sent {
    wr_id: u64,
    target: Target,
    offset: u64,
    len: u64,
}

/// One rank's sending side of the link to one peer (see [`super`] for the design).
pub struct RdmaLink<V: Verbs + ?Sized> {
    verbs: Arc<V>,
    qp: QpId,
    rank: Rank,
    peer: Rank,
    /// The peer's buffers this rank may write.
    regions: Vec<RemoteRegion>,
    /// This rank's registered memory, which sources must lie in.
    local: Vec<Registered>,
    /// Where bytes from memory no region holds are copied to be sent (see
    /// [`Self::with_bounce`]).
    bounce: Option<Bounce>,
    next_wr: u64,
    timeout: Duration,
    completions: Vec<Completion>,
}

/// A registered staging buffer for sources the NIC cannot read in place.
struct Bounce {
    buf: Box<[u8]>,
    region: Registered,
}

impl<V: Verbs + ?Sized> RdmaLink<V> {
    /// The link from `rank` to `peer` over `qp` (already connected), writing into the
    /// peer's `regions` from this rank's `local` ones; a completion not seen within
    /// `timeout` is lost.
    pub fn new(
        verbs: Arc<V>,
        qp: QpId,
        (rank, peer): (Rank, Rank),
        regions: Vec<RemoteRegion>,
        local: Vec<Registered>,
        timeout: Duration,
    ) -> Self {
        RdmaLink {
            verbs,
            qp,
            rank,
            peer,
            regions,
            local,
            bounce: None,
            next_wr: 0,
            timeout,
            completions: Vec::new(),
        }
    }

    /// Stage sources that no local region holds (a user's buffer, a temporary) through
    /// `buf`, registered as `region`: each piece is copied there and written from there,
    /// and the next piece waits for the last one's completion. The copy costs what a
    /// copy into a CCL buffer would; NCCL makes the same trade for unregistered buffers.
    ///
    /// The memory stays allocated while the link lives; `region` must have been
    /// registered for exactly `buf`.
    pub fn with_bounce(mut self, buf: Box<[u8]>, region: Registered) -> Self {
        debug_assert!(region.holds(buf.as_ptr() as u64, buf.len() as u64));
        self.bounce = Some(Bounce { buf, region });
        self
    }

    /// More of the peer's buffers this rank may write (a scratch allocation the peer
    /// announced after the link was made); a target named again takes the newer region.
    pub fn add_regions(&mut self, regions: impl IntoIterator<Item = RemoteRegion>) {
        for region in regions {
            self.regions.retain(|r| r.target != region.target);
            self.regions.push(region);
        }
    }

    /// The peer's address and key for `len` bytes at `offset` of its `target`, checked.
    fn remote(&self, target: Target, offset: u64, len: u64) -> Result<(u64, u32), RdmaError> {
        let region =
            self.regions
                .iter()
                .find(|r| r.target == target)
                .ok_or(RdmaError::UnknownTarget {
                    rank: self.rank,
                    peer: self.peer,
                    target,
                })?;
        let out_of_bounds = || RdmaError::OutOfBounds {
            rank: self.rank,
            peer: self.peer,
            target,
            offset,
            len,
            size: region.len,
        };
        let range = checked_range(offset, len, region.len).ok_or_else(out_of_bounds)?;
        // The region's address came from the peer: the end must not wrap either, since
        // the requests add offsets up to `len` to the start.
        let addr = region.addr.checked_add(range.start);
        match addr.filter(|a| a.checked_add(len).is_some()) {
            Some(addr) => Ok((addr, region.rkey)),
            None => Err(out_of_bounds()),
        }
    }

    /// The local key of the region `bytes` lie in.
    fn source(&self, bytes: &[u8]) -> Result<u32, RdmaError> {
        let (addr, len) = (bytes.as_ptr() as u64, bytes.len() as u64);
        self.local
            .iter()
            .find(|r| r.holds(addr, len))
            .map(|r| r.lkey)
            .ok_or_else(|| RdmaError::SourceNotRegistered {
                port: self.verbs.port().clone(),
                rank: self.rank,
                addr,
                len,
            })
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    /// The requests of one hop: its writes, at most [`MAX_WRITE`] bytes each, then the
    /// post's zero-length WRITE_WITH_IMM.
    fn requests(&mut self, hop: &Hop<'_>) -> Result<(Vec<WorkRequest>, Vec<Sent>), RdmaError> {
        let lkey = match hop.bytes.len() {
            0 => 0,
            _ => self.source(hop.bytes)?,
        };
        self.requests_from(hop, lkey)
    }

    /// [`Self::requests`], its source in the region of local key `lkey`.
    fn requests_from(
        &mut self,
        hop: &Hop<'_>,
        lkey: u32,
    ) -> Result<(Vec<WorkRequest>, Vec<Sent>), RdmaError> {
        let len = hop.bytes.len() as u64;
        let (base, rkey) = self.remote(hop.target, hop.offset, len)?;
        let (mut wrs, mut sent) = (Vec::new(), Vec::new());
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(MAX_WRITE);
            let wr_id = self.wr_id();
            wrs.push(WorkRequest {
                wr_id,
                op: SendOp::Write,
                local: (hop.bytes.as_ptr() as u64 + done, n as u32, lkey),
                remote: (base + done, rkey),
            });
            sent.push(Sent {
                wr_id,
                target: hop.target,
                offset: hop.offset + done,
                len: n,
            });
            done += n;
        }
        if let Some(word) = hop.then_post {
            let imm = encode_imm(word, hop.epoch)?;
            let wr_id = self.wr_id();
            wrs.push(WorkRequest {
                wr_id,
                op: SendOp::WriteImm(imm),
                local: (0, 0, 0),
                remote: (base + len, rkey),
            });
            sent.push(Sent {
                wr_id,
                target: hop.target,
                offset: hop.offset + len,
                len: 0,
            });
        }
        Ok((wrs, sent))
    }

    /// [`PutWire::put`] of a source no region holds: the whole range is checked first,
    /// then piece by piece through the bounce buffer; the post rides on the last piece.
    fn put_staged(&mut self, hop: Hop<'_>) -> Result<(), RdmaError> {
        self.remote(hop.target, hop.offset, hop.bytes.len() as u64)?;
        let mut bounce = self.bounce.take().expect("checked by the caller");
        let result = self.put_through(&mut bounce, &hop);
        self.bounce = Some(bounce);
        result
    }

    fn put_through(&mut self, bounce: &mut Bounce, hop: &Hop<'_>) -> Result<(), RdmaError> {
        let pieces = hop.bytes.chunks(bounce.buf.len().max(1));
        let last = pieces.len() - 1;
        for (i, (at, piece)) in (0u64..)
            .step_by(bounce.buf.len().max(1))
            .zip(pieces)
            .enumerate()
        {
            bounce.buf[..piece.len()].copy_from_slice(piece);
            let staged = Hop {
                target: hop.target,
                offset: hop.offset + at,
                bytes: &bounce.buf[..piece.len()],
                then_post: hop.then_post.filter(|_| i == last),
                epoch: hop.epoch,
            };
            let (wrs, sent) = self.requests_from(&staged, bounce.region.lkey)?;
            self.run(&wrs, &sent)?;
        }
        Ok(())
    }

    /// Post `wrs` and wait for every one's completion, in whatever order they come.
    fn run(&mut self, wrs: &[WorkRequest], sent: &[Sent]) -> Result<(), RdmaError> {
        if wrs.is_empty() {
            return Ok(());
        }
        self.verbs
            .post_send(self.qp, wrs)
            .map_err(|e| self.verbs_error("posting a send", e))?;
        let mut pending: Vec<u64> = sent.iter().map(|s| s.wr_id).collect();
        let deadline = Instant::now() + self.timeout;
        let mut idle = 0;
        while !pending.is_empty() {
            self.completions.clear();
            let mut completions = std::mem::take(&mut self.completions);
            let polled = self.verbs.poll_send(self.qp, &mut completions);
            self.completions = completions;
            polled.map_err(|e| self.verbs_error("polling send completions", e))?;
            for c in &self.completions {
                // A completion of a request this hop did not post (one an earlier hop
                // gave up on) is old news.
                let Some(at) = pending.iter().position(|&id| id == c.wr_id) else {
                    continue;
                };
                pending.swap_remove(at);
                if c.status != Status::Success {
                    let what = sent.iter().find(|s| s.wr_id == c.wr_id).copied();
                    return Err(self.failed(c, what));
                }
            }
            if self.completions.is_empty() {
                if Instant::now() >= deadline {
                    return Err(RdmaError::LostCompletion {
                        port: self.verbs.port().clone(),
                        rank: self.rank,
                        peer: self.peer,
                        wr_id: pending.iter().copied().min().unwrap_or_default(),
                        waited: self.timeout,
                    });
                }
                idle += 1;
                if idle > SPINS {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
        Ok(())
    }

    /// The error a failed completion `c` (of request `what`) means.
    fn failed(&self, c: &Completion, what: Option<Sent>) -> RdmaError {
        match (c.status, what) {
            (Status::RemoteAccess, Some(s)) => RdmaError::KeyRefused {
                port: self.verbs.port().clone(),
                rank: self.rank,
                peer: self.peer,
                target: s.target,
                offset: s.offset,
                len: s.len,
            },
            (status, _) => RdmaError::QueuePair {
                port: self.verbs.port().clone(),
                rank: self.rank,
                peer: self.peer,
                wr_id: c.wr_id,
                status,
            },
        }
    }

    fn verbs_error(&self, what: &'static str, source: super::VerbsError) -> RdmaError {
        RdmaError::verbs(
            self.verbs.port(),
            Some((self.rank, self.peer)),
            what,
            source,
        )
    }
}

impl<V: Verbs + ?Sized> PutWire for RdmaLink<V> {
    type Error = RdmaError;

    fn put(&mut self, hop: Hop<'_>) -> Result<(), RdmaError> {
        let staged = !hop.bytes.is_empty() && self.source(hop.bytes).is_err();
        if staged && self.bounce.is_some() {
            return self.put_staged(hop);
        }
        let (wrs, sent) = self.requests(&hop)?;
        self.run(&wrs, &sent)
    }

    fn post(&mut self, word: u64, epoch: u64) -> Result<(), RdmaError> {
        // A post alone is a hop of no bytes into the first region the peer registered.
        let target = self
            .regions
            .first()
            .map(|r| r.target)
            .ok_or(RdmaError::UnknownTarget {
                rank: self.rank,
                peer: self.peer,
                target: Target::CclIn,
            })?;
        self.put(Hop {
            target,
            offset: 0,
            bytes: &[],
            then_post: Some(word),
            epoch,
        })
    }
}

/// What one rank tells a peer to set up the link from the peer to it: its queue pair's
/// endpoint and the regions the peer may write. Exchanged on the link's TCP connection,
/// whose hello already proved the job's secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectInfo {
    pub endpoint: QpEndpoint,
    pub regions: Vec<RemoteRegion>,
}

/// Bytes of the endpoint part of [`ConnectInfo::encode`].
const ENDPOINT_LEN: usize = 4 + 2 + 16;
/// Bytes of one region of [`ConnectInfo::encode`].
const REGION_LEN: usize = 1 + 8 + 8 + 8 + 4;

impl ConnectInfo {
    /// Little-endian bytes: the endpoint, a region count (u32), then each region.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ENDPOINT_LEN + 4 + self.regions.len() * REGION_LEN);
        b.extend_from_slice(&self.endpoint.qp_num.to_le_bytes());
        b.extend_from_slice(&self.endpoint.lid.to_le_bytes());
        b.extend_from_slice(&self.endpoint.gid);
        b.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for r in &self.regions {
            let (kind, id) = match r.target {
                Target::CclIn => (0u8, 0),
                Target::CclOut => (1, 0),
                Target::Scratch(id) => (2, id),
            };
            b.push(kind);
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&r.addr.to_le_bytes());
            b.extend_from_slice(&r.len.to_le_bytes());
            b.extend_from_slice(&r.rkey.to_le_bytes());
        }
        b
    }

    /// Read what [`Self::encode`] wrote; what is wrong with it otherwise.
    pub fn decode(b: &[u8]) -> Result<ConnectInfo, String> {
        let mut r = Reader(b);
        let endpoint = QpEndpoint {
            qp_num: u32::from_le_bytes(r.take()?),
            lid: u16::from_le_bytes(r.take()?),
            gid: r.take()?,
        };
        let count = u32::from_le_bytes(r.take()?) as usize;
        if r.0.len()
            != count
                .checked_mul(REGION_LEN)
                .ok_or("region count overflows")?
        {
            return Err(format!(
                "{count} regions announced, {} bytes follow",
                r.0.len()
            ));
        }
        let mut regions = Vec::with_capacity(count);
        for _ in 0..count {
            let [kind] = r.take()?;
            let id = u64::from_le_bytes(r.take()?);
            let target = match (kind, id) {
                (0, 0) => Target::CclIn,
                (1, 0) => Target::CclOut,
                (2, id) => Target::Scratch(id),
                _ => return Err(format!("no buffer of kind {kind} (id {id})")),
            };
            regions.push(RemoteRegion {
                target,
                addr: u64::from_le_bytes(r.take()?),
                len: u64::from_le_bytes(r.take()?),
                rkey: u32::from_le_bytes(r.take()?),
            });
        }
        Ok(ConnectInfo { endpoint, regions })
    }
}

/// Fixed-size pieces off the front of a byte string.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| format!("cut short: {N} more bytes wanted, {} left", self.0.len()))?;
        self.0 = rest;
        Ok(*head)
    }
}
