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

use super::layout::{at, forward, pieces, ring_order, start, Layout};
use super::xml::{i, o, s, Loc, Program, Ty};
use super::{Coll, Params};
use std::collections::VecDeque;

/// The threadblock of the rank at `pos` of the closed ring `order`: it sends to the next
/// rank and receives from the one before.
fn ring_tb(prog: &mut Program, order: &[usize], pos: usize, chan: usize) -> usize {
    prog.tb(
        order[pos],
        Some(at(order, pos, 1)),
        Some(at(order, pos, -1)),
        chan,
    )
}

/// The threadblock of the rank at `pos` of the open chain that runs along `order` from
/// position `first` round to the one before it: the chain's end sends to no one, its
/// start receives from no one.
fn chain_tb(prog: &mut Program, order: &[usize], pos: usize, first: usize, chan: usize) -> usize {
    let n = order.len();
    let send = (pos != (first + n - 1) % n).then(|| at(order, pos, 1));
    let recv = (pos != first).then(|| at(order, pos, -1));
    prog.tb(order[pos], send, recv, chan)
}

/// [`pieces`] of the chunks from `off` of the buffer `buf` makes locations in.
fn pieces_in(buf: fn(usize) -> Loc, off: usize, cnt: usize, pipeline: bool) -> Vec<(Loc, usize)> {
    pieces(off, cnt, pipeline)
        .into_iter()
        .map(|(off, cnt)| (buf(off), cnt))
        .collect()
}

/// Rounds 1 to `rounds - 1` of a reduce-scatter along a ring, on threadblock `tb` of `r`
/// (round 0, the sends, is the caller's): the pieces (source, count) of `round(t)` are
/// received, reduced with the source and sent on (`rrs`); in the last round they are
/// stored at `store(source)` by `last` instead (`rrc`, or `rrcs` to send them on too).
pub(super) fn reduce_rounds(
    prog: &mut Program,
    r: usize,
    tb: usize,
    rounds: usize,
    last: Ty,
    round: impl Fn(usize) -> Vec<(Loc, usize)>,
    store: impl Fn(Loc) -> Loc,
) {
    for t in 1..rounds {
        for (src, cnt) in round(t) {
            if t < rounds - 1 {
                prog.rrs(r, tb, src, cnt, None);
            } else {
                prog.step(r, tb, last, src, Some(store(src)), cnt, None);
            }
        }
    }
}

/// Rounds 1 to `rounds - 1` of an all-gather along a ring, on threadblock `tb` of `r`:
/// the pieces (destination, count) of `round(a)` are received, stored and sent on
/// (`rcs`), those of the last round only received and stored (`r`).
pub(super) fn gather_rounds(
    prog: &mut Program,
    r: usize,
    tb: usize,
    rounds: usize,
    round: impl Fn(usize) -> Vec<(Loc, usize)>,
) {
    for a in 1..rounds {
        for (dst, cnt) in round(a) {
            if a < rounds - 1 {
                prog.rcs(r, tb, dst, cnt, None);
            } else {
                prog.recv(r, tb, dst, cnt, None);
            }
        }
    }
}

/// `times` times, receive `cnt` chunks into a new scratch slot of `r` and send them on.
fn relay(prog: &mut Program, r: usize, tb: usize, cnt: usize, times: usize) {
    for _ in 0..times {
        let slot = s(prog.scratch(r, cnt));
        prog.recv(r, tb, slot, cnt, None);
        prog.send(r, tb, slot, cnt, None);
    }
}

/// Ring AllReduce: reduce-scatter with `s`, `rrs`..., and `rrcs` (which stores the
/// reduced block and starts its all-gather), then `rcs`... and `r`.
pub fn all_reduce(p: &Params) -> String {
    all_reduce_program(p).to_xml()
}

pub fn all_reduce_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    let (per, form) = if p.bidirectional {
        (2, "ring_bidir")
    } else {
        (1, "ring")
    };
    around_rings(Coll::AllReduce, form, p, per, |prog, lay, hop| {
        let Hop {
            order,
            pos,
            r,
            tb,
            lane,
        } = *hop;
        // The group travelling at ring step t is that of the rank t places back.
        let group = |shift: isize, buf: fn(usize) -> Loc| {
            pieces_in(buf, lay.part(at(order, pos, shift), lane), f, p.pipeline)
        };
        for (src, cnt) in group(0, i) {
            prog.send(r, tb, src, cnt, None);
        }
        let back = |t: usize| group(-(t as isize), i);
        reduce_rounds(prog, r, tb, n, Ty::Rrcs, back, |src| o(src.off));
        // This rank now holds group pos+1 reduced; it receives the others in turn.
        gather_rounds(prog, r, tb, n, |a| group(1 - a as isize, o));
    })
}

/// Ring AllGather: copy the input to its block, send it, then `rcs` the blocks of the
/// ranks behind and `r` the last.
pub fn all_gather_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    around_rings(Coll::AllGather, "ring", p, 1, |prog, lay, hop| {
        let Hop {
            order,
            pos,
            r,
            tb,
            lane,
        } = *hop;
        prog.cpy(r, tb, i(lay.small(lane)), o(lay.part(r, lane)), f, None);
        for (src, cnt) in pieces_in(i, lay.small(lane), f, p.pipeline) {
            prog.send(r, tb, src, cnt, None);
        }
        gather_rounds(prog, r, tb, n, |a| {
            let block = at(order, pos, -(a as isize));
            pieces_in(o, lay.part(block, lane), f, p.pipeline)
        });
    })
}

