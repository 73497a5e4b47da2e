//! `oxccl tune`: measure every candidate executor and write a tuning table.
//!
//! For each chosen operator the candidates are the registered executors whose declared
//! constraints hold on the topology ([`candidates`]). Each one is forced (the `--algo`
//! override `oxccl perf` uses) on a fresh set of communicators per point and measured with
//! `oxccl perf`'s own measuring code ([`crate::perf::measure`]), out of place, results
//! and guard bytes checked. The sweep goes in `--rounds` rounds (3 by default), each over
//! every size, and at each size over every executor, their order alternating from round
//! to round. `--contender-rounds` rounds more (2 by default) go over each size's
//! contenders only: the executors near the fastest after the first rounds, and the
//! model's pick ([`contenders`]). `--decider-rounds` rounds more (4 by default) go over
//! the executors each size's pick checks turn on: select_alg's pick, the `--reference`
//! table's fastest, and the fastest executor that is neither ([`deciders`]). Each point's
//! time is the median of its rounds with each round's load at its size, shared by the
//! executors measured in it, taken out ([`drift`]).
//! Other processes on the machine only ever add time, and their load drifts over seconds
//! to minutes: measured side by side, the executors compared at one size see the same
//! load (a sweep of one executor after another measured identical programs up to 1.5x
//! apart), and a point's rounds, a whole sweep of sizes apart, do not all fall in one
//! burst of it (with a size's rounds back to back, an 8-rank 4 MiB AllGather once
//! measured `mesh-push` at 803 µs and the seven executors that the run before had within
//! 1.33x of the fastest at 1812 to 3136). A point's `-n` calls, each timed alone, are its
//! warm-up; then it is timed in 5 blocks of at least `-n` calls that take at least 20 ms
//! in all, and its fastest block's mean counts: a few calls of a few microseconds measure
//! the machine's noise, the fastest single call is an extreme of the spread rather than
//! the executor's time, and a burst of load inflates a block, never shortens one.
//! Executors that plan the same programs at a size (a relaying executor on a healthy
//! topology, say) are measured once and share the time ([`twins`]). An executor that
//! cannot be built here (a link it needs is broken or missing, or it refuses the shape:
//! `Unsupported`, `NoLink`, `NoExecutor`) is skipped with the reason printed. One that
//! computes a wrong value, writes out of bounds or fails on the device is reported as
//! FAILED, none of its figures are recorded, and the exit status is non-zero.
//!
//! The table printed per operator lists every size with its executors from fastest to
//! slowest; the file (`-o`, `oxccl-tune.txt` by default; see `oxccl::framework::tune` for
//! the format) records, per measurement, the bytes of one rank's input: the size
//! `select_alg` looks up. If the file exists it must be a tuning table: the series this run
//! measured (operator, ranks, topology, dtype) replace their old figures and the rest is
//! kept, so one file can collect several operators and topologies.

mod candidates;
mod contenders;
mod drift;
mod reference;
mod report;
mod sweep;
mod twins;

