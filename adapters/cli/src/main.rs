//! `oxccl`: the command-line front of oxccl.
//!
//! - `oxccl perf <collective>`: an nccl-tests-style benchmark on the host device, with
//!   correctness checked by default;
//! - `oxccl check <collective>`: the analyzer and the cost model on a topology;
//! - `oxccl tune <collective>`: measure every candidate executor and write a tuning table
//!   that `OXCCL_TUNE_FILE` makes select_alg follow;
//! - `oxccl algs`: every registered executor and template, with its crate of origin.

mod algs;
mod calls;
mod check;
mod perf;
mod sizes;
mod topo_args;
mod tune;

// Link the example plugin so that `--algo bidir-ring` works out of the box.
use oxccl_plugin_bidir_ring as _;

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
    /// Benchmark a collective (nccl-tests style) on the host device.
    Perf(perf::PerfArgs),
    /// Prove a collective's programs correct and model their speed on a topology.
    Check(check::CheckArgs),
    /// Measure every candidate executor of a collective and write a tuning table.
    Tune(tune::TuneArgs),
    /// List registered executors, templates and plugin selectors.
    Algs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Perf(args) => perf::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Tune(args) => tune::run(&args),
        Command::Algs => algs::run(),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("oxccl: error: {err}");
            ExitCode::from(2)
        }
    }
}
