//! Start conditions for streams, as data: the fence edges a sequence of operations adds to
//! the happens-before graph (see [`super::sequence`]).
//!
//! A [`Barrier`] is passed once every stream and barrier it lists has ended or been passed;
//! a stream with a start barrier runs its first task only after that. The canonical
//! execution ([`super::schedule`]) lays a passed barrier out as a short chain of fence
//! nodes, each with two predecessors (the previous node and one more dependency), so the
//! happens-before search keeps its two-predecessor graph and needs no change. A barrier
//! with one dependency is that dependency itself and costs no node.

use super::index::NONE;

/// A join point: passed once every listed stream ended and every listed barrier passed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Barrier {
    /// Global stream numbers.
    pub streams: Vec<u32>,
    /// Barriers with lower numbers (barriers never wait on later ones, so they cannot
    /// form a cycle).
    pub barriers: Vec<u32>,
}

/// Start conditions of every stream of an index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fences {
    /// Per global stream, the barrier it starts after, or `NONE`.
    pub start: Vec<u32>,
    pub barriers: Vec<Barrier>,
}

impl Fences {
    /// No stream waits for anything (one operation alone).
    pub fn none(streams: usize) -> Self {
        Fences {
            start: vec![NONE; streams],
            barriers: Vec::new(),
        }
    }
}

/// Which operation ends precede which operation starts, through the barriers alone: a
/// shortcut for happens-before queries across operations, which would otherwise search
/// backwards through every task of the later operation before reaching the fence.
pub(crate) struct Closure {
    ranks: usize,
    /// (operation, rank) of every global stream.
    stream_op_rank: Vec<(u32, u32)>,
    words: usize,
    /// Per (operation `j`, rank `r`): bit `i * ranks + x` set when operation `i` of rank
    /// `x` ended before operation `j` of rank `r` started.
    bits: Vec<u64>,
}

impl Closure {
    /// `direct[j][r]`: the ranks whose operation `j - 1` the start of `(j, r)` waits for
    /// (empty for `j = 0`).
    pub fn new(ranks: usize, stream_op_rank: Vec<(u32, u32)>, direct: &[Vec<Vec<usize>>]) -> Self {
        let ops = direct.len();
        let words = (ops * ranks).div_ceil(64);
        let mut bits = vec![0u64; ops * ranks * words];
        for (j, per_rank) in direct.iter().enumerate().skip(1) {
            for (r, peers) in per_rank.iter().enumerate() {
                let mut row = vec![0u64; words];
                for &p in peers {
                    let prev = ((j - 1) * ranks + p) * words;
                    row.iter_mut()
                        .zip(&bits[prev..prev + words])
                        .for_each(|(a, b)| *a |= b);
                    let bit = (j - 1) * ranks + p;
                    row[bit / 64] |= 1 << (bit % 64);
                }
                let at = (j * ranks + r) * words;
                bits[at..at + words].copy_from_slice(&row);
            }
        }
        Closure {
            ranks,
            stream_op_rank,
            words,
            bits,
        }
    }

    /// True when everything on stream `sa` happens before everything on stream `sb` by
    /// the fences alone (an earlier operation of the same rank, or one whose end the
    /// later one's start waits for).
    pub fn orders(&self, sa: u32, sb: u32) -> bool {
        let (Some(&(i, x)), Some(&(j, r))) = (
            self.stream_op_rank.get(sa as usize),
            self.stream_op_rank.get(sb as usize),
        ) else {
            return false;
        };
        if i >= j {
            return false;
        }
        if x == r {
            return true;
        }
        let bit = i as usize * self.ranks + x as usize;
        let at = (j as usize * self.ranks + r as usize) * self.words;
        self.bits[at + bit / 64] & (1 << (bit % 64)) != 0
    }
}
