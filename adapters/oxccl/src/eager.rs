//! The eager API: one blocking, typed call per collective.
//!
//! Each method validates its buffers, runs the collective on this rank and returns when
//! this rank's part is done. Slices carry their length, so the counts come from them;
//! the `_n` variants take an explicit count for buffers that are longer than the data.
//!
//! Operators: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Scatter, Gather,
//! AlltoAll, AllGatherV, ReduceScatterV, AlltoAllV, send/recv (single or grouped) and
//! Barrier. Each method builds its call with the [`OpCall`] constructor that the same call
//! added to a [`crate::Group`] uses, and runs it as a group call of one; a `Group`
//! launches many calls, of several ranks or several send/recv pairs, at once.
//!
//! Gathers and scatters follow NCCL: the count is the per-rank block, the larger buffer
//! holds one block per rank (block `r` for rank `r`), and the in-place forms take that
//! larger buffer alone. In place, the input of AllGather and Gather is the rank's own
//! block of the buffer, and ReduceScatter and Scatter leave their result in the rank's own
//! block; the other blocks of a ReduceScatter buffer are left as they were. The V forms
//! place blocks by their displacements. AlltoAll(V) and send/recv have no in-place form.

use crate::logging;
use crate::{OpCall, SharedBuffer};
use oxccl_framework::bootstrap::{Launch, UniqueId};
use oxccl_framework::op::P2pItem;
use oxccl_framework::{ArgError, Communicator as Inner, Config, ConfigError, Error, OpParam};
use oxccl_platform::{Element, Rank, ReduceOp, UserBuffers};

/// One rank of a communicator.
#[derive(Debug)]
pub struct Communicator {
    inner: Inner,
}

impl Communicator {
    /// Create `n` in-process ranks; hand each to its own thread.
    pub fn init_all(n: usize, config: Config) -> Result<Vec<Communicator>, Error> {
        logging::init(config.log_filter.as_deref());
        Ok(Inner::init_all(n, config)?
            .into_iter()
            .map(|inner| Communicator { inner })
            .collect())
    }

    /// Join the job of `id` as rank `rank` of `n`, one call per rank in its own process
    /// or thread (NCCL's `ncclCommInitRank`); see the framework's
    /// [`init_rank`](oxccl_framework::Communicator::init_rank).
    pub fn init_rank(
        id: &UniqueId,
        n: usize,
        rank: Rank,
        config: Config,
    ) -> Result<Communicator, Error> {
        logging::init(config.log_filter.as_deref());
        Ok(Communicator {
            inner: Inner::init_rank(id, n, rank, config)?,
        })
    }

    /// Join the job this process was launched into: rank, size and the job's id from
    /// mpirun, torchrun, Slurm or `oxccl ... --procs N` (see
    /// [`Launch`](oxccl_framework::bootstrap::Launch)).
    pub fn init_launched(config: Config) -> Result<Communicator, Error> {
        let launch = Launch::from_env()?.ok_or_else(|| {
            ConfigError::new(
                "OXCCL_RANK",
                "",
                "no launcher's variables are set: start the processes with mpirun, torchrun, \
                 srun or `oxccl ... --procs N`, or call init_rank",
            )
        })?;
        let id = launch
            .unique_id(config.exec_timeout)
            .map_err(oxccl_framework::Error::from)?;
        let comm = Self::init_rank(&id, launch.size, launch.rank, config);
        launch.joined();
        comm
    }

    /// [`Communicator::init_all`] with [`Config::from_env`].
    pub fn init_all_from_env(n: usize) -> Result<Vec<Communicator>, Error> {
        Self::init_all(n, Config::from_env()?)
    }

    /// Abort the communicator from any thread (NCCL's `ncclCommAbort`): this rank's call
    /// in flight ends at once with an error, later calls are refused, and the other ranks
    /// are released naming this one (see the framework's
    /// [`abort`](oxccl_framework::Communicator::abort)).
    pub fn abort(&self) {
        self.inner.abort();
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.inner.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    /// The framework communicator (program preparation, topology, device).
    pub fn framework(&self) -> &Inner {
        &self.inner
    }

    /// `len` zeroed elements of `T` that peers can reach: with `OXCCL_SHARED_BUFFERS=1`,
    /// ranks in other processes of this host map them and calls run zero-copy (see
    /// [`SharedBuffer`] and the framework's
    /// [`alloc_shared`](oxccl_framework::Communicator::alloc_shared)). **Collective**:
    /// every rank allocates, in the same order.
    pub fn alloc_shared<T: Element>(&self, len: usize) -> Result<SharedBuffer<T>, Error> {
        SharedBuffer::new(self, len)
    }

    /// Untyped call: run `op` on raw byte buffers.
    pub fn execute(&self, op: &OpParam, user: UserBuffers<'_>) -> Result<(), Error> {
        self.run(Ok(OpCall::new(op.clone(), user)))
    }

    /// `recv = op(send of every rank)`, element-wise; `send` and `recv` have equal length.
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(OpCall::all_reduce(send, recv, op))
    }

