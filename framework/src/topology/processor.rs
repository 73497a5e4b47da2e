//! How a CPU host runs its ranks' tasks: on worker threads, not on copy engines.
//!
//! On an NPU or a GPU every rank has engines of its own and a link per peer; the cost
//! model times a task by its dispatch, its engine work and its link transfers. A CPU
//! host's ranks are threads of one machine (the host device): every Copy and Reduce of
//! every rank of a server runs on one pool of worker threads, reading and writing the one
//! memory system, and a peer's buffer is just memory. What decides its times:
//!
//! - **threads**: a server runs at most [`Processor::workers`] tasks at once, whichever
//!   ranks they belong to; a small operation (every rank's program moves at most
//!   [`Processor::inline_bytes`]) runs all on the submitting thread (the host device's
//!   inline path), one task after the other, with no wake-ups, unless the ranks are
//!   processes of their own ([`Processor::ranks`]), which pay a switch per round instead;
//! - **the per-task cost** ([`Processor::task_us`]): binding and dispatching a task on a
//!   thread, measured; small operations are made of it;
//! - **a thread's copy rate** ([`Processor::thread_gbps`]), under the server's shared
//!   [`memory_gbps`](super::Topology::memory_gbps);
//! - **the caches**: an operation whose buffers (every rank's, together: its footprint)
//!   fit in [`Processor::cache_bytes`] moves its bytes at [`Processor::cache_gbps`] per
//!   thread and leaves the memory bus alone; a larger one has that share of its traffic
//!   served so (see [`Processor::cached_share`]). Benchmarks and training loops call a
//!   collective on the same buffers again and again, so what fits stays there between
//!   calls. An operation whose footprint passes the last-level cache
//!   ([`Processor::llc_bytes`]) stores to memory, where a cached copy to several
//!   destinations runs slower than as many copies to one;
//! - **forwarding** ([`Processor::forward_gbps`]): a copy of a block that another rank
//!   wrote in the same operation (a ring's or a recursive halving's step) reads it from
//!   the writing core's cache, slower than cached data at rest: on the 2-core CI VM 8 to
//!   12 GB/s against 14, and an 8-rank AllGatherV of 4 MiB ran `ring` 1.11x to 1.15x
//!   slower than the fastest (`mesh` or `relay-mesh`) in three `oxccl tune` runs, where
//!   the model without it put `ring` 1% ahead of `mesh`. A block that several peers pull
//!   pays once among them (the cost module's `forwarding`);
//! - signals are memory writes: free on the inline path, and cost no link latency.
//!
//! The cost engine applies this to the servers of a topology that has a processor (the
//! host device's topologies, [`super::presets::host`]); NPU and GPU topologies have none.

use crate::error::ConfigError;
use oxccl_platform::host::calibration::HostFigures;

/// The figures of a CPU host's execution, per server (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Processor {
    /// Worker threads that run a server's tasks (the host device's pool; at least one).
    pub workers: usize,
    /// Thread time a Copy or Reduce costs besides moving its bytes, microseconds.
    pub task_us: f64,
    /// On the threaded path, from a stream becoming runnable (its operation starting, or
    /// a post it waits for landing) to a worker running it: a queue push and, often, a
    /// thread's wake-up; microseconds.
    pub wake_us: f64,
    /// What one thread copies per second, GB/s of data copied (a Reduce of `k` sources
    /// into `d` destinations moves `(k + d) / 2` times its length).
    pub thread_gbps: f64,
    /// An operation in which every rank's program moves at most this many bytes (each
    /// data task's length times its destinations) runs on the submitting thread, when
    /// the ranks share one device's pool ([`RanksRun::InPool`]). 0: no operation does.
    pub inline_bytes: usize,
    /// A Copy or Reduce that moves at least this many bytes through memory (its length
    /// times its sources and destinations, halved: a copy's length) is cut into chunks
    /// that idle workers share; a smaller one runs on one thread.
    pub split_bytes: usize,
    /// How the server's ranks run: streams of one device's worker pool, or processes of
    /// their own (see [`Processor::ranks_are_processes`]).
    pub ranks: RanksRun,
    /// The bytes of an operation's footprint that the host's caches keep between calls
    /// (see [`Processor::cached_share`]). 0: none.
    pub cache_bytes: usize,
    /// What one thread copies per second from and into cached memory, GB/s of data
    /// copied, as `thread_gbps`.
    pub cache_gbps: f64,
    /// The host's last-level cache, bytes: an operation whose footprint passes it stores
    /// to memory, where a cached copy to several destinations costs more than as many
    /// copies (see [`Processor::passes_llc`]). 0: not modelled.
    pub llc_bytes: usize,
    /// What one thread copies per second of a block that another core has just written
    /// (the block a staged executor's previous step stored), GB/s of data copied: such
    /// a copy runs at this rate where its caches would serve it faster (see
    /// [`Processor::forward_seconds_per_byte`]). 0: not modelled.
    pub forward_gbps: f64,
}

