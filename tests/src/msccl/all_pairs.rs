//! All-pairs (direct) algorithms: every rank talks to every peer through a threadblock of
//! its own (send and receive peer both that peer), on every channel; channel c moves
//! piece c of every block ([`Layout`]).
//!
//! - AllReduce: each rank owns one group; peers' shares of it arrive in scratch (`r`),
//!   and a local threadblock reduces them into the output with `re`, pairing scratch
//!   slots first (a `nop` waits for one receiving threadblock, the `re` after it for
//!   another), then sends the reduced group to every peer, whose `s` depends on the last
//!   `re`.
//! - ReduceScatter: each peer's share is reduced straight into the output with `rrc`;
//!   the `rrc`s of the peers' threadblocks are chained by dependencies, since they all
//!   write the same chunks.
//! - AllGather, AlltoAll, Gather, Scatter: a send and a receive per peer.
//! - Broadcast: the root sends everything to every peer. Reduce: the root receives every
//!   peer's input into scratch and reduces it with `re`, each waiting for its receive.

use super::layout::{start, Layout};
use super::xml::{i, o, s, Program, StepRef};
use super::{Coll, Params};

/// The peers of `r`, from r+1 round to r-1.
fn peers(n: usize, r: usize) -> Vec<usize> {
    (1..n).map(|d| (r + d) % n).collect()
}

pub fn all_reduce_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::AllReduce, "all_pairs", p, p.channels);
    let f = p.factor;
    for ch in 0..p.channels {
        for r in 0..n {
            let mine = o(lay.part(r, ch));
            let local = prog.tb(r, None, None, ch);
            prog.cpy(r, local, i(lay.part(r, ch)), mine, f, None);
            let mut slots = Vec::new();
            let mut received = Vec::new();
            let mut tbs = Vec::new();
            for q in peers(n, r) {
                let tb = prog.tb(r, Some(q), Some(q), ch);
                tbs.push(tb);
                let slot = s(prog.scratch(r, f));
                prog.send(r, tb, i(lay.part(q, ch)), f, None);
                received.push(prog.recv(r, tb, slot, f, None));
                slots.push(slot);
            }
            // Pairs of slots: wait for both receives, reduce one slot into the other,
            // then that into the output.
            let mut k = 0;
            while k < slots.len() {
                if k + 1 < slots.len() {
                    prog.nop(r, local, Some(received[k]));
                    prog.re(r, local, slots[k + 1], slots[k], f, Some(received[k + 1]));
                    prog.re(r, local, slots[k], mine, f, None);
                    k += 2;
                } else {
                    prog.re(r, local, slots[k], mine, f, Some(received[k]));
                    k += 1;
                }
            }
            let reduced = prog.last(r, local);
            for (j, q) in peers(n, r).into_iter().enumerate() {
                prog.send(r, tbs[j], mine, f, Some(reduced));
                prog.recv(r, tbs[j], o(lay.part(q, ch)), f, None);
            }
        }
    }
    prog
}

pub fn reduce_scatter_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::ReduceScatter, "all_pairs", p, p.channels);
    let f = p.factor;
    for ch in 0..p.channels {
        for r in 0..n {
            let out = o(lay.small(ch));
            let mut previous: Option<StepRef> = None;
            let tbs: Vec<(usize, usize)> = peers(n, r)
                .into_iter()
                .map(|q| (q, prog.tb(r, Some(q), Some(q), ch)))
                .collect();
            for (k, &(q, tb)) in tbs.iter().enumerate() {
                if k == 0 {
                    prog.cpy(r, tb, i(lay.part(r, ch)), out, f, None);
                }
                prog.send(r, tb, i(lay.part(q, ch)), f, None);
            }
            for &(_, tb) in &tbs {
                previous = Some(prog.rrc(r, tb, out, out, f, previous));
            }
        }
    }
    prog
}

pub fn all_gather_program(p: &Params) -> Program {
    exchange(Coll::AllGather, p, |lay, _, ch| lay.small(ch))
}

pub fn all_to_all_program(p: &Params) -> Program {
    exchange(Coll::AllToAll, p, |lay, q, ch| lay.part(q, ch))
}

