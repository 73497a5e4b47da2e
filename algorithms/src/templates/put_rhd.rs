//! Put RHD: recursive halving-doubling by puts, for put-only links.
//!
//! The same schedule as [`rhd`](super::rhd) (HCCL's `H-D_R`: `m = 2^k` participants, the
//! first `2(n - m)` positions folded pairwise), but every exchange is a [`put_step`]: the
//! sender writes what the receiver needs into the receiver's *receive area* (Scratch;
//! chunk `c` at `recv_chunks[c]`), signals, and the receiver reduces or copies it locally.
//!
//! - fold (reduce-scatter): the odd position puts its whole input into the even one's
//!   receive area; the even one reduces it with its own input into its partial sums;
//! - halving, distance `d = m/2 .. 1`: a participant puts its side (input at the first
//!   step unless it folded, partial sums afterwards) of the chunks its partner keeps, and
//!   reduces the partner's put of the chunks it keeps;
//! - unfold (reduce-scatter): the even position puts the odd one's reduced chunk;
//! - fold (all-gather): the odd position puts its chunk; doubling: a participant puts the
//!   chunks it holds; unfold: the even position puts every chunk the odd one lacks.
//!
//! All-gather puts land in the receiver's copy of the chunk when that is a CCL buffer
//! (`gather_into_place`, staged), otherwise in the receive area, copied into place by the
//! receiver (a put may not write a user buffer). The receive area is reused every step:
//! each step's Ack from the receiver precedes the put, after its consume of the previous
//! step, so nothing is overwritten early and no notify is posted twice.

use super::put_step::put_step;
use super::rhd::{group_position, merge_runs, RhdShape};
use super::ring::RingParams;
use super::ring_reduce_scatter::RingTargets;
use oxccl_framework::platform::{Buf, Link, Rank, Slice};
use oxccl_framework::{BufRange, Error, KernelArgs, KernelCtx};
use std::ops::Range;

oxccl_framework::register_template! {
    name: "put_rhd",
    description: "recursive halving-doubling by puts into the partner's Scratch receive area, reduced locally; runs over put-only links",
}

/// An RHD group run by puts.
#[derive(Clone, Debug)]
pub struct PutRhd<'a> {
    /// The group, chunks, input and output, as for the pull templates.
    pub p: RingParams<'a>,
    /// This rank's receive area (Scratch), the same range on every rank.
    pub recv: BufRange,
    /// `(byte offset, byte length)` of chunk `c` within `recv`.
    pub recv_chunks: &'a [(usize, usize)],
    /// All-gather puts write the receiver's `p.output` directly (a CCL buffer).
    pub gather_into_place: bool,
    /// Where this group's chunk tables stop running on, found once for these tables
    /// ([`PutRhdRuns::new`]); an executor keeps it across iterations of one shape
    /// ([`KernelCtx::memo`]).
    pub runs: &'a PutRhdRuns,
}

impl<'a> PutRhd<'a> {
    /// The group of `shape` on the main stream over the iteration's buffers, receiving
    /// into Scratch from offset 0 (an area the size of `shape`'s receive table).
    pub fn on_shape(shape: &'a PutRhdShape, args: &KernelArgs, gather_into_place: bool) -> Self {
        PutRhd {
            p: RingParams::on_main_stream(&shape.order, &shape.chunks, &shape.order, args),
            recv: BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len: shape.recv_bytes(),
            },
            recv_chunks: &shape.recv_chunks,
            gather_into_place,
            runs: &shape.runs,
        }
    }
}

/// Where a put RHD group's chunk tables stop running on, in position order: the step
/// tasks merge chunks into runs, and finding them chunk by chunk would cost O(group) per
/// step (`Breaks`).
#[derive(Debug)]
pub struct PutRhdRuns {
    chunks: Breaks,
    recv: Breaks,
    /// The partial sums' table of a reduce-scatter or all-reduce, when it has one.
    partials: Option<Breaks>,
}

/// An iteration's group over every rank in rank order: its chunk table, the receive
/// area's (and partial sums') table, and their runs, the same for every iteration of one
/// shape, which an executor keeps with [`KernelCtx::memo`].
pub struct PutRhdShape {
    pub order: Vec<Rank>,
    pub chunks: Vec<(usize, usize)>,
    /// Where chunk `c` lies in the receive area, and in the partial sums when they are
    /// not the chunk table's buffer.
    pub recv_chunks: Vec<(usize, usize)>,
    pub runs: PutRhdRuns,
}

