//! Measuring one row: every rank on its own thread, timed between two barriers.
//!
//! On GPUs the ranks' buffers are device copies of the host's ([`GpuCopy`]): the host
//! fills and checks, the calls bind the device copies, and the receive buffers are read
//! back after each form's timed loop.

use super::data::{fill_input, Aligned, Expected, FILL};
use super::gpu::GpuCopy;
use super::graph::{Graphs, RankBinding};
use oxccl::{Communicator, DataType, Error, Group, OpKind, OpParam, ReduceOp, UserBuffers};
use std::sync::Barrier;
use std::time::Instant;

/// Guard bytes on each side of every receive buffer.
const GUARD: usize = 64;
/// Guard bytes of one rank's receive buffer, both sides.
pub const GUARD_BYTES: usize = 2 * GUARD;

/// How to measure a row: `oxccl perf` and `oxccl tune` both measure with this.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Timed calls per direction and block.
    pub iters: usize,
    /// Blocks of `iters` timed calls per direction, each started together on every
    /// thread; the fastest block counts (`oxccl tune`: other processes only ever add
    /// time). `oxccl perf` times one block.
    pub blocks: usize,
    /// Untimed calls before them.
    pub warmup: usize,
    /// Check every result and the guard bytes.
    pub check: bool,
    /// Threads driving the ranks, each with group calls over its share.
    pub threads: usize,
    /// Measure the in-place form too (where the operator has one).
    pub in_place: bool,
    /// Run through graph mode, with this many calls per launch (`--graph`,
    /// `--graph-steps`); `None`: eager calls.
    pub graph: Option<usize>,
    /// A size whose buffers do not fit in the memory available is skipped, with the
    /// reason in its row (`--skip-oom`; `oxccl tune` skips and says so); without it such
    /// a size is an error.
    pub skip_oom: bool,
}

/// One direction (out-of-place or in-place) of a row.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Mean seconds per call, averaged over ranks.
    pub seconds: f64,
    /// Wrong elements over all ranks (`None` when not checked).
    pub wrong: Option<usize>,
}

/// A measured row.
#[derive(Clone, Debug)]
pub struct Measured {
    pub op: OpParam,
    pub out_of_place: Timing,
    /// `None` for operators without an in-place form (AlltoAll(V), send/recv), and where
    /// the executor refuses it.
    pub in_place: Option<Timing>,
    /// Why the executor refused the in-place form, when it did.
    pub in_place_refused: Option<String>,
    /// Bytes written outside receive buffers.
    pub out_of_bounds: usize,
    pub executor: String,
    /// Set when the row was skipped, with the reason.
    pub skipped: Option<String>,
}

struct RankResult {
    oop: (f64, usize),
    ip: (f64, usize),
    oob: usize,
}

/// One rank's communicator, call and buffers, driven by one of the benchmark's threads.
struct RankState<'c> {
    comm: &'c Communicator,
    op: &'c OpParam,
    input: Aligned,
    /// The receive buffer, with guard bytes on both sides.
    output: Aligned,
    /// The device copies of `input` and `output` the calls bind, on GPUs.
    gpu: Option<GpuCopy>,
    /// The receive buffers of a graph's steps after the first (`--graph-steps`).
    extra: Vec<Aligned>,
}

impl RankState<'_> {
    /// Read the receive buffer back from the GPU (nothing to do on the host).
    fn download(&mut self) -> Result<(), Error> {
        match &self.gpu {
            Some(gpu) => gpu.download_output(self.output.bytes_mut()),
            None => Ok(()),
        }
    }

    /// Send the host's receive buffer to the GPU, after the host wrote into it.
    fn upload(&mut self) -> Result<(), Error> {
        match &mut self.gpu {
            Some(gpu) => gpu.upload_output(self.output.bytes()),
            None => Ok(()),
        }
    }
}

