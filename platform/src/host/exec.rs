//! Copy and Reduce on the host: resolve, check, run inline or split across workers.
//!
//! Every slice is resolved to memory and checked before a byte moves: inside its buffer,
//! writes only to writable buffers, no partial overlap between a task's sources and
//! destinations, reductions aligned to their element size. A task that breaks a rule is an
//! error naming rank, stream, task and slice, never undefined behaviour. Ordering between
//! tasks is the program's duty; the analyzer proves it, and a racy program on the host
//! yields wrong values, never an out-of-bounds access.
//!
//! Tasks of at least [`SPLIT_BYTES`] are cut into 64-byte aligned chunks that idle workers
//! pick up; the worker that finishes the last chunk resumes the stream.

use super::launch::{Launch, Step};
use super::memory::Resolved;
use crate::dtype::{DataType, ReduceOp};
use crate::error::{DeviceError, TaskLocation};
use crate::ir::{Slice, Task};
use crate::reduce::reduce_raw;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Tasks at least this big are split across workers.
pub(crate) const SPLIT_BYTES: usize = 1 << 20;
/// Smallest chunk a split produces.
const MIN_CHUNK: usize = 256 << 10;

#[derive(Copy, Clone)]
enum Kind {
    Copy,
    Reduce(DataType, ReduceOp),
}

/// A data task with its memory resolved and checked.
struct Prepared {
    kind: Kind,
    srcs: Ptrs<*const u8>,
    dsts: Ptrs<*mut u8>,
    len: usize,
    _keep: SmallVec<[Resolved; 4]>,
}

/// Pointer lists sized for a mesh of up to 16 ranks without touching the heap.
type Ptrs<T> = SmallVec<[T; 16]>;

// SAFETY: the pointers were checked against live regions, and `_keep` holds the
// registrations of any user buffers they point into, so they stay valid while this lives.
unsafe impl Send for Prepared {}
// SAFETY: as above; chunks touch disjoint byte ranges.
unsafe impl Sync for Prepared {}

impl Prepared {
    /// Run bytes `[from, from + len)` of the task.
    fn run_range(&self, from: usize, len: usize) {
        match self.kind {
            Kind::Copy => {
                for &dst in &self.dsts {
                    // SAFETY: bounds and non-overlap of src/dst were checked in `prepare`;
                    // `from + len <= self.len`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(self.srcs[0].add(from), dst.add(from), len)
                    }
                }
            }
            Kind::Reduce(dtype, op) => {
                let srcs: Ptrs<*const u8> =
                    self.srcs.iter().map(|p| p.wrapping_add(from)).collect();
                let dsts: Ptrs<*mut u8> = self.dsts.iter().map(|p| p.wrapping_add(from)).collect();
                // SAFETY: `prepare` checked bounds, alignment to the element size (chunk
                // offsets are multiples of 64) and that every dst either equals a src or
                // overlaps none.
                unsafe { reduce_raw(dtype, op, &srcs, &dsts, len / dtype.size()) }
            }
        }
    }
}

/// Run a Copy or Reduce task of `launch`'s stream `at.stream`.
pub(crate) fn run_data_task(
    launch: &Arc<Launch>,
    task: &Task,
    at: TaskLocation,
) -> Result<Step, DeviceError> {
    let prepared = prepare(launch, task, at)?;
    let threads = launch.shared.pool.threads();
    if prepared.len < SPLIT_BYTES || threads < 2 {
        prepared.run_range(0, prepared.len);
        return Ok(Step::Next);
    }
    let chunk = (prepared.len / (threads * 4))
        .max(MIN_CHUNK)
        .next_multiple_of(64);
    let job = Arc::new(ChunkJob {
        launch: launch.clone(),
        stream: at.stream,
        chunks: prepared.len.div_ceil(chunk),
        chunk,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        task: prepared,
    });
    for _ in 1..threads.min(job.chunks) {
        let job = job.clone();
        launch.shared.pool.push(Box::new(move || job.help()));
    }
    job.help();
    Ok(Step::Suspended)
}

/// A big task shared by several workers.
struct ChunkJob {
    launch: Arc<Launch>,
    stream: usize,
    task: Prepared,
    chunk: usize,
    chunks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

impl ChunkJob {
    fn help(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks {
                return;
            }
            let from = i * self.chunk;
            self.task
                .run_range(from, self.chunk.min(self.task.len - from));
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.chunks {
                self.launch.advance(self.stream);
                self.launch.resume(self.stream);
            }
        }
    }
}