impl PutRhdShape {
    /// `count` elements of `es` bytes split evenly over `n` ranks, the chunks packed in
    /// the receive area as in the buffers (AllReduce, Reduce).
    pub fn even(n: usize, count: usize, es: usize) -> Self {
        let chunks = super::even_chunks(count, n, es);
        Self::new(chunks.clone(), chunks)
    }

    /// One block of `len` bytes per rank where `blocks` says, packed one after another in
    /// the receive area (AllGather, ReduceScatter).
    pub fn blocks(blocks: Vec<(usize, usize)>, len: usize) -> Self {
        let packed = (0..blocks.len()).map(|c| (c * len, len)).collect();
        Self::new(blocks, packed)
    }

    /// Bytes of the receive area: up to the end of its last chunk.
    pub fn recv_bytes(&self) -> usize {
        self.recv_chunks
            .iter()
            .map(|&(offset, len)| offset + len)
            .max()
            .unwrap_or(0)
    }

    fn new(chunks: Vec<(usize, usize)>, recv_chunks: Vec<(usize, usize)>) -> Self {
        let order: Vec<Rank> = (0..chunks.len()).collect();
        let runs = PutRhdRuns::new(&order, &chunks, &recv_chunks, Some(&recv_chunks));
        PutRhdShape {
            order,
            chunks,
            recv_chunks,
            runs,
        }
    }
}

impl PutRhdRuns {
    /// The breaks of `chunks` (the group's chunk table), `recv_chunks` (the receive
    /// area's) and, for a reduction, `partial_chunks` (the [`RingTargets`]' table), with
    /// the chunk at each position `chunk_at`: the same tables the [`PutRhd`] and the
    /// targets it runs with hold.
    pub fn new(
        chunk_at: &[usize],
        chunks: &[(usize, usize)],
        recv_chunks: &[(usize, usize)],
        partial_chunks: Option<&[(usize, usize)]>,
    ) -> Self {
        PutRhdRuns {
            chunks: Breaks::of(chunks, chunk_at),
            recv: Breaks::of(recv_chunks, chunk_at),
            partials: partial_chunks.map(|t| Breaks::of(t, chunk_at)),
        }
    }
}

/// This rank in a put RHD group.
struct Member<'r, 'a> {
    g: &'r PutRhd<'a>,
    shape: RhdShape,
    pos: usize,
}

/// Positions `q` (in `chunk_at` order) after which a chunk table does not run on: the
/// bytes of chunk `chunk_at[q]` do not end where those of `chunk_at[q + 1]` begin.
///
/// A step's tasks are its chunks merged into runs ([`merge_runs`]); found chunk by chunk
/// that costs O(group) per step, and a 4096-rank group plans O(n²) per iteration. With the
/// breaks found once per iteration, a step finds its runs by binary search.
#[derive(Debug, PartialEq, Eq)]
struct Breaks(Vec<usize>);

impl Breaks {
    fn of(table: &[(usize, usize)], chunk_at: &[usize]) -> Self {
        let ends = |q: usize| {
            let (offset, len) = table[chunk_at[q]];
            offset + len
        };
        let breaks = (0..chunk_at.len().saturating_sub(1))
            .filter(|&q| ends(q) != table[chunk_at[q + 1]].0)
            .collect();
        Breaks(breaks)
    }

    /// The breaks strictly inside `positions` (a run may not continue past them).
    fn within(&self, positions: &Range<usize>) -> &[usize] {
        let lo = self.0.partition_point(|&q| q < positions.start);
        let hi = self.0.partition_point(|&q| q + 1 < positions.end);
        &self.0[lo..hi.max(lo)]
    }
}

/// One slice of a step's items: chunks of `table` in `range` on `rank`.
#[derive(Copy, Clone)]
struct Side<'t> {
    range: BufRange,
    table: &'t [(usize, usize)],
    breaks: &'t Breaks,
    rank: Rank,
}

