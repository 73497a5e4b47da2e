//! `oxccl calibrate`: the figures the host device measured of this machine, which the
//! cost model of an in-process communicator uses (`OXCCL_HOST_FIGURES=measured`, the
//! default), beside the reference machine's; `--again` measures them again.

use crate::columns::{lines, Align::Left, Align::Right};
use clap::Args;
use oxccl::framework::topology::{presets, Processor};
use oxccl::platform::host::calibration::{figures_file, this_host, Origin};
use oxccl::Error;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Measure again, and replace the figures kept for this machine (run it on a quiet
    /// machine: a busy one measures slow).
    #[arg(long)]
    pub again: bool,
    /// Worker threads to measure the memory system with (default: one per core, as the
    /// host device has)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
}

pub fn run(args: &CalibrateArgs) -> Result<ExitCode, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = args.workers.map_or(cores, usize::from);
    let Some((measured, origin)) = this_host(workers, args.again) else {
        let reason = format!(
            "could not measure this host with {workers} workers: its buffers (256 MiB, and 128 MiB per worker) could not be allocated; free memory or give fewer --workers"
        );
        return Err(oxccl::ConfigError::new("oxccl calibrate", "", reason).into());
    };
    let whence = match origin {
        Origin::Measured => "measured now",
        Origin::Cached => "kept from an earlier measurement",
    };
    let file = figures_file(workers).map_or("none (OXCCL_HOST_CACHE=off)".into(), |p| {
        p.display().to_string()
    });
    let machine = match measured.quiet {
        true => "a quiet machine",
        false => "a busy machine (slow figures: a process that finds it quiet measures again)",
    };
    outln!("# host figures, {whence}, on {machine}; file: {file}");
    let reference = Processor::reference(workers);
    let gb = |g: f64| format!("{g:.2}");
    let us = |t: f64| format!("{t:.3}");
    let mib = |b: usize| format!("{:.1}", b as f64 / (1 << 20) as f64);
    let rows = [
        ["figure", "this host", "reference"]
            .map(String::from)
            .to_vec(),
        vec![
            "workers".into(),
            workers.to_string(),
            presets::HOST_WORKERS.to_string(),
        ],
        vec![
            "thread_gbps".into(),
            gb(measured.thread_gbps),
            gb(reference.thread_gbps),
        ],
        vec![
            "memory_gbps".into(),
            gb(measured.memory_gbps),
            gb(presets::HOST_MEMORY_GBPS),
        ],
        vec![
            "cache_mib".into(),
            mib(measured.cache_bytes),
            mib(reference.cache_bytes),
        ],
        vec![
            "cache_gbps".into(),
            gb(measured.cache_gbps),
            gb(reference.cache_gbps),
        ],
        vec![
            "llc_mib".into(),
            mib(measured.llc_bytes),
            mib(reference.llc_bytes),
        ],
        vec![
            "forward_gbps".into(),
            measured.forward_gbps.map_or("-".into(), gb),
            "-".into(),
        ],
        vec![
            "task_us".into(),
            measured.task_us.map_or("-".into(), us),
            us(reference.task_us),
        ],
    ];
    for line in lines(&[Left, Right, Right], &rows) {
        outln!("{line}");
    }
    outln!("# one thread's copies (footprint: bytes read and written)");
    let mut ladder = vec![vec!["footprint_mib".to_string(), "gbps".to_string()]];
    ladder.extend(
        measured
            .ladder
            .iter()
            .map(|r| vec![mib(r.footprint), gb(r.gbps)]),
    );
    for line in lines(&[Right, Right], &ladder) {
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
