//! Which reads of an operation take a block another rank has just written.
//!
//! On a CPU host a staged executor's step copies the block its peer's step before
//! stored, while that block sits in the writing core's cache: the copy runs at the
//! forwarding rate ([`crate::topology::Processor::forward_seconds_per_byte`]), not at
//! the rate of data at rest. Once one core has read the lines, they are shared, and
//! further readers take them as they take any cached data. So a block that one reader
//! forwards (a ring passes each block on once) pays in full, and a block that seven
//! peers pull (a mesh's) pays once among the seven.
//!
//! [`Writers`] summarises that from the programs, per (rank, buffer): the ranks that write
//! it and the span they write, and how many reads by other ranks cover each byte of
//! it. A read's forwarded share is then the sum over its bytes of one over their cover.
//! It is a summary of the whole operation, not of its order: a read of such a buffer's
//! span counts whether the write comes before it or not.

use crate::fast_hash::FastMap;
use oxccl_platform::{Buf, RankProgram, Task};

/// Who writes and who reads each buffer of an operation (see the module docs).
#[derive(Default)]
pub(crate) struct Writers(FastMap<(usize, Buf), Written>);

/// What [`Writers`] keeps of one buffer.
struct Written {
    /// The first rank seen writing it, and whether any other does.
    first: usize,
    many: bool,
    /// The span written (end exclusive).
    span: (usize, usize),
    /// Reads of it by ranks other than its writer, as a step function of their cover:
    /// `(start, weight before start)` per piece, in order, with `1 / cover` per byte
    /// of each piece (0 where nobody reads).
    cover: Vec<Piece>,
}

/// A piece of a buffer where the reads' cover is constant.
#[derive(Copy, Clone)]
struct Piece {
    start: usize,
    /// The forwarded weight of the bytes before `start` (sum of `1 / cover`).
    before: f64,
    /// `1 / cover` for each byte from `start` to the next piece (0: not read).
    per_byte: f64,
}

impl Writers {
    /// The writers and readers of `programs`' buffers where `topology` is a CPU host
    /// whose forwarding is modelled ([`crate::topology::Processor::forward_gbps`]); none
    /// elsewhere, where no read is charged for forwarding and the summary would go
    /// unused.
    pub fn on<'p>(
        topology: &crate::topology::Topology,
        programs: impl IntoIterator<Item = &'p RankProgram> + Clone,
    ) -> Writers {
        match topology.processor() {
            Some(p) if p.forward_gbps > 0.0 => Writers::of(programs),
            _ => Writers::default(),
        }
    }

    /// The writers and readers of `programs`' buffers.
    pub fn of<'p>(programs: impl IntoIterator<Item = &'p RankProgram> + Clone) -> Writers {
        let mut writers = Writers::default();
        for program in programs.clone() {
            for slice in tasks(program).flat_map(|t| t.writes()) {
                writers.wrote(
                    program.rank,
                    slice.rank,
                    slice.buf,
                    (slice.offset, end(slice)),
                );
            }
        }
        let mut reads: FastMap<(usize, Buf), Vec<(usize, usize)>> = FastMap::default();
        for program in programs {
            for slice in tasks(program).flat_map(|t| t.reads()) {
                let span = (slice.offset, end(slice));
                if writers
                    .others_wrote(program.rank, slice.rank, slice.buf, span)
                    .is_some()
                {
                    reads.entry((slice.rank, slice.buf)).or_default().push(span);
                }
            }
        }
        for (key, spans) in reads {
            if let Some(w) = writers.0.get_mut(&key) {
                // Only the written span's bytes are forwarded.
                let (lo, hi) = w.span;
                w.cover = cover(spans.into_iter().map(|(a, b)| (a.max(lo), b.min(hi))));
            }
        }
        writers
    }

    /// Rank `by` writes `span` of `owner`'s buffer `buf`.
    fn wrote(&mut self, by: usize, owner: usize, buf: Buf, span: (usize, usize)) {
        self.0
            .entry((owner, buf))
            .and_modify(|w| {
                w.many |= w.first != by;
                w.span = (w.span.0.min(span.0), w.span.1.max(span.1));
            })
            .or_insert(Written {
                first: by,
                many: false,
                span,
                cover: Vec::new(),
            });
    }

    /// What `owner`'s `buf` has of writes by ranks other than `reader` within `span`.
    fn others_wrote(
        &self,
        reader: usize,
        owner: usize,
        buf: Buf,
        span: (usize, usize),
    ) -> Option<&Written> {
        self.0
            .get(&(owner, buf))
            .filter(|w| (w.many || w.first != reader) && span.0 < w.span.1 && w.span.0 < span.1)
    }

    /// The share of `task`'s read bytes (0 to 1) that it forwards: of each read of a
    /// block other ranks write, one over the number of such reads of each byte.
    pub fn forwarded_share(&self, me: usize, task: &Task) -> f64 {
        let (mut forwarded, mut all) = (0.0, 0usize);
        for slice in task.reads() {
            all = all.saturating_add(slice.len);
            let span = (slice.offset, end(slice));
            if let Some(w) = self.others_wrote(me, slice.rank, slice.buf, span) {
                forwarded += weight_before(&w.cover, span.1) - weight_before(&w.cover, span.0);
            }
        }
        match all {
            0 => 0.0,
            _ => (forwarded / all as f64).clamp(0.0, 1.0),
        }
    }
}