impl Side<'_> {
    /// The slice of the chunks at `run` (positions whose chunks run on).
    fn slice(&self, chunk_at: &[usize], run: &Range<usize>) -> Slice {
        let (start, _) = self.table[chunk_at[run.start]];
        let (offset, len) = self.table[chunk_at[run.end - 1]];
        self.range.at(self.rank, start, offset + len - start)
    }
}

impl Member<'_, '_> {
    fn link(&self, ctx: &KernelCtx<'_>, pos: usize) -> Result<Link, Error> {
        ctx.link(self.g.p.order[pos], self.g.p.channel)
    }

    /// The items of the chunks at `positions`, one per run on which every side runs on
    /// (and a run of its own for position `alone`), with the positions of each.
    fn runs<const K: usize>(
        &self,
        positions: Range<usize>,
        sides: [Side<'_>; K],
        alone: Option<usize>,
    ) -> Vec<(Range<usize>, [Slice; K])> {
        let mut cuts: Vec<usize> = sides
            .iter()
            .flat_map(|s| s.breaks.within(&positions).iter().map(|&q| q + 1))
            .collect();
        if let Some(q) = alone.filter(|q| positions.contains(q)) {
            cuts.extend([q, q + 1]);
        }
        cuts.retain(|&c| c > positions.start && c < positions.end);
        cuts.sort_unstable();
        cuts.dedup();
        let chunk_at = self.g.p.chunk_at;
        let bounds = std::iter::once(positions.start)
            .chain(cuts)
            .chain(std::iter::once(positions.end));
        let bounds: Vec<usize> = bounds.collect();
        bounds
            .windows(2)
            .filter(|w| w[0] < w[1])
            .map(|w| {
                let run = w[0]..w[1];
                let item = sides.map(|s| s.slice(chunk_at, &run));
                (run, item)
            })
            .collect()
    }

    /// [`Member::runs`]' items alone, with no position standing alone.
    fn items<const K: usize>(
        &self,
        positions: Range<usize>,
        sides: [Side<'_>; K],
    ) -> Vec<[Slice; K]> {
        self.runs(positions, sides, None)
            .into_iter()
            .map(|(_, item)| item)
            .collect()
    }

    /// The output chunks (`g.p.output`) of `rank`, as a side.
    fn output_side(&self, rank: Rank) -> Side<'_> {
        Side {
            range: self.g.p.output,
            table: self.g.p.chunks,
            breaks: &self.g.runs.chunks,
            rank,
        }
    }

    /// The receive area of `rank`, as a side.
    fn recv_side(&self, rank: Rank) -> Side<'_> {
        Side {
            range: self.g.recv,
            table: self.g.recv_chunks,
            breaks: &self.g.runs.recv,
            rank,
        }
    }

    fn recv_at(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.recv_chunks[c];
        self.g.recv.at(rank, off, len)
    }

    fn input(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.p.chunks[c];
        self.g.p.input.at(rank, off, len)
    }

    fn output(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.p.chunks[c];
        self.g.p.output.at(rank, off, len)
    }

    /// One step: put `sends` (local source, chunk) into `to`, and reduce (`Some`
    /// targets: `[received, own] -> dst`) or copy into place what `from` put.
    fn step(
        &self,
        ctx: &mut KernelCtx<'_>,
        from: Option<Link>,
        to: Option<Link>,
        puts: Vec<[Slice; 2]>,
        reduces: Vec<[Slice; 3]>,
        copies: Vec<[Slice; 2]>,
    ) {
        let (dtype, op) = (self.g.p.dtype, self.g.p.op);
        put_step(
            ctx,
            self.g.p.stream,
            from.as_ref(),
            to.as_ref(),
            |s| merge_runs(puts).into_iter().for_each(|[a, b]| s.copy(a, b)),
            |s| {
                for [a, b, dst] in merge_runs(reduces) {
                    s.reduce(vec![a, b], dst, dtype, op);
                }
                merge_runs(copies)
                    .into_iter()
                    .for_each(|[a, b]| s.copy(a, b));
            },
        );
    }

    /// Gather puts of `chunks` (held in `p.output`) to `to`, and the receiver's copies.
    fn gather_puts(&self, me: Rank, to: Rank, chunks: &[usize]) -> Vec<[Slice; 2]> {
        chunks
            .iter()
            .map(|&c| {
                let dst = match self.g.gather_into_place {
                    true => self.output(to, c),
                    false => self.recv_at(to, c),
                };
                [self.output(me, c), dst]
            })
            .collect()
    }

