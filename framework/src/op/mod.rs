//! Operators and their parameters, validated before anything runs.

mod layout;

pub use layout::{P2pItem, VLayout};

use crate::error::{ArgError, Error};
use crate::limits::{MAX_BUFFER_BYTES, MAX_RANKS};
use oxccl_platform::{Buf, DataType, Rank, ReduceOp};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A collective operator.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    Scatter,
    Gather,
    AlltoAll,
    /// AllGather with a count and displacement per rank ([`VLayout::Blocks`]).
    AllGatherV,
    /// ReduceScatter with a count and displacement per rank ([`VLayout::Blocks`]).
    ReduceScatterV,
    /// AlltoAll with per-peer counts and displacements ([`VLayout::P2p`], one send and
    /// one receive per rank).
    AlltoAllV,
    /// Point-to-point sends and receives, one or many pairs in one call
    /// ([`VLayout::P2p`]); a plain send or receive is a call with one item.
    SendRecv,
    /// No data; returns on a rank once every rank has entered it.
    Barrier,
}

impl OpKind {
    /// Every operator oxccl knows, in a fixed order.
    pub const ALL: [OpKind; 13] = [
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Scatter,
        OpKind::Gather,
        OpKind::AlltoAll,
        OpKind::AllGatherV,
        OpKind::ReduceScatterV,
        OpKind::AlltoAllV,
        OpKind::SendRecv,
        OpKind::Barrier,
    ];

