//! `oxccl-cli`: the oxccl toolbox, as a library any binary can run.
//!
//! - `perf <collective>`: an nccl-tests-style benchmark on the host device or on GPUs
//!   (`--device cuda`, beside the device-to-device copy bound), with correctness checked
//!   by default;
//! - `check <collective>`: the analyzer and the cost model on a topology;
//! - `tune <collective>`: measure every candidate executor and write a tuning table
//!   that `OXCCL_TUNE_FILE` makes select_alg follow;
//! - `algs`: every registered executor and template, with its crate of origin (or the
//!   file it was imported from).
//!
//! `--algo-file PATH` on every command imports MSCCL-IR algorithm files as executors
//! ([`algo_files`]), as `OXCCL_ALGO_FILES` does.
//!
//! Executors register at link time, so the toolbox sees exactly the plugins its binary
//! links. The `oxccl` binary of this crate links the bundled example plugin; a vendor's
//! binary links its own (here the bundled one) and gets every command for its executors:
//!
//! ```no_run
//! use oxccl_plugin_bidir_ring as _;
//!
//! fn main() -> std::process::ExitCode {
//!     oxccl_cli::main()
//! }
//! ```
//!
//! `perf --procs N` starts N copies of the running executable, so it works the same from
//! a vendor's binary. `plugins/template` in the oxccl repository is such a crate.

#[macro_use]
mod output;

mod algo_files;
mod algs;
mod calibrate;
mod calls;
mod check;
mod columns;
#[cfg(test)]
mod fuzz_args;
mod perf;
mod sizes;
mod topo_args;
mod tune;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "oxccl",
    version,
    about = "oxccl: collective communication with plugin algorithms"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark a collective (nccl-tests style) on the host device or GPUs.
    Perf(perf::PerfArgs),
    /// Prove a collective's programs correct and model their speed on a topology.
    Check(check::CheckArgs),
    /// Measure every candidate executor of a collective and write a tuning table.
    Tune(tune::TuneArgs),
    /// List registered executors, templates and plugin selectors.
    Algs(algs::AlgsArgs),
    /// Show (or measure again) the copy rates and caches of this machine that the host
    /// device's cost model uses.
    Calibrate(calibrate::CalibrateArgs),
}

impl Command {
    /// `check` (of one collective) and `perf` without `--algo` run the executor the
    /// `--algo-file`s bring for the collective, when they bring exactly one. `check
    /// --explain` is about selection: it lets select_alg choose among every candidate,
    /// the file's included.
    fn default_algo(&mut self) -> Result<(), oxccl::Error> {
        let (algo, files, collective) = match self {
            Command::Check(a) if !a.all && !a.explain => {
                (&mut a.algo, &a.files, a.collective.as_deref())
            }
            Command::Perf(a) => (&mut a.algo, &a.files, Some(a.collective.as_str())),
            _ => return Ok(()),
        };
        if algo.is_none() {
            *algo = files.default_algo(collective)?;
        }
        Ok(())
    }

    /// The command's `--algo-file`s.
    fn algo_files(&self) -> &algo_files::AlgoFiles {
        match self {
            Command::Perf(args) => &args.files,
            Command::Check(args) => &args.files,
            Command::Tune(args) => &args.files,
            Command::Algs(args) => &args.files,
            Command::Calibrate(_) => &algo_files::NONE,
        }
    }
}

/// Parse `argv` (program name first) and check every flag and the environment as the
/// command would before running, recording or measuring anything; `Err` carries the
/// message a user would read. The fuzzer calls it on arbitrary command lines.
#[cfg(test)]
fn plan(argv: &[String]) -> Result<(), String> {
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    cli.command.algo_files().check().map_err(|e| report(&e))?;
    let planned = match &cli.command {
        Command::Perf(args) => perf::plan(args, None).map(drop),
        Command::Check(args) => check::plan_command(args).map(drop),
        Command::Tune(args) => tune::plan(args).map(drop),
        Command::Algs(_) | Command::Calibrate(_) => Ok(()),
    };
    planned.map_err(|e| report(&e))
}

/// `err` as the user reads it: its message, then one `caused by:` line per error in its
/// source chain (the `io::Error` of a file that cannot be read, the TOML error of one that
/// cannot be parsed, the first failure of an aborted communicator) that the message does
/// not already say.
fn report(err: &oxccl::Error) -> String {
    let mut chain = oxccl::framework::error::chain(err);
    let mut text = format!(
        "error: {}",
        chain.next().map_or(String::new(), |e| e.to_string())
    );
    for cause in chain {
        // An error that shows its cause in its own message (an algorithm file's place
        // and rule) says it once.
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(&format!("\n  caused by: {cause}"));
        }
    }
    text
}

/// Run the command line of this process (`perf`, `check`, `tune`, `algs` or `calibrate`) and return
/// its exit status: 0 on success, 1 when a check found wrong results, 2 when the command
/// was refused or failed, with the error and its causes on stderr, 3 when `perf
/// --skip-oom` skipped sizes that did not fit in memory (everything it ran was right).
pub fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // Before anything builds the registry, which reads the imported files once.
    let result = cli
        .command
        .algo_files()
        .load()
        .and_then(|()| cli.command.default_algo())
        .and_then(|()| match cli.command {
            Command::Perf(args) => perf::run(&args),
            Command::Check(args) => check::run(&args),
            Command::Tune(args) => tune::run(&args),
            Command::Algs(_) => algs::run(),
            Command::Calibrate(args) => calibrate::run(&args),
        });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("oxccl: {}", report(&err));
            ExitCode::from(2)
        }
    }
}