    fn gather_copies(&self, me: Rank, chunks: &[usize]) -> Vec<[Slice; 2]> {
        match self.g.gather_into_place {
            true => Vec::new(),
            false => chunks
                .iter()
                .map(|&c| [self.recv_at(me, c), self.output(me, c)])
                .collect(),
        }
    }

    /// Where a partial sum of chunk `c` goes (the result for the own chunk at `d == 1`).
    fn partial(&self, t: &RingTargets<'_>, me: Rank, c: usize, last: bool) -> Slice {
        let len = self.g.p.chunks[c].1;
        match t.result {
            Some(result) if last && c == self.g.p.chunk_at[self.pos] => result.at(me, 0, len),
            _ => t.partials.at(me, t.partial_chunks[c].0, len),
        }
    }

    fn fold_reduce(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let all: Vec<usize> = (0..self.g.p.chunks.len()).collect();
        if pos & 1 == 1 {
            let puts = all
                .iter()
                .map(|&c| [self.input(me, c), self.recv_at(peer.remote, c)])
                .collect();
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            let reduces = all
                .iter()
                .map(|&c| {
                    let dst = t
                        .partials
                        .at(me, t.partial_chunks[c].0, self.g.p.chunks[c].1);
                    [self.recv_at(me, c), self.input(me, c), dst]
                })
                .collect();
            self.step(ctx, Some(peer), None, vec![], reduces, vec![]);
        }
        Ok(())
    }

    fn halving(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (shape, me) = (self.shape, ctx.rank);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        let found;
        let breaks = match &self.g.runs.partials {
            Some(breaks) => {
                debug_assert_eq!(*breaks, Breaks::of(t.partial_chunks, self.g.p.chunk_at));
                breaks
            }
            None => {
                found = Breaks::of(t.partial_chunks, self.g.p.chunk_at);
                &found
            }
        };
        let partials = Side {
            range: t.partials,
            table: t.partial_chunks,
            breaks,
            rank: me,
        };
        let input = Side {
            range: self.g.p.input,
            ..self.output_side(me)
        };
        for d in shape.halving() {
            let w = v ^ d;
            let link = self.link(ctx, shape.position(w))?;
            let first = d == shape.m / 2;
            // A partial sum lies where the partials table says, at the chunk's length.
            let side = match !first || v < shape.r {
                true => partials,
                false => input,
            };
            let theirs = shape.positions(RhdShape::block(w, d));
            let puts = self.items(theirs, [side, self.recv_side(link.remote)]);
            let reduces = self.halving_reduces(
                t,
                side,
                partials,
                d == 1,
                shape.positions(RhdShape::block(v, d)),
            );
            self.step(ctx, Some(link), Some(link), puts, reduces, vec![]);
        }
        Ok(())
    }

    /// A halving step's reduces of the chunks at `mine`: `[received, own side] -> partial`,
    /// the own chunk's into the result at the last step (`last`) when there is one.
    fn halving_reduces(
        &self,
        t: &RingTargets<'_>,
        side: Side<'_>,
        partials: Side<'_>,
        last: bool,
        mine: Range<usize>,
    ) -> Vec<[Slice; 3]> {
        let me = partials.rank;
        let alone = (last && t.result.is_some()).then_some(self.pos);
        self.runs(mine, [self.recv_side(me), side, partials], alone)
            .into_iter()
            .map(|(run, [recv, own, dst])| match alone == Some(run.start) {
                true => {
                    let c = self.g.p.chunk_at[run.start];
                    [recv, own, self.partial(t, me, c, true)]
                }
                false => [recv, own, dst],
            })
            .collect()
    }

    fn unfold_reduced(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let c = self.g.p.chunk_at[pos ^ 1];
        let len = self.g.p.chunks[c].1;
        if pos & 1 == 0 {
            let src = t.partials.at(me, t.partial_chunks[c].0, len);
            let puts = vec![[src, self.recv_at(peer.remote, c)]];
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            // The own chunk, which may be shorter than the partner's (uneven chunks).
            let c = self.g.p.chunk_at[pos];
            let len = self.g.p.chunks[c].1;
            let dst = match t.result {
                Some(result) => result.at(me, 0, len),
                None => t.partials.at(me, t.partial_chunks[c].0, len),
            };
            let copies = vec![[self.recv_at(me, c), dst]];
            self.step(ctx, Some(peer), None, vec![], vec![], copies);
        }
        Ok(())
    }

