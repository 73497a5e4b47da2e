//! The checks every command runs on its flags before anything is built: each refusal is a
//! `ConfigError` that names the flag, the value and what would be valid, and holds the
//! error behind it (a file that cannot be read, a name that does not parse) as its source.

use oxccl::framework::limits::MAX_RANKS;
use oxccl::{ConfigError, Error, Topology};
use std::fmt::Display;

/// What to do about a data type or reduce op name that does not parse (the cause lists
/// the known names).
pub const NOT_A_NAME: &str = "use one of the known names";

/// Most timed or warmup iterations per size: past this a run is unbounded in practice.
pub const MAX_ITERS: usize = 1_000_000;

/// The error for a flag given a value it cannot take.
pub fn bad_flag(flag: &'static str, value: impl Display, reason: String) -> Error {
    ConfigError::new(flag, value.to_string(), reason).into()
}

/// The error for `var` (a flag, or a command) given `value` that `cause` refused;
/// `reason` says what to do, the cause what was wrong.
pub fn refused(
    var: &'static str,
    value: impl Display,
    reason: impl Into<String>,
    cause: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    ConfigError::new(var, value.to_string(), reason)
        .caused_by(cause)
        .into()
}

/// The help of `--device` (`oxccl perf` and `oxccl tune`).
pub const DEVICE_HELP: &str = "The backend: `host` (threads of this process) or `cuda` (NVIDIA \
     GPUs, user buffers on the GPU; a build with the `cuda` feature). Default: OXCCL_DEVICE, \
     else host";

/// `--device`: a registered backend kind. `cuda` in a build without the backend is refused
/// with [`CudaError::NotBuilt`](oxccl::platform::cuda::CudaError::NotBuilt) as the cause,
/// which says to rebuild with the feature.
pub fn device(kind: &str) -> Result<String, Error> {
    let known = oxccl::platform::registry::kinds();
    if known.contains(&kind) {
        return Ok(kind.to_string());
    }
    let reason = format!("use one of {}", known.join(", "));
    if kind == "cuda" {
        return Err(refused(
            "--device",
            kind,
            reason,
            oxccl::platform::cuda::CudaError::NotBuilt,
        ));
    }
    Err(bad_flag("--device", kind, reason))
}

/// `--ranks`: from 1 to [`MAX_RANKS`].
pub fn rank_count(ranks: usize) -> Result<usize, Error> {
    if (1..=MAX_RANKS).contains(&ranks) {
        return Ok(ranks);
    }
    Err(bad_flag(
        "--ranks",
        ranks,
        format!("use from 1 to {MAX_RANKS} ranks (limits::MAX_RANKS)"),
    ))
}

/// `-r`: a rank of the topology.
pub fn root(root: usize, topology: &Topology) -> Result<usize, Error> {
    let ranks = topology.ranks();
    if root < ranks {
        return Ok(root);
    }
    Err(bad_flag(
        "-r/--root",
        root,
        format!(
            "the root must be a rank of the {ranks}-rank topology: 0 to {}",
            ranks - 1
        ),
    ))
}

/// `-t`: threads driving the ranks, from 1 (all ranks on one thread) to one per rank.
pub fn threads(threads: usize, ranks: usize) -> Result<usize, Error> {
    if (1..=ranks).contains(&threads) {
        return Ok(threads);
    }
    Err(bad_flag(
        "-t/--nthreads",
        threads,
        format!("use from 1 thread (all ranks) to {ranks} (one per rank)"),
    ))
}

/// An iteration count (`-n`, `-w`, `-R`) from `least` to [`MAX_ITERS`].
pub fn iterations(flag: &'static str, count: usize, least: usize) -> Result<usize, Error> {
    if (least..=MAX_ITERS).contains(&count) {
        return Ok(count);
    }
    let need = if least > 0 {
        "at least one is needed to measure anything"
    } else {
        "0 skips them"
    };
    Err(bad_flag(
        flag,
        count,
        format!("use from {least} to {MAX_ITERS} ({need})"),
    ))
}

/// The machine's physical memory in bytes (`MemTotal` of /proc/meminfo), when readable.
pub fn physical_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuse a run whose buffers at the largest size, about `ranks` x (send + receive +
/// guard bytes), cannot fit in `memory` bytes (no check when `memory` is `None`).
pub fn buffers_fit(
    ranks: usize,
    largest: usize,
    guard: usize,
    memory: Option<usize>,
) -> Result<(), Error> {
    let Some(memory) = memory else {
        return Ok(());
    };
    let need = largest
        .checked_mul(2)
        .and_then(|b| b.checked_add(guard))
        .and_then(|b| b.checked_mul(ranks));
    if need.is_some_and(|need| need <= memory) {
        return Ok(());
    }
    let need = need.map_or("more than fit in a usize".into(), |b| {
        format!("{} MiB", b >> 20)
    });
    Err(bad_flag(
        "-e/--maxbytes",
        largest,
        format!(
            "{ranks} ranks at {largest} bytes need about {need} of buffers but the machine \
             has {} MiB (MemTotal); lower -e/--maxbytes or --ranks",
            memory >> 20
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_flag_and_the_valid_range() {
        let mesh = Topology::single_server(8);
        let cases = [
            (rank_count(0).unwrap_err(), "--ranks", "1 to 4096"),
            (rank_count(usize::MAX).unwrap_err(), "--ranks", "1 to 4096"),
            (root(8, &mesh).unwrap_err(), "-r/--root", "0 to 7"),
            (threads(0, 8).unwrap_err(), "-t/--nthreads", "1 thread"),
            (threads(9, 8).unwrap_err(), "-t/--nthreads", "to 8"),
            (
                iterations("-n/--iters", 0, 1).unwrap_err(),
                "-n/--iters",
                "at least one",
            ),
            (
                iterations("-w/--warmup_iters", usize::MAX, 0).unwrap_err(),
                "-w",
                "1000000",
            ),
        ];
        for (err, flag, valid) in cases {
            let message = err.to_string();
            assert!(message.starts_with(flag), "{message}");
            assert!(message.contains(valid), "{valid:?} not in {message}");
        }
        assert_eq!(rank_count(1024).unwrap(), 1024);
        assert_eq!(root(7, &mesh).unwrap(), 7);
        assert_eq!(threads(8, 8).unwrap(), 8);
        assert_eq!(iterations("-w", 0, 0).unwrap(), 0);
    }

    #[test]
    fn buffers_must_fit_in_physical_memory() {
        let gib = 1usize << 30;
        assert!(buffers_fit(8, gib, 128, Some(32 * gib)).is_ok());
        let err = buffers_fit(8, gib, 128, Some(16 * gib))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lower -e/--maxbytes or --ranks"), "{err}");
        assert!(buffers_fit(usize::MAX, usize::MAX, 128, Some(gib)).is_err());
        assert!(
            buffers_fit(1024, 1 << 40, 128, None).is_ok(),
            "unknown memory: no check"
        );
    }
}