/// AllGather and AlltoAll: on the threadblock of each peer q, every rank sends
/// `input(q)`'s piece of its input and receives q's into q's block of the output, having
/// copied `input(itself)` to its own block first.
fn exchange(coll: Coll, p: &Params, input: impl Fn(&Layout, usize, usize) -> usize) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(coll, "all_pairs", p, p.channels);
    let f = p.factor;
    for ch in 0..p.channels {
        for r in 0..n {
            for (k, q) in peers(n, r).into_iter().enumerate() {
                let tb = prog.tb(r, Some(q), Some(q), ch);
                if k == 0 {
                    prog.cpy(r, tb, i(input(&lay, r, ch)), o(lay.part(r, ch)), f, None);
                }
                prog.send(r, tb, i(input(&lay, q, ch)), f, None);
                prog.recv(r, tb, o(lay.part(q, ch)), f, None);
            }
        }
    }
    prog
}

pub fn broadcast_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::Broadcast, "all_pairs", p, p.channels);
    let root = p.root;
    for ch in 0..p.channels {
        let ranges = lay.lane_ranges(ch);
        for (k, q) in peers(n, root).into_iter().enumerate() {
            let tb = prog.tb(root, Some(q), None, ch);
            if k == 0 {
                for &(off, cnt) in &ranges {
                    prog.cpy(root, tb, i(off), o(off), cnt, None);
                }
            }
            for &(off, cnt) in &ranges {
                prog.send(root, tb, i(off), cnt, None);
            }
            let rtb = prog.tb(q, None, Some(root), ch);
            for &(off, cnt) in &ranges {
                prog.recv(q, rtb, o(off), cnt, None);
            }
        }
    }
    prog
}

pub fn reduce_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::Reduce, "all_pairs", p, p.channels);
    let root = p.root;
    for ch in 0..p.channels {
        let ranges = lay.lane_ranges(ch);
        let mut arrivals = Vec::new();
        for q in peers(n, root) {
            let tb = prog.tb(q, Some(root), None, ch);
            for &(off, cnt) in &ranges {
                prog.send(q, tb, i(off), cnt, None);
            }
            let rtb = prog.tb(root, None, Some(q), ch);
            for &(off, cnt) in &ranges {
                let slot = s(prog.scratch(root, cnt));
                arrivals.push((off, cnt, slot, prog.recv(root, rtb, slot, cnt, None)));
            }
        }
        let local = prog.tb(root, None, None, ch);
        for &(off, cnt) in &ranges {
            prog.cpy(root, local, i(off), o(off), cnt, None);
        }
        for (off, cnt, slot, got) in arrivals {
            prog.re(root, local, slot, o(off), cnt, Some(got));
        }
    }
    prog
}

pub fn gather_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::Gather, "all_pairs", p, p.channels);
    let f = p.factor;
    let root = p.root;
    for ch in 0..p.channels {
        for (k, q) in peers(n, root).into_iter().enumerate() {
            let tb = prog.tb(q, Some(root), None, ch);
            prog.send(q, tb, i(lay.small(ch)), f, None);
            let rtb = prog.tb(root, None, Some(q), ch);
            if k == 0 {
                prog.cpy(root, rtb, i(lay.small(ch)), o(lay.part(root, ch)), f, None);
            }
            prog.recv(root, rtb, o(lay.part(q, ch)), f, None);
        }
    }
    prog
}

pub fn scatter_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::Scatter, "all_pairs", p, p.channels);
    let f = p.factor;
    let root = p.root;
    for ch in 0..p.channels {
        for (k, q) in peers(n, root).into_iter().enumerate() {
            let tb = prog.tb(root, Some(q), None, ch);
            if k == 0 {
                prog.cpy(root, tb, i(lay.part(root, ch)), o(lay.small(ch)), f, None);
            }
            prog.send(root, tb, i(lay.part(q, ch)), f, None);
            let rtb = prog.tb(q, None, Some(root), ch);
            prog.recv(q, rtb, o(lay.small(ch)), f, None);
        }
    }
    prog
}
