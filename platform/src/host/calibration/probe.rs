//! Measuring the host: one thread's copy rate over a ladder of footprints, the memory
//! system's rate with every worker copying at once, and one thread's rate copying a
//! block another CPU has just written ([`forward_gbps`]).
//!
//! Copies are `memcpy`s of byte slices, as `../shared/bench/peers/memcpy_bench.c` makes
//! them, and as the host device's Copy tasks are. A point copies for at least
//! [`POINT_TIME`] and [`MIN_REPS`] times after one copy that faults its pages in, and its
//! fastest copy counts: on a shared machine the fastest copy is the one another tenant
//! disturbed least, which makes the figures steadier from run to run than a mean.

use super::fit::Rate;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// The ladder's copy sizes, MiB: footprints of 2 MiB (within a core's cache on current
/// CPUs) to 256 MiB (past the last-level cache of most hosts).
pub const LADDER_MIB: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Least time a point copies for.
const POINT_TIME: Duration = Duration::from_millis(15);
/// Least copies per point, after the first.
const MIN_REPS: usize = 3;
/// Most copies per point (a machine that copies 1 MiB in under a microsecond).
const MAX_REPS: usize = 100_000;
/// What each worker copies at once in the memory measurement: past the caches of the
/// ladder's machines, several times over with every worker at it.
const MEMORY_COPY: usize = 64 * MIB;
/// Rounds of the memory measurement; the fastest counts.
const MEMORY_ROUNDS: usize = 4;

/// The most of the machine's CPU time others may keep busy for a measurement to count as
/// made on a quiet machine.
pub const QUIET_SHARE: f64 = 0.25;
/// How long [`busy_share`] watches the machine before a measurement.
pub const WATCH: Duration = Duration::from_millis(50);

/// The share of every CPU's time that was busy (not idle, not waiting for I/O) over
/// `interval`, while this thread slept: what the rest of the machine was doing. `None`
/// where `/proc/stat` cannot be read.
pub fn busy_share(interval: Duration) -> Option<f64> {
    let before = cpu_times()?;
    std::thread::sleep(interval);
    let after = cpu_times()?;
    let total = after.1.saturating_sub(before.1);
    let busy = after.0.saturating_sub(before.0);
    (total > 0).then(|| busy as f64 / total as f64)
}

/// (busy, total) jiffies of all CPUs, from `/proc/stat`'s first line.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let times: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, within user]
    let total: u64 = times.iter().take(8).sum();
    let idle = times.get(3)? + times.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// `len` bytes of ones, touched; `None` when the memory is not there.
fn buffer(len: usize) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 1);
    Some(v)
}

/// Seconds the fastest of one point's copies of `src` into `dst` took.
fn fastest_copy(src: &[u8], dst: &mut [u8]) -> f64 {
    dst.copy_from_slice(src);
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut reps = 0;
    while reps < MIN_REPS || (start.elapsed() < POINT_TIME && reps < MAX_REPS) {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&mut *dst);
        best = best.min(t.elapsed().as_secs_f64());
        reps += 1;
    }
    best.max(1e-9)
}

/// One thread's copy rate at every footprint of the ladder; `None` when its buffers
/// cannot be allocated.
pub fn ladder() -> Option<Vec<Rate>> {
    let largest = LADDER_MIB[LADDER_MIB.len() - 1] * MIB;
    let src = buffer(largest)?;
    let mut dst = buffer(largest)?;
    let rate = |len: usize, dst: &mut [u8]| Rate {
        footprint: 2 * len,
        gbps: len as f64 / fastest_copy(&src[..len], &mut dst[..len]) / 1e9,
    };
    Some(
        LADDER_MIB
            .iter()
            .map(|&mib| rate(mib * MIB, &mut dst))
            .collect(),
    )
}

