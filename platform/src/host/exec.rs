//! Copy and Reduce on the host: bind, run inline or split across workers.
//!
//! `compile` resolved and checked every slice it could (see [`super::compile`]): device
//! buffers are addresses, the rank's own user buffers are offsets within the extent
//! `submit` checked against the binding. Running such a task checks nothing again. A task
//! that touches a peer's user buffer (zero-copy) is *dynamic*: the peer's binding is only
//! known now, so its slices are checked against it (inside, writable, aligned) and the
//! task's overlaps are checked, before a byte moves. A task that breaks a rule is an error
//! naming rank, stream, task and slice, never undefined behaviour. Ordering between tasks
//! is the program's duty; the analyzer proves it, and a racy program on the host yields
//! wrong values, never an out-of-bounds access.
//!
//! A task with destinations on ranks reached over TCP computes its result in place (its
//! local destination, its source for a Copy, or a temporary for a Reduce with none) and
//! sends it to each, from the stream's thread: the next task starts once the bytes are in
//! the socket's buffer.
//!
//! Tasks that move at least [`SPLIT_BYTES`] through memory ([`traffic_bytes`]) are cut
//! into 64-byte aligned chunks that idle workers pick up; the worker that finishes the
//! last chunk resumes the stream.

use super::compile::{DataOp, HostProgram, Kind, Operand, Place};
use super::launch::{Launch, Step};
use super::memory::UserRegions;
use crate::error::{DeviceError, SliceFault, TaskLocation};
use crate::ir::{Buf, Slice};
use crate::reduce::{copy_part, copy_streams, reduce_part, CopyScope};
use crate::slice_checks::{check_overlaps, HasSlice};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Tasks that move at least this many bytes through memory ([`traffic_bytes`]) are split
/// across workers.
pub const SPLIT_BYTES: usize = 1 << 20;
/// Smallest chunk a split produces, in bytes moved through memory as [`SPLIT_BYTES`].
const MIN_CHUNK: usize = 256 << 10;

/// What a Copy or Reduce of `len` bytes with `operands` sources and destinations in all
/// moves through memory, counted as a copy's length is (`len * operands / 2`): a copy of
/// 1 MiB moves 1 MiB, a Reduce of 8 sources into one destination moves 4.5 times its
/// length. The cost model counts a task's memory traffic the same way, so the two agree on
/// which tasks split.
pub fn traffic_bytes(len: usize, operands: usize) -> usize {
    len.saturating_mul(operands) / 2
}

/// A data task with its memory bound.
struct Prepared {
    kind: Kind,
    srcs: Ptrs<*const u8>,
    dsts: Ptrs<*mut u8>,
    len: usize,
    /// A Copy's stores stream ([`copy_streams`]); decided for the whole task, so that its
    /// chunks store alike.
    streaming: bool,
    /// What keeps the peers' user buffers the pointers point into: their registrations
    /// (ranks of this process), or this process's mappings of them (ranks elsewhere).
    keep: SmallVec<[Arc<dyn Send + Sync>; 2]>,
}

/// Pointer lists sized for a mesh of up to 16 ranks without touching the heap.
type Ptrs<T> = SmallVec<[T; 16]>;

// SAFETY: the pointers were checked against live regions (at compile for device buffers,
// at submit for the rank's own user buffers, here for peers'), and `keep` holds the
// registrations of peers' user buffers, so they stay valid while this lives.
unsafe impl Send for Prepared {}
// SAFETY: as above; chunks touch disjoint byte ranges.
unsafe impl Sync for Prepared {}

impl Prepared {
    /// An unbound task of `task`'s kind and length, in `program`. A Copy that also sends
    /// its result over TCP streams by its own size alone: the send reads the result back
    /// right away, from the cache unless it streamed.
    fn new(task: &DataOp, program: &HostProgram) -> Self {
        let scope = match task.remote.is_empty() {
            true => CopyScope {
                program_bytes: program.moved,
                footprint: program.footprint,
            },
            false => CopyScope::default(),
        };
        Prepared {
            kind: task.kind,
            srcs: Ptrs::new(),
            dsts: Ptrs::new(),
            len: task.len,
            streaming: copy_streams(task.len, task.dsts.len(), scope),
            keep: SmallVec::new(),
        }
    }

