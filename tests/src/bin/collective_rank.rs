//! One rank of the multi-process collective tests (`tests/tests/processes.rs`): joins the
//! job its launcher started (`Communicator::init_launched`), runs every operator's cases
//! on its own rank, compared with the reference, and prints `rank R ok`; or the first
//! failure on stderr, with exit status 1. `OXCCL_TEST_OPS=quick` runs a few cases per
//! operator instead of the matrices; `OXCCL_TEST_OPS=loop` prints `rank R ready` after a
//! first AllReduce and then runs AllReduces until one fails (for the fault tests);
//! `OXCCL_TEST_OPS=private` runs one AllReduce on heap buffers (refused where peers map
//! user buffers: `OXCCL_SHARED_BUFFERS=1`) and reports its outcome as any run.
//! `OXCCL_TEST_RANKS=a,b` makes this process hold those ranks, one thread each, joined
//! with `init_rank` through `OXCCL_COMM_ID` and `OXCCL_SIZE` (a job of processes that
//! each hold several ranks). After its cases a rank also prints how it runs an AllReduce,
//! an AllGather, a ReduceScatter, a Broadcast, a Scatter, a Gather and an AlltoAll of
//! 1 MiB: `rank R all_reduce: EXECUTOR MODE` (`Direct`: zero-copy), and the figures its
//! cost model has of its host: `rank R host_figures: workers W thread_gbps G task_us T`.

use oxccl::{Communicator, Config};
use oxccl_tests::every::every_operator as run;
use oxccl_tests::SMALL_CCL_BYTES;
use std::process::ExitCode;
use std::time::Duration;

/// AllReduces of 1 MiB until one fails: its error.
fn run_until_failure(comm: &Communicator) -> String {
    // Shared buffers where the job maps them (heap memory otherwise).
    let (mut send, mut recv) = match (comm.alloc_shared(1 << 18), comm.alloc_shared(1 << 18)) {
        (Ok(send), Ok(recv)) => (send, recv),
        (Err(e), _) | (_, Err(e)) => return chain(&e),
    };
    send.fill(1.0f32);
    recv.fill(0.0);
    let mut first = true;
    loop {
        if let Err(e) = comm.all_reduce(&send, &mut recv, oxccl::ReduceOp::Sum) {
            return chain(&e);
        }
        if std::mem::take(&mut first) {
            println!("rank {} ready", comm.rank());
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
    }
}

/// One AllReduce on heap buffers.
fn on_heap_buffers(comm: &Communicator) -> Result<(), String> {
    let send = vec![1.0f32; 1024];
    let mut recv = vec![0.0f32; 1024];
    comm.all_reduce(&send, &mut recv, oxccl::ReduceOp::Sum)
        .map_err(|e| chain(&e))
}

/// How `comm` runs a 1 MiB f32 sum AllReduce, and AllGather, ReduceScatter, Broadcast,
/// Scatter, Gather (rooted at rank 0) and AlltoAll of 1 MiB per rank: a line
/// `rank R OPERATOR: EXECUTOR MODE` each.
fn plans(comm: &Communicator) -> Result<Vec<String>, String> {
    use oxccl::{DataType::F32, OpParam, ReduceOp::Sum};
    let count = 1 << 18;
    let ops = [
        OpParam::all_reduce(count, F32, Sum),
        OpParam::all_gather(count, F32),
        OpParam::reduce_scatter(count, F32, Sum),
        OpParam::rooted(oxccl::OpKind::Broadcast, count, F32, Sum, 0),
        OpParam::rooted(oxccl::OpKind::Scatter, count, F32, Sum, 0),
        OpParam::rooted(oxccl::OpKind::Gather, count, F32, Sum, 0),
        OpParam::new(oxccl::OpKind::AlltoAll, count, F32, Sum),
    ];
    let mut lines = ops
        .iter()
        .map(|op| {
            let prepared = comm.framework().prepare(op, false).map_err(|e| chain(&e))?;
            Ok(format!(
                "rank {} {}: {} {:?}",
                comm.rank(),
                op.kind,
                prepared.selection.executor.name,
                prepared.mode
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(p) = comm.framework().topology().processor() {
        lines.push(format!(
            "rank {} host_figures: workers {} thread_gbps {} task_us {}",
            comm.rank(),
            p.workers,
            p.thread_gbps,
            p.task_us
        ));
    }
    Ok(lines)
}

fn chain(e: &oxccl::Error) -> String {
    let causes: Vec<String> = oxccl::framework::error::chain(e)
        .map(|c| c.to_string())
        .collect();
    causes.join(": ")
}

/// This process's communicators: one through the launcher's variables, or one per rank
/// of `OXCCL_TEST_RANKS`, each joined on its own thread.
fn join(config: Config) -> Result<Vec<Communicator>, oxccl::Error> {
    let Ok(list) = std::env::var("OXCCL_TEST_RANKS") else {
        return Ok(vec![Communicator::init_launched(config)?]);
    };
    let var = |name: &'static str| {
        std::env::var(name).map_err(|_| oxccl::ConfigError::new(name, "", "the test sets it"))
    };
    let id: oxccl::UniqueId = var("OXCCL_COMM_ID")?
        .parse()
        .map_err(oxccl::framework::Error::from)?;
    let size: usize = var("OXCCL_SIZE")?
        .parse()
        .map_err(|_| oxccl::ConfigError::new("OXCCL_SIZE", "", "a number"))?;
    let ranks: Vec<usize> = list.split(',').filter_map(|r| r.parse().ok()).collect();
    std::thread::scope(|s| {
        let joins: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let config = config.clone();
                s.spawn(move || Communicator::init_rank(&id, size, r, config))
            })
            .collect();
        let results: Vec<_> = joins
            .into_iter()
            .map(|j| j.join().expect("init thread"))
            .collect();
        // Report every rank's refusal: the first may only be a consequence of another's.
        for (rank, e) in ranks
            .iter()
            .zip(&results)
            .filter_map(|(r, x)| Some((r, x.as_ref().err()?)))
        {
            eprintln!("rank {rank}: init refused: {}", chain(e));
        }
        results.into_iter().collect()
    })
}

fn main() -> ExitCode {
    let ops = std::env::var("OXCCL_TEST_OPS").unwrap_or_default();
    let config = Config::from_env().map(|c| Config {
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(30),
        ..c
    });
    let comms = match config.map_err(oxccl::Error::from).and_then(join) {
        Ok(comms) => comms,
        Err(e) => {
            eprintln!("init refused: {}", chain(&e));
            return ExitCode::from(1);
        }
    };
    let ranks: Vec<usize> = comms.iter().map(Communicator::rank).collect();
    if ops == "loop" {
        eprintln!("rank {}: {}", ranks[0], run_until_failure(&comms[0]));
        return ExitCode::from(1);
    }
    let outcome = match ops.as_str() {
        "private" => on_heap_buffers(&comms[0]),
        _ => run(&comms, ops == "quick"),
    };
    let outcome: Result<Vec<Vec<String>>, String> =
        outcome.and_then(|()| comms.iter().map(plans).collect());
    match outcome {
        Ok(plans) => {
            for (rank, plans) in ranks.into_iter().zip(plans) {
                plans.iter().for_each(|plan| println!("{plan}"));
                println!("rank {rank} ok");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ranks {ranks:?}: {e}");
            ExitCode::from(1)
        }
    }
}