    /// Snake-case name, as in `OXCCL_ALGO` (`all_reduce=ring`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all_reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::Scatter => "scatter",
            OpKind::Gather => "gather",
            OpKind::AlltoAll => "all_to_all",
            OpKind::AllGatherV => "all_gather_v",
            OpKind::ReduceScatterV => "reduce_scatter_v",
            OpKind::AlltoAllV => "all_to_all_v",
            OpKind::SendRecv => "send_recv",
            OpKind::Barrier => "barrier",
        }
    }

    /// Whether the operator reduces (takes a [`ReduceOp`]).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::AllReduce | OpKind::ReduceScatter | OpKind::Reduce | OpKind::ReduceScatterV
        )
    }

    /// Whether the operator has a root rank.
    pub const fn has_root(self) -> bool {
        matches!(
            self,
            OpKind::Broadcast | OpKind::Reduce | OpKind::Scatter | OpKind::Gather
        )
    }

    /// Whether the operator takes a [`VLayout`] (and which kind).
    pub const fn is_vector(self) -> bool {
        matches!(
            self,
            OpKind::AllGatherV | OpKind::ReduceScatterV | OpKind::AlltoAllV | OpKind::SendRecv
        )
    }

    /// Whether the operator's layout is a list of point-to-point items.
    pub const fn is_p2p(self) -> bool {
        matches!(self, OpKind::AlltoAllV | OpKind::SendRecv)
    }

    /// Elements of the input and output buffers of every rank for `count` (nccl-tests
    /// convention: `count` is the per-rank block for gathers and scatters). Vector
    /// operators size their buffers from their layout ([`OpParam::buffer_counts`]);
    /// here they count as `(count, count)`, Barrier as `(0, 0)`.
    ///
    /// Saturating: a product that overflows becomes `usize::MAX`, which validation
    /// refuses ([`OpParam::validate_shape`]) and no buffer can match.
    pub fn buffer_counts(self, count: usize, ranks: usize) -> (usize, usize) {
        let all = count.saturating_mul(ranks);
        match self {
            OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce => (count, count),
            OpKind::AllGather | OpKind::Gather => (count, all),
            OpKind::ReduceScatter | OpKind::Scatter => (all, count),
            OpKind::AlltoAll => (all, all),
            OpKind::AllGatherV | OpKind::ReduceScatterV | OpKind::AlltoAllV | OpKind::SendRecv => {
                (count, count)
            }
            OpKind::Barrier => (0, 0),
        }
    }

    /// The per-rank block of a call with `send` and `recv` elements: the smaller buffer,
    /// after checking that the larger holds exactly one such block per rank (AllGather:
    /// `recv = ranks * send`; ReduceScatter: `send = ranks * recv`; AllReduce:
    /// `recv = send`).
    pub fn block_count(self, ranks: usize, send: usize, recv: usize) -> Result<usize, ArgError> {
        let (in_blocks, out_blocks) = self.buffer_counts(1, ranks);
        let block = if in_blocks <= out_blocks {
            send / in_blocks.max(1)
        } else {
            recv / out_blocks.max(1)
        };
        let (need_send, need_recv) = self.buffer_counts(block, ranks);
        if (need_send, need_recv) == (send, recv) {
            return Ok(block);
        }
        Err(ArgError::BlockMismatch {
            op: self,
            ranks,
            block,
            send,
            recv,
            need_send,
            need_recv,
        })
    }

    /// The per-rank block of an in-place call on a buffer of `len` elements: `len` for
    /// AllReduce-like operators, `len / ranks` for gathers and scatters, whose buffer
    /// holds one block per rank (an error unless `ranks` divides `len`).
    pub fn in_place_block_count(self, ranks: usize, len: usize) -> Result<usize, ArgError> {
        let (in_blocks, out_blocks) = self.buffer_counts(1, ranks);
        let blocks = in_blocks.max(out_blocks).max(1);
        if !len.is_multiple_of(blocks) {
            return Err(ArgError::NotDivisible {
                op: self,
                ranks,
                len,
            });
        }
        Ok(len / blocks)
    }

    /// nccl-tests bus bandwidth factor (vector operators as their fixed-size forms).
    pub fn busbw_factor(self, ranks: usize) -> f64 {
        let n = ranks as f64;
        match self {
            OpKind::AllReduce => 2.0 * (n - 1.0) / n,
            OpKind::Broadcast | OpKind::Reduce | OpKind::SendRecv => 1.0,
            OpKind::Barrier => 0.0,
            _ => (n - 1.0) / n,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpKind {
    type Err = Error;

    /// Accepts `all_reduce`, `all-reduce`, `allreduce` and `AllReduce`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let norm = |x: &str| x.replace(['_', '-'], "").to_ascii_lowercase();
        OpKind::ALL
            .into_iter()
            .find(|k| norm(k.name()) == norm(s))
            .ok_or_else(|| Error::UnknownOperator {
                given: s.to_string(),
                known: OpKind::ALL.map(|k| k.name()).join(", "),
            })
    }
}

/// One collective call, before buffers are bound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpParam {
    pub kind: OpKind,
    /// Elements per rank (see [`OpKind::buffer_counts`]). For AllGatherV and
    /// ReduceScatterV the sum of the per-rank counts; for AlltoAllV and send/recv this
    /// rank's sent plus received elements (0: this rank has nothing to do); 0 for Barrier.
    pub count: usize,
    pub dtype: DataType,
    /// The reduce op; ignored by operators that do not reduce.
    pub op: ReduceOp,
    /// The root rank of rooted operators.
    pub root: Option<Rank>,
    /// The layout of vector operators; `None` for the others.
    pub layout: Option<Arc<VLayout>>,
}

impl OpParam {
    /// An operator without root or layout.
    pub fn new(kind: OpKind, count: usize, dtype: DataType, op: ReduceOp) -> Self {
        OpParam {
            kind,
            count,
            dtype,
            op,
            root: None,
            layout: None,
        }
    }

    /// An AllReduce of `count` elements.
    pub fn all_reduce(count: usize, dtype: DataType, op: ReduceOp) -> Self {
        OpParam::new(OpKind::AllReduce, count, dtype, op)
    }

    /// An AllGather of `count` elements per rank.
    pub fn all_gather(count: usize, dtype: DataType) -> Self {
        OpParam::new(OpKind::AllGather, count, dtype, ReduceOp::Sum)
    }

    /// A ReduceScatter of `count` elements per rank.
    pub fn reduce_scatter(count: usize, dtype: DataType, op: ReduceOp) -> Self {
        OpParam::new(OpKind::ReduceScatter, count, dtype, op)
    }