use crate::perf::{run_config, Settings, GUARD_BYTES};
use crate::sizes::size_sweep;
use crate::validate::{self, refused, NOT_A_NAME};
use clap::Args;
use oxccl::framework::tune::TuneTable;
use oxccl::platform::dtype::ParseNameError;
use oxccl::{DataType, Error, OpKind};
use std::path::Path;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The collective (all-reduce, ...); omit with --all.
    pub collective: Option<String>,
    /// Tune every operator.
    #[arg(long)]
    pub all: bool,
    /// Number of ranks, 1 to 4096 (default 8, or the topology's; must agree with --topo).
    #[arg(long)]
    pub ranks: Option<usize>,
    #[arg(long, help = crate::topo_args::topo_help("OXCCL_TOPO_FILE, else one server of --ranks"))]
    pub topo: Option<String>,
    /// A broken link, `A-B` (repeatable).
    #[arg(long = "broken", value_name = "A-B")]
    pub broken: Vec<String>,
    /// Smallest size in bytes (K, M, G suffixes), nccl-tests' size as in `oxccl perf`.
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    pub minbytes: String,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "64M")]
    pub maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    pub stepfactor: usize,
    /// Calls per executor, size and round (1 to 1000000), each timed alone, that warm a
    /// point up and size its blocks; the point is then timed in 5 blocks of at least this
    /// many calls that take at least 20 ms in all, and its fastest block's mean counts.
    #[arg(short = 'n', long = "iters", default_value_t = 4)]
    pub iters: usize,
    /// Warmup iterations per executor, size and round (0 to 1000000).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1)]
    pub warmup: usize,
    /// Rounds over every executor (1 to 1000000): each time is the median of its rounds,
    /// with each round's load at its size taken out.
    #[arg(short = 'R', long = "rounds", default_value_t = 3)]
    pub rounds: usize,
    /// Rounds more (0 to 1000000) over each size's contenders: the executors within
    /// 1.25x of the fastest after the first rounds, and select_alg's pick.
    #[arg(long = "contender-rounds", value_name = "N", default_value_t = 2)]
    pub contender_rounds: usize,
    /// Rounds more (0 to 1000000) over each size's deciders: select_alg's pick, the
    /// --reference table's fastest, and the fastest executor that is neither.
    #[arg(long = "decider-rounds", value_name = "N", default_value_t = 4)]
    pub decider_rounds: usize,
    /// Data type (float, half, bfloat16, int32, ...).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Root rank of rooted collectives (below the rank count).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Threads driving the ranks, as `oxccl perf -t` (1 to the rank count).
    #[arg(short = 't', long = "nthreads", default_value_t = 1)]
    pub threads: usize,
    /// The tuning table to write (merged into it when it exists).
    #[arg(short = 'o', long = "output", default_value = "oxccl-tune.txt")]
    pub output: std::path::PathBuf,
    /// A tuning table of an earlier run: each size's fastest executor there is checked as
    /// select_alg's pick is, to tell the model's misses from the machine's noise.
    #[arg(long, value_name = "FILE")]
    pub reference: Option<std::path::PathBuf>,
    #[arg(long, value_name = "KIND", help = crate::validate::DEVICE_HELP)]
    pub device: Option<String>,
    #[command(flatten)]
    pub files: crate::algo_files::AlgoFiles,
}

impl TuneArgs {
    fn operators(&self) -> Result<Vec<OpKind>, Error> {
        match (&self.collective, self.all) {
            (Some(_), true) => Err(bad_arg(
                "name one collective or pass --all, not both".into(),
            )),
            (None, true) => Ok(OpKind::ALL.to_vec()),
            (Some(name), false) => Ok(vec![name.parse()?]),
            (None, false) => Err(bad_arg(
                "name a collective (e.g. `oxccl tune all-reduce`) or pass --all".into(),
            )),
        }
    }
}

/// What `oxccl tune` will measure, every flag checked: building it measures nothing.
#[derive(Debug)]
pub struct TunePlan {
    pub kinds: Vec<OpKind>,
    pub dtype: DataType,
    /// nccl-tests sizes (a barrier measures one row of 0 instead).
    pub sizes: Vec<usize>,
    pub root: usize,
    pub settings: Settings,
    pub rounds: usize,
    pub contender_rounds: usize,
    pub decider_rounds: usize,
    /// The communicators' configuration (topology set, no executor forced).
    pub config: oxccl::Config,
    pub topology: oxccl::Topology,
    /// `--reference`, read.
    pub reference: Option<reference::Reference>,
}

