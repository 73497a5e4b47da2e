//! A sequence with every operator, and its buffers, for the replay tests.

use oxccl::framework::op::VLayout;
use oxccl::{Communicator, DataType, OpCall, OpKind, OpParam, ReduceOp, UserBuffers};
use oxccl_graph::Capture;
use oxccl_tests::vector::{all_to_all_v, blocks, send_recv};
use oxccl_tests::{Aligned, SMALL_CCL_BYTES};

/// Rank `rank`'s operators of the sequence on `n` ranks: every operator, with odd
/// counts, roots that move, vector layouts with gaps, and both reducing types.
pub fn every_operator(rank: usize, n: usize) -> Vec<OpParam> {
    let root = |k: usize| k % n;
    let vcounts: Vec<usize> = (0..n).map(|r| 2 * r + 1).collect();
    let a2av = &all_to_all_v(n, |a, b| (a * 3 + b * 5) % 4 + 1)[rank];
    let ring: Vec<_> = (0..n).map(|r| (r, (r + 1) % n, r * 3 + 2)).collect();
    let p2p = &send_recv(n, &ring)[rank];
    let (i32, f32) = (DataType::I32, DataType::F32);
    vec![
        OpParam::all_reduce(37, i32, ReduceOp::Sum),
        OpParam::all_gather(5, f32),
        OpParam::reduce_scatter(7, f32, ReduceOp::Max),
        OpParam::rooted(OpKind::Broadcast, 33, i32, ReduceOp::Sum, root(1)),
        OpParam::rooted(OpKind::Reduce, 19, i32, ReduceOp::Prod, root(2)),
        OpParam::rooted(OpKind::Gather, 3, f32, ReduceOp::Sum, root(3)),
        OpParam::rooted(OpKind::Scatter, 4, i32, ReduceOp::Sum, root(0)),
        OpParam::new(OpKind::AlltoAll, 3, i32, ReduceOp::Sum),
        OpParam::vector(OpKind::AllGatherV, blocks(&vcounts, 1), f32, ReduceOp::Sum),
        OpParam::vector(
            OpKind::ReduceScatterV,
            blocks(&vcounts, 2),
            i32,
            ReduceOp::Min,
        ),
        OpParam::vector(OpKind::AlltoAllV, a2av.clone(), i32, ReduceOp::Sum),
        OpParam::vector(OpKind::SendRecv, p2p.clone(), f32, ReduceOp::Sum),
        OpParam::barrier(),
        OpParam::all_reduce(0, f32, ReduceOp::Sum),
        // Larger than the CCL buffer of the tests (SMALL_CCL_BYTES): staged in pieces.
        OpParam::all_reduce(SMALL_CCL_BYTES / 4 + 77, i32, ReduceOp::Sum),
    ]
}

/// Whether `op`'s output on `rank` is defined afterwards (Reduce and Gather fill only
/// the root's).
pub fn defined_on(op: &OpParam, rank: usize) -> bool {
    !matches!(op.kind, OpKind::Reduce | OpKind::Gather) || op.root == Some(rank)
}

/// One step's buffers: input and output, or one buffer in place.
pub enum Buffers {
    OutOfPlace(Aligned, Aligned),
    InPlace(Aligned),
}

impl Buffers {
    /// Buffers for `op` on `rank` of `n`, filled from `seed` (the output with a
    /// pattern of its own, so untouched regions are compared too).
    pub fn new(op: &OpParam, rank: usize, n: usize, in_place: bool, seed: u64) -> Self {
        let (input, output) = op.buffer_bytes(rank, n);
        let fill = |len: usize, salt: u64| {
            let words = len.div_ceil(4);
            let bytes =
                oxccl_tests::data::input(DataType::I32, ReduceOp::Sum, rank, words, seed ^ salt);
            Aligned::from_bytes(&bytes[..len])
        };
        match in_place {
            true => Buffers::InPlace(fill(input.max(output), 1)),
            false => Buffers::OutOfPlace(fill(input, 2), fill(output, 3)),
        }
    }

    /// The call binding these buffers.
    pub fn call(&mut self, op: &OpParam) -> OpCall<'_> {
        let user = match self {
            Buffers::OutOfPlace(input, output) => UserBuffers::OutOfPlace {
                input: input.bytes(),
                output: output.bytes_mut(),
            },
            Buffers::InPlace(buf) => UserBuffers::InPlace(buf.bytes_mut()),
        };
        OpCall::new(op.clone(), user)
    }

    /// The result: the output, or the buffer in place.
    pub fn result(&self) -> &[u8] {
        match self {
            Buffers::OutOfPlace(_, output) => output.bytes(),
            Buffers::InPlace(buf) => buf.bytes(),
        }
    }
}

/// Whether `op` runs in place when asked (the operators without an in-place form run
/// out of place in an in-place sequence).
pub fn in_place(op: &OpParam, asked: bool) -> bool {
    asked && op.in_place_allowed() && !matches!(op.layout.as_deref(), Some(VLayout::P2p { .. }))
}

/// The inputs of launch `launch`.
pub fn seed(launch: usize) -> u64 {
    launch as u64 * 7919 + 1
}

/// Run every operator eagerly, then capture, compile and replay it with fresh buffers,
/// comparing each launch's results with the eager call's on the same inputs (an eager
/// barrier between launches): this rank's part, on `comm`.
pub fn replay_on(comm: &Communicator, asked_in_place: bool) -> Result<(), String> {
    let (rank, n) = (comm.rank(), comm.size());
    let ops = every_operator(rank, n);
    let forms: Vec<bool> = ops.iter().map(|op| in_place(op, asked_in_place)).collect();
    let fresh = |launch: usize| -> Vec<Buffers> {
        ops.iter()
            .zip(&forms)
            .map(|(op, &ip)| Buffers::new(op, rank, n, ip, seed(launch)))
            .collect()
    };
    let mut expected = Vec::new();
    for launch in 0..3 {
        let mut bufs = fresh(launch);
        for (buf, op) in bufs.iter_mut().zip(&ops) {
            let (param, user) = buf.call(op).into_parts();
            comm.execute(&param, user)
                .map_err(|e| format!("eager {}: {e}", op.kind))?;
        }
        expected.push(bufs);
    }
    let mut capture = Capture::new();
    for (mut buf, op) in fresh(0).into_iter().zip(&ops) {
        capture.record(&buf.call(op)).map_err(|e| e.to_string())?;
    }
    let graph = capture.compile(comm).map_err(|e| format!("compile: {e}"))?;
    assert_eq!(graph.len(), ops.len());
    for (launch, expected) in expected.iter().enumerate() {
        let mut bufs = fresh(launch);
        let calls = bufs
            .iter_mut()
            .zip(&ops)
            .map(|(b, op)| b.call(op))
            .collect();
        graph
            .launch(comm, calls)
            .map_err(|e| format!("launch {launch}: {e}"))?;
        for (step, op) in ops.iter().enumerate() {
            if defined_on(op, rank) && bufs[step].result() != expected[step].result() {
                return Err(format!(
                    "launch {launch}, step {step} ({} {}): differs from the eager call",
                    op.kind,
                    if forms[step] {
                        "in place"
                    } else {
                        "out of place"
                    }
                ));
            }
        }
        // Eager calls between launches take their call numbers as usual.
        comm.barrier().map_err(|e| format!("barrier: {e}"))?;
    }
    Ok(())
}