/// Ring ReduceScatter: block b starts at the rank after b and ends, with `rrc` into the
/// output, at b.
pub fn reduce_scatter_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    around_rings(Coll::ReduceScatter, "ring", p, 1, |prog, lay, hop| {
        let Hop {
            order,
            pos,
            r,
            tb,
            lane,
        } = *hop;
        let block = |t: usize| i(lay.part(at(order, pos, -1 - t as isize), lane));
        prog.send(r, tb, block(0), f, None);
        let out = o(lay.small(lane));
        reduce_rounds(prog, r, tb, n, Ty::Rrc, |t| vec![(block(t), f)], |_| out);
    })
}

/// Ring AlltoAll, store and forward: in every round each rank sends the oldest message
/// it holds (its own first, nearest destination first) and receives one; a message for
/// another rank goes to scratch and joins the queue. Every round is one `s` and one `r`
/// per rank, so one FIFO slot is enough.
pub fn all_to_all_program(p: &Params) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(Coll::AllToAll, "ring", p, p.channels);
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
            let tb = ring_tb(&mut prog, &order, pos, lane);
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

/// The rank at `pos` of a lane's ring `order`, and its threadblock.
#[derive(Clone, Copy)]
struct Hop<'a> {
    order: &'a [usize],
    pos: usize,
    r: usize,
    tb: usize,
    lane: usize,
}

/// Every rank of every lane's ring, `per` lanes a channel, the ring starting at rank
/// `first_rank`: each rank gets a threadblock from `wire(prog, order, pos, channel)`,
/// then `steps` adds its steps.
fn each_hop(
    coll: Coll,
    form: &str,
    p: &Params,
    per: usize,
    first_rank: usize,
    wire: impl Fn(&mut Program, &[usize], usize, usize) -> usize,
    mut steps: impl FnMut(&mut Program, &Layout, &Hop),
) -> Program {
    let n = p.ranks;
    let (lay, mut prog) = start(coll, form, p, p.channels * per);
    for lane in 0..lay.lanes {
        let order = ring_order(n, first_rank, forward(lane));
        for pos in 0..n {
            let tb = wire(&mut prog, &order, pos, lane / per);
            let hop = Hop {
                order: &order,
                pos,
                r: order[pos],
                tb,
                lane,
            };
            steps(&mut prog, &lay, &hop);
        }
    }
    prog
}

/// A collective on closed rings from rank 0, `per` rings (lanes) a channel: each rank
/// gets a threadblock on its lane's ring (see [`ring_tb`]), then `steps` adds its steps.
fn around_rings(
    coll: Coll,
    form: &str,
    p: &Params,
    per: usize,
    steps: impl FnMut(&mut Program, &Layout, &Hop),
) -> Program {
    each_hop(coll, form, p, per, 0, ring_tb, steps)
}

/// A rooted collective along the ring that starts at the root, on every lane: each rank
/// gets a threadblock on the chain from position `first` (see [`chain_tb`]), then
/// `steps` adds its steps.
fn along_chain(
    coll: Coll,
    p: &Params,
    first: usize,
    steps: impl FnMut(&mut Program, &Layout, &Hop),
) -> Program {
    let wire = |prog: &mut Program, order: &[usize], pos: usize, chan: usize| {
        chain_tb(prog, order, pos, first, chan)
    };
    each_hop(coll, "ring", p, 1, p.root, wire, steps)
}

/// Ring Broadcast from the root: the root sends every piece (and copies it to its own
/// output), the ranks between `rcs`, the last rank `r`.
pub fn broadcast_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    along_chain(Coll::Broadcast, p, 0, |prog, lay, hop| {
        let Hop {
            pos, r, tb, lane, ..
        } = *hop;
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
    })
}

/// Ring Reduce to the root: the rank after the root sends every piece, the ranks between
/// `rrs`, and the root `rrc`s into its output.
pub fn reduce_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    // The chain runs 1, 2, ..., n-1, then the root (position 0).
    along_chain(Coll::Reduce, p, 1, |prog, lay, hop| {
        let Hop {
            pos, r, tb, lane, ..
        } = *hop;
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
    })
}

/// Ring Gather to the root: every rank sends its input on towards the root, then
/// forwards through scratch what the ranks before it sent.
pub fn gather_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    along_chain(Coll::Gather, p, 1, |prog, lay, hop| {
        let Hop {
            order,
            pos,
            r,
            tb,
            lane,
            ..
        } = *hop;
        if pos == 0 {
            prog.cpy(r, tb, i(lay.small(lane)), o(lay.part(r, lane)), f, None);
            // From the last rank: its own input, then those of n-2, ..., 1.
            for q in (1..n).rev() {
                prog.recv(r, tb, o(lay.part(order[q], lane)), f, None);
            }
        } else {
            prog.send(r, tb, i(lay.small(lane)), f, None);
            relay(prog, r, tb, f, pos - 1);
        }
    })
}

/// Ring Scatter from the root: the root sends the block of the farthest rank first;
/// every rank forwards through scratch the blocks of the ranks after it, then receives
/// its own into its output.
pub fn scatter_program(p: &Params) -> Program {
    let (n, f) = (p.ranks, p.factor);
    along_chain(Coll::Scatter, p, 0, |prog, lay, hop| {
        let Hop {
            order,
            pos,
            r,
            tb,
            lane,
            ..
        } = *hop;
        if pos == 0 {
            for q in (1..n).rev() {
                prog.send(r, tb, i(lay.part(order[q], lane)), f, None);
            }
            prog.cpy(r, tb, i(lay.part(r, lane)), o(lay.small(lane)), f, None);
        } else {
            relay(prog, r, tb, f, n - 1 - pos);
            prog.recv(r, tb, o(lay.small(lane)), f, None);
        }
    })
}
