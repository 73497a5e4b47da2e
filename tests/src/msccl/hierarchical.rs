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

use super::layout::{at, forward, ring_order, start};
use super::ring::{gather_rounds, reduce_rounds};
use super::xml::{i, o, Loc, Program, Ty};
use super::{Coll, Params};

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

/// A rank on one channel: where it stands on its node's ring and on the ring across the
/// nodes, and its threadblock on each.
struct Place<'a> {
    per: usize,
    r: usize,
    local: usize,
    locals: &'a [usize],
    ip: usize,
    across: &'a [usize],
    np: usize,
    intra: usize,
    inter: usize,
}

impl Place<'_> {
    /// The rank of local index `local` on node `node`.
    fn rank(&self, node: usize, local: usize) -> usize {
        node * self.per + local
    }

    /// The local index `shift` places along the intra-node ring.
    fn local_at(&self, shift: isize) -> usize {
        at(self.locals, self.ip, shift)
    }

    /// The node `shift` places along the inter-node ring.
    fn node_at(&self, shift: isize) -> usize {
        at(self.across, self.np, shift)
    }
}

/// Runs `body` for every rank on channel `ch`, node by node, once the rank's intra-node
/// and then inter-node threadblocks are made.
fn each_rank(
    prog: &mut Program,
    p: &Params,
    ch: usize,
    mut body: impl FnMut(&mut Program, &Place),
) {
    let (nodes, per) = shape(p);
    let locals = ring_order(per, 0, forward(ch));
    let across = ring_order(nodes, 0, forward(ch));
    for node in 0..nodes {
        for local in 0..per {
            let mut me = Place {
                per,
                r: node * per + local,
                local,
                locals: &locals,
                ip: locals.iter().position(|&x| x == local).unwrap(),
                across: &across,
                np: across.iter().position(|&x| x == node).unwrap(),
                intra: 0,
                inter: 0,
            };
            me.intra = prog.tb(
                me.r,
                Some(me.rank(node, me.local_at(1))),
                Some(me.rank(node, me.local_at(-1))),
                ch,
            );
            me.inter = prog.tb(
                me.r,
                Some(me.rank(me.node_at(1), local)),
                Some(me.rank(me.node_at(-1), local)),
                ch,
            );
            body(prog, &me);
        }
    }
}

pub fn all_reduce_program(p: &Params) -> Program {
    let (nodes, per) = shape(p);
    let (lay, mut prog) = start(Coll::AllReduce, "hierarchical", p, p.channels);
    let f = p.factor;
    for ch in 0..p.channels {
        each_rank(&mut prog, p, ch, |prog, me| {
            let (r, intra, inter) = (me.r, me.intra, me.inter);
            let sub = |q: usize, g: usize| lay.part(q * nodes + g, ch);
            // The group of local index q, sub-block by sub-block, in `buf`.
            let group = |q: usize, buf: fn(usize) -> Loc| -> Vec<(Loc, usize)> {
                (0..nodes).map(|g| (buf(sub(q, g)), f)).collect()
            };
            // Intra-node reduce-scatter: this rank ends with group(1) reduced.
            for (src, cnt) in group(me.local_at(0), i) {
                prog.send(r, intra, src, cnt, None);
            }
            let back = |t: usize| group(me.local_at(-(t as isize)), i);
            reduce_rounds(prog, r, intra, per, Ty::Rrc, back, |src| o(src.off));
            let node_reduced = prog.last(r, intra);
            // Inter-node AllReduce of that group, in place in the output.
            let owned = me.local_at(1);
            let piece = |shift: isize| o(sub(owned, me.node_at(shift)));
            prog.send(r, inter, piece(0), f, Some(node_reduced));
            let back = |t: usize| vec![(piece(-(t as isize)), f)];
            reduce_rounds(prog, r, inter, nodes, Ty::Rrcs, back, |src| src);
            gather_rounds(prog, r, inter, nodes, |a| vec![(piece(1 - a as isize), f)]);
            let all_reduced = prog.last(r, inter);
            // Intra-node all-gather of the groups.
            for (g, (src, cnt)) in group(owned, o).into_iter().enumerate() {
                prog.send(r, intra, src, cnt, (g == 0).then_some(all_reduced));
            }
            gather_rounds(prog, r, intra, per, |a| {
                group(me.local_at(1 - a as isize), o)
            });
        });
    }
    prog
}

pub fn all_gather_program(p: &Params) -> Program {
    let (nodes, per) = shape(p);
    let (lay, mut prog) = start(Coll::AllGather, "hierarchical", p, p.channels);
    let f = p.factor;
    for ch in 0..p.channels {
        each_rank(&mut prog, p, ch, |prog, me| {
            let (r, intra, inter) = (me.r, me.intra, me.inter);
            let block = |rank: usize| o(lay.part(rank, ch));
            // Inter-node all-gather among the ranks of this local index.
            prog.cpy(r, inter, i(lay.small(ch)), block(r), f, None);
            prog.send(r, inter, i(lay.small(ch)), f, None);
            gather_rounds(prog, r, inter, nodes, |a| {
                vec![(block(me.rank(me.node_at(-(a as isize)), me.local)), f)]
            });
            let gathered = prog.last(r, inter);
            // Intra-node all-gather of the groups (one block per node each).
            for g in 0..nodes {
                let dep = (g == 0).then_some(gathered);
                prog.send(r, intra, block(me.rank(g, me.local)), f, dep);
            }
            gather_rounds(prog, r, intra, per, |a| {
                let q = me.local_at(-(a as isize));
                (0..nodes).map(|g| (block(me.rank(g, q)), f)).collect()
            });
        });
    }
    prog
}
