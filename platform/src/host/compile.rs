//! Compile on the host: a rank's program with every fact that does not depend on the
//! user's buffers resolved and checked once.
//!
//! For every data task, each slice becomes an [`Operand`]:
//!
//! - a device-owned slice (CclIn, CclOut, Scratch of a local rank) becomes its address,
//!   checked inside its buffer, aligned for reductions;
//! - a slice of the rank's own Input or Output stays an offset; its end counts toward the
//!   program's user extent, which `submit` compares with the bound buffer's length once
//!   (O(buffers), not per task), and its alignment need toward the binding's;
//! - a slice of a peer's Input or Output (zero-copy) can only be checked against the
//!   peer's binding when the task runs, so the task is marked *dynamic*;
//! - a slice of a TCP peer's CclIn, CclOut or Scratch (a put-only link) may only be
//!   written: it becomes a [`Place::Remote`], checked against the buffer's size (the CCL
//!   buffers', or the scratch size the peer announced), and the task sends its result
//!   there; reading it is refused ([`SliceFault::ReadOverPutLink`]).
//!
//! Lengths, writes to Input, element multiples and overlaps between a task's static
//! operands are checked here, so running a non-dynamic task checks nothing. Notifies
//! become signal-bank words; a program that names a rank the device does not serve is
//! refused with [`ConfigFault::NotServed`].

use super::launch::{Reach, Shared};
use crate::device::{CompileRequest, Compiled};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{DeviceError, SliceFault, TaskFault, TaskLocation};
use crate::ir::{Buf, NotifyId, Rank, Slice, Task};
use crate::notify::LinkSignal;
use crate::slice_checks::{check_overlaps, check_slice, within, HasSlice, UserReach};
use crate::transport::tcp::wire::Target;
use smallvec::SmallVec;
use std::sync::Arc;

/// What a data task does.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Kind {
    Copy,
    Reduce(DataType, ReduceOp),
}

/// Where a slice's bytes are.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Place {
    /// A device-owned buffer: the slice's first byte, bounds checked at compile.
    Fixed(*mut u8),
    /// The rank's own user buffer (Input or Output): base plus `slice.offset`, within the
    /// extent `submit` checked against the binding.
    Own,
    /// A peer's user buffer (its local slot): checked against its binding when run.
    Peer(usize),
    /// The user buffer of a rank in another process of this host, which maps it (see
    /// `shm/user.rs`): found through the rank's binding record and checked when run.
    Afar(Rank),
    /// A buffer of a rank reached over TCP: a destination only, sent as a Write frame.
    Remote { rank: usize, target: Target },
}

/// One slice of a data task, resolved as far as compile can.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Operand {
    pub place: Place,
    pub slice: Slice,
}

/// A Copy or Reduce with its operands resolved.
#[derive(Debug)]
pub(crate) struct DataOp {
    pub kind: Kind,
    pub len: usize,
    pub srcs: SmallVec<[Operand; 4]>,
    /// The destinations in this process's memory.
    pub dsts: SmallVec<[Operand; 4]>,
    /// The destinations on ranks reached over TCP ([`Place::Remote`]): the task's result
    /// is sent to each.
    pub remote: SmallVec<[Operand; 1]>,
    /// The link word of the one remote destination's rank that the next task posts,
    /// sent with the data (that task is then [`Op::Fused`]).
    pub then_post: Option<usize>,
    /// Touches a peer's user buffer: bounds, alignment and overlaps are checked when run.
    pub dynamic: bool,
}

/// One task, compiled.
#[derive(Debug)]
pub(crate) enum Op {
    /// Boxed: operands are large, and signals are most of the tasks.
    Data(Box<DataOp>),
    /// Post word `word` of the bank of local slot `slot`.
    Post {
        slot: usize,
        word: usize,
        notify: NotifyId,
    },
    /// Post word `word` (of the link region) of `rank`, served by another device and
    /// reached through shared memory.
    PostAfar {
        rank: usize,
        word: usize,
        notify: NotifyId,
    },
    /// Post word `word` (of the link region) of `rank`, reached over TCP.
    PostTcp { rank: usize, word: usize },
    /// Nothing: a Post over TCP sent with the data task before it.
    Fused,
    /// Wait on word `word` of the rank's own bank.
    Wait { word: usize, notify: NotifyId },
}

