//! Device buffers (feature `cuda`): typed user memory on a rank's GPU, and the eager calls
//! that run on it in place.
//!
//! A [`DeviceBuffer<T>`] is allocated for one rank of a communicator on the CUDA device
//! that rank runs on ([`DeviceBuffer::zeroed`], [`DeviceBuffer::from_host`]), owns its
//! memory (freed on drop) and moves data with synchronous, length-checked copies
//! ([`DeviceBuffer::to_host`], [`DeviceBuffer::copy_from_host`], ...). The calls that take
//! device buffers mirror the ones on slices, with a `_device` suffix and the same rules
//! (equal lengths, one block per rank, ...), checked by the same functions:
//!
//! ```no_run
//! use oxccl::{Communicator, Config, DeviceBuffer, ReduceOp};
//!
//! let config = Config { device: "cuda".into(), ..Config::default() };
//! let comms = Communicator::init_all(2, config)?;
//! std::thread::scope(|s| {
//!     for comm in &comms {
//!         s.spawn(move || {
//!             let ones = vec![comm.rank() as f32 + 1.0; 1024];
//!             let send = DeviceBuffer::from_host(comm, &ones).unwrap();
//!             let mut recv = DeviceBuffer::<f32>::zeroed(comm, 1024).unwrap();
//!             comm.all_reduce_device(&send, &mut recv, ReduceOp::Sum).unwrap();
//!             assert!(recv.to_host().unwrap().iter().all(|&x| x == 3.0));
//!         });
//!     }
//! });
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! The eager methods are [`Communicator::all_reduce_device`] (and `_in_place`),
//! `all_gather_device`, `reduce_scatter_device` and `broadcast_device` (and `_in_place`);
//! each has an [`OpCall`] constructor of the same name for a [`crate::Group`]
//! (`group.submit(comm, OpCall::all_reduce_device(&send, &mut recv, op))`). Any other
//! operator runs on device buffers through [`DeviceBuffer::out_of_place`] or
//! [`DeviceBuffer::in_place`] with an explicit [`OpParam`](crate::OpParam)
//! ([`Communicator::execute`], [`OpCall::new`]).
//!
//! Borrows keep the buffers alive and untouched while a call may use them: a call (or an
//! `OpCall` waiting in a group) borrows its send buffer shared and its receive buffer
//! mutably, like slices. A communicator whose device runs on host memory refuses device
//! buffers with [`ConfigFault::DeviceMemory`]: when allocating one for it, and when a
//! call binds one allocated elsewhere.

use crate::{Communicator, OpCall};
use oxccl_framework::{Communicator as Inner, Error, OpKind, OpParam};
use oxccl_platform::cuda::{CudaDevice, DeviceBytes};
use oxccl_platform::{ConfigFault, DeviceError, DeviceSpan, Element, Rank, ReduceOp, UserBuffers};
use std::marker::PhantomData;

/// `len` elements of `T` on the GPU of one rank of a communicator (see the module docs).
pub struct DeviceBuffer<T: Element> {
    bytes: DeviceBytes,
    len: usize,
    element: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("dtype", &T::DTYPE)
            .field("len", &self.len)
            .field("memory", &self.bytes)
            .finish()
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// `len` zeroed elements on the GPU `comm`'s rank runs on.
    pub fn zeroed(comm: &Communicator, len: usize) -> Result<Self, Error> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(DeviceError::Config(ConfigFault::TooLarge {
                what: "device buffer",
            }))?;
        let memory = comm.cuda_device()?.alloc_user(comm.rank(), bytes)?;
        Ok(DeviceBuffer {
            bytes: memory,
            len,
            element: PhantomData,
        })
    }

    /// A buffer on the GPU `comm`'s rank runs on, holding a copy of `data`.
    pub fn from_host(comm: &Communicator, data: &[T]) -> Result<Self, Error> {
        let mut buffer = Self::zeroed(comm, data.len())?;
        buffer.copy_from_host(data)?;
        Ok(buffer)
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a buffer of no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CUDA device the buffer is on.
    pub fn ordinal(&self) -> usize {
        self.bytes.ordinal()
    }

    /// The buffer's device address and length in bytes.
    pub fn span(&self) -> DeviceSpan {
        self.bytes.span()
    }

    /// The untyped memory (for device-to-device copies of the platform's API).
    pub fn bytes(&self) -> &DeviceBytes {
        &self.bytes
    }

    /// Copy `data`, exactly [`len`](Self::len) elements, into the buffer.
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<(), Error> {
        Ok(self.bytes.copy_from_host(bytemuck::cast_slice(data))?)
    }

    /// Copy the buffer into `out`, exactly [`len`](Self::len) elements.
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<(), Error> {
        Ok(self.bytes.copy_to_host(bytemuck::cast_slice_mut(out))?)
    }

    /// The buffer's elements, copied to the host.
    pub fn to_host(&self) -> Result<Vec<T>, Error> {
        let mut out = vec![<T as bytemuck::Zeroable>::zeroed(); self.len];
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Copy `src`, a buffer of the same length, into this one on the GPU.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<(), Error> {
        Ok(self.bytes.copy_from_device(&src.bytes)?)
    }

    /// `send` as a call's input and `recv` as its output, for any operator.
    pub fn out_of_place<'a>(send: &'a Self, recv: &'a mut Self) -> UserBuffers<'a> {
        UserBuffers::Device {
            input: send.span(),
            output: recv.span(),
            in_place: false,
        }
    }

    /// This buffer as a call's input and output at once, for any operator.
    pub fn in_place(&mut self) -> UserBuffers<'_> {
        let span = self.span();
        UserBuffers::Device {
            input: span,
            output: span,
            in_place: true,
        }
    }
}

