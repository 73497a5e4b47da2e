//! The harness for the rooted operators: Broadcast, Reduce, Scatter and Gather on every
//! rank, with roots 0, `n/2` and `n − 1` in turn, compared byte for byte with a reference
//! built from [`oracle::fold`].
//!
//! Buffers follow NCCL. Broadcast and Reduce send and receive `count` elements; Scatter
//! sends `n` blocks of `count` and receives one, Gather the reverse. In place, the one
//! buffer is the larger side: a Broadcast root starts with its data there (the others
//! with garbage), a Reduce rank with its input, a Scatter root with its `n` blocks (and
//! must end with its own block unchanged, every rank's other blocks untouched), a Gather
//! rank with its input in block `rank`. Only the root's output is defined for Reduce and
//! Gather, so only the root's is compared for them.

use std::sync::Arc;

use crate::{
    check_on_every_shape, data, oracle, run_on_every_rank, Aligned, Case, RankData, Setup,
    SMALL_CCL_BYTES,
};
use oxccl::framework::analyzer::conformance::check_conformance;
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp, Topology};

/// Byte that marks memory the collective must overwrite.
const GARBAGE: u8 = 0xEE;

/// Every dtype x boundary count, in and out of place, for every reduce op when `kind`
/// reduces; plus, per dtype, one count that exceeds the CCL buffer (Broadcast, Reduce:
/// the vector; Scatter, Gather: the `n` blocks), rotating through the reduce ops and
/// alternating in place.
pub fn rooted_matrix(kind: OpKind, ranks: usize, ccl_bytes: usize) -> Vec<Case> {
    let ops: &[ReduceOp] = if kind.reduces() {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let (in_blocks, out_blocks) = kind.buffer_counts(1, ranks);
    let blocks = in_blocks.max(out_blocks);
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for (j, count) in crate::boundary_counts(ranks).into_iter().enumerate() {
            for (op, in_place) in crate::op_variants(ops, ranks, i, j) {
                cases.push(Case {
                    dtype,
                    op,
                    count,
                    in_place,
                });
            }
        }
        if !crate::crosses_buffer(ranks, i) {
            continue;
        }
        cases.push(Case {
            dtype,
            op: ops[i % ops.len()],
            count: ccl_bytes / (blocks * dtype.size()) + 37,
            in_place: i % 2 == 1,
        });
    }
    cases
}

fn prepare(kind: OpKind, n: usize, root: usize, case: &Case, seed: u64) -> Vec<RankData> {
    let (in_count, _) = kind.buffer_counts(case.count, n);
    let inputs: Vec<Aligned> = (0..n)
        .map(|r| data::input(case.dtype, case.op, r, in_count, seed))
        .collect();
    let block = case.count * case.dtype.size();
    let own = |r: usize| r * block..(r + 1) * block;
    let garbage = |len: usize| Aligned::filled(GARBAGE, len);
    let broadcast: Arc<[u8]> = Arc::from(&inputs[root][..]);
    let buffers: Vec<(Aligned, Option<Arc<[u8]>>)> = (0..n)
        .map(|r| match (kind, case.in_place) {
            (OpKind::Broadcast, false) => (garbage(block), Some(broadcast.clone())),
            (OpKind::Broadcast, true) => {
                let start = match r == root {
                    true => inputs[r].clone(),
                    false => garbage(block),
                };
                (start, Some(broadcast.clone()))
            }
            (OpKind::Reduce, in_place) => {
                let refs: Vec<&[u8]> = inputs.iter().map(Aligned::bytes).collect();
                let start = match in_place {
                    true => inputs[r].clone(),
                    false => garbage(block),
                };
                let expected = match r == root {
                    true => oracle::fold(case.dtype, case.op, &refs).into(),
                    false => Arc::from(start.bytes()),
                };
                (start, Some(expected))
            }
            (OpKind::Scatter, false) => (garbage(block), Some(inputs[root][own(r)].into())),
            (OpKind::Scatter, true) => {
                let start = match r == root {
                    true => inputs[r].clone(),
                    false => garbage(n * block),
                };
                let mut expected = start.to_vec();
                expected[own(r)].copy_from_slice(&inputs[root][own(r)]);
                (start, Some(expected.into()))
            }
            (_, in_place) => {
                let mut start = garbage(n * block);
                if in_place {
                    start[own(r)].copy_from_slice(&inputs[r]);
                }
                let expected = match r == root {
                    true => inputs.concat().into(),
                    false => Arc::from(start.bytes()),
                };
                (start, Some(expected))
            }
        })
        .collect();
    RankData::zip(inputs, buffers)
}