/// The host's part of a [`Compiled`].
#[derive(Debug)]
pub(crate) struct HostProgram {
    pub slot: usize,
    pub streams: Vec<Vec<Op>>,
    /// What the exit fence waits for (zero-copy): the fence peers that may touch the
    /// rank's user buffers, which leaves out those reached over TCP or RDMA. A put-only
    /// link writes only a peer's CCL buffers and scratch (the wire has no other target),
    /// so such a peer never reads or writes this rank's user buffers; and this rank's own
    /// puts read their sources before the task ends (into the socket, or through the RDMA
    /// bounce buffer with its completion awaited). Waiting for such a peer's
    /// epoch at exit would only add a message's latency to every zero-copy call of a job
    /// across hosts. The entry fence still waits for it (it writes the CCL buffers).
    pub exit_slots: Arc<[usize]>,
    /// What the entry fence waits for: the rank's own slot first (its previous epoch, when
    /// its submissions are queued), then the fence peers' slots (local, or proxies of
    /// peers in other devices).
    pub entry_slots: Arc<[usize]>,
    /// The words of its rank's bank a post of this program's operation may land on:
    /// looked at when its streams end, for notifies left set (see `launch.rs`).
    pub watched: Box<[usize]>,
    /// Bytes its data tasks move in all (each one's length times its destinations): a
    /// small program runs inline ([`HostProgram::small`]), a large one's copies stream
    /// (see `reduce::copy_streams`).
    pub moved: usize,
    /// The operation's footprint on this host ([`CompileRequest::footprint`]).
    pub footprint: usize,
}

impl HostProgram {
    /// Latency-bound: its data tasks move at most [`INLINE_BYTES`] in all, so its streams
    /// run on the submitting thread rather than wake a worker (see the pool).
    pub fn small(&self) -> bool {
        self.moved <= INLINE_BYTES
    }
}

/// Programs whose data tasks move at most this many bytes in all are small (the cost
/// model's CPU hosts know it as `Processor::inline_bytes`).
pub const INLINE_BYTES: usize = 64 << 10;

// SAFETY: the raw pointers in `Place::Fixed` point into device-owned buffers that live as
// long as the device (and its `Shared`, which every launch holds); they are only
// dereferenced by tasks, whose ordering the program guarantees.
unsafe impl Send for HostProgram {}
// SAFETY: as above; a HostProgram is read-only after compile.
unsafe impl Sync for HostProgram {}