/// The tasks of `program`, every stream's.
fn tasks(program: &RankProgram) -> impl Iterator<Item = &Task> {
    program.streams.iter().flat_map(|s| s.tasks.iter())
}

/// One past a slice's last byte.
fn end(slice: &oxccl_platform::Slice) -> usize {
    slice.offset.saturating_add(slice.len)
}

/// The pieces of constant cover of `spans` (see [`Written::cover`]).
fn cover(spans: impl Iterator<Item = (usize, usize)>) -> Vec<Piece> {
    let mut edges: Vec<(usize, i64)> = spans
        .filter(|(a, b)| a < b)
        .flat_map(|(a, b)| [(a, 1), (b, -1)])
        .collect();
    edges.sort_unstable();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut depth = 0i64;
    for (at, step) in edges {
        depth += step;
        let per_byte = if depth > 0 { 1.0 / depth as f64 } else { 0.0 };
        let before = pieces
            .last()
            .map_or(0.0, |p| p.before + (at - p.start) as f64 * p.per_byte);
        match pieces.last_mut() {
            Some(p) if p.start == at => p.per_byte = per_byte,
            _ => pieces.push(Piece {
                start: at,
                before,
                per_byte,
            }),
        }
    }
    pieces
}

/// The forwarded weight of bytes `0..at` of a buffer with these pieces.
fn weight_before(pieces: &[Piece], at: usize) -> f64 {
    let i = pieces.partition_point(|p| p.start <= at);
    match i {
        0 => 0.0,
        _ => {
            let p = pieces[i - 1];
            p.before + (at - p.start) as f64 * p.per_byte
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_platform::Slice;

    /// A program of `rank` with one copy per `(src, dst)` pair.
    fn copies(rank: usize, pairs: &[(Slice, Slice)]) -> RankProgram {
        let mut p = RankProgram::new(rank, 1);
        for &(src, dst) in pairs {
            p.streams[0].copy(src, dst);
        }
        p
    }

    #[test]
    fn a_block_passed_on_once_is_forwarded_whole_and_one_pulled_by_many_once_among_them() {
        let out = |rank, offset| Slice::new(rank, Buf::Output, offset, 100);
        let input = |rank| Slice::new(rank, Buf::Input, 0, 100);
        // Rank 0 writes its output's first block; rank 1 passes it on (a ring step);
        // ranks 2 and 3 pull rank 1's second block, which rank 1 wrote from its input.
        let programs = [
            copies(0, &[(input(0), out(0, 0))]),
            copies(1, &[(out(0, 0), out(1, 0)), (input(1), out(1, 100))]),
            copies(2, &[(out(1, 100), out(2, 100))]),
            copies(3, &[(out(1, 100), out(3, 100)), (input(2), out(3, 200))]),
        ];
        let w = Writers::of(programs.iter());
        let share = |rank: usize, task: usize| {
            w.forwarded_share(rank, &programs[rank].streams[0].tasks[task])
        };
        assert_eq!(share(1, 0), 1.0);
        assert_eq!(share(2, 0), 0.5);
        assert_eq!(share(3, 0), 0.5);
        // Inputs nobody writes, and a rank's own writes, are not forwarded.
        assert_eq!(share(0, 0), 0.0);
        assert_eq!(share(1, 1), 0.0);
        assert_eq!(share(3, 1), 0.0);
    }

    #[test]
    fn a_read_half_over_a_forwarded_block_is_half_forwarded() {
        let programs = [
            copies(
                0,
                &[(
                    Slice::new(0, Buf::Input, 0, 50),
                    Slice::new(0, Buf::Output, 50, 50),
                )],
            ),
            copies(
                1,
                &[(
                    Slice::new(0, Buf::Output, 0, 100),
                    Slice::new(1, Buf::Output, 0, 100),
                )],
            ),
        ];
        let w = Writers::of(programs.iter());
        let task = &programs[1].streams[0].tasks[0];
        assert_eq!(w.forwarded_share(1, task), 0.5);
    }
}