    /// AllReduce of the first `count` elements of `send` into `recv`.
    pub fn all_reduce_n<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        count: usize,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::all_reduce_n(send, recv, count, op)))
    }

    /// AllReduce in place: `buf = op(buf of every rank)`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::all_reduce_in_place(buf, op)))
    }

    /// `recv` block `s` = `send` of rank `s`; `recv` holds exactly `size() * send.len()`
    /// elements.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.run(OpCall::all_gather(self.size(), send, recv))
    }

    /// AllGather of `send` into a new vector (block `s` from rank `s`), through buffers it
    /// allocates with [`Communicator::alloc_shared`]: it runs in any job, zero-copy ones
    /// (`OXCCL_SHARED_BUFFERS=1`) included, which is how oxccl's own exchanges (a graph's
    /// agreement) travel. On a device without host memory for users (cuda, whose peers
    /// never map host slices: it stages them), through vectors of this process.
    /// Collective, as both the allocations and the call are.
    pub fn all_gather_to_vec<T: Element>(&self, send: &[T]) -> Result<Vec<T>, Error> {
        let total = send
            .len()
            .checked_mul(self.size())
            .ok_or(ArgError::AllocTooLarge {
                len: send.len(),
                dtype: T::DTYPE,
                limit: oxccl_framework::limits::MAX_BUFFER_BYTES,
            })?;
        let mut mine = match self.alloc_shared::<T>(send.len()) {
            Err(e) if no_shared_memory(&e) => {
                let mut all = vec![<T as bytemuck::Zeroable>::zeroed(); total];
                self.all_gather(send, &mut all)?;
                return Ok(all);
            }
            other => other?,
        };
        let mut all = self.alloc_shared::<T>(total)?;
        mine.copy_from_slice(send);
        self.all_gather(&mine, &mut all)?;
        Ok(all.to_vec())
    }

    /// AllGather in place: `buf` holds one block per rank, this rank's input in block
    /// `rank()`; afterwards block `s` holds rank `s`'s.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), Error> {
        self.run(OpCall::all_gather_in_place(self.size(), buf))
    }

    /// `recv = op(block rank() of send of every rank)`; `send` holds exactly
    /// `size() * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(OpCall::reduce_scatter(self.size(), send, recv, op))
    }

    /// ReduceScatter in place: `buf` holds one block per rank; afterwards block `rank()`
    /// holds `op` over block `rank()` of every rank's `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(OpCall::reduce_scatter_in_place(self.size(), buf, op))
    }
    /// Broadcast: `recv` = the root's `send` (equal lengths).
    pub fn broadcast<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: Rank,
    ) -> Result<(), Error> {
        self.run(OpCall::broadcast(send, recv, root))
    }

    /// Broadcast in place: every `buf` becomes the root's.
    pub fn broadcast_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        self.run(Ok(OpCall::broadcast_in_place(buf, root)))
    }

    /// Reduce: the root's `recv` = `op` over every rank's `send`; other ranks' `recv` is
    /// left as it was (NCCL's `recvbuff` is unused off the root; oxccl's analyzer holds
    /// every executor to it).
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<(), Error> {
        self.run(OpCall::reduce(send, recv, op, root))
    }

    /// Reduce in place: the root's `buf` becomes `op` over every rank's `buf`.
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::reduce_in_place(buf, op, root)))
    }

    /// Scatter: `recv` = block `rank()` of the root's `send` (`size()` blocks of
    /// `recv.len()`).
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<(), Error> {
        self.run(OpCall::scatter(self.size(), send, recv, root))
    }

    /// Scatter in place: block `rank()` of `buf` becomes that block of the root's `buf`.
    pub fn scatter_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        self.run(OpCall::scatter_in_place(self.size(), buf, root))
    }

    /// Gather: block `s` of the root's `recv` = rank `s`'s `send`.
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<(), Error> {
        self.run(OpCall::gather(self.size(), send, recv, root))
    }

    /// Gather in place: each rank's input is block `rank()` of its `buf`.
    pub fn gather_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        self.run(OpCall::gather_in_place(self.size(), buf, root))
    }

    /// AlltoAll: block `s` of `recv` = block `rank()` of rank `s`'s `send`.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.run(OpCall::all_to_all(self.size(), send, recv))
    }

    /// AllGatherV (see [`crate::Group::all_gather_v`]).
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::all_gather_v(send, recv, counts, displs)))
    }

    /// ReduceScatterV (see [`crate::Group::reduce_scatter_v`]).
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let call = OpCall::reduce_scatter_v(send, recv, counts, displs, op);
        self.run(Ok(call))
    }

    /// AlltoAllV with per-peer counts and displacements (see
    /// [`crate::Group::all_to_all_v`]).
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::all_to_all_v(
            send,
            send_counts,
            send_displs,
            recv,
            recv_counts,
            recv_displs,
        )))
    }

    /// Grouped sends and receives of this rank in one call (see
    /// [`crate::Group::send_recv`]).
    pub fn send_recv<T: Element>(
        &self,
        send: &[T],
        sends: &[P2pItem],
        recv: &mut [T],
        recvs: &[P2pItem],
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::send_recv(send, sends, recv, recvs)))
    }

    /// Send all of `buf` to `peer`, which calls [`Communicator::recv`].
    pub fn send<T: Element>(&self, buf: &[T], peer: Rank) -> Result<(), Error> {
        self.run(Ok(OpCall::send(buf, peer)))
    }

    /// Receive all of `buf` from `peer`, which calls [`Communicator::send`].
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: Rank) -> Result<(), Error> {
        self.run(Ok(OpCall::recv(buf, peer)))
    }

    /// Return once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<(), Error> {
        self.run(Ok(OpCall::barrier()))
    }

    /// Run this rank's one call. A call refused by its constructor runs too, as refused:
    /// the other ranks learn why at once, and this rank gets its own refusal.
    pub(crate) fn run(&self, call: Result<OpCall<'_>, Error>) -> Result<(), Error> {
        let refused = call.as_ref().err().cloned();
        let ran = Inner::execute_calls(vec![OpCall::for_rank(call, &self.inner)])
            .pop()
            .expect("one result per call");
        refused.map_or(ran, Err)
    }
}

/// Whether `err` is a device's refusal to allocate host memory for users (it has none).
fn no_shared_memory(err: &Error) -> bool {
    matches!(
        err,
        Error::Device(oxccl_platform::DeviceError::Config(
            oxccl_platform::ConfigFault::NoSharedMemory { .. }
        ))
    )
}
