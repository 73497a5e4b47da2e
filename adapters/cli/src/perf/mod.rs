//! `oxccl perf`: an nccl-tests-style benchmark of one collective on the host device, or
//! on GPUs (`--device cuda`).
//!
//! `-t` threads drive the ranks, each with group calls over its share (one thread for all
//! ranks by default, as in nccl-tests). For each size the threads run the warmup
//! iterations, meet at a barrier, time `iters` back-to-back calls, and report the mean time
//! per call; then (with `-c 1`) a fresh call is checked against the expected result, and
//! guard bytes around every receive buffer are checked for out-of-bounds writes. The table
//! has nccl-tests' columns and bandwidth formulas; the exit status is non-zero when any
//! value is wrong. A size whose buffers do not fit in the memory available is an error,
//! or with `--skip-oom` a row that says "skipped" and the exit status 3: never a size
//! left out silently.
//!
//! Ranks in processes: under `mpirun`, `torchrun` or Slurm every process is one rank
//! ([`oxccl::Communicator::init_launched`]), measures its own calls, and the job's times
//! and wrong counts are summed with an AllReduce; rank 0 prints the one table.
//! `--procs N` starts N such processes on this host itself ([`procs`]).
//!
//! `--topo` and `--broken` give the communicator a topology (a preset or a TOML file, and
//! links to treat as broken): the communicator then refuses broken links, and select_alg
//! runs the executors that avoid them. `oxccl tune` measures with this module's
//! [`measure`].
//!
//! `--device` (default `OXCCL_DEVICE`, else `host`) picks the backend. On `cuda` the user
//! buffers live on the GPUs and every row also shows the copy bound of its size and busbw
//! as a fraction of it ([`gpu`]); a build without the `cuda` feature refuses
//! `--device cuda`, saying to rebuild with it.

mod data;
mod gpu;
mod graph;
mod procs;
mod report;
mod run;

pub use run::{measure, Measured, Settings, GUARD_BYTES};

use crate::calls::calls;
use crate::sizes::{count_for_size, size_sweep};
use crate::validate;
use clap::Args;
use oxccl::{Communicator, Config, DataType, Error, OpKind, ReduceOp, Topology};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct PerfArgs {
    /// The collective: all-reduce, all-gather, reduce-scatter, broadcast, reduce, scatter,
    /// gather, all-to-all, all-gather-v, reduce-scatter-v, all-to-all-v, send-recv, barrier.
    pub collective: String,
    /// Smallest size in bytes (K, M, G suffixes; at most 1024G).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    pub minbytes: String,
    /// Largest size in bytes (at most 1024G, and all ranks' buffers must fit in memory).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    pub maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub stepfactor: usize,
    /// Timed iterations per size (1 to 1000000).
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warmup iterations per size (0 to 1000000).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Data type (float, half, bfloat16, int32, ...; `all` for every type).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Reduce op (sum, prod, max, min; `all` for every op).
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Root rank of rooted collectives (below the rank count).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Number of ranks, 1 to 4096 (default 8, or the topology's; must agree with --topo).
    #[arg(long)]
    pub ranks: Option<usize>,
    #[arg(long, help = crate::topo_args::topo_help("OXCCL_TOPO_FILE, else one server of --ranks"))]
    pub topo: Option<String>,
    /// A broken link, `A-B` (repeatable): the communicator refuses it.
    #[arg(long = "broken", value_name = "A-B")]
    pub broken: Vec<String>,
    /// Threads driving the ranks (nccl-tests' -t): each drives its share of the ranks with
    /// group calls. 1 (the default, like nccl-tests) drives all ranks from one thread; equal
    /// to --ranks gives every rank its own thread; more than --ranks is refused.
    #[arg(short = 't', long = "nthreads", default_value_t = 1)]
    pub threads: usize,
    /// Executor to use (overrides OXCCL_ALGO for this collective).
    #[arg(long)]
    pub algo: Option<String>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run the ranks as N processes of this host (one rank each, over shared memory),
    /// started by this command; the same as `mpirun -np N oxccl perf ...`.
    #[arg(long, value_name = "N")]
    pub procs: Option<usize>,
    /// With --procs: split the processes into H hosts of this machine (each a host of its
    /// own through OXCCL_HOSTID; the first N mod H hold one process more), so a job across
    /// hosts can be tried here: shared memory inside each, the network between them.
    #[arg(long, value_name = "H", requires = "procs")]
    pub hosts: Option<usize>,
    #[arg(long, value_name = "KIND", help = crate::validate::DEVICE_HELP)]
    pub device: Option<String>,
    /// Measure through graph mode: every rank captures the call once, compiles it, and
    /// each iteration replays it with its buffers bound (`oxccl-graph`). Host device, and
    /// GPUs (`--device cuda`: each launch one CUDA graph).
    #[arg(long)]
    pub graph: bool,
    /// With --graph: calls per captured graph (1 to 1000), each with its own receive
    /// buffer; times are reported per call.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "graph")]
    pub graph_steps: usize,
    /// Skip a size whose buffers do not fit in the memory available (more than 80% of
    /// MemAvailable, on any process of the job) instead of failing on it; the table says
    /// so and the exit status is 3.
    #[arg(long)]
    pub skip_oom: bool,
    /// Allocate the buffers with `alloc_shared`, which the ranks in other processes of this
    /// host map, and run the calls zero-copy across processes (the same as
    /// OXCCL_SHARED_BUFFERS=1; nccl-tests' registered buffers). Every process of the job
    /// must be given it.
    #[arg(long)]
    pub shared_buffers: bool,
    #[command(flatten)]
    pub files: crate::algo_files::AlgoFiles,
}

fn parse_all<T: std::str::FromStr + Copy>(
    flag: &'static str,
    text: &str,
    all: &[T],
) -> Result<Vec<T>, Error>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    if text.eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    text.parse::<T>()
        .map(|v| vec![v])
        .map_err(|e| validate::refused(flag, text, "use one of the known names, or `all`", e))
}