/// Compile `request` for the host device behind `shared`.
pub(crate) fn compile(
    shared: &Arc<Shared>,
    request: CompileRequest,
) -> Result<Arc<Compiled>, DeviceError> {
    let program = &request.program;
    let rank = program.rank;
    let slot = shared.slot(rank)?;
    let peer_slots = request
        .peers
        .iter()
        .map(|&p| {
            shared
                .fence_slot(p)
                .ok_or_else(|| shared.config.not_served(p))
        })
        .collect::<Result<Vec<usize>, _>>()?;
    let exit_slots = request
        .peers
        .iter()
        .zip(&peer_slots)
        .filter(|&(&p, _)| !matches!(shared.reach(p), Reach::Tcp))
        .map(|(_, &slot)| slot)
        .collect();
    // Their Done epochs come back on the connections to them (see `host::tcp`).
    for &peer in &request.peers {
        connect(shared, slot, peer)?;
    }
    let table_len = shared.layout.table_len(request.local_notifies);
    let link_words = shared.layout.local_base() as usize;
    // The rank's own local region: grown here, not per task.
    shared.banks[slot].reserve_local(request.local_notifies);
    let mut c = Compiler {
        shared,
        slot,
        request: &request,
        user: UserReach::default(),
    };
    let mut streams = Vec::with_capacity(program.streams.len());
    let mut tasks = 0;
    let mut moved = 0usize;
    for (s, stream) in program.streams.iter().enumerate() {
        let mut ops = Vec::with_capacity(stream.tasks.len());
        for (t, task) in stream.tasks.iter().enumerate() {
            let at = TaskLocation {
                rank,
                stream: s,
                task: t,
            };
            let no_notify = |notify: NotifyId| DeviceError::InvalidTask {
                at,
                fault: TaskFault::NoSuchNotify {
                    notify,
                    rank: notify.rank,
                    len: table_len,
                },
            };
            let op = match *task {
                Task::Post { notify } => {
                    let index = notify.index as usize;
                    if index >= table_len {
                        return Err(no_notify(notify));
                    }
                    let rank = notify.rank;
                    // A peer elsewhere: only its link region is reachable.
                    let link_only = |op| match index < link_words {
                        true => Ok(op),
                        false => Err(no_notify(notify)),
                    };
                    match shared.reach(rank) {
                        Reach::Local(target) => {
                            if index >= link_words {
                                shared.banks[target].reserve_local(index + 1 - link_words);
                            }
                            Op::Post {
                                slot: target,
                                word: index,
                                notify,
                            }
                        }
                        Reach::Shm => link_only(Op::PostAfar {
                            rank,
                            word: index,
                            notify,
                        })?,
                        Reach::Tcp => {
                            connect(shared, slot, rank)?;
                            link_only(Op::PostTcp { rank, word: index })?
                        }
                        Reach::Not => return Err(shared.config.not_served(rank)),
                    }
                }
                Task::Wait { notify } => {
                    if notify.rank != rank {
                        return Err(DeviceError::InvalidTask {
                            at,
                            fault: TaskFault::RemoteWait { notify },
                        });
                    }
                    if notify.index as usize >= table_len {
                        return Err(no_notify(notify));
                    }
                    Op::Wait {
                        word: notify.index as usize,
                        notify,
                    }
                }
                Task::Copy { .. } | Task::Reduce { .. } => Op::Data(Box::new(c.data(task, at)?)),
            };
            if let Op::Data(d) = &op {
                let dsts = d.dsts.len() + d.remote.len();
                moved = moved.saturating_add(d.len.saturating_mul(dsts));
            }
            ops.push(op);
            tasks += 1;
        }
        fuse_puts(&mut ops);
        streams.push(ops);
    }
    let UserReach { extent, align } = c.user;
    let watched = watched_words(shared, &request, &streams);
    Ok(Arc::new(Compiled {
        rank,
        peers: request.peers.clone(),
        in_place: request.in_place,
        exit_fence: request.exit_fence,
        user_extent: extent,
        user_align: align,
        tasks,
        device_id: shared.id,
        backend: Arc::new(HostProgram {
            slot,
            streams,
            entry_slots: std::iter::once(slot)
                .chain(peer_slots.iter().copied().filter(|&p| p != slot))
                .collect(),
            exit_slots,
            watched,
            moved,
            footprint: request.footprint,
        }),
    }))
}

/// The words of the program's rank that a post of its operation may land on: the link
/// words of every fence peer (a peer that posts here holds a link, so it is one), every
/// word the program waits on, and the rank's local region. Sorted, without repeats.
fn watched_words(shared: &Shared, request: &CompileRequest, streams: &[Vec<Op>]) -> Box<[usize]> {
    let per_peer = shared.layout.link_channels * LinkSignal::COUNT;
    let local_base = shared.layout.local_base() as usize;
    let rank = request.program.rank;
    let peers = request.peers.iter().filter(|&&p| p != rank);
    let mut words: Vec<usize> = peers
        .flat_map(|&p| p * per_peer..(p + 1) * per_peer)
        .chain(streams.iter().flatten().filter_map(|op| match *op {
            Op::Wait { word, .. } => Some(word),
            _ => None,
        }))
        .chain(local_base..local_base + request.local_notifies)
        .collect();
    words.sort_unstable();
    words.dedup();
    words.into()
}