    /// A rooted operator (Broadcast, Reduce, Scatter, Gather) of `count` elements per rank.
    pub fn rooted(kind: OpKind, count: usize, dtype: DataType, op: ReduceOp, root: Rank) -> Self {
        OpParam {
            root: Some(root),
            ..OpParam::new(kind, count, dtype, op)
        }
    }

    /// A vector operator with its layout; `count` is derived from the layout (saturating
    /// at `usize::MAX`, which validation refuses).
    pub fn vector(kind: OpKind, layout: VLayout, dtype: DataType, op: ReduceOp) -> Self {
        let sum = |counts: &mut dyn Iterator<Item = usize>| counts.fold(0, usize::saturating_add);
        let count = match &layout {
            VLayout::Blocks { counts, .. } => sum(&mut counts.iter().copied()),
            VLayout::P2p { sends, recvs } => sum(&mut sends.iter().chain(recvs).map(|i| i.count)),
        };
        OpParam {
            layout: Some(Arc::new(layout)),
            ..OpParam::new(kind, count, dtype, op)
        }
    }

    /// A barrier.
    pub fn barrier() -> Self {
        OpParam::new(OpKind::Barrier, 0, DataType::U8, ReduceOp::Sum)
    }

    /// The same operation with `count` elements (one loop iteration's share).
    pub fn with_count(&self, count: usize) -> Self {
        OpParam {
            count,
            ..self.clone()
        }
    }

    /// Whether the call must run (a count-0 call returns at once). A barrier always runs,
    /// and so do the point-to-point operators (AlltoAllV, send/recv): on a topology with
    /// broken links a rank with nothing of its own may relay other ranks' transfers, which
    /// only the executor, seeing the topology, knows.
    pub fn has_work(&self) -> bool {
        self.count > 0 || self.kind == OpKind::Barrier || self.kind.is_p2p()
    }

    /// The layout of a vector operator.
    pub fn layout(&self) -> Option<&VLayout> {
        self.layout.as_deref()
    }

    /// Elements of `rank`'s input and output buffers.
    pub fn buffer_counts(&self, rank: Rank, ranks: usize) -> (usize, usize) {
        let Some(layout) = self.layout() else {
            return self.kind.buffer_counts(self.count, ranks);
        };
        let extent = |items: &[P2pItem]| items.iter().map(P2pItem::end).max().unwrap_or(0);
        match (self.kind, layout) {
            (OpKind::AllGatherV, VLayout::Blocks { counts, .. }) => (
                counts.get(rank).copied().unwrap_or(0),
                layout.blocks_extent(),
            ),
            (OpKind::ReduceScatterV, VLayout::Blocks { counts, .. }) => (
                layout.blocks_extent(),
                counts.get(rank).copied().unwrap_or(0),
            ),
            (_, VLayout::P2p { sends, recvs }) => (extent(sends), extent(recvs)),
            _ => self.kind.buffer_counts(self.count, ranks),
        }
    }

    /// Input and output sizes in bytes for `rank` (saturating; see
    /// [`OpParam::validate_shape`]).
    pub fn buffer_bytes(&self, rank: Rank, ranks: usize) -> (usize, usize) {
        let (i, o) = self.buffer_counts(rank, ranks);
        let es = self.dtype.size();
        (i.saturating_mul(es), o.saturating_mul(es))
    }

    /// The user buffer a rooted operator leaves alone on `rank` away from its root, as
    /// NCCL does: the output of Gather and Reduce (`Buf::Output`), the input of Scatter
    /// and Broadcast (`Buf::Input`). `None` at the root, and for other operators.
    pub fn unused_buffer(&self, rank: Rank) -> Option<Buf> {
        if self.root.is_none_or(|root| root == rank) {
            return None;
        }
        match self.kind {
            OpKind::Gather | OpKind::Reduce => Some(Buf::Output),
            OpKind::Scatter | OpKind::Broadcast => Some(Buf::Input),
            _ => None,
        }
    }

