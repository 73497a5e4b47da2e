//! Every operator on a job's communicators: what a rank of the multi-process tests runs
//! (`collective_rank`), and the in-process tests of a transport.

use crate::blocks::{block_matrix, blocks_on};
use crate::rooted::{rooted_matrix, rooted_on};
use crate::vector::{all_to_all_v, blocks_matrix, p2p_matrix, send_recv, vector_on};
use crate::{all_reduce_on, all_to_all::all_to_all_on, full_matrix, SMALL_CCL_BYTES};
use oxccl::{Communicator, OpKind};

/// Every `step`-th element of `all` (the quick run), or all of them.
fn some<T: Clone>(all: Vec<T>, quick: bool) -> Vec<T> {
    match quick {
        true => all.into_iter().step_by(7).collect(),
        false => all,
    }
}

/// Every operator's cases on `comms` (the ranks this process holds, each run from a
/// thread of its own; the other ranks of the job run the same), compared with the
/// reference: the full matrices, or every seventh case when `quick`; then Barriers.
pub fn every_operator(comms: &[Communicator], quick: bool) -> Result<(), String> {
    let n = comms[0].size();
    let small = SMALL_CCL_BYTES;
    all_reduce_on(comms, &some(full_matrix(n, small), quick))
        .map_err(|e| format!("AllReduce {e}"))?;
    for kind in [OpKind::AllGather, OpKind::ReduceScatter] {
        blocks_on(kind, comms, &some(block_matrix(kind, n, small), quick))
            .map_err(|e| format!("{kind} {e}"))?;
    }
    for kind in [
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Gather,
        OpKind::Scatter,
    ] {
        rooted_on(kind, comms, &some(rooted_matrix(kind, n, small), quick))
            .map_err(|e| format!("{kind} {e}"))?;
    }
    all_to_all_on(comms, |i, j| !quick || (i + j) % 5 == 0).map_err(|e| format!("AlltoAll {e}"))?;
    for kind in [OpKind::AllGatherV, OpKind::ReduceScatterV] {
        vector_on(kind, comms, &some(blocks_matrix(kind, n, small), quick))
            .map_err(|e| format!("{kind} {e}"))?;
    }
    let exchanges = vec![
        all_to_all_v(n, |a, b| (a * 3 + b * 5) % 4 * 3 + 1),
        all_to_all_v(n, |a, b| usize::from(a != b) * (small / 16 + a)),
    ];
    let ring: Vec<_> = (0..n).map(|r| (r, (r + 1) % n, r * 5 + 1)).collect();
    let rings = vec![send_recv(n, &ring)];
    for (kind, layouts) in [(OpKind::AlltoAllV, exchanges), (OpKind::SendRecv, rings)] {
        vector_on(kind, comms, &some(p2p_matrix(n, &layouts), quick))
            .map_err(|e| format!("{kind} {e}"))?;
    }
    std::thread::scope(|s| {
        let barriers: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let mut none: [u8; 0] = [];
                    (0..5).try_for_each(|_| {
                        let call = oxccl::UserBuffers::InPlace(&mut none);
                        comm.execute(&oxccl::OpParam::barrier(), call)
                            .map_err(|e| format!("Barrier on rank {}: {e}", comm.rank()))
                    })
                })
            })
            .collect();
        barriers
            .into_iter()
            .try_for_each(|b| b.join().expect("barrier thread"))
    })
}
