//! Graph mode on the cuda backend. A graph launch of every rank's steps on device buffers
//! runs as one CUDA graph per GPU, built on the first launch and replayed on the next,
//! with buffers rebound and data changed at every launch and eager calls between
//! launches, and gives the values computed here on the host: on 2, 4 and 8 virtual ranks
//! of GPU 0, zero-copy and staged. The same sequence with `cuda_graphs` off, on host
//! slices, or launched rank by rank from threads of their own, runs step by step with the
//! same values and replays nothing. Needs a GPU: skips with a printed reason without one.

#![cfg(feature = "cuda")]

use oxccl::{Communicator, Config, DeviceBuffer, Group, OpCall, ReduceOp, Topology};
use oxccl_graph::{Capture, Graph};
use std::time::Duration;

/// Elements per rank of the small steps: odd, not a multiple of any rank count.
const COUNT: usize = 1001;
/// Elements of the large step: past the 1 MiB CCL buffers, so staged runs take rounds.
const LARGE: usize = 300_000;
/// The root of the Broadcast step.
fn root(ranks: usize) -> usize {
    ranks - 1
}

fn config(ranks: usize, cuda_graphs: bool, zero_copy: bool) -> Config {
    Config {
        device: "cuda".into(),
        topology: Some(Topology::single_server(ranks)),
        exec_timeout: Duration::from_secs(30),
        ccl_buffer_bytes: 1 << 20,
        gpus: vec![0],
        cuda_graphs,
        zero_copy,
        ..Config::default()
    }
}

/// `ranks` virtual ranks of GPU 0, or `None` (and why, printed) without a GPU.
fn gpu_comms(ranks: usize, cuda_graphs: bool, zero_copy: bool) -> Option<Vec<Communicator>> {
    match oxccl::platform::cuda::gpu_count() {
        Ok(0) => {
            eprintln!("skipped: the CUDA driver reports no GPU");
            None
        }
        Ok(_) => {
            Some(Communicator::init_all(ranks, config(ranks, cuda_graphs, zero_copy)).unwrap())
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// Rank `rank`'s input of `step` at launch `launch`: small integers, so every sum is
/// exact in f32.
fn input(rank: usize, step: usize, launch: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((rank * 7 + step * 3 + launch * 5 + i) % 11) as f32)
        .collect()
}

/// The steps: (input elements, output elements) per rank of `ranks`.
fn shapes(ranks: usize) -> [(usize, usize); 6] {
    [
        (COUNT, COUNT),         // 0: AllReduce Sum, out of place
        (COUNT, COUNT),         // 1: AllReduce Max, in place (the output is the buffer)
        (COUNT, ranks * COUNT), // 2: AllGather
        (ranks * COUNT, COUNT), // 3: ReduceScatter Sum
        (COUNT, COUNT),         // 4: Broadcast from the last rank, out of place
        (LARGE, LARGE),         // 5: AllReduce Sum, in place
    ]
}

/// What rank `rank`'s output of `step` holds after launch `launch`.
fn expected(ranks: usize, rank: usize, step: usize, launch: usize) -> Vec<f32> {
    let (len, _) = shapes(ranks)[step];
    let inputs: Vec<Vec<f32>> = (0..ranks).map(|r| input(r, step, launch, len)).collect();
    let fold = |f: fn(f32, f32) -> f32, at: usize| {
        inputs.iter().map(|v| v[at]).reduce(f).expect("ranks > 0")
    };
    match step {
        0 | 5 => (0..len).map(|i| fold(|a, b| a + b, i)).collect(),
        1 => (0..len).map(|i| fold(f32::max, i)).collect(),
        2 => inputs.concat(),
        3 => (0..COUNT)
            .map(|i| fold(|a, b| a + b, rank * COUNT + i))
            .collect(),
        _ => inputs[root(ranks)].clone(),
    }
}

/// One rank's buffers for every step: on the GPU, or host vectors.
struct Buffers<T> {
    send: Vec<T>,
    recv: Vec<T>,
}

type DeviceSet = Buffers<DeviceBuffer<f32>>;
type HostSet = Buffers<Vec<f32>>;

impl DeviceSet {
    fn new(comm: &Communicator) -> Self {
        let zeroed = |n| DeviceBuffer::<f32>::zeroed(comm, n).unwrap();
        let shapes = shapes(comm.size());
        Buffers {
            send: shapes.iter().map(|&(i, _)| zeroed(i)).collect(),
            recv: shapes.iter().map(|&(_, o)| zeroed(o)).collect(),
        }
    }

    /// Fill the inputs of launch `launch` (in place: the buffer itself).
    fn fill(&mut self, rank: usize, launch: usize) {
        for step in 0..6 {
            let len = self.send[step].len();
            let data = input(rank, step, launch, len);
            match in_place(step) {
                true => self.recv[step].copy_from_host(&data).unwrap(),
                false => self.send[step].copy_from_host(&data).unwrap(),
            }
        }
    }

    fn calls(&mut self, ranks: usize) -> Vec<OpCall<'_>> {
        let mut calls = Vec::with_capacity(6);
        for (step, (send, recv)) in self.send.iter().zip(self.recv.iter_mut()).enumerate() {
            calls.push(match step {
                0 => OpCall::all_reduce_device(send, recv, ReduceOp::Sum).unwrap(),
                1 => OpCall::all_reduce_in_place_device(recv, ReduceOp::Max),
                2 => OpCall::all_gather_device(ranks, send, recv).unwrap(),
                3 => OpCall::reduce_scatter_device(ranks, send, recv, ReduceOp::Sum).unwrap(),
                4 => OpCall::broadcast_device(send, recv, root(ranks)).unwrap(),
                _ => OpCall::all_reduce_in_place_device(recv, ReduceOp::Sum),
            });
        }
        calls
    }

    fn results(&self) -> Vec<Vec<f32>> {
        self.recv.iter().map(|b| b.to_host().unwrap()).collect()
    }
}

impl HostSet {
    fn new(ranks: usize) -> Self {
        let shapes = shapes(ranks);
        Buffers {
            send: shapes.iter().map(|&(i, _)| vec![0.0; i]).collect(),
            recv: shapes.iter().map(|&(_, o)| vec![0.0; o]).collect(),
        }
    }

    fn fill(&mut self, rank: usize, launch: usize) {
        for step in 0..6 {
            let data = input(rank, step, launch, self.send[step].len());
            match in_place(step) {
                true => self.recv[step].copy_from_slice(&data),
                false => self.send[step].copy_from_slice(&data),
            }
        }
    }

    fn calls(&mut self, ranks: usize) -> Vec<OpCall<'_>> {
        let mut calls = Vec::with_capacity(6);
        for (step, (send, recv)) in self.send.iter().zip(self.recv.iter_mut()).enumerate() {
            calls.push(match step {
                0 => OpCall::all_reduce(send, recv, ReduceOp::Sum).unwrap(),
                1 => OpCall::all_reduce_in_place(recv, ReduceOp::Max),
                2 => OpCall::all_gather(ranks, send, recv).unwrap(),
                3 => OpCall::reduce_scatter(ranks, send, recv, ReduceOp::Sum).unwrap(),
                4 => OpCall::broadcast(send, recv, root(ranks)).unwrap(),
                _ => OpCall::all_reduce_in_place(recv, ReduceOp::Sum),
            });
        }
        calls
    }
}