/// Connect local slot `slot` to `rank` if it is reached over TCP and not yet connected.
fn connect(shared: &Shared, slot: usize, rank: Rank) -> Result<(), DeviceError> {
    match &shared.tcp {
        Some(tcp) if tcp.reaches(rank) => tcp.ensure(slot, rank),
        _ => Ok(()),
    }
}

/// A data task whose one remote destination's rank the next task posts over TCP sends
/// both in one go: the post rides with the data ([`DataOp::then_post`]).
fn fuse_puts(ops: &mut [Op]) {
    for i in 1..ops.len() {
        let Op::PostTcp { rank, word } = ops[i] else {
            continue;
        };
        let Op::Data(data) = &mut ops[i - 1] else {
            continue;
        };
        let to_rank = |o: &Operand| matches!(o.place, Place::Remote { rank: r, .. } if r == rank);
        if data.remote.len() == 1 && to_rank(&data.remote[0]) && data.then_post.is_none() {
            data.then_post = Some(word);
            ops[i] = Op::Fused;
        }
    }
}

struct Compiler<'a> {
    shared: &'a Arc<Shared>,
    /// The program's rank's local slot.
    slot: usize,
    request: &'a CompileRequest,
    /// How far the program reaches into its rank's own user buffers.
    user: UserReach,
}

impl Compiler<'_> {
    fn data(&mut self, task: &Task, at: TaskLocation) -> Result<DataOp, DeviceError> {
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
        if reads.is_empty() || writes.is_empty() {
            return Err(DeviceError::InvalidTask {
                at,
                fault: TaskFault::NoOperands,
            });
        }
        let len = writes[0].len;
        let srcs = reads
            .iter()
            .map(|s| self.operand(*s, len, kind, false, at))
            .collect::<Result<SmallVec<[Operand; 4]>, _>>()?;
        let mut dsts = SmallVec::<[Operand; 4]>::new();
        let mut remote = SmallVec::<[Operand; 1]>::new();
        for s in writes {
            let o = self.operand(*s, len, kind, true, at)?;
            match o.place {
                Place::Remote { .. } => remote.push(o),
                _ => dsts.push(o),
            }
        }
        let dynamic = srcs
            .iter()
            .chain(&dsts)
            .any(|o| matches!(o.place, Place::Peer(_) | Place::Afar(_)));
        if !dynamic {
            let in_place = self.request.in_place;
            let key = |o: &Operand| match o.place {
                Place::Fixed(p) => (0, p as usize),
                // In place, Input and Output are one buffer; out of place they are two
                // distinct borrows, which cannot overlap each other or device memory.
                Place::Own if in_place => (1, o.slice.offset),
                Place::Own => (1 + o.slice.buf as usize, o.slice.offset),
                Place::Peer(_) | Place::Afar(_) | Place::Remote { .. } => {
                    unreachable!("not dynamic, not remote")
                }
            };
            let reduce = matches!(kind, Kind::Reduce(..));
            check_overlaps(&srcs, &dsts, len, reduce, key)
                .map_err(|(slice, fault)| DeviceError::InvalidSlice { at, slice, fault })?;
        }
        Ok(DataOp {
            kind,
            len,
            srcs,
            dsts,
            remote,
            then_post: None,
            dynamic,
        })
    }

    fn operand(
        &mut self,
        slice: Slice,
        len: usize,
        kind: Kind,
        write: bool,
        at: TaskLocation,
    ) -> Result<Operand, DeviceError> {
        let invalid = |fault| DeviceError::InvalidSlice { at, slice, fault };
        let shared = self.shared;
        let elem = match kind {
            Kind::Reduce(dtype, _) => Some(dtype),
            Kind::Copy => None,
        };
        check_slice(slice, shared.config.ranks, len, elem, write).map_err(invalid)?;
        let reach = shared.reach(slice.rank);
        let place = match slice.buf {
            Buf::Input | Buf::Output if slice.rank == self.request.program.rank => {
                self.user.note(slice, elem).map_err(invalid)?;
                Place::Own
            }
            Buf::Input | Buf::Output => match reach {
                Reach::Local(slot) => Place::Peer(slot),
                Reach::Shm if shared.shm.as_ref().is_some_and(|s| s.user_buffers) => {
                    Place::Afar(slice.rank)
                }
                Reach::Shm | Reach::Tcp => {
                    return Err(invalid(SliceFault::UserBufferOutOfReach {
                        rank: slice.rank,
                    }))
                }
                Reach::Not => return Err(shared.config.not_served(slice.rank)),
            },
            buf => {
                let scratch = self.request.scratch.map(|s| s.0);
                let region = match reach {
                    Reach::Local(slot) => shared.memory.device_region(slot, buf, scratch),
                    Reach::Shm => self.peer_region(slice.rank, buf, scratch),
                    Reach::Tcp => return self.remote(slice, buf, write, at),
                    Reach::Not => return Err(shared.config.not_served(slice.rank)),
                }
                .map_err(invalid)?;
                within(slice, region.len).map_err(invalid)?;
                // SAFETY: `offset + len` did not overflow and is at most `region.len`, so
                // `ptr + offset` and every byte up to `ptr + offset + len` lie in the
                // region, which lives as long as the device.
                let ptr = unsafe { region.ptr.add(slice.offset) };
                if let Some(dtype) = elem {
                    if !(ptr as usize).is_multiple_of(dtype.size()) {
                        return Err(invalid(SliceFault::Misaligned { dtype }));
                    }
                }
                Place::Fixed(ptr)
            }
        };
        Ok(Operand { place, slice })
    }
}

