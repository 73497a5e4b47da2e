//! Where a generator's pieces lie in the buffers, and ring orders.
//!
//! A loop of `ranks * lanes * factor` chunks is cut into `ranks` blocks (one per rank,
//! for the collectives with blocked buffers; one per ring step for the others), and every
//! block into `lanes` pieces of `factor` chunks, one per lane (a channel, or one ring of
//! a bidirectional channel). Piece (block b, lane l) starts at chunk `(b * lanes + l) *
//! factor` of a full-size buffer, and lane l's piece of a one-block buffer (AllGather's
//! input, ReduceScatter's output) at `l * factor`.

use super::xml::Program;
use super::{Coll, Params};

/// The pieces of one loop.
#[derive(Copy, Clone, Debug)]
pub struct Layout {
    pub ranks: usize,
    pub lanes: usize,
    pub factor: usize,
}

impl Layout {
    pub fn new(ranks: usize, lanes: usize, factor: usize) -> Layout {
        assert!(ranks >= 2, "an algorithm needs at least two ranks");
        assert!(lanes >= 1 && factor >= 1, "lanes and factor start at 1");
        Layout {
            ranks,
            lanes,
            factor,
        }
    }

    /// nchunksperloop.
    pub fn chunks(&self) -> usize {
        self.ranks * self.lanes * self.factor
    }

    /// The first chunk of piece (`block`, `lane`) in a full-size buffer.
    pub fn part(&self, block: usize, lane: usize) -> usize {
        (block * self.lanes + lane) * self.factor
    }

    /// The first chunk of `lane`'s piece of a one-block buffer.
    pub fn small(&self, lane: usize) -> usize {
        lane * self.factor
    }

    /// The pieces of `lane` over all blocks of a full-size buffer, as (offset, count)
    /// ranges with neighbours merged (one range when there is one lane).
    pub fn lane_ranges(&self, lane: usize) -> Vec<(usize, usize)> {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for b in 0..self.ranks {
            let off = self.part(b, lane);
            match ranges.last_mut() {
                Some((start, cnt)) if *start + *cnt == off => *cnt += self.factor,
                _ => ranges.push((off, self.factor)),
            }
        }
        ranges
    }
}

/// The layout of a loop of `p` with `lanes` lanes, and an empty [`Program`] of `coll` in
/// `form` on it.
pub fn start(coll: Coll, form: &str, p: &Params, lanes: usize) -> (Layout, Program) {
    let lay = Layout::new(p.ranks, lanes, p.factor);
    let prog = Program::new(coll, form, p, lay.chunks());
    (lay, prog)
}

/// `cnt` chunks from `off`: one step's worth, or one step per chunk when `pipeline`.
pub fn pieces(off: usize, cnt: usize, pipeline: bool) -> Vec<(usize, usize)> {
    if pipeline {
        (off..off + cnt).map(|c| (c, 1)).collect()
    } else {
        vec![(off, cnt)]
    }
}

/// The ranks of a ring starting at `first`: `first, first+1, ...` forward, `first,
/// first-1, ...` backward.
pub fn ring_order(ranks: usize, first: usize, forward: bool) -> Vec<usize> {
    (0..ranks)
        .map(|k| {
            if forward {
                (first + k) % ranks
            } else {
                (first + ranks - k) % ranks
            }
        })
        .collect()
}

/// Lane (or channel) `lane`'s rings run forward when it is even, backward when odd.
pub fn forward(lane: usize) -> bool {
    lane.is_multiple_of(2)
}

/// Rank at `pos + shift` (mod n) of `order`, for a signed shift.
pub fn at(order: &[usize], pos: usize, shift: isize) -> usize {
    let n = order.len() as isize;
    order[(pos as isize + shift).rem_euclid(n) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_tile_the_loop() {
        let lay = Layout::new(4, 3, 2);
        let mut seen = vec![0; lay.chunks()];
        for lane in 0..3 {
            for (off, cnt) in lay.lane_ranges(lane) {
                for n in &mut seen[off..off + cnt] {
                    *n += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        assert_eq!(Layout::new(4, 1, 2).lane_ranges(0), vec![(0, 8)]);
    }

    #[test]
    fn rings_visit_every_rank_once() {
        assert_eq!(ring_order(4, 1, true), vec![1, 2, 3, 0]);
        assert_eq!(ring_order(4, 1, false), vec![1, 0, 3, 2]);
    }
}