    /// Run the whole task (the common case: no chunk offsets to apply).
    fn run_all(&self) {
        // SAFETY: as in `run_range`, with `from = 0` and `len = self.len`.
        unsafe { self.run_at(&self.srcs, &self.dsts, self.len) }
    }

    /// Run bytes `[from, from + len)` of the task.
    fn run_range(&self, from: usize, len: usize) {
        let srcs: Ptrs<*const u8> = self.srcs.iter().map(|p| p.wrapping_add(from)).collect();
        let dsts: Ptrs<*mut u8> = self.dsts.iter().map(|p| p.wrapping_add(from)).collect();
        // SAFETY: `from + len <= self.len`, and chunk offsets are multiples of 64, so the
        // shifted pointers keep the bounds and alignment `run_at` needs.
        unsafe { self.run_at(&srcs, &dsts, len) }
    }

    /// # Safety
    /// `srcs` and `dsts` are this task's operands, shifted alike by at most
    /// `self.len - len` bytes: bounds, alignment to the element size and that every dst
    /// either equals a src or overlaps none were checked at compile (static operands),
    /// submit (own user buffers) or in `bind` (peers').
    unsafe fn run_at(&self, srcs: &[*const u8], dsts: &[*mut u8], len: usize) {
        // A chunk stores as its whole task does (streaming or not).
        let whole = self.len;
        match self.kind {
            // SAFETY: see the function's contract (a Copy's dst overlaps no src).
            Kind::Copy => unsafe { copy_part(srcs[0], dsts, len, self.streaming) },
            // SAFETY: see the function's contract.
            Kind::Reduce(dtype, op) => unsafe {
                reduce_part(dtype, op, srcs, dsts, len / dtype.size(), whole)
            },
        }
    }
}

/// Where a zero-copy task finds its peers' user buffers.
#[derive(Clone, Copy)]
enum PeerRegions<'r> {
    /// The device's registry: a peer may end its call and unregister at any time, so the
    /// task keeps the peer's registration while it runs.
    Registered,
    /// A serial run's (see `serial`), by local slot: every launch of the run stays
    /// registered until the run is over, so nothing needs keeping.
    Serial(&'r [Option<UserRegions>]),
}

/// A data task bound for a serial run (see `serial`): its pointers hold while the user
/// buffers it was bound with stay bound (the device's own buffers live as long as it).
pub(crate) struct BoundTask(Prepared);

impl BoundTask {
    /// Bind `task` of `launch` with the serial run's `regions` (by local slot), checking
    /// every operand as [`run_data_task`] does.
    pub(crate) fn bind(
        launch: &Launch,
        task: &DataOp,
        at: TaskLocation,
        regions: &[Option<UserRegions>],
    ) -> Result<Self, DeviceError> {
        let mut prepared = Prepared::new(task, &launch.program);
        bind(
            launch,
            task,
            at,
            PeerRegions::Serial(regions),
            &mut prepared,
        )?;
        Ok(BoundTask(prepared))
    }

    /// Run the task inline.
    ///
    /// # Safety
    /// The user buffers it was bound with are bound now, at the same addresses and
    /// lengths, and no other thread touches the bytes it reads or writes.
    pub(crate) unsafe fn run(&self) {
        self.0.run_all()
    }
}

