//! The harness for the vector operators (AllGatherV, ReduceScatterV, AlltoAllV, send/recv):
//! each rank gets its own [`OpParam`] (point-to-point layouts differ per rank), runs it on
//! its own thread, and every byte a receive (or gathered block, or reduced block) covers is
//! compared with a reference built from the inputs and [`oracle::fold`]. Bytes nothing
//! covers are not compared.
//!
//! Layout builders produce uneven counts (some zero), displacements out of rank order with
//! gaps, and point-to-point items listed in a different order on every rank.

use crate::{data, execute_on, first_difference, on_every_rank, oracle, Aligned, Setup};
use oxccl::framework::op::{P2pItem, VLayout};
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp};

/// Byte that marks memory the collective must overwrite.
const GARBAGE: u8 = 0xEE;

/// One call of a vector operator: each rank's layout.
#[derive(Clone, Debug)]
pub struct VCase {
    pub dtype: DataType,
    pub op: ReduceOp,
    /// Indexed by rank (all equal for AllGatherV and ReduceScatterV).
    pub layouts: Vec<VLayout>,
    pub in_place: bool,
}

impl VCase {
    /// Every rank's parameters.
    pub fn params(&self, kind: OpKind) -> Vec<OpParam> {
        self.layouts
            .iter()
            .map(|l| OpParam::vector(kind, l.clone(), self.dtype, self.op))
            .collect()
    }
}

/// Blocks of `counts` elements, placed in reverse rank order with `gap` unused elements
/// before each (so displacements are neither in rank order nor packed).
pub fn blocks(counts: &[usize], gap: usize) -> VLayout {
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for r in (0..counts.len()).rev() {
        at += gap;
        displs[r] = at;
        at += counts[r];
    }
    VLayout::Blocks {
        counts: counts.to_vec(),
        displs,
    }
}

/// Items of `(peer, count)` in the given order, laid out one after the other with a gap
/// of `gap` elements before each.
fn items(list: &[(usize, usize)], gap: usize) -> Vec<P2pItem> {
    let mut at = 0;
    list.iter()
        .map(|&(peer, count)| {
            at += gap;
            let item = P2pItem {
                peer,
                offset: at,
                count,
            };
            at += count;
            item
        })
        .collect()
}

/// Every rank's AlltoAllV layout where rank `a` sends `count(a, b)` elements to `b`;
/// each rank lays its send and receive blocks out in a different order.
pub fn all_to_all_v(n: usize, count: impl Fn(usize, usize) -> usize) -> Vec<VLayout> {
    (0..n)
        .map(|r| {
            let place = |counts: Vec<usize>, shift: usize| {
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by_key(|&p| ((p + shift + r) * 7919) % (n + 3));
                let laid = items(
                    &order.iter().map(|&p| (p, counts[p])).collect::<Vec<_>>(),
                    2,
                );
                let mut by_peer: Vec<P2pItem> = laid;
                by_peer.sort_by_key(|i| i.peer);
                by_peer
            };
            let sends = place((0..n).map(|s| count(r, s)).collect(), 1);
            let recvs = place((0..n).map(|s| count(s, r)).collect(), 2);
            VLayout::P2p { sends, recvs }
        })
        .collect()
}

/// Every rank's send/recv layout for `transfers` (`(from, to, count)`, matched per pair in
/// list order). Each rank lists its items grouped by peer in a rank-dependent rotation,
/// sends and receives in different rotations, so the call order differs on every rank.
pub fn send_recv(n: usize, transfers: &[(usize, usize, usize)]) -> Vec<VLayout> {
    (0..n)
        .map(|r| VLayout::P2p {
            sends: listed(n, r, transfers, true),
            recvs: listed(n, r, transfers, false),
        })
        .collect()
}

/// Rank `r`'s sends (or receives) of `transfers`, grouped by peer in a rank-dependent
/// rotation (a different one for receives), in list order within a peer.
fn listed(n: usize, r: usize, transfers: &[(usize, usize, usize)], sends: bool) -> Vec<P2pItem> {
    let mut list: Vec<(usize, usize)> = transfers
        .iter()
        .filter_map(|&(from, to, count)| match sends {
            true => (from == r).then_some((to, count)),
            false => (to == r).then_some((from, count)),
        })
        .collect();
    list.sort_by_key(|&(peer, _)| match sends {
        true => (peer + n - r) % n,
        false => (r + 2 * n - peer) % n,
    });
    items(&list, 3)
}

/// One rank's buffers before the call, and what the covered bytes must hold after it.
struct RankCase {
    param: OpParam,
    input: Aligned,
    start: Aligned,
    expected: Vec<u8>,
    /// Byte ranges of the output buffer to compare.
    covered: Vec<(usize, usize)>,
}