pub(crate) fn bad_arg(reason: String) -> Error {
    oxccl::ConfigError::new("oxccl perf", "", reason).into()
}

/// What `oxccl perf` will run, every flag checked: building it runs nothing.
#[derive(Debug)]
pub struct PerfPlan {
    pub kind: OpKind,
    pub dtypes: Vec<DataType>,
    pub redops: Vec<ReduceOp>,
    /// nccl-tests sizes (one 0 for a barrier).
    pub sweep: Vec<usize>,
    pub root: usize,
    pub settings: Settings,
    pub config: Config,
    pub topology: Topology,
}

/// Check every flag of `args` and the environment, and say what would run; `launched`:
/// the job's size when this process is one rank of a job its launcher started.
pub fn plan(args: &PerfArgs, launched: Option<usize>) -> Result<PerfPlan, Error> {
    let kind: OpKind = args.collective.parse()?;
    let dtypes = parse_all("-d/--datatype", &args.datatype, &DataType::ALL)?;
    let redops = if kind.reduces() {
        parse_all("-o/--op", &args.op, &ReduceOp::ALL)?
    } else {
        vec![ReduceOp::Sum]
    };
    args.ranks.map(validate::rank_count).transpose()?;
    let ranks = match (launched, args.ranks) {
        (Some(size), Some(n)) if n != size => {
            return Err(bad_arg(format!(
                "--ranks {n} disagrees with the launcher's {size} processes; drop --ranks"
            )))
        }
        (Some(size), _) => Some(size),
        (None, n) => n,
    };
    let sweep = match kind {
        // A barrier moves no data: one row.
        OpKind::Barrier => vec![0],
        _ => size_sweep(&args.minbytes, &args.maxbytes, args.stepfactor)?,
    };
    let forced = args.algo.as_deref().map(|name| (kind, name));
    let (mut config, topology, given) = run_config(
        ranks,
        args.topo.as_deref(),
        &args.broken,
        forced,
        args.device.as_deref(),
        launched.is_none(),
    )?;
    // A job of processes takes its hosts as the topology unless one is given.
    if launched.is_some() && !given {
        config.topology = None;
    }
    config.shared_buffers |= args.shared_buffers;
    let ranks = topology.ranks();
    let largest = sweep.last().copied().unwrap_or(0);
    validate::buffers_fit(ranks, largest, GUARD_BYTES, validate::physical_memory())?;
    let settings = Settings {
        iters: validate::iterations("-n/--iters", args.iters, 1)?,
        blocks: 1,
        warmup: validate::iterations("-w/--warmup_iters", args.warmup, 0)?,
        check: args.check != 0,
        threads: validate::threads(args.threads, ranks)?,
        in_place: true,
        graph: graph_steps(args, &config)?,
        skip_oom: args.skip_oom,
    };
    if let Some(steps) = settings.graph.filter(|&s| s > 1) {
        // Every step after the first has a receive buffer of its own.
        let extra = largest.saturating_mul(steps);
        validate::buffers_fit(ranks, extra, GUARD_BYTES, validate::physical_memory())?;
    }
    Ok(PerfPlan {
        kind,
        dtypes,
        redops,
        sweep,
        root: validate::root(args.root, &topology)?,
        settings,
        config,
        topology,
    })
}

