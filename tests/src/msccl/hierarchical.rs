//! Hierarchical algorithms on [`Params::nodes`] "nodes" of `ranks / nodes` consecutive
//! ranks. Every rank has, per channel, an intra-node ring threadblock (to and from its
//! neighbours in the node) and an inter-node ring threadblock (to and from the ranks with
//! the same local index in the neighbouring nodes); dependencies order the phases.
//!
//! - AllReduce: intra-node ring reduce-scatter (`s`, `rrs`..., `rrc` into the output),
//!   inter-node ring AllReduce of the group each rank now holds (`s`, `rrs`..., `rrcs`,
//!   `rcs`..., `r`, all in the output, its first step depending on the last `rrc`), then
//!   intra-node ring all-gather (its first `s` depending on the inter-node ring's last
//!   step).
//! - AllGather: inter-node ring all-gather of each rank's input, then intra-node ring
//!   all-gather of the node's groups of blocks (its first `s` depending on the inter-node
//!   ring's last step).
//!
//! Groups: a loop of `ranks * channels * factor` chunks has `ranks` blocks; block `q *
//! nodes + g` is sub-block g of the group of local index q (AllReduce), or the block of
//! rank `g * per_node + q` (AllGather).

use super::layout::{ring_order, Layout};
use super::xml::{i, o, Program};
use super::{Coll, Params};

fn forward(lane: usize) -> bool {
    lane.is_multiple_of(2)
}

fn at(order: &[usize], pos: usize, shift: isize) -> usize {
    let n = order.len() as isize;
    order[(pos as isize + shift).rem_euclid(n) as usize]
}

/// (nodes, ranks per node), checked.
fn shape(p: &Params) -> (usize, usize) {
    let g = p.nodes;
    assert!(
        g >= 2 && p.ranks.is_multiple_of(g) && p.ranks / g >= 2,
        "{} ranks do not make {g} nodes of two or more",
        p.ranks
    );
    (g, p.ranks / g)
}

pub fn all_reduce(p: &Params) -> String {
    all_reduce_program(p).to_xml()
}

pub fn all_reduce_program(p: &Params) -> Program {
    let (nodes, per) = shape(p);
    let lay = Layout::new(p.ranks, p.channels, p.factor);
    let mut prog = Program::new(Coll::AllReduce, "hierarchical", p, lay.chunks());
    let f = p.factor;
    let rank = |node: usize, local: usize| node * per + local;
    for ch in 0..p.channels {
        let locals = ring_order(per, 0, forward(ch));
        let across = ring_order(nodes, 0, forward(ch));
        for node in 0..nodes {
            for local in 0..per {
                let r = rank(node, local);
                let ip = locals.iter().position(|&x| x == local).unwrap();
                let np = across.iter().position(|&x| x == node).unwrap();
                let intra = prog.tb(
                    r,
                    Some(rank(node, at(&locals, ip, 1))),
                    Some(rank(node, at(&locals, ip, -1))),
                    ch,
                );
                let inter = prog.tb(
                    r,
                    Some(rank(at(&across, np, 1), local)),
                    Some(rank(at(&across, np, -1), local)),
                    ch,
                );
                let sub = |q: usize, g: usize| lay.part(q * nodes + g, ch);
                let group = |shift: isize| at(&locals, ip, shift);
                // Intra-node reduce-scatter: this rank ends with group(1) reduced.
                for g in 0..nodes {
                    prog.send(r, intra, i(sub(group(0), g)), f, None);
                }
                for t in 1..per {
                    let q = group(-(t as isize));
                    for g in 0..nodes {
                        let off = sub(q, g);
                        if t < per - 1 {
                            prog.rrs(r, intra, i(off), f, None);
                        } else {
                            prog.rrc(r, intra, i(off), o(off), f, None);
                        }
                    }
                }
                let node_reduced = prog.last(r, intra);
                // Inter-node AllReduce of that group, in place in the output.
                let owned = group(1);
                let piece = |shift: isize| o(sub(owned, at(&across, np, shift)));
                prog.send(r, inter, piece(0), f, Some(node_reduced));
                for t in 1..nodes {
                    let at = piece(-(t as isize));
                    if t < nodes - 1 {
                        prog.rrs(r, inter, at, f, None);
                    } else {
                        prog.rrcs(r, inter, at, at, f, None);
                    }
                }
                for a in 1..nodes {
                    let at = piece(1 - a as isize);
                    if a < nodes - 1 {
                        prog.rcs(r, inter, at, f, None);
                    } else {
                        prog.recv(r, inter, at, f, None);
                    }
                }
                let all_reduced = prog.last(r, inter);
                // Intra-node all-gather of the groups.
                for g in 0..nodes {
                    let dep = (g == 0).then_some(all_reduced);
                    prog.send(r, intra, o(sub(owned, g)), f, dep);
                }
                for a in 1..per {
                    let q = group(1 - a as isize);
                    for g in 0..nodes {
                        let off = sub(q, g);
                        if a < per - 1 {
                            prog.rcs(r, intra, o(off), f, None);
                        } else {
                            prog.recv(r, intra, o(off), f, None);
                        }
                    }
                }
            }
        }
    }
    prog
}

pub fn all_gather(p: &Params) -> String {
    all_gather_program(p).to_xml()
}

pub fn all_gather_program(p: &Params) -> Program {
    let (nodes, per) = shape(p);
    let lay = Layout::new(p.ranks, p.channels, p.factor);
    let mut prog = Program::new(Coll::AllGather, "hierarchical", p, lay.chunks());
    let f = p.factor;
    let rank = |node: usize, local: usize| node * per + local;
    for ch in 0..p.channels {
        let locals = ring_order(per, 0, forward(ch));
        let across = ring_order(nodes, 0, forward(ch));
        for node in 0..nodes {
            for local in 0..per {
                let r = rank(node, local);
                let ip = locals.iter().position(|&x| x == local).unwrap();
                let np = across.iter().position(|&x| x == node).unwrap();
                let intra = prog.tb(
                    r,
                    Some(rank(node, at(&locals, ip, 1))),
                    Some(rank(node, at(&locals, ip, -1))),
                    ch,
                );
                let inter = prog.tb(
                    r,
                    Some(rank(at(&across, np, 1), local)),
                    Some(rank(at(&across, np, -1), local)),
                    ch,
                );
                let block = |rank: usize| o(lay.part(rank, ch));
                // Inter-node all-gather among the ranks of this local index.
                prog.cpy(r, inter, i(lay.small(ch)), block(r), f, None);
                prog.send(r, inter, i(lay.small(ch)), f, None);
                for a in 1..nodes {
                    let from = rank(at(&across, np, -(a as isize)), local);
                    if a < nodes - 1 {
                        prog.rcs(r, inter, block(from), f, None);
                    } else {
                        prog.recv(r, inter, block(from), f, None);
                    }
                }
                let gathered = prog.last(r, inter);
                // Intra-node all-gather of the groups (one block per node each).
                for g in 0..nodes {
                    let dep = (g == 0).then_some(gathered);
                    prog.send(r, intra, block(rank(g, local)), f, dep);
                }
                for a in 1..per {
                    let q = at(&locals, ip, -(a as isize));
                    for g in 0..nodes {
                        if a < per - 1 {
                            prog.rcs(r, intra, block(rank(g, q)), f, None);
                        } else {
                            prog.recv(r, intra, block(rank(g, q)), f, None);
                        }
                    }
                }
            }
        }
    }
    prog
}