/// The rate of `workers` threads copying [`MEMORY_COPY`] bytes each at once, GB/s of
/// data copied in all: the fastest of [`MEMORY_ROUNDS`] rounds, a round lasting until
/// its slowest thread is done. `None` when a thread's buffers cannot be allocated.
pub fn memory_gbps(workers: usize) -> Option<f64> {
    let workers = workers.max(1);
    let start = Barrier::new(workers);
    let times = run_together(
        (0..workers)
            .map(|_| Box::new(|| copy_rounds(&start)) as Body<'_, Option<Vec<f64>>>)
            .collect(),
    )?;
    let mut slowest = vec![0.0f64; MEMORY_ROUNDS];
    for thread in times {
        for (round, t) in thread?.into_iter().enumerate() {
            slowest[round] = slowest[round].max(t);
        }
    }
    let best = slowest.into_iter().fold(f64::INFINITY, f64::min).max(1e-9);
    Some(workers as f64 * MEMORY_COPY as f64 / best / 1e9)
}

/// One thread's part of [`memory_gbps`]: each round's copy time, the rounds started
/// together. A thread that cannot allocate still meets the others at every round.
fn copy_rounds(start: &Barrier) -> Option<Vec<f64>> {
    let mut buffers = buffer(MEMORY_COPY).zip(buffer(MEMORY_COPY));
    let mut times = Vec::with_capacity(MEMORY_ROUNDS);
    for _ in 0..MEMORY_ROUNDS {
        start.wait();
        let t = Instant::now();
        if let Some((src, dst)) = buffers.as_mut() {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        times.push(t.elapsed().as_secs_f64());
    }
    buffers.map(|_| times)
}

/// What the forwarding measurement copies: a block of the size a ring step of a few
/// MiB moves on eight ranks, within a core's caches.
const FORWARD_COPY: usize = MIB / 2;
/// Rounds of the forwarding measurement.
const FORWARD_ROUNDS: usize = 192;

/// One thread's copy rate, GB/s of data copied, of [`FORWARD_COPY`] bytes that a thread
/// on another CPU has just written: what a staged executor's step pays for the block
/// the step before wrote (a ring's or a recursive halving's), where a copy of data at
/// rest reads it from its own caches or memory. The writer and the reader are pinned
/// to two CPUs this process may run on, so that every round crosses between them.
///
/// On the 2-core CI VM the rounds' rates are bimodal, about 4 and about 11 to 15 GB/s,
/// the slow ones in bursts (the hypervisor placing the two virtual CPUs apart, likely),
/// so the mean time counts: what a step pays on average, slow rounds and fast. In scratch
/// runs of this measurement there, batches of 128 rounds gave means of 8 to 9.8 GB/s in
/// 13 of 18 batches and 4.2 to 7.4 in the others, and medians of 8 to 13 GB/s swinging
/// to 4.1. The host model's picks on 8 ranks do not change for rates from 4.5 to 11.5
/// GB/s but for AllGatherV at 512 KiB and 4 MiB (`ring` to `mesh`, as measured there),
/// and at 12 and above that one falls back (`oxccl check --topo` with each rate).
/// `None` with fewer than two CPUs, or where threads cannot be pinned.
pub fn forward_gbps() -> Option<f64> {
    let cpus = rustix::thread::sched_getaffinity(None).ok()?;
    let mut allowed = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| cpus.is_set(c));
    let (writer_cpu, reader_cpu) = (allowed.next()?, allowed.next()?);
    let block = parking_lot::Mutex::new(buffer(FORWARD_COPY)?);
    let mut dst = buffer(FORWARD_COPY)?;
    let turn = Barrier::new(2);
    // Both ends run on threads of their own, so that the caller's affinity is left as
    // it was. Each gives its times (the writer none) where it could be pinned.
    let writer = || {
        let pinned = pin(writer_cpu);
        for round in 0..FORWARD_ROUNDS {
            block.lock().fill(round as u8);
            turn.wait(); // written
            turn.wait(); // read
        }
        pinned.then(Vec::new)
    };
    let reader = || {
        let pinned = pin(reader_cpu);
        let mut times = Vec::with_capacity(FORWARD_ROUNDS);
        for _ in 0..FORWARD_ROUNDS {
            turn.wait();
            let src = block.lock();
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
            times.push(t.elapsed().as_secs_f64());
            drop(src);
            turn.wait();
        }
        pinned.then_some(times)
    };
    let ends = run_together(vec![Box::new(writer) as Body<'_, _>, Box::new(reader)])?;
    let [written, times]: [Option<Vec<f64>>; 2] = ends.try_into().ok()?;
    let times = times.filter(|_| written.is_some())?;
    let mean = (times.iter().sum::<f64>() / times.len() as f64).max(1e-9);
    Some(FORWARD_COPY as f64 / mean / 1e9)
}

/// What one thread of a measurement runs.
type Body<'a, T> = Box<dyn FnOnce() -> T + Send + 'a>;

/// Whether a measurement's threads may start, decided once every one of them exists.
struct StartGate {
    go: parking_lot::Mutex<Option<bool>>,
    decided: parking_lot::Condvar,
}

impl StartGate {
    fn new() -> Self {
        StartGate {
            go: parking_lot::Mutex::new(None),
            decided: parking_lot::Condvar::new(),
        }
    }

    /// Wait for the decision; whether to run.
    fn wait(&self) -> bool {
        let mut go = self.go.lock();
        loop {
            match *go {
                Some(go) => return go,
                None => self.decided.wait(&mut go),
            }
        }
    }

    fn decide(&self, go: bool) {
        *self.go.lock() = Some(go);
        self.decided.notify_all();
    }
}

/// Run `bodies` on threads of their own, each with what it returns, or `None` when one
/// panics or the OS refuses one of the threads. The bodies meet at barriers, so none of
/// them starts before all the threads exist: a thread the OS refused would leave the
/// others waiting for it for ever. Then none of them runs. (A body that panicked between
/// barriers would leave the others waiting too; the probes' bodies copy slices of equal
/// lengths and wait, which does not panic.)
fn run_together<T: Send>(bodies: Vec<Body<'_, T>>) -> Option<Vec<T>> {
    run_together_spawning(bodies, usize::MAX)
}

/// [`run_together`], as if the OS refused every thread past the first `spawnable`.
fn run_together_spawning<T: Send>(bodies: Vec<Body<'_, T>>, spawnable: usize) -> Option<Vec<T>> {
    let wanted = bodies.len();
    let gate = StartGate::new();
    std::thread::scope(|s| {
        let mut threads = Vec::with_capacity(wanted);
        for (i, body) in bodies.into_iter().enumerate() {
            let gate = &gate;
            let run = move || gate.wait().then(body);
            let thread = match i < spawnable {
                true => std::thread::Builder::new().spawn_scoped(s, run).ok(),
                false => None,
            };
            match thread {
                Some(thread) => threads.push(thread),
                None => break,
            }
        }
        let all = threads.len() == wanted;
        gate.decide(all);
        let results: Vec<Option<T>> = threads
            .into_iter()
            .map(|t| t.join().ok().flatten())
            .collect();
        results
            .into_iter()
            .collect::<Option<Vec<T>>>()
            .filter(|_| all)
    })
}

/// Pin this thread to `cpu`; whether it worked.
fn pin(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_timed_and_its_rate_is_positive() {
        let src = buffer(MIB).unwrap();
        let mut dst = buffer(MIB).unwrap();
        let t = fastest_copy(&src, &mut dst);
        assert!(t > 0.0 && t < 1.0, "{t}");
        assert_eq!(src, dst);
    }

    #[test]
    fn a_forwarded_copy_has_a_positive_rate_where_two_cpus_can_be_had() {
        match forward_gbps() {
            Some(gbps) => assert!(gbps.is_finite() && gbps > 0.0, "{gbps}"),
            None => eprintln!("skipped: fewer than two CPUs to pin, or no pinning here"),
        }
    }

    #[test]
    fn the_busy_share_is_a_share() {
        if let Some(share) = busy_share(Duration::from_millis(20)) {
            assert!((0.0..=1.0).contains(&share), "{share}");
        }
        assert!(cpu_times().is_none_or(|(busy, total)| busy <= total));
    }

    #[test]
    fn threads_meeting_at_a_barrier_run_all_or_none() {
        let meet = Barrier::new(3);
        let bodies = || -> Vec<Body<'_, usize>> {
            (0..3usize)
                .map(|i| {
                    let meet = &meet;
                    Box::new(move || {
                        meet.wait();
                        i
                    }) as Body<'_, usize>
                })
                .collect()
        };
        assert_eq!(run_together(bodies()), Some(vec![0, 1, 2]));
        // The third thread refused: the two that exist are not left at the barrier.
        assert_eq!(run_together_spawning(bodies(), 2), None);
        assert_eq!(run_together_spawning(bodies(), 0), None);
        // A body that panics fails the measurement, not the caller.
        let panics: Vec<Body<'_, usize>> = vec![Box::new(|| 1), Box::new(|| panic!("a probe"))];
        assert_eq!(run_together(panics), None);
    }

    #[test]
    fn the_memory_rate_of_one_and_two_threads_is_positive() {
        for workers in [0, 1, 2] {
            let gbps = memory_gbps(workers).unwrap();
            assert!(gbps.is_finite() && gbps > 0.0, "{workers}: {gbps}");
        }
    }
}