fn prepare(launch: &Launch, task: &Task, at: TaskLocation) -> Result<Prepared, DeviceError> {
    let (kind, reads, writes) = match task {
        Task::Copy { src, dsts } => (Kind::Copy, std::slice::from_ref(src), dsts.as_slice()),
        Task::Reduce {
            srcs,
            dsts,
            dtype,
            op,
        } => (Kind::Reduce(*dtype, *op), srcs.as_slice(), dsts.as_slice()),
        Task::Post { .. } | Task::Wait { .. } => unreachable!("not a data task"),
    };
    let invalid = |slice: Slice, reason: String| DeviceError::InvalidSlice { at, slice, reason };
    let len = writes.first().map_or(0, |s| s.len);
    if reads.is_empty() || writes.is_empty() {
        return Err(DeviceError::InvalidTask {
            at,
            reason: "a data task needs sources and destinations".into(),
        });
    }
    let mut keep = SmallVec::new();
    let mut resolve = |slice: Slice, write: bool| -> Result<(*mut u8, Slice), DeviceError> {
        check_slice(launch, slice, len, kind, write).map_err(|r| invalid(slice, r))?;
        let resolved = launch
            .shared
            .memory
            .resolve(slice.rank, slice.buf, launch.scratch)
            .map_err(|r| invalid(slice, r))?;
        let region = resolved.region;
        // Checked on its own (not trusting `Slice::end` or any earlier validation): the
        // sum must not wrap and must stay within the region.
        let inside = slice
            .offset
            .checked_add(slice.len)
            .is_some_and(|end| end <= region.len);
        if !inside {
            return Err(invalid(
                slice,
                format!("the buffer has only {} bytes", region.len),
            ));
        }
        if write && !region.writable {
            return Err(invalid(slice, "the buffer is read-only".into()));
        }
        // SAFETY: `offset + len` did not overflow and is at most `region.len`, so
        // `ptr + offset` and every byte up to `ptr + offset + len` lie in the region.
        let ptr = unsafe { region.ptr.add(slice.offset) };
        if let Kind::Reduce(dtype, _) = kind {
            if !(ptr as usize).is_multiple_of(dtype.size()) {
                return Err(invalid(
                    slice,
                    format!("not aligned to {} bytes for {dtype}", dtype.size()),
                ));
            }
        }
        if resolved.keep.is_some() {
            keep.push(resolved);
        }
        Ok((ptr, slice))
    };
    let srcs = reads
        .iter()
        .map(|s| resolve(*s, false))
        .collect::<Result<Ptrs<_>, _>>()?;
    let dsts = writes
        .iter()
        .map(|s| resolve(*s, true))
        .collect::<Result<Ptrs<_>, _>>()?;
    check_overlaps(&srcs, &dsts, len, matches!(kind, Kind::Reduce(..)))
        .map_err(|(s, r)| invalid(s, r))?;
    Ok(Prepared {
        kind,
        srcs: srcs.into_iter().map(|(p, _)| p as *const u8).collect(),
        dsts: dsts.into_iter().map(|(p, _)| p).collect(),
        len,
        _keep: keep,
    })
}

fn check_slice(
    launch: &Launch,
    slice: Slice,
    len: usize,
    kind: Kind,
    write: bool,
) -> Result<(), String> {
    if slice.rank >= launch.shared.config.ranks {
        return Err(format!("rank {} does not exist", slice.rank));
    }
    if slice.len != len {
        return Err(format!(
            "length {} differs from the task's {len}",
            slice.len
        ));
    }
    if write && slice.buf == crate::ir::Buf::Input {
        return Err("programs must not write the user's Input".into());
    }
    if let Kind::Reduce(dtype, _) = kind {
        if !slice.len.is_multiple_of(dtype.size()) {
            return Err(format!(
                "length is not a multiple of the {dtype} size {}",
                dtype.size()
            ));
        }
    }
    Ok(())
}

/// Destinations must not overlap each other or any source, except that a Reduce may list a
/// destination among its sources exactly (accumulate in place).
fn check_overlaps(
    srcs: &[(*mut u8, Slice)],
    dsts: &[(*mut u8, Slice)],
    len: usize,
    reduce: bool,
) -> Result<(), (Slice, String)> {
    let overlap = |a: *mut u8, b: *mut u8| {
        let (a, b) = (a as usize, b as usize);
        // Both ranges were checked to lie inside live regions, so these sums do not wrap;
        // saturating keeps the check sound even if they did.
        len > 0 && a < b.saturating_add(len) && b < a.saturating_add(len)
    };
    for (i, &(d, ds)) in dsts.iter().enumerate() {
        for &(o, os) in &dsts[i + 1..] {
            if overlap(d, o) {
                return Err((ds, format!("overlaps another destination {os}")));
            }
        }
        for &(s, ss) in srcs {
            if overlap(d, s) && !(reduce && d == s) {
                return Err((ds, format!("overlaps source {ss}")));
            }
        }
    }
    Ok(())
}
