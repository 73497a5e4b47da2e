//! The host's own figures for the cost model: measured once per machine, kept on disk.
//!
//! The host cost model (the framework's `Processor`) needs what one thread copies per
//! second in and out of the caches, how much the caches hold, and what the memory
//! system carries with every worker copying. Those figures differ between machines by
//! more than the choices they decide: a model with one machine's figures picks
//! executors 1.36x and 1.65x slower than the fastest on another (a 4 MiB Broadcast and
//! AllGather on 8 ranks; see the framework's `topology::presets`). So the host device
//! measures them (`probe`), fits the model's one cache level to them ([`fit`]) and
//! keeps them per machine (`cache`): the first process on a machine pays about half a
//! second once, the others read a file.
//!
//! It also measures what a copy of a block another CPU has just written runs at
//! (`probe::forward_gbps`), which staged executors pay at every step, and, running
//! programs on a host device of its own (`dispatch`), what a task costs a thread besides
//! its bytes. The wake-up stays the reference machine's (`dispatch` says why).

mod cache;
mod dispatch;
pub mod fit;
mod probe;

use fit::Rate;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// What the host device measured of this machine (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct HostFigures {
    /// The worker threads the memory rate was measured with.
    pub workers: usize,
    /// One thread's copy rate past the caches, GB/s of data copied.
    pub thread_gbps: f64,
    /// Every worker copying at once, past the caches, GB/s in all.
    pub memory_gbps: f64,
    /// The footprint (bytes read and written) the caches hold between calls.
    pub cache_bytes: usize,
    /// One thread's copy rate within `cache_bytes`, GB/s.
    pub cache_gbps: f64,
    /// The footprint past which copies store to memory; 0: none seen.
    pub llc_bytes: usize,
    /// One thread's copy rate of a block another CPU has just written, GB/s
    /// (`probe::forward_gbps`); `None`: not measured (one CPU, or no pinning).
    pub forward_gbps: Option<f64>,
    /// The thread time a data task costs besides its bytes, with the Post, Wait and
    /// stream switch a staged executor gives it, microseconds (`dispatch::task_us`);
    /// `None`: not measured (the probe's device could not run).
    pub task_us: Option<f64>,
    /// The measurements the cache figures were fitted to.
    pub ladder: Vec<Rate>,
    /// Measured while the rest of the machine kept less than `probe::QUIET_SHARE` of
    /// its CPUs busy (or where that cannot be told). Figures measured on a busy machine
    /// are slow; a process that finds the machine quiet measures them again.
    pub quiet: bool,
}

impl HostFigures {
    /// Measure this machine now, with `workers` threads for the memory rate; `None`
    /// when its buffers (256 MiB for the ladder, 128 MiB per worker) cannot be had.
    pub fn measure(workers: usize) -> Option<HostFigures> {
        let quiet = machine_is_quiet();
        let ladder = probe::ladder()?;
        let cache = fit::fit(&ladder)?;
        let figures = HostFigures {
            workers: workers.max(1),
            thread_gbps: cache.thread_gbps,
            memory_gbps: probe::memory_gbps(workers)?,
            cache_bytes: cache.cache_bytes,
            cache_gbps: cache.cache_gbps,
            llc_bytes: cache.llc_bytes,
            forward_gbps: probe::forward_gbps(),
            task_us: dispatch::task_us(),
            ladder,
            quiet,
        };
        figures.valid().then_some(figures)
    }

    /// These figures as the text the cache folder keeps (`name = value` lines), which
    /// [`HostFigures::from_text`] reads back: how a job's rank 0 hands its figures to the
    /// other ranks.
    pub fn to_text(&self) -> String {
        cache::write(self)
    }

    /// The figures in `text` as [`HostFigures::to_text`] wrote them; `None` for text
    /// that is not that, or figures that are not valid.
    pub fn from_text(text: &str) -> Option<HostFigures> {
        cache::read(text)
    }

    /// Rates positive and finite, a worker at least, a ladder.
    fn valid(&self) -> bool {
        let rate = |g: f64| g.is_finite() && g > 0.0;
        self.workers > 0
            && rate(self.thread_gbps)
            && rate(self.memory_gbps)
            && rate(self.cache_gbps)
            && self.forward_gbps.is_none_or(rate)
            && self.task_us.is_none_or(|us| us.is_finite() && us >= 0.0)
            && !self.ladder.is_empty()
            && self.ladder.iter().all(|r| rate(r.gbps))
    }
}