fn prepare(kind: OpKind, case: &VCase, seed: u64) -> Vec<RankCase> {
    let n = case.layouts.len();
    let es = case.dtype.size();
    let params = case.params(kind);
    let inputs: Vec<Aligned> = params
        .iter()
        .enumerate()
        .map(|(r, p)| data::input(case.dtype, case.op, r, p.buffer_counts(r, n).0, seed))
        .collect();
    (0..n)
        .map(|r| {
            let p = &params[r];
            let (in_bytes, out_bytes) = p.buffer_bytes(r, n);
            let (in_base, out_base) = match case.in_place {
                true => p.in_place_offsets(r),
                false => (0, 0),
            };
            let len = if case.in_place {
                in_bytes.max(out_bytes)
            } else {
                out_bytes
            };
            let mut start = Aligned::filled(GARBAGE, len);
            if case.in_place {
                start[in_base..in_base + in_bytes].copy_from_slice(&inputs[r]);
            }
            let mut expected = start.to_vec();
            let mut covered = Vec::new();
            let mut put = |at: usize, bytes: &[u8]| {
                expected[out_base + at..out_base + at + bytes.len()].copy_from_slice(bytes);
                covered.push((out_base + at, out_base + at + bytes.len()));
            };
            match p.layout().expect("vector layout") {
                VLayout::Blocks { counts, displs } if kind == OpKind::AllGatherV => {
                    for s in 0..n {
                        put(displs[s] * es, &inputs[s]);
                    }
                }
                VLayout::Blocks { counts, displs } => {
                    let own = displs[r] * es..(displs[r] + counts[r]) * es;
                    let blocks: Vec<&[u8]> = inputs.iter().map(|i| &i[own.clone()]).collect();
                    put(0, &oracle::fold(case.dtype, case.op, &blocks));
                }
                VLayout::P2p { recvs, .. } => {
                    let mut seen = vec![0; n];
                    for item in recvs {
                        let k = seen[item.peer];
                        seen[item.peer] += 1;
                        let (sends, _) = params[item.peer]
                            .layout()
                            .and_then(VLayout::p2p)
                            .expect("p2p");
                        let send = sends
                            .iter()
                            .filter(|s| s.peer == r)
                            .nth(k)
                            .expect("matching send");
                        assert_eq!(send.count, item.count, "test layout: unmatched counts");
                        let src = &inputs[item.peer][send.offset * es..send.end() * es];
                        put(item.offset * es, src);
                    }
                }
            }
            RankCase {
                param: p.clone(),
                input: inputs[r].clone(),
                start,
                expected,
                covered,
            }
        })
        .collect()
}

/// Run `case` on every rank at once and compare the covered bytes.
fn run_case(kind: OpKind, comms: &[Communicator], case: &VCase, seed: u64) -> Result<(), String> {
    let ranks = prepare(kind, case, seed);
    let es = case.dtype.size();
    on_every_rank(comms, ranks, |comm, mut d| {
        execute_on(comm, &d.param, case.in_place, &d.input, &mut d.start)?;
        for &(a, b) in &d.covered {
            let (got, want) = (&d.start[a..b], &d.expected[a..b]);
            if let Some(i) = first_difference(got, want, es) {
                return Err(format!(
                    "rank {} byte {}: got {:?}, want {:?}",
                    comm.rank(),
                    a + i * es,
                    &got[i * es..(i + 1) * es],
                    &want[i * es..(i + 1) * es]
                ));
            }
        }
        Ok(())
    })
}

/// Run `cases` of `kind` in order on a fresh communicator built from `setup` (its `algo`
/// forced for `kind`); the first failure, with the setup and case that produced it.
pub fn run_vector(kind: OpKind, setup: &Setup, cases: &[VCase]) -> Result<(), String> {
    setup.run_with(&format!("{kind} "), setup.config_for(kind), |comms| {
        vector_on(kind, comms, cases)
    })
}

/// Run `cases` of `kind` in order on the ranks `comms` (all of a communicator's, or this
/// process's); the first failure, with its case.
pub fn vector_on(kind: OpKind, comms: &[Communicator], cases: &[VCase]) -> Result<(), String> {
    for (i, case) in cases.iter().enumerate() {
        run_case(kind, comms, case, i as u64).map_err(|e| format!("{case:?}: {e}"))?;
    }
    Ok(())
}

/// Per-rank block counts of the blocks matrix: uneven, some zero, a few thousand, all zero.
fn count_patterns(n: usize) -> Vec<Vec<usize>> {
    vec![
        vec![1; n],
        (0..n).map(|r| r % 3 * 5 + 1).collect(),
        (0..n).map(|r| (r + 1) % 3 * 7).collect(),
        (0..n).map(|r| 4099 - 13 * r).collect(),
        vec![0; n],
    ]
}

/// AllGatherV or ReduceScatterV: every dtype x count pattern, in and out of place, every
/// reduce op for ReduceScatterV (thinned on many ranks as [`crate::op_variants`]); plus,
/// per dtype, one case whose block 0 is larger than the CCL buffer.
pub fn blocks_matrix(kind: OpKind, n: usize, ccl_bytes: usize) -> Vec<VCase> {
    let ops: &[ReduceOp] = if kind.reduces() {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for (j, counts) in count_patterns(n).into_iter().enumerate() {
            for (op, in_place) in crate::op_variants(ops, n, i, j) {
                cases.push(VCase {
                    dtype,
                    op,
                    layouts: vec![blocks(&counts, j % 2 * 3); n],
                    in_place,
                });
            }
        }
        if !crate::crosses_buffer(n, i) {
            continue;
        }
        let mut counts: Vec<usize> = (0..n).map(|r| r % 3 * 5 + 1).collect();
        counts[0] = ccl_bytes / dtype.size() + 37;
        cases.push(VCase {
            dtype,
            op: ReduceOp::ALL[i % 4],
            layouts: vec![blocks(&counts, 1); n],
            in_place: i % 2 == 1,
        });
    }
    cases
}

/// Every dtype with each of `layouts` (out of place: point-to-point operators refuse in
/// place); on many ranks each layout with a few dtypes only.
pub fn p2p_matrix(n: usize, layouts: &[Vec<VLayout>]) -> Vec<VCase> {
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for (j, l) in layouts.iter().enumerate() {
            if n > crate::THIN_ABOVE_RANKS && (i + j) % 4 != 0 {
                continue;
            }
            cases.push(VCase {
                dtype,
                op: ReduceOp::Sum,
                layouts: l.clone(),
                in_place: false,
            });
        }
    }
    cases
}