/// Every receive buffer of `states` as the last calls left it, on the host.
fn download(states: &mut [RankState<'_>]) -> Result<(), Error> {
    states.iter_mut().try_for_each(RankState::download)
}

fn available_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The executor every rank runs `ops` with, after building every rank's programs (both
/// forms when `in_place`): an executor that cannot run here fails before anything runs,
/// with the error of the first rank it fails on. An executor that runs the operation out
/// of place but refuses the in-place form (`Error::Unsupported`: an imported MSCCL-IR file
/// with `inplace="0"`, forced by `--algo`) leaves the in-place form out, with the reason.
fn prepare_all(
    comms: &[Communicator],
    ops: &[OpParam],
    in_place: bool,
) -> Result<(String, Option<String>), Error> {
    let mut name = String::new();
    for comm in comms {
        let prepared = comm.framework().prepare(&ops[comm.rank()], false)?;
        name = prepared.selection.executor.name.to_string();
    }
    if !in_place {
        return Ok((name, None));
    }
    for comm in comms {
        match comm.framework().prepare(&ops[comm.rank()], true) {
            Ok(prepared) => name = prepared.selection.executor.name.to_string(),
            Err(Error::Unsupported { reason, .. }) => return Ok((name, Some(reason))),
            Err(e) => return Err(e),
        }
    }
    Ok((name, None))
}

/// Measure one row: `ops[r]` is rank `r`'s call (the same on every rank except for
/// send/recv, whose peers differ). `comms` are the ranks of this process: all of the
/// communicator's, or (a job of processes) some; then every process measures its own and
/// the times and counts are summed over the job ([`job_totals`]).
pub fn measure(
    comms: &[Communicator],
    ops: &[OpParam],
    settings: &Settings,
) -> Result<Measured, Error> {
    let n = comms[0].size();
    let op = &ops[0];
    let (in_bytes, out_bytes) = op.buffer_bytes(0, n);
    let (executor, in_place_refused) =
        prepare_all(comms, ops, settings.in_place && op.in_place_allowed())?;
    let in_place = settings.in_place && op.in_place_allowed() && in_place_refused.is_none();
    let settings = &Settings {
        in_place,
        ..*settings
    };
    let mut row = Measured {
        op: op.clone(),
        out_of_place: Timing::default(),
        in_place: None,
        in_place_refused,
        out_of_bounds: 0,
        executor,
        skipped: None,
    };
    if let Some(short) = short_of_memory(comms, (in_bytes, out_bytes), op.kind)? {
        if !settings.skip_oom {
            return Err(super::bad_arg(format!(
                "{} B: {short}; lower -e/--maxbytes, or pass --skip-oom to skip such sizes",
                super::report::row_size(op, n)
            )));
        }
        row.skipped = Some(short);
        return Ok(row);
    }
    let expected = if settings.check {
        Some(Expected::new(op, n).map_err(super::bad_arg)?)
    } else {
        None
    };
    let threads = settings.threads.clamp(1, n);
    let barrier = Barrier::new(threads);
    let per_thread = n.div_ceil(threads);
    let results: Vec<Result<Vec<RankResult>, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .chunks(per_thread)
            .map(|ranks| {
                let (barrier, expected) = (&barrier, expected.as_ref());
                s.spawn(move || run_thread(ranks, ops, settings, barrier, expected))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    });
    let results: Vec<RankResult> = results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let totals = job_totals(comms, &results, op.kind)?;
    let wrong = |w: f64| expected.as_ref().map(|_| w as usize);
    row.out_of_place = Timing {
        seconds: totals[0] / n as f64,
        wrong: wrong(totals[2]),
    };
    row.in_place = in_place.then(|| Timing {
        seconds: totals[1] / n as f64,
        wrong: wrong(totals[3]),
    });
    row.out_of_bounds = totals[4] as usize;
    Ok(row)
}

/// Why a row's buffers (every local rank's send and receive buffers) would not fit: more
/// than 80% of the memory available (`MemAvailable`) on this host, or on another
/// process's of the job; `None` when they fit everywhere (or the memory cannot be read).
/// The processes agree, so that all of them skip or refuse the same rows.
fn short_of_memory(
    comms: &[Communicator],
    (in_bytes, out_bytes): (usize, usize),
    measured: OpKind,
) -> Result<Option<String>, Error> {
    let need = in_bytes
        .checked_add(out_bytes.max(in_bytes))
        .and_then(|bytes| bytes.checked_mul(comms.len()))
        .unwrap_or(usize::MAX);
    let short_here = available_memory().filter(|&avail| need > avail / 10 * 8);
    let short_anywhere = job_sums(comms, [f64::from(u8::from(short_here.is_some()))], measured)?;
    Ok(match (short_here, short_anywhere[0] > 0.0) {
        (Some(avail), _) => Some(format!(
            "its buffers need ~{} MiB, more than 80% of the {} MiB available",
            need >> 20,
            avail >> 20
        )),
        (None, true) => Some("another process of the job has too little memory".into()),
        (None, false) => None,
    })
}

/// Sums over every rank of the job of (out-of-place seconds, in-place seconds, wrong
/// values out of place, in place, out-of-bounds bytes).
fn job_totals(
    comms: &[Communicator],
    results: &[RankResult],
    measured: OpKind,
) -> Result<[f64; 5], Error> {
    let mut mine = [0.0f64; 5];
    for r in results {
        let add = [r.oop.0, r.ip.0, r.oop.1 as f64, r.ip.1 as f64, r.oob as f64];
        for (m, a) in mine.iter_mut().zip(add) {
            *m += a;
        }
    }
    job_sums(comms, mine, measured)
}

/// This process's sums `mine`, added over the processes with a collective when the job
/// has ranks elsewhere.
///
/// The sums travel by an operator other than the `measured` one: `--algo` forces an
/// executor for the measured operator only, and a forced executor may refuse the sums'
/// `N` elements (an imported MSCCL-IR algorithm runs only counts its chunks divide,
/// within its file's byte range). An AllReduce is measured, so they are gathered and
/// added here; anything else is measured, so an AllReduce adds them.
fn job_sums<const N: usize>(
    comms: &[Communicator],
    mine: [f64; N],
    measured: OpKind,
) -> Result<[f64; N], Error> {
    if !spans_processes(comms[0].framework()) {
        return Ok(mine);
    }
    let gather = measured == OpKind::AllReduce;
    let (op, out_len) = if gather {
        (OpParam::all_gather(N, DataType::F64), N * comms[0].size())
    } else {
        (OpParam::all_reduce(N, DataType::F64, ReduceOp::Sum), N)
    };
    // Every local rank takes part; the first brings this process's sums. The buffers are
    // the calls' kind (shared where the job maps user buffers).
    let mut sends = Vec::new();
    let mut outs = Vec::new();
    for (i, comm) in comms.iter().enumerate() {
        let mut send = Aligned::for_calls(comm, N * 8)?;
        if i == 0 {
            send.bytes_mut()
                .copy_from_slice(bytemuck::cast_slice(&mine));
        }
        sends.push(send);
        outs.push(Aligned::for_calls(comm, out_len * 8)?);
    }
    let mut group = Group::new();
    for ((comm, send), out) in comms.iter().zip(&sends).zip(outs.iter_mut()) {
        group.execute(
            comm,
            op.clone(),
            UserBuffers::OutOfPlace {
                input: send.bytes(),
                output: out.bytes_mut(),
            },
        );
    }
    group.run()?;
    let outs: Vec<f64> = bytemuck::pod_collect_to_vec(outs[0].bytes());
    let mut totals = [0.0f64; N];
    for block in outs.chunks(N) {
        for (t, v) in totals.iter_mut().zip(block) {
            *t += v;
        }
    }
    Ok(totals)
}

/// Seconds per call of the fastest of `blocks` blocks of `iters` calls, after `warmup`
/// untimed ones; all threads start every block together.
fn timed(
    args: &Settings,
    barrier: &Barrier,
    mut call: impl FnMut() -> Result<(), Error>,
    mut job_barrier: impl FnMut() -> Result<(), Error>,
) -> Result<f64, Error> {
    for _ in 0..args.warmup {
        call()?;
    }
    let mut fastest = f64::INFINITY;
    for _ in 0..args.blocks.max(1) {
        barrier.wait();
        job_barrier()?;
        let start = Instant::now();
        for _ in 0..args.iters {
            call()?;
        }
        fastest = fastest.min(start.elapsed().as_secs_f64() / args.iters.max(1) as f64);
    }
    Ok(fastest)
}

/// A Barrier over every rank this thread drives when the job has ranks in other
/// processes (their threads are not at this process's barrier); nothing otherwise.
fn job_barrier(comms: &[&Communicator]) -> Result<(), Error> {
    if !spans_processes(comms[0].framework()) {
        return Ok(());
    }
    let mut none: Vec<[u8; 0]> = vec![[]; comms.len()];
    let mut group = Group::new();
    for (comm, buf) in comms.iter().zip(none.iter_mut()) {
        group.execute(comm, OpParam::barrier(), UserBuffers::InPlace(buf));
    }
    group.run()
}

/// True when the communicator has ranks this process's device does not serve (a job of
/// processes): then threads here cannot time or count for the whole job alone.
fn spans_processes(comm: &oxccl::framework::Communicator) -> bool {
    comm.device().config().local_ranks.len() < comm.size()
}

/// The receive buffer inside its guards.
fn recv(o: &mut Aligned, len: usize) -> &mut [u8] {
    &mut o.bytes_mut()[GUARD..GUARD + len]
}

/// This thread's ranks as a graph launch binds them (receive buffers of `len` bytes).
fn bindings<'b>(states: &'b mut [RankState<'_>], len: usize) -> Vec<RankBinding<'b>> {
    states
        .iter_mut()
        .map(|st| RankBinding {
            comm: st.comm,
            op: st.op,
            input: st.input.bytes(),
            output: recv(&mut st.output, len),
            extra: &mut st.extra,
            gpu: st.gpu.as_ref().map(|gpu| (gpu, GUARD)),
        })
        .collect()
}

/// One call of every rank this thread drives: one launch of their graphs, or a group
/// call.
fn call(
    states: &mut [RankState<'_>],
    graphs: Option<&Graphs>,
    len: usize,
    in_place: bool,
) -> Result<(), Error> {
    match graphs {
        Some(graphs) => graphs.launch(&mut bindings(states, len), in_place),
        None => group_call(states, len, in_place),
    }
}

/// The graphs of each form `args` measures (out of place, in place, and a one-step
/// in-place graph for the check when launches have several steps), or none when calls
/// are eager.
struct FormGraphs {
    oop: Graphs,
    ip: Option<Graphs>,
    ip_check: Option<Graphs>,
}

impl FormGraphs {
    fn compile(
        states: &mut [RankState<'_>],
        args: &Settings,
        lens: (usize, usize),
        in_place: bool,
    ) -> Result<Option<Self>, Error> {
        let Some(steps) = args.graph else {
            return Ok(None);
        };
        let (out_bytes, one_bytes) = lens;
        for st in states.iter_mut() {
            match &mut st.gpu {
                Some(gpu) => gpu.add_steps(st.comm, steps - 1, one_bytes)?,
                None => {
                    st.extra = (1..steps)
                        .map(|_| Aligned::for_calls(st.comm, one_bytes))
                        .collect::<Result<_, _>>()?;
                }
            }
        }
        let oop = Graphs::compile(&mut bindings(states, out_bytes), steps, false)?;
        let (ip, ip_check) = match in_place {
            false => (None, None),
            true => {
                let ip = Graphs::compile(&mut bindings(states, one_bytes), steps, true)?;
                let check = (steps > 1 && args.check)
                    .then(|| Graphs::compile(&mut bindings(states, one_bytes), 1, true))
                    .transpose()?;
                (Some(ip), check)
            }
        };
        Ok(Some(FormGraphs { oop, ip, ip_check }))
    }
}

/// One group call over every rank this thread drives.
fn group_call(states: &mut [RankState<'_>], len: usize, in_place: bool) -> Result<(), Error> {
    let mut group = Group::new();
    for st in states.iter_mut() {
        let user = match &mut st.gpu {
            Some(gpu) => gpu.user(GUARD, len, in_place)?,
            None if in_place => UserBuffers::InPlace(recv(&mut st.output, len)),
            None => UserBuffers::OutOfPlace {
                input: st.input.bytes(),
                output: recv(&mut st.output, len),
            },
        };
        group.execute(st.comm, st.op.clone(), user);
    }
    group.run()
}

fn run_thread<'c>(
    comms: &'c [Communicator],
    ops: &'c [OpParam],
    args: &Settings,
    barrier: &Barrier,
    expected: Option<&Expected>,
) -> Result<Vec<RankResult>, Error> {
    // Every rank's buffers have rank 0's sizes (equal in every benchmarked layout).
    let op = &ops[0];
    let (in_bytes, out_bytes) = op.buffer_bytes(0, comms[0].size());
    // In place, the one buffer is the larger side (NCCL's convention).
    let one_bytes = in_bytes.max(out_bytes);
    let mut states: Vec<RankState<'_>> = comms
        .iter()
        .map(|comm| {
            let mut input = Aligned::for_calls(comm, in_bytes)?;
            fill_input(op, comm.rank(), input.bytes_mut());
            let mut output = Aligned::for_calls(comm, one_bytes + 2 * GUARD)?;
            output.bytes_mut().fill(FILL);
            let gpu = GpuCopy::for_rank(comm, input.bytes(), output.bytes())?;
            Ok(RankState {
                comm,
                op: &ops[comm.rank()],
                input,
                output,
                gpu,
                extra: Vec::new(),
            })
        })
        .collect::<Result<_, Error>>()?;
    let check = |states: &mut [RankState<'_>], in_place: bool, len: usize| -> Vec<usize> {
        states
            .iter_mut()
            .map(|st| {
                let rank = st.comm.rank();
                expected.map_or(0, |e| {
                    e.count_wrong(rank, in_place, recv(&mut st.output, len))
                })
            })
            .collect()
    };
    let comms: Vec<&Communicator> = states.iter().map(|st| st.comm).collect();
    let with_ip = args.in_place && op.in_place_allowed();
    let graphs = FormGraphs::compile(&mut states, args, (out_bytes, one_bytes), with_ip)?;
    let per_launch = args.graph.unwrap_or(1) as f64;
    let oop_graph = graphs.as_ref().map(|g| &g.oop);
    let oop_time = timed(
        args,
        barrier,
        || call(&mut states, oop_graph, out_bytes, false),
        || job_barrier(&comms),
    )? / per_launch;
    download(&mut states)?;
    let oop_wrong = check(&mut states, false, out_bytes);
    let oop_oob: Vec<usize> = states
        .iter()
        .map(|st| guard_damage(&st.output, out_bytes))
        .collect();
    if !with_ip {
        return Ok(results(
            &states,
            (oop_time, &oop_wrong),
            None,
            &oop_oob,
            one_bytes,
        ));
    }
    let ip_graph = graphs.as_ref().and_then(|g| g.ip.as_ref());
    let ip_time = timed(
        args,
        barrier,
        || call(&mut states, ip_graph, one_bytes, true),
        || job_barrier(&comms),
    )? / per_launch;
    let mut ip_wrong = vec![0; states.len()];
    if expected.is_some() {
        for st in states.iter_mut() {
            let (at, _) = op.in_place_offsets(st.comm.rank());
            recv(&mut st.output, one_bytes)[at..at + in_bytes].copy_from_slice(st.input.bytes());
            st.upload()?;
        }
        barrier.wait();
        let check_graph = graphs
            .as_ref()
            .and_then(|g| g.ip_check.as_ref().or(ip_graph));
        call(&mut states, check_graph, one_bytes, true)?;
        download(&mut states)?;
        ip_wrong = check(&mut states, true, one_bytes);
    } else {
        download(&mut states)?;
    }
    Ok(results(
        &states,
        (oop_time, &oop_wrong),
        Some((ip_time, &ip_wrong)),
        &oop_oob,
        one_bytes,
    ))
}

/// Each rank's times and wrong counts (`ip`: `None` for operators without an in-place
/// form, reported as zero).
fn results(
    states: &[RankState<'_>],
    oop: (f64, &[usize]),
    ip: Option<(f64, &[usize])>,
    oop_oob: &[usize],
    one_bytes: usize,
) -> Vec<RankResult> {
    states
        .iter()
        .enumerate()
        .map(|(i, st)| RankResult {
            oop: (oop.0, oop.1[i]),
            ip: ip.map_or((0.0, 0), |(t, w)| (t, w[i])),
            oob: oop_oob[i] + ip.map_or(0, |_| guard_damage(&st.output, one_bytes)),
        })
        .collect()
}

/// Guard bytes around the first `len` bytes of the receive buffer that were overwritten.
fn guard_damage(output: &Aligned, len: usize) -> usize {
    let bytes = output.bytes();
    bytes[..GUARD]
        .iter()
        .chain(&bytes[GUARD + len..])
        .filter(|&&b| b != FILL)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_fastest_block_counts_per_call() {
        let settings = Settings {
            iters: 2,
            blocks: 3,
            warmup: 1,
            check: false,
            threads: 1,
            in_place: false,
            graph: None,
            skip_oom: false,
        };
        // The warm-up call, then blocks of 2 calls: 40 ms, 2 ms and 25 ms a call.
        let naps = [0, 40, 40, 2, 2, 25, 25];
        let mut calls = 0;
        let per_call = timed(
            &settings,
            &Barrier::new(1),
            || {
                std::thread::sleep(Duration::from_millis(naps[calls]));
                calls += 1;
                Ok(())
            },
            || Ok(()),
        )
        .unwrap();
        assert_eq!(calls, naps.len());
        assert!((0.002..0.025).contains(&per_call), "{per_call} s a call");
    }
}
