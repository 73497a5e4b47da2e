//! The eager API: one blocking, typed call per collective.
//!
//! Each method validates its buffers, runs the collective on this rank and returns when
//! this rank's part is done. Slices carry their length, so the counts come from them;
//! the `_n` variants take an explicit count for buffers that are longer than the data.
//!
//! Gathers and scatters follow NCCL: the count is the per-rank block, the larger buffer
//! holds one block per rank (block `r` for rank `r`), and the in-place forms take that
//! larger buffer alone. In place, AllGather's input is the rank's own block of the buffer,
//! and ReduceScatter leaves its result in the rank's own block; the other blocks of a
//! ReduceScatter buffer are left as they were.

use crate::group::{out_of_place, Group};
use crate::logging;
use oxccl_framework::{Communicator as Inner, Config, Error, OpParam};
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

    /// [`Communicator::init_all`] with [`Config::from_env`].
    pub fn init_all_from_env(n: usize) -> Result<Vec<Communicator>, Error> {
        Self::init_all(n, Config::from_env()?)
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

    /// Untyped call: run `op` on raw byte buffers.
    pub fn execute(&self, op: &OpParam, user: UserBuffers<'_>) -> Result<(), Error> {
        self.inner.execute(op, user)
    }

    /// `recv = op(send of every rank)`, element-wise; `send` and `recv` have equal length.
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let mut group = Group::new();
        group.all_reduce(self, send, recv, op)?;
        group.run()
    }

    /// AllReduce of the first `count` elements of `send` into `recv`.
    pub fn all_reduce_n<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        count: usize,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.inner.execute(
            &OpParam::all_reduce(count, T::DTYPE, op),
            out_of_place(send, recv),
        )
    }

    /// AllReduce in place: `buf = op(buf of every rank)`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let mut group = Group::new();
        group.all_reduce_in_place(self, buf, op);
        group.run()
    }

    /// `recv` block `s` = `send` of rank `s`; `recv` holds exactly `size() * send.len()`
    /// elements.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let mut group = Group::new();
        group.all_gather(self, send, recv)?;
        group.run()
    }

    /// AllGather in place: `buf` holds one block per rank, this rank's input in block
    /// `rank()`; afterwards block `s` holds rank `s`'s.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), Error> {
        let mut group = Group::new();
        group.all_gather_in_place(self, buf)?;
        group.run()
    }

    /// `recv = op(block rank() of send of every rank)`; `send` holds exactly
    /// `size() * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let mut group = Group::new();
        group.reduce_scatter(self, send, recv, op)?;
        group.run()
    }

    /// ReduceScatter in place: `buf` holds one block per rank; afterwards block `rank()`
    /// holds `op` over block `rank()` of every rank's `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let mut group = Group::new();
        group.reduce_scatter_in_place(self, buf, op)?;
        group.run()
    }
}