/// Check every flag of `args` and the environment, and say what would be measured.
pub fn plan(args: &TuneArgs) -> Result<TunePlan, Error> {
    let kinds = args.operators()?;
    let dtype: DataType = args
        .datatype
        .parse()
        .map_err(|e: ParseNameError| refused("-d/--datatype", &args.datatype, NOT_A_NAME, e))?;
    args.ranks.map(validate::rank_count).transpose()?;
    let sizes = size_sweep(&args.minbytes, &args.maxbytes, args.stepfactor)?;
    let (config, topology, _) = run_config(
        args.ranks,
        args.topo.as_deref(),
        &args.broken,
        None,
        args.device.as_deref(),
        true,
    )?;
    let ranks = topology.ranks();
    let largest = sizes.last().copied().unwrap_or(0);
    validate::buffers_fit(ranks, largest, GUARD_BYTES, validate::physical_memory())?;
    // Each of the -n calls is timed alone and the fastest counts; short points are
    // measured again in blocks (see `sweep::steady`).
    let settings = Settings {
        iters: 1,
        blocks: validate::iterations("-n/--iters", args.iters, 1)?,
        warmup: validate::iterations("-w/--warmup_iters", args.warmup, 0)?,
        check: true,
        threads: validate::threads(args.threads, ranks)?,
        in_place: false,
        graph: None,
        // A size that does not fit is recorded as skipped and printed with the reason.
        skip_oom: true,
    };
    Ok(TunePlan {
        kinds,
        dtype,
        sizes,
        root: validate::root(args.root, &topology)?,
        settings,
        rounds: validate::iterations("-R/--rounds", args.rounds, 1)?,
        contender_rounds: validate::iterations("--contender-rounds", args.contender_rounds, 0)?,
        decider_rounds: validate::iterations("--decider-rounds", args.decider_rounds, 0)?,
        config,
        topology,
        reference: args
            .reference
            .as_deref()
            .map(reference::Reference::load)
            .transpose()?,
    })
}

pub fn run(args: &TuneArgs) -> Result<ExitCode, Error> {
    let plan = plan(args)?;
    let mut table = existing_table(&args.output)?;
    let mut fresh = TuneTable::default();
    let mut failures = Vec::new();
    let mut totals = report::Tallies::default();
    for &kind in &plan.kinds {
        let job = sweep::Job {
            kind,
            dtype: plan.dtype,
            root: plan.root,
            sizes: if kind == OpKind::Barrier {
                vec![0]
            } else {
                plan.sizes.clone()
            },
            settings: plan.settings,
            rounds: plan.rounds,
            contender_rounds: plan.contender_rounds,
            decider_rounds: plan.decider_rounds,
            config: plan.config.clone(),
            topology: plan.topology.clone(),
        };
        let reference = plan.reference.as_ref().map(|r| &r.table);
        let outcome = sweep::tune_operator(&job, reference)?;
        let tallies = report::print(&job, &outcome, plan.reference.as_ref());
        totals.model.add(tallies.model);
        if let Some(t) = tallies.reference {
            totals.reference.get_or_insert_with(Default::default).add(t);
        }
        failures.extend(outcome.failures.iter().cloned());
        fresh
            .entries
            .extend(outcome.points.into_iter().map(|p| p.entry));
    }
    report::print_totals(plan.kinds.len(), &totals, plan.reference.as_ref());
    let measured = fresh.entries.len();
    table.merge(fresh);
    std::fs::write(&args.output, table.to_text()).map_err(|e| {
        let reason = "cannot write the tuning table there; name a writable file";
        refused("-o/--output", args.output.display(), reason, e)
    })?;
    outln!(
        "# wrote {measured} measurements to {} ({} in all)",
        args.output.display(),
        table.entries.len()
    );
    Ok(report::finish(&failures))
}

pub(crate) fn bad_arg(reason: String) -> Error {
    oxccl::ConfigError::new("oxccl tune", "", reason).into()
}

/// The table at `path` to merge into: empty when there is no file; an error when there is
/// one that is not a tuning table (it is not overwritten).
fn existing_table(path: &Path) -> Result<TuneTable, Error> {
    if !path.exists() {
        return Ok(TuneTable::default());
    }
    TuneTable::load(path).map_err(|e| {
        let reason = "-o must name a tuning table to merge into or a new file";
        refused("-o/--output", path.display(), reason, e)
    })
}
