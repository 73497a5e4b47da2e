//! One GPU's ranks of a device and their launches: every local rank on the GPU makes each
//! call (runs a program, or nothing: a retired call, a refused gate), and the last to
//! arrive at a call launches the program kernel once for all of them (see
//! `program.rs` for why one launch).
//!
//! Launches of one GPU follow each other on its one stream. The call after a launched one
//! can only gather once every rank of that launch saw it end (a rank arrives at a call
//! after its previous call returned), so a launch never overlaps the previous one of its
//! GPU: the descriptor and barrier counters are reused, and the done event is recorded
//! again only after every rank of the previous launch read it.

use super::compile::CudaProgram;
use super::driver::{cu, Gpu};
use super::graph::SequenceGraph;
use super::launch::{Bases, Launch, Word};
use super::memory::DevAlloc;
use super::program::{Params, ENTRY_WORDS};
use super::zero_copy;
use super::{CudaError, Shared};
use crate::error::{ConfigFault, DeviceError};
use cudarc::driver::sys::{CUevent, CUstream};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes of a data task worth one more block of its stream.
const BYTES_PER_BLOCK: usize = 64 << 10;
/// Blocks per stream at most.
const MAX_BLOCKS_PER_STREAM: usize = 32;

/// A run's epoch words to wait for: the entry fence's, the exit fence's.
type FenceWords = (Vec<u64>, Vec<u64>);

/// What a rank brought to a call.
pub(crate) enum Arrival {
    Run(Arc<Launch>),
    Nothing,
}

/// A GPU's ranks (local slots) and its launch state.
pub(crate) struct GpuGroup {
    pub gpu: Arc<Gpu>,
    /// Local slots placed on this GPU, ascending.
    pub slots: Vec<usize>,
    pub stream: CUstream,
    /// Recorded after each launch.
    pub done: CUevent,
    /// Per epoch: what each slot brought (by position in `slots`).
    pending: Mutex<BTreeMap<u64, Vec<Option<Arrival>>>>,
    /// The descriptor and the barrier counters, grown on demand.
    memory: Mutex<(Option<DevAlloc>, Option<DevAlloc>)>,
    /// Graph mode's sequences of this GPU as CUDA graphs (see `replay`), the most
    /// recently used last.
    pub graphs: Mutex<Vec<SequenceGraph>>,
}

// SAFETY: the stream and event are driver handles usable from any thread with the GPU's
// context current; the mutable state is behind locks.
unsafe impl Send for GpuGroup {}
// SAFETY: as above.
unsafe impl Sync for GpuGroup {}

impl GpuGroup {
    pub fn new(gpu: Arc<Gpu>, slots: Vec<usize>) -> Result<Self, DeviceError> {
        let _current = gpu.bind()?;
        let stream = super::driver::new_stream()?;
        let done = super::driver::new_event(false)?;
        Ok(GpuGroup {
            gpu,
            slots,
            stream,
            done,
            pending: Mutex::new(BTreeMap::new()),
            memory: Mutex::new((None, None)),
            graphs: Mutex::new(Vec::new()),
        })
    }

    /// Slot `slot` brings `arrival` to call `epoch`; the last arrival launches the call.
    pub fn arrive(&self, shared: &Shared, slot: usize, epoch: u64, arrival: Arrival) {
        let Some(at) = self.slots.iter().position(|&s| s == slot) else {
            return;
        };
        let complete = {
            let mut pending = self.pending.lock();
            let call = pending
                .entry(epoch)
                .or_insert_with(|| (0..self.slots.len()).map(|_| None).collect());
            call[at] = Some(arrival);
            match call.iter().all(Option::is_some) {
                true => pending.remove(&epoch),
                false => None,
            }
        };
        let Some(call) = complete else {
            return;
        };
        let runs: Vec<Arc<Launch>> = call
            .into_iter()
            .filter_map(|a| match a {
                Some(Arrival::Run(l)) => Some(l),
                _ => None,
            })
            .collect();
        if runs.is_empty() {
            return;
        }
        let outcome = match shared.stopped() {
            Some(cause) => Err(cause),
            None => self.launch(shared, epoch, &runs).map_err(|error| {
                let cause = crate::error::AbortCause::PeerFailed {
                    rank: runs[0].rank(),
                    error: Arc::new(error),
                };
                shared.stop(cause.clone());
                // The kernel may be queued already (a failed event record): it sees the
                // abort word and ends; none of the runs returns before it did.
                self.drain();
                cause
            }),
        };
        for run in &runs {
            run.launched(outcome.clone());
        }
    }

    /// Wait for everything launched on this GPU's stream (best effort: at teardown, or
    /// after a failed launch or replay, whose queued kernels see the abort word and end).
    pub fn drain(&self) {
        if let Ok(_current) = self.gpu.bind() {
            let _ = cu!(cuStreamSynchronize(self.stream));
        }
    }

