//! `oxccl perf --procs N`: the benchmark as N processes of this host, started here.
//!
//! A convenience, not a launcher: this process creates the job's id (its root runs here),
//! starts N copies of itself with the same arguments but `--procs`, each told its rank
//! through `OXCCL_RANK`, `OXCCL_SIZE`, `OXCCL_LOCAL_RANK` and `OXCCL_COMM_ID` (what
//! [`oxccl::Communicator::init_launched`] reads), and waits for them. Rank 0 prints the
//! table; the exit status is the first failing process's, or success. The processes
//! inherit the environment and keep every other argument, so they import the same
//! algorithm files (`OXCCL_ALGO_FILES`, `--algo-file`; this process has checked them).

use oxccl::{ConfigError, Error, UniqueId};
use std::ffi::OsString;
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Most processes `--procs` starts (each holds one rank and its buffers).
const MAX_PROCS: usize = 256;

/// How long the job's root waits for every process to join.
const JOIN_WITHIN: Duration = Duration::from_secs(120);

fn refused(n: usize, reason: &str) -> ConfigError {
    ConfigError::new("--procs", n.to_string(), reason)
}

/// This command's arguments without `--procs N` (or `--procs=N`).
fn forwarded_args() -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--procs") => {
                args.next();
            }
            Some(a) if a.starts_with("--procs=") => {}
            _ => out.push(arg),
        }
    }
    out
}

pub fn run(n: usize) -> Result<ExitCode, Error> {
    if !(1..=MAX_PROCS).contains(&n) {
        return Err(refused(n, &format!("start 1 to {MAX_PROCS} processes")).into());
    }
    let exe = std::env::current_exe()
        .map_err(|e| refused(n, "cannot find this program to start it again").caused_by(e))?;
    let id = UniqueId::create(n, JOIN_WITHIN).map_err(oxccl::framework::Error::from)?;
    let args = forwarded_args();
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let child = Command::new(&exe)
            .args(&args)
            .env("OXCCL_RANK", rank.to_string())
            .env("OXCCL_SIZE", n.to_string())
            .env("OXCCL_LOCAL_RANK", rank.to_string())
            .env("OXCCL_COMM_ID", id.to_string())
            .spawn()
            .map_err(|e| refused(n, "cannot start a rank's process").caused_by(e))?;
        children.push(child);
    }
    let mut status = ExitCode::SUCCESS;
    let mut failed = false;
    for mut child in children {
        let code = child.wait().map(|s| s.code().unwrap_or(1)).unwrap_or(1);
        if code != 0 && !failed {
            failed = true;
            status = ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
    }
    Ok(status)
}
