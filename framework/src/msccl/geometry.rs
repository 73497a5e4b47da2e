//! Where an imported file's chunks lie in one loop iteration's buffers: the input and
//! output (in blocks for the sides that hold one per rank), the file's own scratch, the
//! landing slots in peers' scratch, and the one-buffer view of an in-place algorithm.

use super::executor::Imported;
use super::model::{BufName, ChunkRef};
use super::validate::buffer_chunks;
use crate::executor::{KernelArgs, KernelCtx};
use oxccl_platform::{Buf, Rank, Slice};

/// How an algorithm that runs in place sees the one buffer: its references to
/// `from` are chunks `base..` of `to` (the larger side: AllGather's input is block `rank`
/// of the output, ReduceScatter's output block `rank` of the input, AllReduce's input is
/// the output). msccl-tools writes in-place programs either way (chunks of the input, or
/// the same chunks of the output): read through this, both meet in one buffer.
///
/// - A file that runs in place only is remapped through it when the buffers bound are not
///   one (staged through the CCL buffers): the input is copied into place first, or the
///   output out of it last.
/// - Bound in place (zero-copy), input and output are one memory already, with the user's
///   input read-only: references stand, and a `cpy` of chunks onto themselves (a rank's
///   own block into its place) is dropped; a file that writes the input there is refused
///   by the analyzer.
/// - A file that also runs out of place names two buffers whenever the call does not bind
///   them as one: nothing is remapped or dropped then.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Alias {
    pub(super) from: BufName,
    pub(super) to: BufName,
    pub(super) base: usize,
}

/// Where a file's chunks lie in one iteration's buffers.
pub(super) struct Geometry<'a> {
    pub(super) rank: Rank,
    pub(super) args: &'a KernelArgs,
    pub(super) chunk_bytes: usize,
    /// Bytes per scratch chunk position ([`SlotPlan::stride`]).
    pub(super) stride: usize,
    /// The one-buffer view of an algorithm that runs in place.
    pub(super) alias: Option<Alias>,
    /// The algorithm also runs out of place (its input and output references name two
    /// buffers unless the call binds them as one).
    pub(super) outofplace: bool,
    /// Chunks per block of the input and output, for the sides with one block per rank.
    pub(super) in_block: Option<usize>,
    pub(super) out_block: Option<usize>,
}

/// A run of chunks in some rank's buffer.
#[derive(Copy, Clone, Debug)]
pub(super) enum Loc {
    Local(BufName, usize),
    /// Chunk of `rank`'s scratch (landing slots).
    Scratch(Rank, usize),
}

impl<'a> Geometry<'a> {
    /// The geometry of `imp` on `rank` for the iteration `args`, chunks of `chunk_bytes`,
    /// scratch positions `stride` bytes apart.
    pub(super) fn new(
        imp: &Imported,
        rank: Rank,
        args: &'a KernelArgs,
        chunk_bytes: usize,
        stride: usize,
    ) -> Self {
        let n = imp.algo.nchunksperloop;
        let (in_chunks, out_chunks) = buffer_chunks(&imp.algo);
        let blocked = |chunks| (imp.multiplier() > 1 && chunks == n).then_some(n / imp.algo.ngpus);
        Geometry {
            rank,
            args,
            chunk_bytes,
            stride,
            alias: imp.alias(rank),
            outofplace: imp.algo.outofplace,
            in_block: blocked(in_chunks),
            out_block: blocked(out_chunks),
        }
    }

    /// The one-buffer view, where references must be moved through it: the buffers
    /// bound are not one. Bound in place (zero-copy), input and output are one memory
    /// already, with the user's input read-only: references stand as they are.
    pub(super) fn remap(&self) -> Option<Alias> {
        self.alias
            .filter(|_| !self.args.aliased && !self.outofplace)
    }

    /// Whether input and output are one buffer in this iteration: bound in place, or
    /// seen as one ([`Geometry::remap`]).
    pub(super) fn one_buffer(&self) -> bool {
        self.alias.is_some() && (self.args.aliased || self.remap().is_some())
    }

    /// Where a step's chunk reference lies (through the one-buffer view when remapped).
    pub(super) fn local(&self, chunk: ChunkRef) -> Loc {
        match self.remap() {
            Some(a) if a.from == chunk.buf => Loc::Local(a.to, a.base + chunk.off),
            _ => Loc::Local(chunk.buf, chunk.off),
        }
    }