    /// Odd position to even (`fold`) or even to odd (`!fold`) of `chunks`.
    fn pair_gather(
        &self,
        ctx: &mut KernelCtx<'_>,
        fold: bool,
        chunks: &[usize],
    ) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let sender = (pos & 1 == 1) == fold;
        if sender {
            let puts = self.gather_puts(me, peer.remote, chunks);
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            let copies = self.gather_copies(me, chunks);
            self.step(ctx, Some(peer), None, vec![], vec![], copies);
        }
        Ok(())
    }

    fn doubling(&self, ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
        let (shape, me) = (self.shape, ctx.rank);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        for d in shape.doubling() {
            let w = v ^ d;
            let link = self.link(ctx, shape.position(w))?;
            let mine = shape.positions(RhdShape::block(v, d));
            let theirs = shape.positions(RhdShape::block(w, d));
            let to = match self.g.gather_into_place {
                true => self.output_side(link.remote),
                false => self.recv_side(link.remote),
            };
            let puts = self.items(mine, [self.output_side(me), to]);
            let copies = match self.g.gather_into_place {
                true => Vec::new(),
                false => self.items(theirs, [self.recv_side(me), self.output_side(me)]),
            };
            self.step(ctx, Some(link), Some(link), puts, vec![], copies);
        }
        Ok(())
    }
}

fn member<'r, 'a>(ctx: &KernelCtx<'_>, g: &'r PutRhd<'a>) -> Result<Member<'r, 'a>, Error> {
    debug_assert_eq!(g.runs.chunks, Breaks::of(g.p.chunks, g.p.chunk_at));
    debug_assert_eq!(g.runs.recv, Breaks::of(g.recv_chunks, g.p.chunk_at));
    Ok(Member {
        g,
        shape: RhdShape::new(g.p.order.len()),
        pos: group_position(ctx, g.p.order)?,
    })
}

/// The chunks the odd position of a folded pair lacks after the doubling: all, or all
/// but its own (none outside a folded pair).
fn unfold_chunks(g: &PutRhd<'_>, pos: usize, has_own: bool) -> Vec<usize> {
    if pos >= 2 * RhdShape::new(g.p.order.len()).r {
        return Vec::new();
    }
    let own = g.p.chunk_at[pos | 1];
    (0..g.p.chunks.len())
        .filter(|&c| !has_own || c != own)
        .collect()
}

/// Append a put RHD reduce-scatter that reads `g.p.input` and writes `t`.
pub fn put_rhd_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    g: &PutRhd<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    let m = member(ctx, g)?;
    m.fold_reduce(ctx, t)?;
    m.halving(ctx, t)?;
    m.unfold_reduced(ctx, t)
}

/// Append a put RHD all-gather of the chunks in `g.p.output` (each rank's own chunk in
/// place).
pub fn put_rhd_all_gather(ctx: &mut KernelCtx<'_>, g: &PutRhd<'_>) -> Result<(), Error> {
    let m = member(ctx, g)?;
    let folded = match m.pos < 2 * m.shape.r {
        true => vec![g.p.chunk_at[m.pos | 1]],
        false => Vec::new(),
    };
    m.pair_gather(ctx, true, &folded)?;
    m.doubling(ctx)?;
    m.pair_gather(ctx, false, &unfold_chunks(g, m.pos, true))
}

/// Append a put RHD all-reduce: afterwards every member's `g.p.output` holds the
/// reduction of every member's `g.p.input`, partial sums kept in `g.p.output`.
pub fn put_rhd_all_reduce(ctx: &mut KernelCtx<'_>, g: &PutRhd<'_>) -> Result<(), Error> {
    let m = member(ctx, g)?;
    let targets = RingTargets {
        partials: g.p.output,
        partial_chunks: g.p.chunks,
        result: None,
    };
    m.fold_reduce(ctx, &targets)?;
    m.halving(ctx, &targets)?;
    m.doubling(ctx)?;
    m.pair_gather(ctx, false, &unfold_chunks(g, m.pos, false))
}
