//! Ring algorithms: every rank has one threadblock per ring, sending to the next rank and
//! receiving from the previous one. Channel c runs forward (0, 1, 2, ...) when c is even
//! and backward when odd; with [`Params::bidirectional`] (AllReduce only) every channel
//! carries one ring each way, as two threadblocks. Each ring (lane) moves its own piece of
//! every block ([`Layout`]).
//!
//! The rooted collectives run along the ring that starts at the root: Broadcast and
//! Scatter from the root to the last rank, Reduce and Gather from the rank after the root
//! round to the root. Ranks that only forward what is not theirs (AlltoAll, Gather,
//! Scatter) receive it into scratch with `r` and send it on with `s`.

use super::layout::{pieces, ring_order, Layout};
use super::xml::{i, o, s, Program};
use super::{Coll, Params};
use std::collections::VecDeque;

fn forward(lane: usize) -> bool {
    lane.is_multiple_of(2)
}

/// Rank at `pos + shift` (mod n) of `order`, for a signed shift.
fn at(order: &[usize], pos: usize, shift: isize) -> usize {
    let n = order.len() as isize;
    order[(pos as isize + shift).rem_euclid(n) as usize]
}

/// Ring AllReduce: reduce-scatter with `s`, `rrs`..., and `rrcs` (which stores the
/// reduced block and starts its all-gather), then `rcs`... and `r`.
pub fn all_reduce(p: &Params) -> String {
    all_reduce_program(p).to_xml()
}

pub fn all_reduce_program(p: &Params) -> Program {
    let n = p.ranks;
    let per = if p.bidirectional { 2 } else { 1 };
    let lay = Layout::new(n, p.channels * per, p.factor);
    let form = if p.bidirectional {
        "ring_bidir"
    } else {
        "ring"
    };
    let mut prog = Program::new(Coll::AllReduce, form, p, lay.chunks());
    let f = p.factor;
    for lane in 0..lay.lanes {
        let chan = lane / per;
        let order = ring_order(n, 0, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let tb = prog.tb(r, Some(at(&order, pos, 1)), Some(at(&order, pos, -1)), chan);
            // The group travelling at ring step t is that of the rank t places back.
            let group = |shift: isize| lay.part(at(&order, pos, shift), lane);
            for (off, cnt) in pieces(group(0), f, p.pipeline) {
                prog.send(r, tb, i(off), cnt, None);
            }
            for t in 1..n {
                for (off, cnt) in pieces(group(-(t as isize)), f, p.pipeline) {
                    if t < n - 1 {
                        prog.rrs(r, tb, i(off), cnt, None);
                    } else {
                        prog.rrcs(r, tb, i(off), o(off), cnt, None);
                    }
                }
            }
            // This rank now holds group pos+1 reduced; it receives the others in turn.
            for a in 1..n {
                for (off, cnt) in pieces(group(1 - a as isize), f, p.pipeline) {
                    if a < n - 1 {
                        prog.rcs(r, tb, o(off), cnt, None);
                    } else {
                        prog.recv(r, tb, o(off), cnt, None);
                    }
                }
            }
        }
    }
    prog
}

/// Ring AllGather: copy the input to its block, send it, then `rcs` the blocks of the
/// ranks behind and `r` the last.
pub fn all_gather(p: &Params) -> String {
    all_gather_program(p).to_xml()
}

pub fn all_gather_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::AllGather, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, 0, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let tb = prog.tb(r, Some(at(&order, pos, 1)), Some(at(&order, pos, -1)), lane);
            prog.cpy(r, tb, i(lay.small(lane)), o(lay.part(r, lane)), f, None);
            for (off, cnt) in pieces(lay.small(lane), f, p.pipeline) {
                prog.send(r, tb, i(off), cnt, None);
            }
            for a in 1..n {
                let block = at(&order, pos, -(a as isize));
                for (off, cnt) in pieces(lay.part(block, lane), f, p.pipeline) {
                    if a < n - 1 {
                        prog.rcs(r, tb, o(off), cnt, None);
                    } else {
                        prog.recv(r, tb, o(off), cnt, None);
                    }
                }
            }
        }
    }
    prog
}