/// Calls per graph launch with `--graph`, checked; `None` without it.
fn graph_steps(args: &PerfArgs, config: &Config) -> Result<Option<usize>, Error> {
    if !args.graph {
        return Ok(None);
    }
    if config.device != "host" && config.device != "cuda" {
        return Err(bad_arg(format!(
            "--graph measures graph mode on the host device and on GPUs (cuda); --device \
             {} runs eager calls only here, so drop --graph or use --device host",
            config.device
        )));
    }
    if !(1..=1000).contains(&args.graph_steps) {
        return Err(bad_arg(format!(
            "--graph-steps {} is out of range: use 1 to 1000 calls per graph",
            args.graph_steps
        )));
    }
    Ok(Some(args.graph_steps))
}

/// The communicator's configuration: the environment's, with `--device` (`device`) and
/// `--topo`/`--broken`/`--ranks` applied and `forced` = (operator, executor) set when
/// given; and whether a topology was given at all (`--topo`, `--broken` or
/// `OXCCL_TOPO_FILE`) rather than defaulted. A defaulted CPU host of ranks `in_process`
/// takes this machine's measured figures, as `Communicator::init_all` does.
pub(crate) fn run_config(
    ranks: Option<usize>,
    topo: Option<&str>,
    broken: &[String],
    forced: Option<(OpKind, &str)>,
    device: Option<&str>,
    in_process: bool,
) -> Result<(Config, Topology, bool), Error> {
    let mut config = Config::from_env()?;
    if let Some(kind) = device {
        config.device = validate::device(kind)?;
    }
    let given = topo.is_some() || !broken.is_empty() || config.topology.is_some();
    let defaulted = topo.is_none() && config.topology.is_none();
    let topology = crate::topo_args::run_topology(
        ranks,
        topo,
        broken,
        config.topology.as_ref(),
        &config.device,
    )?;
    // What `Communicator::init_all` would take without a topology: this machine's
    // figures, measured (see `oxccl::framework::communicator::in_process_topology`).
    let topology = match defaulted && in_process {
        true => config.host_figures.apply(topology),
        false => topology,
    };
    config.topology = Some(topology.clone());
    if let Some((kind, name)) = forced {
        config.algo.set(Some(kind), name);
    }
    Ok((config, topology, given))
}

pub fn run(args: &PerfArgs) -> Result<ExitCode, Error> {
    if let Some(n) = args.procs {
        return procs::run(n, args.hosts.unwrap_or(1));
    }
    let launch = oxccl::framework::bootstrap::Launch::from_env()?;
    let plan = plan(args, launch.as_ref().map(|l| l.size))?;
    let ranks = plan.topology.ranks();
    let comms = match launch {
        Some(_) => {
            let comm = Communicator::init_launched(plan.config.clone())?;
            if comm.rank() != 0 {
                crate::output::silence();
            }
            vec![comm]
        }
        None => Communicator::init_all(ranks, plan.config.clone())?,
    };
    let mut report = report::Report::new(plan.kind, &comms, &plan.topology, args);
    for &dtype in &plan.dtypes {
        for &redop in &plan.redops {
            for &size in &plan.sweep {
                let count = count_for_size(plan.kind, size, dtype, ranks);
                let ops = calls(plan.kind, count, dtype, redop, plan.root, ranks);
                let bytes = report::row_size(&ops[0], ranks);
                let copy = gpu::copy_bound(&comms, bytes, plan.settings.iters)?;
                report.row(measure(&comms, &ops, &plan.settings)?, copy);
            }
        }
    }
    Ok(report.finish())
}