    /// Bytes of `rank`'s user buffers the operation touches: its input and output
    /// ([`OpParam::buffer_bytes`]), the larger alone in place, without the buffer a rooted
    /// operator leaves alone away from its root (a non-root's output of Gather and
    /// Reduce, its input of Scatter and Broadcast). The point-to-point operators' layouts
    /// are this rank's own, so for them it is the bytes of this rank's call.
    pub fn touched_bytes(&self, rank: Rank, ranks: usize, in_place: bool) -> usize {
        let (input, output) = self.buffer_bytes(rank, ranks);
        let (input, output) = match self.unused_buffer(rank) {
            Some(Buf::Output) => (input, 0),
            Some(_) => (0, output),
            None => (input, output),
        };
        match in_place {
            true => input.max(output),
            false => input.saturating_add(output),
        }
    }

    /// Bytes the operation's user buffers take on a server of `server_ranks` ranks, as
    /// `rank` (one of them) sees it: [`OpParam::touched_bytes`] summed over them, taking
    /// every rank but a root to touch what `rank` does (what a rank of a V or
    /// point-to-point operator knows). A hint for a device's store policy
    /// ([`CompileRequest::footprint`](oxccl_platform::CompileRequest::footprint)), in
    /// O(1) whatever the rank count; saturating.
    pub fn server_footprint(
        &self,
        rank: Rank,
        ranks: usize,
        server_ranks: std::ops::Range<Rank>,
        in_place: bool,
    ) -> usize {
        let touched = |r: Rank| self.touched_bytes(r, ranks, in_place);
        let n = server_ranks.len();
        let root = self.root.filter(|r| server_ranks.contains(r));
        let other = match root {
            Some(root) if root == rank => (rank + 1) % ranks.max(1),
            _ => rank,
        };
        match root {
            Some(root) => touched(root).saturating_add(touched(other).saturating_mul(n - 1)),
            None => touched(other).saturating_mul(n),
        }
    }

    /// Byte offsets of `rank`'s input and output data inside the one buffer of an in-place
    /// call (NCCL's convention: the buffer is the larger side; the input of AllGather and
    /// Gather is block `rank` of the output, the output of ReduceScatter and Scatter is
    /// block `rank` of the input; the V forms use their displacements). `(0, 0)` for every
    /// other operator.
    pub fn in_place_offsets(&self, rank: Rank) -> (usize, usize) {
        let es = self.dtype.size();
        // Saturating: a validated op's offsets lie inside its buffers (`validate_shape`).
        let own_block = match self.layout().and_then(VLayout::blocks) {
            Some((_, displs)) => displs.get(rank).copied().unwrap_or(0).saturating_mul(es),
            None => rank.saturating_mul(self.count).saturating_mul(es),
        };
        match self.kind {
            OpKind::AllGather | OpKind::Gather | OpKind::AllGatherV => (own_block, 0),
            OpKind::ReduceScatter | OpKind::Scatter | OpKind::ReduceScatterV => (0, own_block),
            _ => (0, 0),
        }
    }

    /// Check the parameters against the communicator size and `rank`'s bound buffers'
    /// lengths in bytes (`None` for an in-place call, where `output_len` is the one buffer).
    pub fn validate(
        &self,
        rank: Rank,
        ranks: usize,
        input_len: Option<usize>,
        output_len: usize,
    ) -> Result<(), ArgError> {
        self.validate_shape(rank, ranks)?;
        let (need_in, need_out) = self.buffer_bytes(rank, ranks);
        let es = self.dtype.size();
        let short = |which, need: usize, got: usize| {
            (got < need).then_some(ArgError::BufferTooShort {
                which,
                need: need / es,
                got: got / es,
                dtype: self.dtype,
            })
        };
        let problem = match input_len {
            Some(len) => short("send", need_in, len).or(short("receive", need_out, output_len)),
            None if !self.in_place_allowed() => {
                Some(ArgError::InPlaceUnsupported { op: self.kind })
            }
            None => short("in-place", need_in.max(need_out), output_len),
        };
        problem.map_or(Ok(()), Err)
    }