/// Run a Copy or Reduce task of `launch`'s stream `at.stream`.
pub(crate) fn run_data_task(
    launch: &Arc<Launch>,
    task: &DataOp,
    at: TaskLocation,
) -> Result<Step, DeviceError> {
    let mut prepared = Prepared::new(task, &launch.program);
    bind(launch, task, at, PeerRegions::Registered, &mut prepared)?;
    if !task.remote.is_empty() {
        return run_with_puts(launch, task, &prepared).map(|()| Step::Next);
    }
    let threads = launch.shared.pool.threads();
    let operands = prepared.srcs.len() + prepared.dsts.len();
    // A small program's tasks run whole: it wakes no worker (see `pool`), and the linked
    // sequences of `serial` run its tasks inline as well.
    let whole = launch.program.small()
        || traffic_bytes(prepared.len, operands) < SPLIT_BYTES
        || threads < 2;
    if whole {
        prepared.run_all();
        return Ok(Step::Next);
    }
    // The shortest chunk moves MIN_CHUNK through memory.
    let min_chunk = MIN_CHUNK.saturating_mul(2) / operands.max(1);
    let chunk = (prepared.len / (threads * 4))
        .max(min_chunk)
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

/// Run a bound task with remote destinations: its result, computed here, is sent to each.
fn run_with_puts(launch: &Launch, task: &DataOp, p: &Prepared) -> Result<(), DeviceError> {
    let tcp = launch
        .shared
        .tcp
        .as_ref()
        .expect("compile makes remote operands only over tcp");
    let mut temp: Vec<u64> = Vec::new();
    let result: *const u8 = match (p.dsts.first(), task.kind) {
        (Some(&dst), _) => {
            p.run_all();
            dst
        }
        (None, Kind::Copy) => p.srcs[0],
        (None, Kind::Reduce(..)) => {
            // u64 words: aligned for every element type.
            temp.resize(p.len.div_ceil(8), 0);
            let dst = temp.as_mut_ptr().cast::<u8>();
            // SAFETY: `temp` holds at least `len` bytes, aligned to 8, and overlaps no
            // source; the sources were bound as for any task.
            unsafe { p.run_at(&p.srcs, &[dst], p.len) };
            dst
        }
    };
    // SAFETY: `result` points at `len` bytes bound (or allocated) above, which nothing
    // writes while this stream sends them.
    let bytes = unsafe { std::slice::from_raw_parts(result, p.len) };
    let slot = launch.program.slot;
    for o in &task.remote {
        let Place::Remote { rank, target } = o.place else {
            unreachable!("only remote operands are listed as remote")
        };
        let post = (task.then_post, launch.epoch);
        tcp.write(slot, rank, (target, o.slice.offset), bytes, post)
            .map_err(|e| launch.shared.tcp_send_failed(e))?;
    }
    Ok(())
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

/// The address of a static operand.
fn static_ptr(launch: &Launch, o: &Operand) -> *mut u8 {
    match o.place {
        Place::Fixed(p) => p,
        Place::Own => {
            let region = if o.slice.buf == Buf::Input {
                launch.user.input
            } else {
                launch.user.output
            };
            // SAFETY: `submit` checked that the bound buffer is at least the program's
            // extent for it, which covers `offset + len` of every own-buffer slice.
            unsafe { region.ptr.add(o.slice.offset) }
        }
        Place::Peer(_) | Place::Afar(_) => unreachable!("dynamic operand"),
        Place::Remote { .. } => unreachable!("remote operands are sent, not bound"),
    }
}

/// Bind a compiled task's operands to memory, into `p`: static ones directly, a dynamic
/// task's peer operands after checking them against the peer's binding, and then its
/// overlaps.
fn bind(
    launch: &Launch,
    task: &DataOp,
    at: TaskLocation,
    peers: PeerRegions<'_>,
    p: &mut Prepared,
) -> Result<(), DeviceError> {
    if !task.dynamic {
        p.srcs
            .extend(task.srcs.iter().map(|o| static_ptr(launch, o) as *const u8));
        p.dsts
            .extend(task.dsts.iter().map(|o| static_ptr(launch, o)));
        return Ok(());
    }
    let invalid = |(slice, fault)| DeviceError::InvalidSlice { at, slice, fault };
    // Plain loops with a small error type: this runs for every zero-copy task, and
    // collecting through `Result<_, DeviceError>` moves a large error-sized value per
    // operand.
    let mut srcs: Ptrs<Bound> = Ptrs::new();
    for o in &task.srcs {
        srcs.push(resolve(launch, task, o, (false, peers), &mut p.keep).map_err(invalid)?);
    }
    let mut dsts: Ptrs<Bound> = Ptrs::new();
    for o in &task.dsts {
        dsts.push(resolve(launch, task, o, (true, peers), &mut p.keep).map_err(invalid)?);
    }
    let reduce = matches!(task.kind, Kind::Reduce(..));
    check_overlaps(&srcs, &dsts, task.len, reduce, |b| (0, b.0 as usize)).map_err(invalid)?;
    p.srcs.extend(srcs.iter().map(|b| b.0 as *const u8));
    p.dsts.extend(dsts.iter().map(|b| b.0));
    Ok(())
}

/// Bind one operand of a dynamic task: a peer's user-buffer slice is checked against the
/// peer's binding (inside, writable, aligned) and its registration kept in `keep`.
fn resolve(
    launch: &Launch,
    task: &DataOp,
    o: &Operand,
    (write, peers): (bool, PeerRegions<'_>),
    keep: &mut SmallVec<[Arc<dyn Send + Sync>; 2]>,
) -> Result<Bound, (Slice, SliceFault)> {
    let slice = o.slice;
    let (region, reg): (_, Option<Arc<dyn Send + Sync>>) = match (o.place, peers) {
        (Place::Peer(slot), PeerRegions::Registered) => {
            let (region, reg) = launch
                .shared
                .memory
                .peer_user(slot, slice.rank, slice.buf, launch.epoch)
                .map_err(|f| (slice, f))?;
            (region, Some(reg))
        }
        (Place::Afar(rank), PeerRegions::Registered) => {
            let shm = launch.shared.shm.as_ref();
            let unbound = SliceFault::Unbound {
                rank,
                buf: slice.buf,
            };
            let (region, mapping) = shm
                .ok_or(unbound)
                .and_then(|shm| shm.peer_user(rank, slice.buf, launch.epoch))
                .map_err(|f| (slice, f))?;
            (region, Some(mapping))
        }
        // A serial run never has peers in other processes: it refuses their posts.
        (Place::Afar(rank), PeerRegions::Serial(_)) => {
            let buf = slice.buf;
            return Err((slice, SliceFault::Unbound { rank, buf }));
        }
        (Place::Peer(slot), PeerRegions::Serial(regions)) => {
            let unbound = (
                slice,
                SliceFault::Unbound {
                    rank: slice.rank,
                    buf: slice.buf,
                },
            );
            let regs = regions.get(slot).copied().flatten().ok_or(unbound)?;
            let region = if slice.buf == Buf::Input {
                regs.input
            } else {
                regs.output
            };
            (region, None)
        }
        _ => return Ok(Bound(static_ptr(launch, o), o.slice)),
    };
    let inside = slice
        .offset
        .checked_add(slice.len)
        .is_some_and(|end| end <= region.len);
    if !inside {
        let buffer_len = region.len;
        return Err((slice, SliceFault::OutOfBounds { buffer_len }));
    }
    if write && !region.writable {
        return Err((slice, SliceFault::ReadOnly));
    }
    // SAFETY: `offset + len` did not overflow and is at most `region.len`; `reg` (kept
    // with the prepared task) keeps the peer's buffer registered, or mapped.
    let ptr = unsafe { region.ptr.add(slice.offset) };
    if let Kind::Reduce(dtype, _) = task.kind {
        if !(ptr as usize).is_multiple_of(dtype.size()) {
            return Err((slice, SliceFault::Misaligned { dtype }));
        }
    }
    keep.extend(reg);
    Ok(Bound(ptr, slice))
}

/// An operand bound to its address.
#[derive(Copy, Clone)]
struct Bound(*mut u8, Slice);

impl HasSlice for Bound {
    fn slice(&self) -> Slice {
        self.1
    }
}