/// Whether the rest of the machine keeps less than `probe::QUIET_SHARE` of its CPUs
/// busy (watched for [`probe::WATCH`]); `true` where that cannot be told.
fn machine_is_quiet() -> bool {
    probe::busy_share(probe::WATCH).is_none_or(|busy| busy < probe::QUIET_SHARE)
}

/// Whether `kept` figures serve, or the machine is measured again: not when asked
/// `again`, and figures measured on a busy machine only while it stays busy.
fn keep(kept: &HostFigures, again: bool, quiet_now: impl FnOnce() -> bool) -> bool {
    !again && (kept.quiet || !quiet_now())
}

/// Where [`this_host`]'s figures came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Measured by this call (and stored, where there is a cache folder).
    Measured,
    /// Read from the cache folder.
    Cached,
}

/// This machine's figures with `workers` workers: the cache folder's when it holds them
/// (and `again` is false), else measured now and stored. Figures the folder holds from a
/// busy machine are measured again when this one finds the machine quiet. Once per
/// process and worker count; a second call returns the first's (measuring `again`
/// replaces them). `None` when the machine could not be measured (the caller keeps its
/// reference figures).
pub fn this_host(workers: usize, again: bool) -> Option<(HostFigures, Origin)> {
    static KNOWN: Mutex<BTreeMap<usize, (HostFigures, Origin)>> = Mutex::new(BTreeMap::new());
    let mut known = KNOWN.lock();
    if !again {
        if let Some(found) = known.get(&workers) {
            return Some(found.clone());
        }
    }
    let found = match cache::folder() {
        Some(dir) => cache::locked(&dir, || {
            let name = cache::file_name(workers);
            let kept = std::fs::read_to_string(dir.join(&name))
                .ok()
                .and_then(|t| cache::read(&t));
            match kept {
                Some(f) if keep(&f, again, machine_is_quiet) => Some((f, Origin::Cached)),
                _ => {
                    let f = HostFigures::measure(workers)?;
                    crate::disk_cache::store(&dir, &name, cache::write(&f).as_bytes());
                    Some((f, Origin::Measured))
                }
            }
        }),
        None => HostFigures::measure(workers).map(|f| (f, Origin::Measured)),
    }?;
    tracing::debug!(?found, "host figures");
    known.insert(workers, found.clone());
    Some(found)
}

/// The file [`this_host`] keeps `workers`' figures in; `None` without a cache folder.
pub fn figures_file(workers: usize) -> Option<std::path::PathBuf> {
    Some(cache::folder()?.join(figures_file_name(workers)))
}

/// The name of the file in a cache folder (`OXCCL_HOST_CACHE`) that holds this machine's
/// figures with `workers` workers.
pub fn figures_file_name(workers: usize) -> String {
    cache::file_name(workers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_measures_to_valid_figures() {
        let f = HostFigures::measure(2).expect("256 MiB to measure with");
        assert!(f.valid(), "{f:?}");
        assert_eq!(f.ladder.len(), probe::LADDER_MIB.len());
        assert!(f.cache_gbps >= f.thread_gbps, "{f:?}");
        assert!(f.cache_bytes <= f.ladder.last().unwrap().footprint, "{f:?}");
    }

    #[test]
    fn kept_figures_serve_unless_made_busy_and_the_machine_is_quiet_now() {
        let f = |quiet| HostFigures {
            workers: 1,
            thread_gbps: 1.0,
            memory_gbps: 1.0,
            cache_bytes: 0,
            cache_gbps: 1.0,
            llc_bytes: 0,
            forward_gbps: None,
            task_us: None,
            ladder: vec![Rate {
                footprint: 1,
                gbps: 1.0,
            }],
            quiet,
        };
        let unasked = || -> bool { panic!("quiet figures need no look at the machine") };
        assert!(keep(&f(true), false, unasked));
        assert!(keep(&f(false), false, || false));
        assert!(!keep(&f(false), false, || true));
        assert!(!keep(&f(true), true, || true));
    }
}
