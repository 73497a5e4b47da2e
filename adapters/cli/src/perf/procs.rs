//! `oxccl perf --procs N`: the benchmark as N processes of this host, started here.
//!
//! A convenience, not a launcher: this process creates the job's id (its root runs here),
//! starts N copies of itself with the same arguments but `--procs`, each told its rank
//! through `OXCCL_RANK`, `OXCCL_SIZE`, `OXCCL_LOCAL_RANK` and `OXCCL_COMM_ID` (what
//! [`oxccl::Communicator::init_launched`] reads), and waits for them. Rank 0 prints the
//! table; the exit status is the first failing process's, or success. The processes
//! inherit the environment and keep every other argument, so they import the same
//! algorithm files (`OXCCL_ALGO_FILES`, `--algo-file`; this process has checked them).
//!
//! `--hosts H` splits the processes into `H` hosts of this machine, contiguous runs of
//! ranks, each named by `OXCCL_HOSTID` (`<hostname>/<i>`), with `OXCCL_LOCAL_RANK` counted
//! within it: the ranks of one meet over shared memory, the hosts over the network
//! (what a job across hosts does, zero-copy per peer included).

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

/// This command's arguments without `--procs N` and `--hosts H` (or `--procs=N`,
/// `--hosts=H`), which only this process acts on.
fn forwarded_args() -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--procs" | "--hosts") => {
                args.next();
            }
            Some(a) if a.starts_with("--procs=") || a.starts_with("--hosts=") => {}
            _ => out.push(arg),
        }
    }
    out
}

/// The host of `rank` among `n` processes split into `hosts` contiguous runs (the first
/// `n % hosts` one longer), and its local rank there.
fn placement(rank: usize, n: usize, hosts: usize) -> (usize, usize) {
    let (base, longer) = (n / hosts, n % hosts);
    let long_ranks = longer * (base + 1);
    match rank < long_ranks {
        true => (rank / (base + 1), rank % (base + 1)),
        false => (
            longer + (rank - long_ranks) / base,
            (rank - long_ranks) % base,
        ),
    }
}

pub fn run(n: usize, hosts: usize) -> Result<ExitCode, Error> {
    if !(1..=MAX_PROCS).contains(&n) {
        return Err(refused(n, &format!("start 1 to {MAX_PROCS} processes")).into());
    }
    if !(1..=n).contains(&hosts) {
        let why = format!("--hosts {hosts}: split the {n} processes into 1 to {n} hosts");
        return Err(ConfigError::new("--hosts", hosts.to_string(), why).into());
    }
    let this_host = oxccl::framework::bootstrap::hostname().unwrap_or_else(|| "localhost".into());
    let exe = std::env::current_exe()
        .map_err(|e| refused(n, "cannot find this program to start it again").caused_by(e))?;
    let id = UniqueId::create(n, JOIN_WITHIN).map_err(oxccl::framework::Error::from)?;
    let args = forwarded_args();
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let (host, local) = placement(rank, n, hosts);
        let mut cmd = Command::new(&exe);
        if hosts > 1 {
            cmd.env("OXCCL_HOSTID", format!("{this_host}/{host}"));
        }
        let child = cmd
            .args(&args)
            .env("OXCCL_RANK", rank.to_string())
            .env("OXCCL_SIZE", n.to_string())
            .env("OXCCL_LOCAL_RANK", local.to_string())
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

#[cfg(test)]
mod tests {
    use super::placement;

    #[test]
    fn hosts_take_contiguous_runs_the_first_ones_longer() {
        let of = |n, hosts| (0..n).map(|r| placement(r, n, hosts)).collect::<Vec<_>>();
        assert_eq!(of(4, 1), [(0, 0), (0, 1), (0, 2), (0, 3)]);
        assert_eq!(of(4, 2), [(0, 0), (0, 1), (1, 0), (1, 1)]);
        assert_eq!(of(5, 2), [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
        assert_eq!(of(3, 3), [(0, 0), (1, 0), (2, 0)]);
        assert_eq!(
            of(7, 3),
            [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1)]
        );
    }
}
