//! The host's figures on disk ([`crate::disk_cache`]), one file per machine and worker
//! count, so that a machine is measured once and not by every process.
//!
//! The file is `host-figures-<key>.txt`, the key a hash of what the figures depend on:
//! the CPU model, the logical CPUs, the memory, the worker count and this format's
//! version. A process that finds no file (or one measured on a busy machine, while the
//! machine is quiet now) measures under an exclusive lock on `host-figures.lock` and
//! writes the file before it lets go, so processes starting together on a new machine
//! (test binaries, a script's commands) measure once and read the same figures. The
//! folder is `OXCCL_HOST_CACHE` (`off`: none), else the user's cache folder.

use super::fit::Rate;
use super::HostFigures;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// This format's version: part of the key, so that a change of what is measured or
/// how makes every machine measure again.
const VERSION: &str = "4";

/// The cache folder; `None`: none.
pub fn folder() -> Option<PathBuf> {
    crate::disk_cache::dir(Some("OXCCL_HOST_CACHE"), |k| std::env::var(k).ok())
}

/// The file holding the figures of this machine with `workers` workers.
pub fn file_name(workers: usize) -> String {
    let (cpu, memory) = (
        first_line_value("/proc/cpuinfo", "model name"),
        first_line_value("/proc/meminfo", "MemTotal"),
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let key = crate::disk_cache::key(&[
        VERSION,
        &cpu.unwrap_or_default(),
        &cpus.to_string(),
        &memory.unwrap_or_default(),
        &workers.to_string(),
    ]);
    format!("host-figures-{key}.txt")
}

/// The value of the first `name: value` line of a `/proc` file.
fn first_line_value(path: &str, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim().to_string())
}

/// Runs `f` holding the folder's lock (without one when it cannot be taken: the worst
/// is measuring twice).
pub fn locked<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    let lock = std::fs::create_dir_all(dir).ok().and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("host-figures.lock"))
            .ok()
    });
    if let Some(file) = &lock {
        let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::LockExclusive);
    }
    f()
    // The lock goes with the file.
}

/// The figures in `text`, as [`write`] made it; `None` for anything else.
pub fn read(text: &str) -> Option<HostFigures> {
    let value = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim())
    };
    let ladder = value("ladder")?
        .split(',')
        .map(|point| {
            let (bytes, gbps) = point.split_once(':')?;
            Some(Rate {
                footprint: bytes.trim().parse().ok()?,
                gbps: gbps.trim().parse().ok()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let figures = HostFigures {
        workers: value("workers")?.parse().ok()?,
        thread_gbps: value("thread_gbps")?.parse().ok()?,
        memory_gbps: value("memory_gbps")?.parse().ok()?,
        cache_bytes: value("cache_bytes")?.parse().ok()?,
        cache_gbps: value("cache_gbps")?.parse().ok()?,
        llc_bytes: value("llc_bytes")?.parse().ok()?,
        forward_gbps: optional(value("forward_gbps")?)?,
        task_us: optional(value("task_us")?)?,
        ladder,
        quiet: value("quiet")?.parse().ok()?,
    };
    figures.valid().then_some(figures)
}

/// A figure that may be `none` (not measured): `Some(None)` for that, `None` for text
/// that is neither `none` nor a number.
fn optional(text: &str) -> Option<Option<f64>> {
    match text {
        "none" => Some(None),
        number => Some(Some(number.parse().ok()?)),
    }
}

/// A figure that may be missing, as [`optional`] reads it.
fn or_none(figure: Option<f64>) -> String {
    figure.map_or("none".to_string(), |f| f.to_string())
}

/// `figures` as text: `name = value` lines that [`read`] takes back.
pub fn write(figures: &HostFigures) -> String {
    let mut text = String::from(
        "# oxccl: this machine's figures for the host cost model, measured by the host\n\
         # device's probe; delete the file (or run `oxccl calibrate --again`) to measure again\n",
    );
    let ladder: Vec<String> = figures
        .ladder
        .iter()
        .map(|r| format!("{}:{}", r.footprint, r.gbps))
        .collect();
    let _ = write!(
        text,
        "workers = {}\nthread_gbps = {}\nmemory_gbps = {}\ncache_bytes = {}\ncache_gbps = {}\nllc_bytes = {}\nforward_gbps = {}\ntask_us = {}\nladder = {}\nquiet = {}\n",
        figures.workers,
        figures.thread_gbps,
        figures.memory_gbps,
        figures.cache_bytes,
        figures.cache_gbps,
        figures.llc_bytes,
        or_none(figures.forward_gbps),
        or_none(figures.task_us),
        ladder.join(","),
        figures.quiet,
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HostFigures {
        HostFigures {
            workers: 2,
            thread_gbps: 6.25,
            memory_gbps: 11.5,
            cache_bytes: 64 << 20,
            cache_gbps: 13.4,
            llc_bytes: 64 << 20,
            forward_gbps: Some(10.5),
            task_us: Some(0.03),
            ladder: vec![
                Rate {
                    footprint: 2 << 20,
                    gbps: 28.3,
                },
                Rate {
                    footprint: 256 << 20,
                    gbps: 6.25,
                },
            ],
            quiet: false,
        }
    }

    #[test]
    fn written_figures_read_back_and_damaged_ones_do_not() {
        let text = write(&sample());
        assert_eq!(read(&text), Some(sample()));
        assert_eq!(read(&text.replace("workers", "wrkers")), None);
        assert_eq!(read(&text.replace("11.5", "-1")), None);
        assert_eq!(read(&text.replace(":28.3", "")), None);
        assert_eq!(read(&text.replace("quiet = false", "quiet = maybe")), None);
        assert_eq!(read(&text.replace("= 10.5", "= fast")), None);
        assert_eq!(read(&text.replace("= 10.5", "= 0")), None);
        let unmeasured = read(&text.replace("= 10.5", "= none")).unwrap();
        assert_eq!(unmeasured.forward_gbps, None);
        assert_eq!(read(&text.replace("= 0.03", "= -1")), None);
        assert_eq!(read(&text.replace("= 0.03", "= soon")), None);
        assert_eq!(read(&text.replace("task_us", "tsk_us")), None);
        let no_cost = read(&text.replace("= 0.03", "= none"));
        assert_eq!(no_cost.map(|f| f.task_us), Some(None));
        assert_eq!(read(&text[..text.len() / 2]), None);
        assert_eq!(read(""), None);
    }

    #[test]
    fn the_file_name_depends_on_the_worker_count() {
        assert_eq!(file_name(2), file_name(2));
        assert_ne!(file_name(2), file_name(3));
        assert!(file_name(1).starts_with("host-figures-") && file_name(1).ends_with(".txt"));
    }

    #[test]
    fn the_lock_is_taken_and_given_back() {
        let dir = std::env::temp_dir().join(format!("oxccl-figures-lock-{}", std::process::id()));
        assert_eq!(locked(&dir, || 1), 1);
        // Taken again: the first was released.
        assert_eq!(locked(&dir, || 2), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