impl Compiler<'_> {
    /// A device buffer of a rank reached over TCP: a write destination only, inside the
    /// buffer as far as this rank knows its size (connecting to the rank first, which
    /// tells this one its scratch sizes).
    fn remote(
        &self,
        slice: Slice,
        buf: Buf,
        write: bool,
        at: TaskLocation,
    ) -> Result<Operand, DeviceError> {
        let invalid = |fault| DeviceError::InvalidSlice { at, slice, fault };
        let rank = slice.rank;
        if !write {
            return Err(invalid(SliceFault::ReadOverPutLink { rank }));
        }
        let tcp = self.shared.tcp.as_ref().expect("checked by the caller");
        tcp.ensure(self.slot, rank)?;
        let (target, buffer_len) = match buf {
            Buf::CclIn => (Target::CclIn, tcp.ccl_bytes()),
            Buf::CclOut => (Target::CclOut, tcp.ccl_bytes()),
            Buf::Scratch => {
                let id = self
                    .request
                    .scratch
                    .ok_or(invalid(SliceFault::NoScratch))?
                    .0;
                (
                    Target::Scratch(id as u64),
                    tcp.scratch_len(self.slot, rank, id)?,
                )
            }
            Buf::Input | Buf::Output => unreachable!("user buffers are not device regions"),
        };
        within(slice, buffer_len).map_err(invalid)?;
        Ok(Operand {
            place: Place::Remote { rank, target },
            slice,
        })
    }

    /// A device buffer of a peer in another device, mapped here.
    fn peer_region(
        &self,
        rank: usize,
        buf: Buf,
        scratch: Option<usize>,
    ) -> Result<super::memory::Region, SliceFault> {
        let shm = self
            .shared
            .shm
            .as_ref()
            .expect("a peer is reached through shm");
        let peer = shm.peer(rank).expect("checked by the caller");
        match buf {
            Buf::CclIn => Ok(peer.block.ccl_in()),
            Buf::CclOut => Ok(peer.block.ccl_out()),
            Buf::Scratch => {
                let id = scratch.ok_or(SliceFault::NoScratch)?;
                shm.peer_scratch(rank, id)
                    .ok_or(SliceFault::NoSuchScratch { id })
            }
            Buf::Input | Buf::Output => unreachable!("user buffers are not device regions"),
        }
    }
}

impl HasSlice for Operand {
    fn slice(&self) -> Slice {
        self.slice
    }
}