/// The roots the cases rotate through: 0, `n/2` and `n − 1`.
pub fn roots(ranks: usize) -> [usize; 3] {
    [0, ranks / 2, ranks - 1]
}

/// Run `cases` of the rooted operator `kind` in order on a fresh communicator built from
/// `setup` (its `algo` forced for `kind`), case `i` with root `roots(n)[i % 3]`; the
/// first failure, with the setup and case that produced it.
pub fn run_rooted(kind: OpKind, setup: &Setup, cases: &[Case]) -> Result<(), String> {
    setup.run_with(&format!("{kind} "), setup.config_for(kind), |comms| {
        rooted_on(kind, comms, cases)
    })
}

/// Run `cases` of the rooted operator `kind` in order on the ranks `comms` (all of a
/// communicator's, or this process's), case `i` with root `roots(n)[i % 3]`; the first
/// failure, with its root and case.
pub fn rooted_on(kind: OpKind, comms: &[Communicator], cases: &[Case]) -> Result<(), String> {
    let n = comms[0].size();
    rooted_with(kind, comms, cases, |i| roots(n)[i % 3])
}

/// Run `cases` of the rooted operator `kind` in order on the ranks `comms`, every case
/// with root `root` (for an algorithm made for one root, as an imported MSCCL-IR file
/// is); the first failure, with its root and case.
pub fn rooted_at(
    kind: OpKind,
    comms: &[Communicator],
    root: usize,
    cases: &[Case],
) -> Result<(), String> {
    rooted_with(kind, comms, cases, |_| root)
}

/// Run `cases` in order, case `i` with root `root_of(i)`.
fn rooted_with(
    kind: OpKind,
    comms: &[Communicator],
    cases: &[Case],
    root_of: impl Fn(usize) -> usize,
) -> Result<(), String> {
    let n = comms[0].size();
    for (i, case) in cases.iter().enumerate() {
        let root = root_of(i);
        let data = prepare(kind, n, root, case, i as u64);
        let param = OpParam::rooted(kind, case.count, case.dtype, case.op, root);
        run_on_every_rank(comms, &param, case.in_place, data)
            .map_err(|e| format!("root {root}, {case:?}: {e}"))?;
    }
    Ok(())
}

/// Check executor `algo` of rooted `kind` on every shape and mode with [`rooted_matrix`].
pub fn check_rooted_executor(kind: OpKind, algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_rooted(
            kind,
            setup,
            &rooted_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
    });
}

/// The executor passes the analyzer's whole conformance matrix, on every shape its link
/// need admits, and on the broken meshes unless it declares a full mesh.
pub fn rooted_conforms(kind: OpKind, algo: &str) {
    let out = check_conformance(kind, algo).unwrap_or_else(|e| panic!("{e}"));
    let constraints = oxccl::registry()
        .and_then(|r| r.executor(kind, algo).map(|e| e.constraints))
        .unwrap_or_else(|e| panic!("{e}"));
    let refused = oxccl::framework::analyzer::conformance::shapes()
        .iter()
        .filter(|t| {
            constraints.links.refusal(t).is_some() || (constraints.full_mesh && !t.is_full_mesh())
        })
        .count();
    assert!(
        out.cases > 0 && out.skipped_shapes == refused,
        "only shapes with put-only links it cannot use, or broken links where it declares a \
         full mesh, may be skipped: {out:?}"
    );
}

/// With links broken around the roots the cases use, the built-in selector still finds
/// an executor and its results are right, zero-copy and staged. Root 0 (the first case's)
/// loses its link to rank 3: no star around it, but a tree (and a ring of healthy links)
/// remain for every root.
pub fn rooted_selection_around_broken_links(kind: OpKind) {
    let topology = Topology::single_server(8)
        .with_broken(0, 3)
        .and_then(|t| t.with_broken(1, 6))
        .and_then(|t| t.with_broken(2, 5))
        .expect("valid topology");
    for zero_copy in [true, false] {
        let setup = Setup {
            algo: None,
            topology: topology.clone(),
            zero_copy,
            ccl_bytes: SMALL_CCL_BYTES,
            device: None,
        };
        let cases = rooted_matrix(kind, 8, SMALL_CCL_BYTES);
        run_rooted(kind, &setup, &cases).unwrap_or_else(|e| panic!("{e}"));
    }
}
