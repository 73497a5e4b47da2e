//! `oxccl check`: the analyzer and the cost model on the command line.
//!
//! For one collective it records every rank's program through the real framework path on
//! the `sim` device (select_alg included, unless `--algo` forces an executor), proves it
//! correct with the analyzer, and models its time on the topology: one row per size with
//! the verdict and the modelled time, algbw and busbw, then the first failures in full.
//! `--explain` adds, under each row, select_alg's candidate table (the source of the
//! choice, and per executor its modelled time and algbw or why it was rejected).
//! `--all` runs every registered executor over the conformance matrix instead, one line
//! per executor. `--sequence` also proves the operation back to back under the device's
//! epoch fence (with itself, and with `--then`'s operation); `--all --sequence` runs every
//! pair of executors of each operator. The exit status is non-zero on any failure.

mod matrix;
mod sequence;
mod single;

use crate::calls::calls;
use crate::sizes::{count_flag, count_for_size, size_sweep};
use crate::topo_args::topo_help;
use crate::validate::{self, refused, NOT_A_NAME};
use clap::Args;
use oxccl::platform::dtype::ParseNameError;
use oxccl::{Config, DataType, Error, OpKind, OpParam, ReduceOp, Topology};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The collective (all-reduce, ...); omit with --all.
    pub collective: Option<String>,
    /// Check every registered executor over the conformance matrix.
    #[arg(long)]
    pub all: bool,
    /// Ranks of a single server (the `1xN` shape), 1 to 4096 (default 8, or the
    /// topology's; must agree with --topo).
    #[arg(long)]
    pub ranks: Option<usize>,
    #[arg(long, help = topo_help("one server of --ranks"))]
    pub topo: Option<String>,
    /// A broken link, `A-B` (repeatable).
    #[arg(long = "broken", value_name = "A-B")]
    pub broken: Vec<String>,
    /// Executor to check (default: what select_alg picks for each size).
    #[arg(long)]
    pub algo: Option<String>,
    /// Smallest size in bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    pub minbytes: String,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "1G")]
    pub maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 1024)]
    pub stepfactor: usize,
    /// Check exactly this element count instead of a size sweep (a rank's buffer must stay
    /// within 1024G).
    #[arg(long)]
    pub count: Option<usize>,
    /// Data type.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Reduce op.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Root rank of rooted collectives (below the rank count).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Check the in-place form.
    #[arg(long)]
    pub in_place: bool,
    /// Check HCCL's staged eager mode (through the CCL buffers) instead of zero-copy.
    #[arg(long)]
    pub staged: bool,
    /// Write the modelled schedule of the last size as Chrome trace-event JSON.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// Under each size, list every candidate executor with its verdict: modelled time and
    /// algbw, or why it was rejected or lost.
    #[arg(long)]
    pub explain: bool,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also prove the operation back to back under the device's epoch fence: followed by
    /// itself (two and three calls) and by `--then`; with --all, every pair of executors.
    #[arg(long)]
    pub sequence: bool,
    /// With --sequence: a second collective to follow the checked one (same count, type,
    /// op and root).
    #[arg(long, value_name = "COLLECTIVE")]
    pub then: Option<String>,
    /// Executor of the --then collective (default: what select_alg picks).
    #[arg(long, value_name = "EXECUTOR")]
    pub then_algo: Option<String>,
    #[command(flatten)]
    pub files: crate::algo_files::AlgoFiles,
}

pub fn run(args: &CheckArgs) -> Result<ExitCode, Error> {
    match plan_command(args)? {
        Some(plan) => single::run(args, &plan),
        None if args.sequence => sequence::run_pairs(args),
        None => matrix::run(args),
    }
}

/// [`plan`] for the command line's collective; `None` for `--all`, which takes no other
/// flag that could be wrong.
pub fn plan_command(args: &CheckArgs) -> Result<Option<CheckPlan>, Error> {
    match (&args.collective, args.all) {
        (_, true) => Ok(None),
        (Some(collective), false) => plan(args, collective.parse()?).map(Some),
        (None, false) => Err(bad_arg(
            "name a collective (e.g. `oxccl check all-reduce`) or pass --all".into(),
        )),
    }
}

pub(crate) fn bad_arg(reason: String) -> Error {
    oxccl::ConfigError::new("oxccl check", "", reason).into()
}

/// The configuration a recording is made with.
pub(crate) fn config(
    args: &CheckArgs,
    kind: OpKind,
    topology: &Topology,
    algo: Option<&str>,
) -> Result<Config, Error> {
    let mut config = Config::from_env()?;
    config.topology = Some(topology.clone());
    config.zero_copy = !args.staged;
    if let Some(name) = algo {
        config.algo.set(Some(kind), name);
    }
    Ok(config)
}

/// What `oxccl check <collective>` will check, every flag validated: building it records
/// nothing.
#[derive(Debug)]
pub struct CheckPlan {
    pub kind: OpKind,
    pub topology: Topology,
    pub dtype: DataType,
    pub redop: ReduceOp,
    pub root: usize,
    /// Element counts, one per row: the size sweep's, or `--count`.
    pub counts: Vec<usize>,
    /// With --sequence, the collective that follows the checked one (`--then`).
    pub then: Option<OpKind>,
}

impl CheckPlan {
    /// Every rank's call for `count` elements.
    pub fn calls(&self, count: usize) -> Vec<OpParam> {
        let ranks = self.topology.ranks();
        calls(self.kind, count, self.dtype, self.redop, self.root, ranks)
    }
}

/// Check the flags of `oxccl check <collective>` and say what would be checked.
pub fn plan(args: &CheckArgs, kind: OpKind) -> Result<CheckPlan, Error> {
    args.ranks.map(validate::rank_count).transpose()?;
    let topology = crate::topo_args::topology(args.ranks, args.topo.as_deref(), &args.broken)?;
    topology.check_connected()?;
    let ranks = topology.ranks();
    let dtype: DataType = args
        .datatype
        .parse()
        .map_err(|e: ParseNameError| refused("-d/--datatype", &args.datatype, NOT_A_NAME, e))?;
    let redop: ReduceOp = args
        .op
        .parse()
        .map_err(|e: ParseNameError| refused("-o/--op", &args.op, NOT_A_NAME, e))?;
    let counts = match args.count {
        Some(count) => vec![count_flag(kind, count, dtype, ranks)?],
        None => size_sweep(&args.minbytes, &args.maxbytes, args.stepfactor)?
            .into_iter()
            .map(|size| count_for_size(kind, size, dtype, ranks))
            .collect(),
    };
    let then = match (&args.then, args.sequence) {
        (Some(name), true) => Some(name.parse()?),
        (Some(_), false) => return Err(bad_arg("--then needs --sequence".into())),
        (None, _) if args.then_algo.is_some() => {
            return Err(bad_arg("--then-algo needs --then".into()))
        }
        (None, _) => None,
    };
    Ok(CheckPlan {
        then,
        kind,
        root: validate::root(args.root, &topology)?,
        topology,
        dtype,
        redop,
        counts,
    })
}
