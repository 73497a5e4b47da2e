//! The calls `oxccl perf` and `oxccl check` make for one size, on every rank.

use oxccl::framework::op::{P2pItem, VLayout};
use oxccl::{DataType, OpKind, OpParam, ReduceOp};

/// Every rank's call for one size. The vector operators get nccl-tests-like uniform layouts
/// (every block `count` elements, packed), so their figures compare with the fixed-size
/// forms; send/recv is nccl-tests' `sendrecv`: each rank sends `count` elements to the
/// next rank and receives as many from the previous one.
pub fn calls(
    kind: OpKind,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
    root: usize,
    n: usize,
) -> Vec<OpParam> {
    let uniform = vec![count; n];
    let packed: Vec<usize> = (0..n).map(|r| r * count).collect();
    let same = |param: OpParam| vec![param; n];
    match kind {
        OpKind::AllGatherV | OpKind::ReduceScatterV => same(OpParam::vector(
            kind,
            VLayout::packed_blocks(&uniform),
            dtype,
            op,
        )),
        OpKind::AlltoAllV => {
            let layout = VLayout::all_to_all_v(&uniform, &packed, &uniform, &packed);
            same(OpParam::vector(kind, layout, dtype, op))
        }
        OpKind::SendRecv => (0..n)
            .map(|r| {
                let item = |peer| P2pItem {
                    peer,
                    offset: 0,
                    count,
                };
                let layout = VLayout::P2p {
                    sends: vec![item((r + 1) % n)],
                    recvs: vec![item((r + n - 1) % n)],
                };
                OpParam::vector(kind, layout, dtype, op)
            })
            .collect(),
        OpKind::Barrier => same(OpParam::barrier()),
        _ => same(OpParam {
            root: kind.has_root().then_some(root),
            ..OpParam::new(kind, count, dtype, op)
        }),
    }
}