impl Communicator {
    /// The cuda device this rank runs on; for a communicator on another device
    /// (host memory), [`ConfigFault::DeviceMemory`] naming it.
    pub fn cuda_device(&self) -> Result<&CudaDevice, Error> {
        let device = self.framework().device();
        device.downcast_ref::<CudaDevice>().ok_or_else(|| {
            DeviceError::Config(ConfigFault::DeviceMemory {
                kind: device.kind(),
            })
            .into()
        })
    }

    /// [`Communicator::all_reduce`] on device buffers of equal length.
    pub fn all_reduce_device<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(OpCall::all_reduce_device(send, recv, op))
    }

    /// [`Communicator::all_reduce_in_place`] on a device buffer.
    pub fn all_reduce_in_place_device<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::all_reduce_in_place_device(buf, op)))
    }

    /// [`Communicator::all_gather`] on device buffers: `recv` holds exactly
    /// `size() * send.len()` elements.
    pub fn all_gather_device<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
    ) -> Result<(), Error> {
        self.run(OpCall::all_gather_device(self.size(), send, recv))
    }

    /// [`Communicator::reduce_scatter`] on device buffers: `send` holds exactly
    /// `size() * recv.len()` elements.
    pub fn reduce_scatter_device<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.run(OpCall::reduce_scatter_device(self.size(), send, recv, op))
    }

    /// [`Communicator::broadcast`] on device buffers of equal length.
    pub fn broadcast_device<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        root: Rank,
    ) -> Result<(), Error> {
        self.run(OpCall::broadcast_device(send, recv, root))
    }

    /// [`Communicator::broadcast_in_place`] on a device buffer.
    pub fn broadcast_in_place_device<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        root: Rank,
    ) -> Result<(), Error> {
        self.run(Ok(OpCall::broadcast_in_place_device(buf, root)))
    }
}

impl<'a> OpCall<'a> {
    /// AllReduce of equal-length device buffers.
    pub fn all_reduce_device<T: Element>(
        send: &'a DeviceBuffer<T>,
        recv: &'a mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        let param = OpParam::all_reduce(send.len(), T::DTYPE, op);
        Ok(Self::new(param, DeviceBuffer::out_of_place(send, recv)))
    }

    /// AllReduce in place on a device buffer.
    pub fn all_reduce_in_place_device<T: Element>(
        buf: &'a mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Self {
        let param = OpParam::all_reduce(buf.len(), T::DTYPE, op);
        Self::new(param, buf.in_place())
    }

    /// AllGather of device buffers: `recv` holds exactly `ranks * send.len()` elements.
    pub fn all_gather_device<T: Element>(
        ranks: usize,
        send: &'a DeviceBuffer<T>,
        recv: &'a mut DeviceBuffer<T>,
    ) -> Result<Self, Error> {
        let count = OpKind::AllGather.block_count(ranks, send.len(), recv.len())?;
        let param = OpParam::all_gather(count, T::DTYPE);
        Ok(Self::new(param, DeviceBuffer::out_of_place(send, recv)))
    }

    /// ReduceScatter of device buffers: `send` holds exactly `ranks * recv.len()`
    /// elements.
    pub fn reduce_scatter_device<T: Element>(
        ranks: usize,
        send: &'a DeviceBuffer<T>,
        recv: &'a mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<Self, Error> {
        let count = OpKind::ReduceScatter.block_count(ranks, send.len(), recv.len())?;
        let param = OpParam::reduce_scatter(count, T::DTYPE, op);
        Ok(Self::new(param, DeviceBuffer::out_of_place(send, recv)))
    }

    /// Broadcast of the root's device buffer `send` into every `recv` (equal lengths).
    pub fn broadcast_device<T: Element>(
        send: &'a DeviceBuffer<T>,
        recv: &'a mut DeviceBuffer<T>,
        root: Rank,
    ) -> Result<Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        let param = OpParam::rooted(OpKind::Broadcast, send.len(), T::DTYPE, ReduceOp::Sum, root);
        Ok(Self::new(param, DeviceBuffer::out_of_place(send, recv)))
    }

    /// Broadcast in place: every device buffer `buf` becomes the root's.
    pub fn broadcast_in_place_device<T: Element>(buf: &'a mut DeviceBuffer<T>, root: Rank) -> Self {
        let param = OpParam::rooted(OpKind::Broadcast, buf.len(), T::DTYPE, ReduceOp::Sum, root);
        Self::new(param, buf.in_place())
    }
}
