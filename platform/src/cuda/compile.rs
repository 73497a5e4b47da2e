//! Compile on the cuda backend: a rank's program with every slice resolved to a device
//! address (or an offset into the rank's own user buffer, bound at submit) and every
//! notify to a signal word, checked once, as the host device checks them.
//!
//! Peers' user buffers (zero-copy) are in reach when the peer runs on the same GPU: every
//! rank of a GPU brings its call before the one launch that runs them all (`group`), so
//! each peer's buffers are known when the launch's descriptor is written. Such an operand
//! stays symbolic here ([`Addr::Peer`]); its bounds and alignment are checked against the
//! peer's binding at launch, from the reach recorded per peer ([`CudaProgram::peer_reach`]).
//! Overlaps are checked here, symbolically: a rank's Input and Output are one space in
//! place and two out of place, and distinct ranks' buffers are distinct spaces, which the
//! launch makes true (it refuses ranks whose user buffers overlap where one is written).
//! Peers on other GPUs would need their buffers registered ahead of time (NCCL's user-buffer
//! registration): the backend offers zero-copy only when all ranks share one GPU
//! (capability `peer_user_buffers`), and refuses such an operand otherwise.

use super::memory::{DevAlloc, LOCAL_NOTIFIES, MAX_STREAMS};
use super::program::{self, Encoded};
use super::{CudaError, Shared};
use crate::device::{CompileRequest, Compiled};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{DeviceError, SliceFault, TaskFault, TaskLocation};
use crate::ir::{Buf, NotifyId, Rank, Slice, Task};
use crate::slice_checks::{check_overlaps, check_slice, within, HasSlice, UserReach};
use cudarc::driver::sys::CUdeviceptr;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where an operand's bytes are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Addr {
    /// Device memory of a local rank (CCL buffers, scratch), bounds checked.
    Fixed(CUdeviceptr),
    /// The rank's own Input or Output, `offset` bytes in: within the extent that submit
    /// checks against the binding.
    Own { buf: Buf, offset: usize },
    /// A peer's Input or Output on the same GPU, `offset` bytes in: bound at launch.
    Peer { rank: Rank, buf: Buf, offset: usize },
}

impl Addr {
    /// The overlap space of a user-buffer operand: Input and Output of a rank are one
    /// space in place, two out of place; distinct ranks never share one (the launch
    /// refuses overlapping user buffers of distinct ranks). Device memory is space 0,
    /// addressed by its device address.
    fn space(self, own: Rank, in_place: bool) -> (usize, usize) {
        let user = |rank: Rank, buf: Buf, offset: usize| {
            let out = usize::from(!in_place && buf == Buf::Output);
            (1 + 2 * rank + out, offset)
        };
        match self {
            Addr::Fixed(p) => (0, p as usize),
            Addr::Own { buf, offset } => user(own, buf, offset),
            Addr::Peer { rank, buf, offset } => user(rank, buf, offset),
        }
    }
}

#[derive(Copy, Clone, Debug)]
pub(crate) struct Operand {
    pub addr: Addr,
    pub slice: Slice,
}

impl HasSlice for Operand {
    fn slice(&self) -> Slice {
        self.slice
    }
}