    /// Check everything but the buffers: the root, the layout, and that every buffer of
    /// every rank fits [`MAX_BUFFER_BYTES`] — with checked arithmetic, so that afterwards
    /// every size and offset derived from the op (counts times ranks times the element
    /// size, displacements plus counts) is exact. Programs are built only for ops that
    /// pass ([`crate::Communicator::prepare`]).
    pub fn validate_shape(&self, rank: Rank, ranks: usize) -> Result<(), ArgError> {
        if rank >= ranks || ranks > MAX_RANKS {
            return Err(ArgError::BadRank { rank, ranks });
        }
        self.validate_root(ranks)?;
        self.validate_layout(ranks)?;
        let es = self.dtype.size();
        let fits = |elements: usize| {
            elements
                .checked_mul(es)
                .is_some_and(|b| b <= MAX_BUFFER_BYTES)
        };
        // This rank's own buffers, and for the fixed-size operators with one block per
        // rank every rank's blocks (count x ranks; vector layouts were bounded item by
        // item above). AllReduce, Broadcast and Reduce have no blocks: their offsets stay
        // below count x element size, and count x ranks x element size is at most
        // MAX_BUFFER_BYTES x MAX_RANKS (2^52), exact in a usize.
        let (need_in, need_out) = self.buffer_counts(rank, ranks);
        let blockless = matches!(
            self.kind,
            OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce | OpKind::Barrier
        );
        let blocks_fit =
            self.kind.is_vector() || blockless || self.count.checked_mul(ranks).is_some_and(fits);
        if !(fits(need_in) && fits(need_out) && blocks_fit) {
            return Err(ArgError::CountOverflow {
                count: self.count,
                dtype: self.dtype,
                ranks,
                limit: MAX_BUFFER_BYTES,
            });
        }
        Ok(())
    }

    fn validate_root(&self, ranks: usize) -> Result<(), ArgError> {
        match (self.kind.has_root(), self.root) {
            (true, None) => Err(ArgError::MissingRoot { op: self.kind }),
            (true, Some(root)) if root >= ranks => Err(ArgError::InvalidRoot { root, ranks }),
            _ => Ok(()),
        }
    }

    fn validate_layout(&self, ranks: usize) -> Result<(), ArgError> {
        let missing = |reason: &str| ArgError::BadLayout {
            reason: format!("{} {reason}", self.kind),
        };
        match (self.kind.is_vector(), self.layout()) {
            (false, None) => Ok(()),
            (false, Some(_)) => Err(missing("takes no per-rank counts")),
            (true, None) => Err(missing("needs per-rank counts and displacements")),
            (true, Some(l)) if l.p2p().is_some() != self.kind.is_p2p() => {
                Err(missing("got the wrong kind of layout"))
            }
            (true, Some(l)) => l.validate(ranks, self.dtype.size(), self.kind == OpKind::AlltoAllV),
        }
    }