/// Ring ReduceScatter: block b starts at the rank after b and ends, with `rrc` into the
/// output, at b.
pub fn reduce_scatter(p: &Params) -> String {
    reduce_scatter_program(p).to_xml()
}

pub fn reduce_scatter_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::ReduceScatter, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, 0, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let tb = prog.tb(r, Some(at(&order, pos, 1)), Some(at(&order, pos, -1)), lane);
            let block = |t: usize| lay.part(at(&order, pos, -1 - t as isize), lane);
            prog.send(r, tb, i(block(0)), f, None);
            for t in 1..n - 1 {
                prog.rrs(r, tb, i(block(t)), f, None);
            }
            prog.rrc(r, tb, i(block(n - 1)), o(lay.small(lane)), f, None);
        }
    }
    prog
}

/// Ring AlltoAll, store and forward: in every round each rank sends the oldest message
/// it holds (its own first, nearest destination first) and receives one; a message for
/// another rank goes to scratch and joins the queue. Every round is one `s` and one `r`
/// per rank, so one FIFO slot is enough.
pub fn all_to_all(p: &Params) -> String {
    all_to_all_program(p).to_xml()
}

pub fn all_to_all_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::AllToAll, "ring", p, lay.chunks());
    let f = p.factor;
    #[derive(Clone, Copy)]
    struct Msg {
        from: usize,
        to: usize,
        at: super::xml::Loc,
    }
    for lane in 0..p.channels {
        let order = ring_order(n, 0, forward(lane));
        let mut queue: Vec<VecDeque<Msg>> = vec![VecDeque::new(); n];
        let mut tbs = vec![0; n];
        for pos in 0..n {
            let r = order[pos];
            let tb = prog.tb(r, Some(at(&order, pos, 1)), Some(at(&order, pos, -1)), lane);
            tbs[pos] = tb;
            prog.cpy(r, tb, i(lay.part(r, lane)), o(lay.part(r, lane)), f, None);
            for d in 1..n {
                let to = at(&order, pos, d as isize);
                queue[pos].push_back(Msg {
                    from: r,
                    to,
                    at: i(lay.part(to, lane)),
                });
            }
        }
        while queue.iter().any(|q| !q.is_empty()) {
            let mut arriving: Vec<Option<Msg>> = vec![None; n];
            for pos in 0..n {
                if let Some(m) = queue[pos].pop_front() {
                    prog.send(order[pos], tbs[pos], m.at, f, None);
                    arriving[(pos + 1) % n] = Some(m);
                }
            }
            for pos in 0..n {
                let Some(m) = arriving[pos] else { continue };
                let r = order[pos];
                if m.to == r {
                    prog.recv(r, tbs[pos], o(lay.part(m.from, lane)), f, None);
                } else {
                    let slot = s(prog.scratch(r, f));
                    prog.recv(r, tbs[pos], slot, f, None);
                    queue[pos].push_back(Msg { at: slot, ..m });
                }
            }
        }
    }
    prog
}

/// Ring Broadcast from the root: the root sends every piece (and copies it to its own
/// output), the ranks between `rcs`, the last rank `r`.
pub fn broadcast(p: &Params) -> String {
    broadcast_program(p).to_xml()
}