/// One task, compiled.
#[derive(Debug)]
pub(crate) enum Op {
    Copy {
        src: Addr,
        dsts: Vec<Addr>,
        len: usize,
    },
    Reduce {
        srcs: Vec<Addr>,
        dsts: Vec<Addr>,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    /// Set the word at `addr` (a local rank's signal) to 1.
    Post { addr: CUdeviceptr, notify: NotifyId },
    /// Wait until the word at `addr` is 1, then clear it.
    Wait { addr: CUdeviceptr, notify: NotifyId },
}

/// The cuda backend's part of a [`Compiled`].
#[derive(Debug)]
pub(crate) struct CudaProgram {
    pub slot: usize,
    pub streams: Vec<Vec<Op>>,
    /// Local slots of the fence peers.
    pub peer_slots: Vec<usize>,
    /// Every stream's encoded tasks ([`program`]), one after the other, on the rank's GPU.
    tasks: DevAlloc,
    /// Each stream's first task: its byte offset in `tasks`.
    starts: Vec<u64>,
    /// Bytes of the largest data task: how many blocks a stream is worth.
    pub largest: usize,
    /// How far the program reaches into each peer's user buffers (zero-copy), by rank,
    /// ascending: checked against the peers' bindings at launch.
    pub peer_reach: Vec<(Rank, UserReach)>,
}

/// Compile `request` for the device behind `shared`.
pub(crate) fn compile(
    shared: &Arc<Shared>,
    request: CompileRequest,
) -> Result<Arc<Compiled>, DeviceError> {
    let program = &request.program;
    let rank = program.rank;
    let slot = shared.slot(rank)?;
    if program.streams.len() > MAX_STREAMS {
        return Err(CudaError::TooManyStreams {
            rank,
            streams: program.streams.len(),
            capacity: MAX_STREAMS,
        }
        .into());
    }
    if request.local_notifies > LOCAL_NOTIFIES {
        return Err(CudaError::TooManyLocalNotifies {
            rank,
            needed: request.local_notifies,
            capacity: LOCAL_NOTIFIES,
        }
        .into());
    }
    let peer_slots = request
        .peers
        .iter()
        .map(|&p| shared.slot(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut c = Compiler {
        shared,
        slot,
        request: &request,
        user: UserReach::default(),
        peers: BTreeMap::new(),
    };
    let mut streams = Vec::with_capacity(program.streams.len());
    let mut tasks = 0;
    for (s, stream) in program.streams.iter().enumerate() {
        let mut ops = Vec::with_capacity(stream.tasks.len());
        for (t, task) in stream.tasks.iter().enumerate() {
            let at = TaskLocation {
                rank,
                stream: s,
                task: t,
            };
            ops.push(c.task(task, at)?);
            tasks += 1;
        }
        streams.push(ops);
    }
    if streams.is_empty() {
        // The kernel gives each stream its blocks, and the first block of stream 0 keeps
        // the rank's fences and epoch word: a program of no streams (the IR's fields are
        // public) runs as one empty stream, so its call still ends and fences its peers.
        streams.push(Vec::new());
    }
    let (tasks_alloc, starts, largest) = upload(shared, slot, &streams)?;
    Ok(Arc::new(Compiled {
        rank,
        peers: request.peers.clone(),
        in_place: request.in_place,
        exit_fence: request.exit_fence,
        user_extent: c.user.extent,
        user_align: c.user.align,
        tasks,
        device_id: shared.id,
        backend: Arc::new(CudaProgram {
            slot,
            streams,
            peer_slots,
            tasks: tasks_alloc,
            starts,
            largest,
            peer_reach: c.peers.into_iter().collect(),
        }),
    }))
}

impl CudaProgram {
    /// The device address of stream `s`'s first task.
    pub fn start(&self, s: usize) -> CUdeviceptr {
        self.tasks.ptr + self.starts[s]
    }
}

/// Encode every stream and upload the words to the rank's GPU.
fn upload(
    shared: &Shared,
    slot: usize,
    streams: &[Vec<Op>],
) -> Result<(DevAlloc, Vec<u64>, usize), DeviceError> {
    let encoded = streams
        .iter()
        .map(|ops| program::encode(ops))
        .collect::<Result<Vec<Encoded>, _>>()?;
    let largest = encoded.iter().map(|e| e.largest).max().unwrap_or(0);
    let mut words = Vec::new();
    let mut offsets = Vec::with_capacity(encoded.len());
    for e in &encoded {
        offsets.push(words.len() as u64 * 8);
        words.extend_from_slice(&e.words);
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let alloc = DevAlloc::upload(&shared.ranks[slot].gpu, &bytes, "encoded program")?;
    Ok((alloc, offsets, largest))
}

struct Compiler<'a> {
    shared: &'a Arc<Shared>,
    /// The program's rank's local slot.
    slot: usize,
    request: &'a CompileRequest,
    /// How far the program reaches into its rank's own user buffers.
    user: UserReach,
    /// How far it reaches into each peer's (zero-copy).
    peers: BTreeMap<Rank, UserReach>,
}

impl Compiler<'_> {
    fn task(&mut self, task: &Task, at: TaskLocation) -> Result<Op, DeviceError> {
        let shared = self.shared;
        // A Wait names a notify of this program's table; a Post may reach any word a
        // rank has (the words are fixed, see `LOCAL_NOTIFIES`).
        let table_len = shared.layout.table_len(self.request.local_notifies);
        let words = shared.layout.table_len(LOCAL_NOTIFIES);
        let no_notify = |notify: NotifyId, len| DeviceError::InvalidTask {
            at,
            fault: TaskFault::NoSuchNotify {
                notify,
                rank: notify.rank,
                len,
            },
        };
        match *task {
            Task::Post { notify } => {
                let index = notify.index as usize;
                if index >= words {
                    return Err(no_notify(notify, words));
                }
                let target = shared.slot(notify.rank)?;
                Ok(Op::Post {
                    addr: shared.ranks[target].signal(index),
                    notify,
                })
            }
            Task::Wait { notify } => {
                if notify.rank != at.rank {
                    return Err(DeviceError::InvalidTask {
                        at,
                        fault: TaskFault::RemoteWait { notify },
                    });
                }
                if notify.index as usize >= table_len {
                    return Err(no_notify(notify, table_len));
                }
                let slot = shared.slot(at.rank)?;
                Ok(Op::Wait {
                    addr: shared.ranks[slot].signal(notify.index as usize),
                    notify,
                })
            }
            Task::Copy { .. } | Task::Reduce { .. } => self.data(task, at),
        }
    }

    fn data(&mut self, task: &Task, at: TaskLocation) -> Result<Op, DeviceError> {
        let (reduce, reads, writes) = match task {
            Task::Copy { src, dsts } => (None, std::slice::from_ref(src), dsts.as_slice()),
            Task::Reduce {
                srcs,
                dsts,
                dtype,
                op,
            } => (Some((*dtype, *op)), srcs.as_slice(), dsts.as_slice()),
            Task::Post { .. } | Task::Wait { .. } => unreachable!("not a data task"),
        };
        if reads.is_empty() || writes.is_empty() {
            return Err(DeviceError::InvalidTask {
                at,
                fault: TaskFault::NoOperands,
            });
        }
        let len = writes[0].len;
        let dtype = reduce.map(|(d, _)| d);
        let srcs = reads
            .iter()
            .map(|s| self.operand(*s, len, dtype, false, at))
            .collect::<Result<Vec<_>, _>>()?;
        let dsts = writes
            .iter()
            .map(|s| self.operand(*s, len, dtype, true, at))
            .collect::<Result<Vec<_>, _>>()?;
        let (own, in_place) = (at.rank, self.request.in_place);
        let key = |o: &Operand| o.addr.space(own, in_place);
        check_overlaps(&srcs, &dsts, len, reduce.is_some(), key)
            .map_err(|(slice, fault)| DeviceError::InvalidSlice { at, slice, fault })?;
        let addrs = |v: Vec<Operand>| v.into_iter().map(|o| o.addr).collect::<Vec<_>>();
        Ok(match reduce {
            None => Op::Copy {
                src: srcs[0].addr,
                dsts: addrs(dsts),
                len,
            },
            Some((dtype, op)) => Op::Reduce {
                srcs: addrs(srcs),
                dsts: addrs(dsts),
                count: len / dtype.size(),
                dtype,
                op,
            },
        })
    }

    fn operand(
        &mut self,
        slice: Slice,
        len: usize,
        elem: Option<DataType>,
        write: bool,
        at: TaskLocation,
    ) -> Result<Operand, DeviceError> {
        let invalid = |fault| DeviceError::InvalidSlice { at, slice, fault };
        let shared = self.shared;
        check_slice(slice, shared.config.ranks, len, elem, write).map_err(invalid)?;
        let addr = match slice.buf {
            Buf::Input | Buf::Output if slice.rank == self.request.program.rank => {
                self.user.note(slice, elem).map_err(invalid)?;
                Addr::Own {
                    buf: slice.buf,
                    offset: slice.offset,
                }
            }
            Buf::Input | Buf::Output => {
                let peer = shared.slot(slice.rank)?;
                if !shared.peer_user_buffers()
                    || shared.group_index[peer] != shared.group_index[self.slot]
                {
                    return Err(invalid(SliceFault::UserBufferOutOfReach {
                        rank: slice.rank,
                    }));
                }
                self.peers
                    .entry(slice.rank)
                    .or_default()
                    .note(slice, elem)
                    .map_err(invalid)?;
                Addr::Peer {
                    rank: slice.rank,
                    buf: slice.buf,
                    offset: slice.offset,
                }
            }
            buf => {
                let slot = shared.slot(slice.rank)?;
                let (base, buffer_len) = shared
                    .region(slot, buf, self.request.scratch)
                    .map_err(invalid)?;
                within(slice, buffer_len).map_err(invalid)?;
                // Device buffers start 256-byte aligned: a whole-element offset is an
                // aligned address.
                if let Some(dtype) = elem {
                    if !slice.offset.is_multiple_of(dtype.size()) {
                        return Err(invalid(SliceFault::Misaligned { dtype }));
                    }
                }
                Addr::Fixed(base + slice.offset as u64)
            }
        };
        Ok(Operand { addr, slice })
    }
}