    /// Whether the operator has an in-place form.
    pub fn in_place_allowed(&self) -> bool {
        !matches!(
            self.kind,
            OpKind::AlltoAll | OpKind::AlltoAllV | OpKind::SendRecv
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_parse_in_every_spelling() {
        for spelling in ["all_reduce", "all-reduce", "allreduce", "AllReduce"] {
            assert_eq!(spelling.parse::<OpKind>().unwrap(), OpKind::AllReduce);
        }
        let err = "allsum".parse::<OpKind>().unwrap_err().to_string();
        assert!(err.contains("all_gather"), "{err}");
    }

    #[test]
    fn block_counts_check_the_block_shape() {
        assert_eq!(OpKind::AllGather.block_count(4, 3, 12), Ok(3));
        assert_eq!(OpKind::ReduceScatter.block_count(4, 12, 3), Ok(3));
        assert_eq!(OpKind::AllReduce.block_count(4, 5, 5), Ok(5));
        assert_eq!(OpKind::AlltoAll.block_count(3, 6, 6), Ok(2));
        assert!(OpKind::AlltoAll.block_count(3, 7, 7).is_err());
        assert!(matches!(
            OpKind::AllGather.block_count(4, 3, 13),
            Err(ArgError::BlockMismatch {
                need_recv: 12,
                recv: 13,
                ..
            })
        ));
        assert!(matches!(
            OpKind::ReduceScatter.block_count(4, 11, 3),
            Err(ArgError::BlockMismatch { need_send: 12, .. })
        ));
        assert_eq!(OpKind::AllGather.in_place_block_count(4, 12), Ok(3));
        assert_eq!(OpKind::AllReduce.in_place_block_count(4, 13), Ok(13));
        assert_eq!(
            OpKind::ReduceScatter.in_place_block_count(4, 13),
            Err(ArgError::NotDivisible {
                op: OpKind::ReduceScatter,
                ranks: 4,
                len: 13
            })
        );
    }

    #[test]
    fn in_place_data_lies_in_the_own_block() {
        let ag = OpParam::all_gather(3, DataType::F32);
        assert_eq!(ag.in_place_offsets(2), (24, 0));
        let rs = OpParam::reduce_scatter(3, DataType::I16, ReduceOp::Max);
        assert_eq!(rs.in_place_offsets(2), (0, 12));
        let ar = OpParam::all_reduce(3, DataType::F32, ReduceOp::Sum);
        assert_eq!(ar.in_place_offsets(2), (0, 0));
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let p = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
        assert!(p.validate(0, 4, Some(40), 40).is_ok());
        assert!(p.validate(0, 4, None, 40).is_ok());
        assert!(matches!(
            p.validate(0, 4, Some(36), 40),
            Err(ArgError::BufferTooShort {
                which: "send",
                need: 10,
                got: 9,
                ..
            })
        ));
        assert!(matches!(
            p.validate(0, 4, Some(40), 4),
            Err(ArgError::BufferTooShort {
                which: "receive",
                ..
            })
        ));
        let b = OpParam {
            kind: OpKind::Broadcast,
            root: Some(4),
            ..p.clone()
        };
        assert_eq!(
            b.validate(0, 4, Some(40), 40),
            Err(ArgError::InvalidRoot { root: 4, ranks: 4 })
        );
        let g = OpParam {
            kind: OpKind::AllGather,
            ..p
        };
        assert!(matches!(
            g.validate(0, 4, Some(40), 80),
            Err(ArgError::BufferTooShort {
                which: "receive",
                need: 40,
                got: 20,
                ..
            })
        ));
    }

    #[test]
    fn an_operations_footprint_counts_the_buffers_it_touches_on_the_server() {
        const MIB: usize = 1 << 20;
        // An f32 operation of `kind` with blocks of `bytes`, rooted at `root` if any.
        let f32_op = |kind, bytes: usize, root: Option<Rank>| OpParam {
            root,
            ..OpParam::new(kind, bytes / 4, DataType::F32, ReduceOp::Sum)
        };
        // Gather of 32 MiB on 8 ranks: every input (4 MiB) and the root's output; in
        // place, the root's input is part of its output.
        let gather = f32_op(OpKind::Gather, 4 * MIB, Some(0));
        for rank in [0, 5] {
            assert_eq!(gather.server_footprint(rank, 8, 0..8, false), 64 * MIB);
            assert_eq!(gather.server_footprint(rank, 8, 0..8, true), 60 * MIB);
        }
        // A server without the root: only inputs.
        assert_eq!(gather.server_footprint(9, 16, 8..16, false), 32 * MIB);
        assert_eq!(gather.touched_bytes(3, 8, false), 4 * MIB);
        // Broadcast: the root's input and every output.
        let bcast = f32_op(OpKind::Broadcast, 4 * MIB, Some(2));
        assert_eq!(bcast.server_footprint(2, 8, 0..8, false), 36 * MIB);
        // AllGather at 4 MiB and AlltoAll at 4 MiB, symmetric.
        let ag = f32_op(OpKind::AllGather, MIB / 2, None);
        assert_eq!(ag.server_footprint(1, 8, 0..8, false), 36 * MIB);
        assert_eq!(ag.server_footprint(1, 8, 0..8, true), 32 * MIB);
        let a2a = f32_op(OpKind::AlltoAll, MIB / 2, None);
        assert_eq!(a2a.server_footprint(1, 8, 0..8, false), 64 * MIB);
        // One rank alone, and sizes that would wrap saturate.
        assert_eq!(gather.server_footprint(0, 1, 0..1, false), 8 * MIB);
        let huge = f32_op(OpKind::AlltoAll, usize::MAX / 2, None);
        assert_eq!(huge.server_footprint(0, 8, 0..8, false), usize::MAX);
    }
}