/// How a CPU host's ranks run (a topology file's `ranks`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum RanksRun {
    /// Streams of one host device's worker pool, as `Communicator::init_all` makes them.
    #[default]
    InPool,
    /// Each rank a process of its own, with a device of its own, as
    /// `Communicator::init_rank` makes them.
    Processes,
}

impl RanksRun {
    /// The name a topology file gives it (`ranks`).
    pub const fn name(self) -> &'static str {
        match self {
            RanksRun::InPool => "pool",
            RanksRun::Processes => "processes",
        }
    }
}

/// Bytes under which the host device runs a rank's program inline.
pub const HOST_INLINE_BYTES: usize = oxccl_platform::host::INLINE_BYTES;

/// Bytes from which the host device shares one task among its workers.
pub const HOST_SPLIT_BYTES: usize = oxccl_platform::host::SPLIT_BYTES;

impl Processor {
    /// The server's ranks are processes of their own ([`RanksRun::Processes`]), not
    /// streams of one device's worker pool: a rank that waits for its peers gives its
    /// core up and is switched back in once per round, `wake_us` of a core's time, and a
    /// host's switches queue on its cores (`workers`) where the ranks outnumber them. A
    /// pool's wake-up is a pick-up that runs beside the others.
    pub fn ranks_are_processes(&self) -> bool {
        self.ranks == RanksRun::Processes
    }

    /// The most bytes a rank's program may move for its operation to run inline on the
    /// submitting thread: `inline_bytes` in a pool; 0 for processes, which never share a
    /// thread.
    pub fn inline_limit(&self) -> usize {
        match self.ranks {
            RanksRun::InPool => self.inline_bytes,
            RanksRun::Processes => 0,
        }
    }

    /// The share of an operation's memory traffic that the caches serve, when it touches
    /// `footprint` bytes in all on the server: all of it when the footprint fits in
    /// `cache_bytes`, else the share of the footprint they hold (`cache_bytes /
    /// footprint`). A blend rather than a cliff: the reference machine's copy rate falls
    /// gradually from its cached rate as the buffers grow past the cache (see
    /// [`super::presets`]).
    pub fn cached_share(&self, footprint: usize) -> f64 {
        oxccl_platform::host::calibration::fit::cached_share(self.cache_bytes, footprint)
    }

    /// Whether an operation touching `footprint` bytes in all on the server passes the
    /// last-level cache ([`Processor::llc_bytes`]; never when that is 0).
    pub fn passes_llc(&self, footprint: usize) -> bool {
        self.llc_bytes > 0 && footprint > self.llc_bytes
    }

    /// Seconds one thread takes per byte of memory traffic of which `cached` (0 to 1) the
    /// caches serve.
    pub fn seconds_per_byte(&self, cached: f64) -> f64 {
        cached / (self.cache_gbps * 1e9) + (1.0 - cached) / (self.thread_gbps * 1e9)
    }

    /// Seconds one thread takes per byte of a block another core has just written, in
    /// an operation of which `cached` the caches serve: the slower of the forwarding
    /// rate and [`Processor::seconds_per_byte`] (past the caches, the bytes come from
    /// memory either way). With `workers` threads, the writer is another one
    /// `(workers - 1) / workers` of the time, so that share of the bytes pays it.
    pub fn forward_seconds_per_byte(&self, cached: f64) -> f64 {
        let own = self.seconds_per_byte(cached);
        if self.forward_gbps <= 0.0 || self.workers < 2 {
            return own;
        }
        let forwarded = own.max(1.0 / (self.forward_gbps * 1e9));
        let other = (self.workers - 1) as f64 / self.workers as f64;
        other * forwarded + (1.0 - other) * own
    }

    /// The figures measured on the reference machine (see [`super::presets`]), with
    /// `workers` threads.
    pub fn reference(workers: usize) -> Processor {
        Processor {
            workers: workers.max(1),
            task_us: super::presets::HOST_TASK_US,
            wake_us: super::presets::HOST_WAKE_US,
            thread_gbps: super::presets::HOST_LINK_GBPS,
            inline_bytes: HOST_INLINE_BYTES,
            split_bytes: HOST_SPLIT_BYTES,
            ranks: RanksRun::InPool,
            cache_bytes: super::presets::HOST_CACHE_BYTES,
            cache_gbps: super::presets::HOST_CACHE_GBPS,
            llc_bytes: super::presets::HOST_LLC_BYTES,
            forward_gbps: 0.0,
        }
    }