fn in_place(step: usize) -> bool {
    matches!(step, 1 | 5)
}

/// Every rank's graph of the six steps, compiled from `sets`' calls.
fn compile<F>(comms: &[Communicator], mut calls_of: F) -> Vec<Graph>
where
    F: FnMut(usize, &mut dyn FnMut(&OpCall<'_>)),
{
    let captures = comms
        .iter()
        .map(|comm| {
            let mut capture = Capture::new();
            calls_of(comm.rank(), &mut |call| {
                capture.record(call).unwrap();
            });
            (capture, comm)
        })
        .collect();
    Capture::compile_group(captures)
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// An eager in-place AllReduce of every rank from one thread, between launches.
fn eager_between(comms: &[Communicator], launch: usize) {
    let mut bufs: Vec<DeviceBuffer<f32>> = comms
        .iter()
        .map(|c| DeviceBuffer::from_host(c, &input(c.rank(), 9, launch, COUNT)).unwrap())
        .collect();
    let mut group = Group::new();
    for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
        group.add(comm, OpCall::all_reduce_in_place_device(buf, ReduceOp::Sum));
    }
    group.run().unwrap();
    let ranks = comms.len();
    let want: Vec<f32> = (0..COUNT)
        .map(|i| (0..ranks).map(|r| input(r, 9, launch, COUNT)[i]).sum())
        .collect();
    for buf in &bufs {
        assert_eq!(
            buf.to_host().unwrap(),
            want,
            "the eager call between launches"
        );
    }
}

fn check(ranks: usize, rank: usize, launch: usize, got: &[Vec<f32>]) {
    for (step, got) in got.iter().enumerate() {
        let want = expected(ranks, rank, step, launch);
        assert!(
            *got == want,
            "{ranks} ranks, rank {rank}, step {step}, launch {launch}: first difference at \
             {:?}",
            got.iter().zip(&want).position(|(g, w)| g != w)
        );
    }
}

/// Compile on buffer set A, then launch three times from one thread with the data changed
/// every time and the buffers rebound (A, B, A), an eager call between launches; every
/// output checked. Returns the device's graph counts.
fn replay_device_buffers(comms: &[Communicator]) -> oxccl::platform::cuda::GraphCounts {
    let ranks = comms.len();
    let mut a: Vec<DeviceSet> = comms.iter().map(DeviceSet::new).collect();
    let mut b: Vec<DeviceSet> = comms.iter().map(DeviceSet::new).collect();
    let graphs = compile(comms, |rank, record| {
        a[rank].calls(ranks).iter().for_each(&mut *record)
    });
    for launch in 0..3 {
        let sets = match launch {
            1 => &mut b,
            _ => &mut a,
        };
        for (rank, set) in sets.iter_mut().enumerate() {
            set.fill(rank, launch);
        }
        let launches = graphs
            .iter()
            .zip(comms)
            .zip(sets.iter_mut())
            .map(|((graph, comm), set)| (graph, comm, set.calls(ranks)))
            .collect();
        for (rank, result) in Graph::launch_group(launches).into_iter().enumerate() {
            result.unwrap_or_else(|e| panic!("rank {rank}, launch {launch}: {e}"));
        }
        for (rank, set) in sets.iter().enumerate() {
            check(ranks, rank, launch, &set.results());
        }
        eager_between(comms, launch);
    }
    comms[0].cuda_device().unwrap().graph_counts()
}

#[test]
fn graph_launches_replay_as_cuda_graphs_on_2_4_and_8_virtual_ranks() {
    for zero_copy in [true, false] {
        for ranks in [2, 4, 8] {
            let Some(comms) = gpu_comms(ranks, true, zero_copy) else {
                return;
            };
            let counts = replay_device_buffers(&comms);
            assert!(
                counts.on && counts.refused.is_none(),
                "graphs are on: {counts:?}"
            );
            assert_eq!(counts.built, 1, "one graph built for the sequence, kept");
            assert_eq!(counts.replays, 3, "every launch replayed it");
        }
    }
}

#[test]
fn with_cuda_graphs_off_a_launch_runs_step_by_step_alike() {
    let Some(comms) = gpu_comms(4, false, true) else {
        return;
    };
    let counts = replay_device_buffers(&comms);
    assert!(!counts.on, "{counts:?}");
    assert_eq!((counts.built, counts.replays), (0, 0));
}

#[test]
fn graph_launches_on_host_slices_run_step_by_step() {
    let Some(comms) = gpu_comms(4, true, true) else {
        return;
    };
    let ranks = comms.len();
    let mut sets: Vec<HostSet> = (0..ranks).map(|_| HostSet::new(ranks)).collect();
    let graphs = compile(&comms, |rank, record| {
        sets[rank].calls(ranks).iter().for_each(&mut *record)
    });
    for launch in 0..2 {
        for (rank, set) in sets.iter_mut().enumerate() {
            set.fill(rank, launch);
        }
        let launches = graphs
            .iter()
            .zip(&comms)
            .zip(sets.iter_mut())
            .map(|((graph, comm), set)| (graph, comm, set.calls(ranks)))
            .collect();
        for result in Graph::launch_group(launches) {
            result.unwrap();
        }
        for (rank, set) in sets.iter().enumerate() {
            check(ranks, rank, launch, &set.recv);
        }
    }
    let counts = comms[0].cuda_device().unwrap().graph_counts();
    assert_eq!(counts.replays, 0, "host slices are staged step by step");
}

#[test]
fn graph_launches_from_a_thread_per_rank_run_step_by_step() {
    let Some(comms) = gpu_comms(4, true, true) else {
        return;
    };
    let ranks = comms.len();
    let mut sets: Vec<DeviceSet> = comms.iter().map(DeviceSet::new).collect();
    let graphs = compile(&comms, |rank, record| {
        sets[rank].calls(ranks).iter().for_each(&mut *record)
    });
    std::thread::scope(|s| {
        for ((comm, graph), set) in comms.iter().zip(&graphs).zip(sets.iter_mut()) {
            s.spawn(move || {
                let rank = comm.rank();
                set.fill(rank, 0);
                graph.launch(comm, set.calls(ranks)).unwrap();
                check(ranks, rank, 0, &set.results());
            });
        }
    });
    let counts = comms[0].cuda_device().unwrap().graph_counts();
    assert_eq!(
        counts.replays, 0,
        "no launch holds every rank's steps: each rank's steps arrive from its own thread"
    );
}