    /// Take slot `slot`'s arrival at call `epoch` back: true if the call had not gathered
    /// yet (so it will not launch with this slot), false if it is launched or launching.
    pub fn withdraw(&self, slot: usize, epoch: u64) -> bool {
        let Some(at) = self.slots.iter().position(|&s| s == slot) else {
            return true;
        };
        match self.pending.lock().get_mut(&epoch) {
            Some(call) => {
                call[at] = None;
                true
            }
            None => false,
        }
    }

    /// The local ranks (by global rank) that have not yet arrived at call `epoch`.
    pub fn missing(&self, shared: &Shared, epoch: u64) -> Vec<usize> {
        let pending = self.pending.lock();
        let rank_of = |slot: usize| shared.config.local_ranks.get(slot).copied().unwrap_or(slot);
        match pending.get(&epoch) {
            Some(call) => self
                .slots
                .iter()
                .zip(call)
                .filter(|(_, a)| a.is_none())
                .map(|(&s, _)| rank_of(s))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Stage the runs' host buffers in, then launch the program kernel and record `done`.
    fn launch(&self, shared: &Shared, epoch: u64, runs: &[Arc<Launch>]) -> Result<(), DeviceError> {
        let _current = self.gpu.bind()?;
        let grid = self.grid(runs.iter().map(|r| r.program()))?;
        let counters_len = grid.counters(runs.len());
        let mut memory = self.memory.lock();
        grow(
            &self.gpu,
            self.done,
            &mut memory.1,
            counters_len * 4,
            "barrier counters",
        )?;
        let counters = memory.1.as_ref().map_or(0, |a| a.ptr);
        let (desc_words, users) = self.descriptor(shared, runs, grid, counters)?;
        let desc_bytes = desc_words.len() * 8;
        grow(
            &self.gpu,
            self.done,
            &mut memory.0,
            desc_bytes,
            "launch descriptor",
        )?;
        for run in runs {
            run.reset_progress();
        }
        let desc = memory.0.as_ref().map_or(0, |a| a.ptr);
        cu!(cuMemcpyHtoDAsync_v2(
            desc,
            desc_words.as_ptr().cast(),
            desc_bytes,
            self.stream
        ))?;
        cu!(cuMemsetD32Async(counters, 0, counters_len, self.stream))?;
        let mut params = grid.params(shared, desc, users, epoch);
        let mut args = [(&mut params as *mut Params).cast::<std::ffi::c_void>()];
        cu!(cuLaunchCooperativeKernel(
            self.gpu.program,
            grid.blocks(),
            1,
            1,
            grid.threads,
            1,
            1,
            0,
            self.stream,
            args.as_mut_ptr(),
        ))?;
        cu!(cuEventRecord(self.done, self.stream))?;
        Ok(())
    }

    /// The grid of a launch of `programs` on this GPU: it depends on the programs alone,
    /// so a CUDA graph fixes it when it is built.
    pub(crate) fn grid<'p>(
        &self,
        programs: impl Iterator<Item = &'p CudaProgram>,
    ) -> Result<Grid, DeviceError> {
        let (entries, largest) = programs.fold((0, 0), |(entries, largest), p| {
            (entries + p.streams.len(), largest.max(p.largest))
        });
        let (threads, resident) =
            self.gpu
                .block_size_for(entries)
                .ok_or_else(|| CudaError::TooManyBlocks {
                    ordinal: self.gpu.ordinal,
                    needed: entries,
                    capacity: self.gpu.resident_blocks.last().copied().unwrap_or(0) as usize,
                })?;
        let k = blocks_per_stream(largest, entries, self.gpu.sms as usize)
            .min(resident / entries.max(1))
            .max(1);
        Ok(Grid {
            threads,
            k,
            entries,
        })
    }

    /// The descriptor of a launch of `runs` (their host buffers staged in first, on the
    /// GPU's stream), with the index of its table of user buffers: the runs' buffers are
    /// checked against every program that reaches them (zero-copy) here.
    pub(crate) fn descriptor(
        &self,
        shared: &Shared,
        runs: &[Arc<Launch>],
        grid: Grid,
        counters: u64,
    ) -> Result<(Vec<u64>, usize), DeviceError> {
        let ranks = shared.config.ranks;
        let sides: Vec<_> = runs.iter().map(|r| r.user_side()).collect();
        let reach = zero_copy::reach(ranks, &sides)?;
        let mut bases = Vec::with_capacity(runs.len());
        for (run, &reach) in runs.iter().zip(&reach) {
            bases.push(run.stage_in(self.stream, reach)?);
        }
        if sides.iter().any(|s| !s.peers.is_empty()) {
            zero_copy::check_disjoint(&sides, &reach)?;
        }
        let fences: Vec<_> = runs.iter().map(|r| r.fence_words()).collect();
        let mut words = describe(shared, runs, (&bases, &fences), grid.k, counters);
        let users = words.len();
        let pairs: Vec<_> = bases.iter().map(|b| (b.input, b.output)).collect();
        words.extend(zero_copy::table(ranks, &sides, &pairs));
        Ok((words, users))
    }
}

/// A launch's grid: `k` blocks of `threads` for each of its `entries` (streams).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    pub threads: u32,
    pub k: usize,
    pub entries: usize,
}

