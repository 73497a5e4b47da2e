//! Graph replay against the same eager calls, on in-process ranks of the host device
//! driven from one thread (eager: a group call per collective; graph: one group launch per
//! sequence), as `oxccl perf` drives them.
//!
//!     cargo run --release -p oxccl-graph --example replay_bench [-- RANKS ROUNDS]
//!
//! Three cases: one 1 KiB AllReduce, a sequence of 10 small collectives of five
//! operators, and one 64 MiB AllReduce. Each round times the eager calls, then the graph
//! launches, on the same buffers; the table shows each side's median over the rounds
//! (per launch of the whole sequence) and eager / graph, so the two are measured side by
//! side on the same noisy machine. Every result of the last round is checked against the
//! eager one.

use oxccl::{Communicator, Config, DataType, Group, OpCall, OpKind, OpParam, ReduceOp};
use oxccl_graph::{Capture, Graph};
use std::time::Instant;

/// One rank's buffers of one step (f32 words, so aligned for every type used).
struct Bufs {
    input: Vec<f32>,
    output: Vec<f32>,
}

impl Bufs {
    fn new(op: &OpParam, rank: usize, ranks: usize) -> Self {
        let (i, o) = op.buffer_bytes(rank, ranks);
        let input = (0..i / 4).map(|k| ((rank * 7 + k) % 13) as f32).collect();
        Bufs {
            input,
            output: vec![0.0; o / 4],
        }
    }

    fn call(&mut self, op: &OpParam) -> OpCall<'_> {
        let user = oxccl::UserBuffers::OutOfPlace {
            input: bytemuck::cast_slice(&self.input),
            output: bytemuck::cast_slice_mut(&mut self.output),
        };
        OpCall::new(op.clone(), user)
    }
}

fn case(
    name: &'static str,
    ops: Vec<OpParam>,
    iters: usize,
) -> (&'static str, Vec<OpParam>, usize) {
    (name, ops, iters)
}

fn small_sequence() -> Vec<OpParam> {
    let f32 = DataType::F32;
    let sum = ReduceOp::Sum;
    let rooted = |kind, count, root| OpParam::rooted(kind, count, f32, sum, root);
    vec![
        OpParam::all_reduce(256, f32, sum),
        OpParam::all_gather(32, f32),
        OpParam::reduce_scatter(32, f32, sum),
        rooted(OpKind::Broadcast, 256, 0),
        rooted(OpKind::Reduce, 256, 1),
        OpParam::all_reduce(1024, f32, sum),
        OpParam::all_gather(128, f32),
        rooted(OpKind::Broadcast, 64, 2),
        OpParam::all_reduce(64, f32, ReduceOp::Max),
        OpParam::reduce_scatter(128, f32, sum),
    ]
}

/// Seconds per eager sequence (one group call per step).
fn eager(comms: &[Communicator], ops: &[OpParam], bufs: &mut [Vec<Bufs>], iters: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        for (k, op) in ops.iter().enumerate() {
            let mut group = Group::new();
            for (comm, rank_bufs) in comms.iter().zip(bufs.iter_mut()) {
                let (param, user) = rank_bufs[k].call(op).into_parts();
                group.execute(comm, param, user);
            }
            group.run().expect("eager group");
        }
    }
    start.elapsed().as_secs_f64() / iters as f64
}

/// Seconds per graph launch (one group launch of every rank's graph).
fn replay(
    comms: &[Communicator],
    graphs: &[Graph],
    ops: &[OpParam],
    bufs: &mut [Vec<Bufs>],
    iters: usize,
) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        let launches = graphs
            .iter()
            .zip(comms)
            .zip(bufs.iter_mut())
            .map(|((graph, comm), rank_bufs)| {
                let calls = rank_bufs
                    .iter_mut()
                    .zip(ops)
                    .map(|(b, op)| b.call(op))
                    .collect();
                (graph, comm, calls)
            })
            .collect();
        for result in Graph::launch_group(launches) {
            result.expect("graph launch");
        }
    }
    start.elapsed().as_secs_f64() / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ranks = args.first().copied().unwrap_or(8);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);
    let comms = Communicator::init_all(ranks, Config::from_env().expect("config")).expect("init");
    let f32 = DataType::F32;
    let cases = [
        case(
            "1 KiB AllReduce",
            vec![OpParam::all_reduce(256, f32, ReduceOp::Sum)],
            2000,
        ),
        case("10 small collectives", small_sequence(), 200),
        case(
            "64 MiB AllReduce",
            vec![OpParam::all_reduce(16 << 20, f32, ReduceOp::Sum)],
            3,
        ),
    ];
    println!("# {ranks} ranks, one thread, median of {rounds} interleaved rounds (per launch)");
    println!(
        "# {:<22} {:>12} {:>12} {:>14}",
        "case", "eager (us)", "graph (us)", "eager / graph"
    );
    for (name, ops, iters) in cases {
        let mut bufs: Vec<Vec<Bufs>> = (0..ranks)
            .map(|r| ops.iter().map(|op| Bufs::new(op, r, ranks)).collect())
            .collect();
        let captures = comms
            .iter()
            .zip(bufs.iter_mut())
            .map(|(comm, rank_bufs)| {
                let mut capture = Capture::new();
                for (b, op) in rank_bufs.iter_mut().zip(&ops) {
                    capture.record(&b.call(op)).expect("record");
                }
                (capture, comm)
            })
            .collect();
        let graphs: Vec<Graph> = Capture::compile_group(captures)
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("compile");
        let (mut e, mut g) = (Vec::new(), Vec::new());
        let mut eager_out: Vec<Vec<Vec<f32>>> = Vec::new();
        for _ in 0..rounds {
            e.push(eager(&comms, &ops, &mut bufs, iters));
            eager_out = bufs
                .iter()
                .map(|r| r.iter().map(|b| b.output.clone()).collect())
                .collect();
            g.push(replay(&comms, &graphs, &ops, &mut bufs, iters));
        }
        let graph_out: Vec<Vec<Vec<f32>>> = bufs
            .iter()
            .map(|r| r.iter().map(|b| b.output.clone()).collect())
            .collect();
        let same = eager_out
            .iter()
            .zip(&graph_out)
            .enumerate()
            .all(|(rank, (a, b))| {
                a.iter().zip(b).zip(&ops).all(|((x, y), op)| {
                    let defined = !matches!(op.kind, OpKind::Reduce) || op.root == Some(rank);
                    !defined || x == y
                })
            });
        assert!(
            same,
            "{name}: the graph's results differ from the eager calls'"
        );
        let (e, g) = (median(e) * 1e6, median(g) * 1e6);
        println!("  {name:<22} {e:>12.2} {g:>12.2} {:>14.2}", e / g);
    }
}