    /// Whether `a` and `b` are the same chunks (of the one buffer, when input and output
    /// are one): a copy between them moves nothing.
    pub(super) fn same(&self, a: Loc, b: Loc) -> bool {
        let view = self.alias.filter(|_| self.one_buffer());
        let one = |l: Loc| match (view, l) {
            (Some(al), Loc::Local(buf, c)) if al.from == buf => Loc::Local(al.to, al.base + c),
            _ => l,
        };
        matches!((one(a), one(b)), (Loc::Local(x, i), Loc::Local(y, j)) if x == y && i == j)
    }

    /// Copy `cnt` chunks from `from` to `to` on stream `s`, in runs no block boundary
    /// crosses.
    pub(super) fn copy(&self, ctx: &mut KernelCtx<'_>, s: usize, from: Loc, to: Loc, cnt: usize) {
        for run in self.runs(&[from, to], cnt) {
            ctx.stream(s).copy(run[0], run[1]);
        }
    }

    /// Chunks per block of `loc`'s buffer, if it has blocks.
    pub(super) fn block(&self, loc: Loc) -> Option<usize> {
        match loc {
            Loc::Local(BufName::Input, _) => self.in_block,
            Loc::Local(BufName::Output, _) => self.out_block,
            _ => None,
        }
    }

    /// Whether chunk `k` of `loc` starts a new block (a run must not cross it).
    pub(super) fn breaks_at(&self, loc: Loc, k: usize) -> bool {
        let first = match loc {
            Loc::Local(_, c) | Loc::Scratch(_, c) => c,
        };
        self.block(loc)
            .is_some_and(|b| (first + k).is_multiple_of(b))
    }

    /// Chunks `[k, k + len)` of `loc` as one slice (no block boundary inside).
    pub(super) fn slice(&self, loc: Loc, k: usize, len: usize) -> Slice {
        // Saturating: a position past a buffer stays past it, and the slice checks of the
        // analyzer and the devices refuse it naming the task.
        let bytes = len.saturating_mul(self.chunk_bytes);
        let at = |chunk: usize, size: usize| chunk.saturating_mul(size);
        match loc {
            // A landing slot is read and written whole (or cut at the same chunks by both
            // ends): its chunks are packed after its position.
            Loc::Scratch(rank, c) => Slice::new(rank, Buf::Scratch, self.scratch_at(c, k), bytes),
            // The file's own scratch is this rank's alone, and the iteration's streams join
            // before the next: packed at this iteration's chunk size.
            Loc::Local(BufName::Scratch, c) => Slice::new(
                self.rank,
                Buf::Scratch,
                at(c.saturating_add(k), self.chunk_bytes),
                bytes,
            ),
            Loc::Local(side, c) => {
                let range = match side {
                    BufName::Input => self.args.input,
                    _ => self.args.output,
                };
                let chunk = c.saturating_add(k);
                let offset = match self.block(loc) {
                    Some(b) => at(chunk / b, self.args.block_stride)
                        .saturating_add(at(chunk % b, self.chunk_bytes)),
                    None => at(chunk, self.chunk_bytes),
                };
                range.at(self.rank, offset, bytes)
            }
        }
    }

    /// Byte offset of chunk `k` of the landing slot at scratch position `c`. Positions
    /// are `stride` bytes apart (the file's own `s_chunks` come first, each at most
    /// `stride` bytes in any iteration), so a slot lies at the same bytes in every
    /// iteration; a slot's chunks are packed after its position.
    pub(super) fn scratch_at(&self, c: usize, k: usize) -> usize {
        c.saturating_mul(self.stride)
            .saturating_add(k.saturating_mul(self.chunk_bytes))
    }

    /// `cnt` chunks of every location in `locs`, cut into runs that no block boundary
    /// crosses: for each run, one slice per location.
    pub(super) fn runs(&self, locs: &[Loc], cnt: usize) -> Vec<Vec<Slice>> {
        let mut cuts = vec![0];
        cuts.extend((1..cnt).filter(|&k| locs.iter().any(|&l| self.breaks_at(l, k))));
        cuts.push(cnt);
        cuts.windows(2)
            .map(|w| {
                locs.iter()
                    .map(|&l| self.slice(l, w[0], w[1] - w[0]))
                    .collect()
            })
            .collect()
    }
}