impl Grid {
    /// Blocks in the grid: `k <= resident / entries`, and the device reports `resident`
    /// as a u32, so it fits.
    pub fn blocks(&self) -> u32 {
        (self.entries * self.k) as u32
    }

    /// Barrier counters of a launch of `runs` programs: one per entry, one per run.
    pub fn counters(&self, runs: usize) -> usize {
        self.entries + runs
    }

    /// The kernel's argument for a descriptor at `desc` whose table of user buffers is
    /// at word `users`.
    pub fn params(&self, shared: &Shared, desc: u64, users: usize, epoch: u64) -> Params {
        Params {
            desc,
            epoch,
            abort: shared.mapped.dev_addr(shared.abort_word()),
            users: desc + users as u64 * 8,
            k: self.k as u32,
        }
    }
}

/// Blocks per stream: enough for the largest data task, at most one block per
/// multiprocessor over all the launch's streams (the rest of the GPU stays free for other
/// communicators' launches).
fn blocks_per_stream(largest: usize, entries: usize, sms: usize) -> usize {
    let worth = largest.div_ceil(BYTES_PER_BLOCK).max(1);
    let room = (sms / entries.max(1)).max(1);
    worth.min(room).min(MAX_BLOCKS_PER_STREAM)
}

/// Make `slot` at least `len` bytes (the previous launch is over: see the module docs).
///
/// The old allocation is freed on the allocation stream once `done` (recorded after the
/// GPU's last launch) fired: a launch's kernel reads it, and the allocation stream is
/// not otherwise ordered after the GPU's stream.
fn grow(
    gpu: &Arc<Gpu>,
    done: CUevent,
    slot: &mut Option<DevAlloc>,
    len: usize,
    what: &'static str,
) -> Result<(), DeviceError> {
    if slot.as_ref().is_none_or(|a| a.len < len) {
        if slot.is_some() {
            cu!(cuStreamWaitEvent(gpu.alloc_stream, done, 0))?;
        }
        let bytes = len
            .checked_next_power_of_two()
            .ok_or(ConfigFault::TooLarge { what })?;
        *slot = None;
        *slot = Some(DevAlloc::zeroed(gpu, bytes, what)?);
    }
    Ok(())
}

/// The launch's descriptor: an entry per stream of every run, then each run's fence
/// lists (see `program.cu`).
fn describe(
    shared: &Shared,
    runs: &[Arc<Launch>],
    (bases, fences): (&[Bases], &[FenceWords]),
    k: usize,
    counters: u64,
) -> Vec<u64> {
    let entries: usize = runs.iter().map(|r| r.program().streams.len()).sum();
    let mut words = vec![0u64; entries * ENTRY_WORDS];
    let mut entry = 0;
    for (r, ((run, base), (entry_peers, exit_peers))) in
        runs.iter().zip(bases).zip(fences).enumerate()
    {
        let program = run.program();
        let slot = program.slot;
        let fences = words.len() as u64;
        words.push(entry_peers.len() as u64);
        words.extend(entry_peers);
        words.push(exit_peers.len() as u64);
        words.extend(exit_peers);
        let streams = program.streams.len();
        let rank_blocks = (streams * k) as u64;
        for s in 0..streams {
            let e = &mut words[entry * ENTRY_WORDS..(entry + 1) * ENTRY_WORDS];
            e[0] = program.start(s);
            e[1] = base.input;
            e[2] = base.output;
            e[3] = run.word_addr(Word::Progress(s));
            e[4] = run.word_addr(Word::Fault);
            e[5] = counters + 4 * entry as u64;
            e[6] = counters + 4 * (entries + r) as u64;
            e[7] = s as u64 | rank_blocks << 16;
            e[8] = fences;
            e[9] = shared.mapped.dev_addr(shared.epoch_word(slot));
            entry += 1;
        }
    }
    words
}

impl Drop for GpuGroup {
    fn drop(&mut self) {
        if let Ok(_current) = self.gpu.bind() {
            let _ = cu!(cuStreamSynchronize(self.stream));
            let _ = cu!(cuStreamDestroy_v2(self.stream));
            let _ = cu!(cuEventDestroy_v2(self.done));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_tasks_get_one_block_and_large_ones_share_the_gpu() {
        assert_eq!(blocks_per_stream(0, 8, 132), 1);
        assert_eq!(blocks_per_stream(1000, 8, 132), 1);
        assert_eq!(blocks_per_stream(1 << 20, 8, 132), 16);
        assert_eq!(blocks_per_stream(1 << 30, 8, 132), 16);
        assert_eq!(blocks_per_stream(1 << 30, 1, 132), MAX_BLOCKS_PER_STREAM);
        assert_eq!(blocks_per_stream(1 << 30, 200, 132), 1);
    }
}