    /// These figures with the workers, copy rates, caches and task cost measured on a
    /// machine (`oxccl_platform::host::calibration`); a figure it could not measure
    /// stays, and so does the wake-up, which it does not measure.
    pub fn with_measured(self, measured: &HostFigures) -> Processor {
        Processor {
            workers: measured.workers,
            task_us: measured.task_us.unwrap_or(self.task_us),
            thread_gbps: measured.thread_gbps,
            cache_bytes: measured.cache_bytes,
            cache_gbps: measured.cache_gbps,
            llc_bytes: measured.llc_bytes,
            forward_gbps: measured.forward_gbps.unwrap_or(self.forward_gbps),
            ..self
        }
    }

    /// Errors on figures the model cannot use: no worker, a cost that is negative or not
    /// finite, a rate that is not positive.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: String, reason: &str| Err(ConfigError::new("topology", what, reason));
        if self.workers == 0 {
            return bad(
                "workers = 0".into(),
                "a host runs its tasks on at least one thread",
            );
        }
        for (name, us) in [("task_us", self.task_us), ("wake_us", self.wake_us)] {
            if !(us.is_finite() && us >= 0.0) {
                return bad(
                    format!("{name} = {us}"),
                    "a cost must be zero or a positive number of microseconds",
                );
            }
        }
        for (name, gbps) in [
            ("thread_gbps", self.thread_gbps),
            ("cache_gbps", self.cache_gbps),
        ] {
            if !(gbps.is_finite() && gbps > 0.0) {
                return bad(
                    format!("{name} = {gbps}"),
                    "a thread's copy rate must be a positive number of GB/s",
                );
            }
        }
        if !(self.forward_gbps.is_finite() && self.forward_gbps >= 0.0) {
            return bad(
                format!("forward_gbps = {}", self.forward_gbps),
                "a forwarding rate must be a positive number of GB/s, or 0 for none",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_figures_are_valid_and_bad_ones_are_named() {
        assert!(Processor::reference(0).validate().is_ok());
        assert_eq!(Processor::reference(0).workers, 1);
        let mut p = Processor::reference(2);
        p.task_us = -1.0;
        assert!(p.validate().unwrap_err().to_string().contains("task_us"));
        p = Processor::reference(2);
        p.wake_us = f64::INFINITY;
        assert!(p.validate().unwrap_err().to_string().contains("wake_us"));
        p = Processor::reference(2);
        p.thread_gbps = f64::NAN;
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("thread_gbps"));
        p = Processor::reference(2);
        p.cache_gbps = 0.0;
        assert!(p.validate().unwrap_err().to_string().contains("cache_gbps"));
        p = Processor::reference(2);
        p.workers = 0;
        assert!(p.validate().unwrap_err().to_string().contains("workers"));
        p = Processor::reference(2);
        p.forward_gbps = -1.0;
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("forward_gbps"));
    }

    #[test]
    fn a_forwarded_byte_costs_the_slower_rate_on_the_share_another_thread_wrote() {
        let mut p = Processor::reference(2);
        (p.cache_gbps, p.thread_gbps, p.forward_gbps) = (16.0, 4.0, 8.0);
        // Not modelled, or one thread: a forwarded byte is any byte.
        let unmodelled = Processor {
            forward_gbps: 0.0,
            ..p
        };
        assert_eq!(unmodelled.forward_seconds_per_byte(1.0), 1.0 / 16e9);
        let alone = Processor { workers: 1, ..p };
        assert_eq!(alone.forward_seconds_per_byte(1.0), 1.0 / 16e9);
        // Cached: half the bytes (two workers) at the forwarding rate.
        let cached = p.forward_seconds_per_byte(1.0);
        assert!(
            (cached - (0.5 / 8e9 + 0.5 / 16e9)).abs() < 1e-18,
            "{cached}"
        );
        // From memory, slower than forwarding: unchanged.
        assert_eq!(p.forward_seconds_per_byte(0.0), 1.0 / 4e9);
        p.workers = 4;
        let more = p.forward_seconds_per_byte(1.0);
        assert!((more - (0.75 / 8e9 + 0.25 / 16e9)).abs() < 1e-18, "{more}");
    }

    #[test]
    fn a_footprint_in_the_cache_is_served_from_it_and_a_larger_one_in_part() {
        let mut p = Processor::reference(2);
        p.cache_bytes = 8 << 20;
        p.cache_gbps = 48.0;
        p.thread_gbps = 12.0;
        assert_eq!(p.cached_share(0), 1.0);
        assert_eq!(p.cached_share(8 << 20), 1.0);
        assert_eq!(p.cached_share(32 << 20), 0.25);
        assert_eq!(p.seconds_per_byte(1.0), 1.0 / 48e9);
        assert_eq!(p.seconds_per_byte(0.0), 1.0 / 12e9);
        let half = p.seconds_per_byte(0.5);
        assert!(half > 1.0 / 48e9 && half < 1.0 / 12e9);
        p.cache_bytes = 0;
        assert_eq!(p.cached_share(1), 0.0);
    }
}