pub fn broadcast_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::Broadcast, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, p.root, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let send = (pos + 1 < n).then(|| order[pos + 1]);
            let recv = (pos > 0).then(|| order[pos - 1]);
            let tb = prog.tb(r, send, recv, lane);
            for b in 0..n {
                let off = lay.part(b, lane);
                match pos {
                    0 => {
                        prog.send(r, tb, i(off), f, None);
                    }
                    _ if pos + 1 < n => {
                        prog.rcs(r, tb, o(off), f, None);
                    }
                    _ => {
                        prog.recv(r, tb, o(off), f, None);
                    }
                }
            }
            if pos == 0 {
                for b in 0..n {
                    let off = lay.part(b, lane);
                    prog.cpy(r, tb, i(off), o(off), f, None);
                }
            }
        }
    }
    prog
}

/// Ring Reduce to the root: the rank after the root sends every piece, the ranks between
/// `rrs`, and the root `rrc`s into its output.
pub fn reduce(p: &Params) -> String {
    reduce_program(p).to_xml()
}

pub fn reduce_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::Reduce, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, p.root, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            // The chain runs 1, 2, ..., n-1, then the root (position 0).
            let send = (pos != 0).then(|| order[(pos + 1) % n]);
            let recv = (pos != 1).then(|| at(&order, pos, -1));
            let tb = prog.tb(r, send, recv, lane);
            for b in 0..n {
                let off = lay.part(b, lane);
                match pos {
                    1 => {
                        prog.send(r, tb, i(off), f, None);
                    }
                    0 => {
                        prog.rrc(r, tb, i(off), o(off), f, None);
                    }
                    _ => {
                        prog.rrs(r, tb, i(off), f, None);
                    }
                }
            }
        }
    }
    prog
}

/// Ring Gather to the root: every rank sends its input on towards the root, then
/// forwards through scratch what the ranks before it sent.
pub fn gather(p: &Params) -> String {
    gather_program(p).to_xml()
}

pub fn gather_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::Gather, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, p.root, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let send = (pos != 0).then(|| order[(pos + 1) % n]);
            let recv = (pos != 1).then(|| at(&order, pos, -1));
            let tb = prog.tb(r, send, recv, lane);
            if pos == 0 {
                prog.cpy(r, tb, i(lay.small(lane)), o(lay.part(r, lane)), f, None);
                // From the last rank: its own input, then those of n-2, ..., 1.
                for q in (1..n).rev() {
                    prog.recv(r, tb, o(lay.part(order[q], lane)), f, None);
                }
            } else {
                prog.send(r, tb, i(lay.small(lane)), f, None);
                for _ in 1..pos {
                    let slot = s(prog.scratch(r, f));
                    prog.recv(r, tb, slot, f, None);
                    prog.send(r, tb, slot, f, None);
                }
            }
        }
    }
    prog
}

/// Ring Scatter from the root: the root sends the block of the farthest rank first;
/// every rank forwards through scratch the blocks of the ranks after it, then receives
/// its own into its output.
pub fn scatter(p: &Params) -> String {
    scatter_program(p).to_xml()
}

pub fn scatter_program(p: &Params) -> Program {
    let n = p.ranks;
    let lay = Layout::new(n, p.channels, p.factor);
    let mut prog = Program::new(Coll::Scatter, "ring", p, lay.chunks());
    let f = p.factor;
    for lane in 0..p.channels {
        let order = ring_order(n, p.root, forward(lane));
        for pos in 0..n {
            let r = order[pos];
            let send = (pos + 1 < n).then(|| order[pos + 1]);
            let recv = (pos > 0).then(|| order[pos - 1]);
            let tb = prog.tb(r, send, recv, lane);
            if pos == 0 {
                for q in (1..n).rev() {
                    prog.send(r, tb, i(lay.part(order[q], lane)), f, None);
                }
                prog.cpy(r, tb, i(lay.part(r, lane)), o(lay.small(lane)), f, None);
            } else {
                for _ in pos + 1..n {
                    let slot = s(prog.scratch(r, f));
                    prog.recv(r, tb, slot, f, None);
                    prog.send(r, tb, slot, f, None);
                }
                prog.recv(r, tb, o(lay.small(lane)), f, None);
            }
        }
    }
    prog
}
