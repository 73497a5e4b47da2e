//! `oxccl perf` on GPUs (`--device cuda`, a build with the `cuda` feature): the user
//! buffers live on each rank's GPU, and every size is measured beside the copy bound.
//!
//! The host keeps the buffers it fills and checks (the same test data, guard bytes and
//! checks as on the host device); each rank also holds device copies of them
//! ([`GpuCopy`]), uploaded before the timed calls, bound as `UserBuffers::Device`, and
//! read back after the timed loop of each form, so the checks see what the GPU wrote,
//! guards included.
//!
//! The **copy bound** of a size is the bandwidth of one of R concurrent device-to-device
//! copies (`cuMemcpyDtoDAsync`, one stream each, timed with CUDA events) of that size on
//! rank 0's GPU, where R is the number of ranks placed on that GPU (its virtual ranks):
//! what each rank could move per second if its collective were nothing but copies of its
//! message, sharing the GPU's memory with the others. busbw counts the bytes each rank
//! moves per second, so `busbw/copy` near 1 means the collective moves data as fast as
//! plain copies do. Ranks on separate GPUs (R = 1) still get the local-memory bound, not
//! their link's. In a build without the feature there is no GPU path: every item here is
//! uninhabited or answers "none".

use oxccl::{Communicator, Error, UserBuffers};

/// The copy bound of one row (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct CopyBound {
    /// GB/s of each of the concurrent copies.
    pub gbps: f64,
    /// Concurrent copies: the ranks sharing rank 0's GPU.
    pub copies: usize,
}

#[cfg(feature = "cuda")]
pub use on_gpu::*;

#[cfg(not(feature = "cuda"))]
pub use host_only::*;

#[cfg(feature = "cuda")]
mod on_gpu {
    use super::*;
    use oxccl::DeviceBuffer;

    /// True when the communicator's ranks run on GPUs (the cuda device).
    pub fn runs_on_gpu(comm: &Communicator) -> bool {
        comm.cuda_device().is_ok()
    }

    /// The copy bound for rows of `bytes` (`None` on the host, or for a row of no bytes),
    /// timed over `iters` rounds.
    ///
    /// A process of a job (`--procs`) times one copy per rank of its own while the other
    /// processes, some on the same GPU, time theirs: a barrier starts them together, so
    /// each copy shares the GPU as the ranks' collective does. Timed one process after
    /// another, each would have the GPU alone and the bound would be as many times too
    /// high as processes share it.
    pub fn copy_bound(
        comms: &[Communicator],
        bytes: usize,
        iters: usize,
    ) -> Result<Option<CopyBound>, Error> {
        let comm = &comms[0];
        let Ok(cuda) = comm.cuda_device() else {
            return Ok(None);
        };
        if bytes == 0 {
            return Ok(None);
        }
        let one_of_a_job = comms.len() == 1 && comm.size() > 1;
        if one_of_a_job {
            comm.barrier()?;
        }
        let measured = cuda.copy_bound(comm.rank(), bytes, iters)?;
        Ok(Some(CopyBound {
            gbps: measured.per_copy_gbps(),
            copies: measured.copies,
        }))
    }

    /// A rank's input and receive buffer (guards included) on its GPU, and the receive
    /// buffers of a graph's steps after the first (`--graph-steps`).
    pub struct GpuCopy {
        input: DeviceBuffer<u8>,
        output: DeviceBuffer<u8>,
        steps: Vec<DeviceBuffer<u8>>,
    }

    impl GpuCopy {
        /// Device copies of `input` and `output` when `comm` runs on GPUs; `None` on the
        /// host.
        pub fn for_rank(
            comm: &Communicator,
            input: &[u8],
            output: &[u8],
        ) -> Result<Option<Self>, Error> {
            if !runs_on_gpu(comm) {
                return Ok(None);
            }
            Ok(Some(GpuCopy {
                input: DeviceBuffer::from_host(comm, input)?,
                output: DeviceBuffer::from_host(comm, output)?,
                steps: Vec::new(),
            }))
        }

        /// Receive buffers of `len` bytes on the GPU for `more` steps of a graph after
        /// its first (which binds the row's buffers).
        pub fn add_steps(
            &mut self,
            comm: &Communicator,
            more: usize,
            len: usize,
        ) -> Result<(), Error> {
            self.steps = (0..more)
                .map(|_| DeviceBuffer::zeroed(comm, len))
                .collect::<Result<_, _>>()?;
            Ok(())
        }

        /// Every step's binding of a graph of `steps` calls of `len` bytes: the row's
        /// buffers (the receive buffer after `guard`) for the first, the step buffers
        /// after it.
        pub fn step_users(
            &self,
            guard: usize,
            len: usize,
            in_place: bool,
            steps: usize,
        ) -> Result<Vec<UserBuffers<'_>>, Error> {
            let mut users = vec![self.user(guard, len, in_place)?];
            let input = self.input.span();
            for buf in self.steps.iter().take(steps.saturating_sub(1)) {
                let recv = buf.span().slice(0, len).ok_or_else(|| {
                    super::super::bad_arg(format!(
                        "{len} bytes do not fit a graph step's {}-byte device receive buffer",
                        buf.len()
                    ))
                })?;
                users.push(UserBuffers::Device {
                    input: if in_place { recv } else { input },
                    output: recv,
                    in_place,
                });
            }
            Ok(users)
        }

        /// The binding of one call: the input and the `len` bytes after `guard` of the
        /// receive buffer (alone, in place).
        pub fn user(
            &self,
            guard: usize,
            len: usize,
            in_place: bool,
        ) -> Result<UserBuffers<'_>, Error> {
            let recv = self.output.span().slice(guard, len).ok_or_else(|| {
                super::super::bad_arg(format!(
                    "{len} bytes after {guard} guard bytes do not fit the {} of the device \
                     receive buffer",
                    self.output.len()
                ))
            })?;
            Ok(UserBuffers::Device {
                input: if in_place { recv } else { self.input.span() },
                output: recv,
                in_place,
            })
        }

        /// Replace the device receive buffer with `host` (after the host edited it).
        pub fn upload_output(&mut self, host: &[u8]) -> Result<(), Error> {
            self.output.copy_from_host(host)
        }

        /// Read the device receive buffer back into `host`.
        pub fn download_output(&self, host: &mut [u8]) -> Result<(), Error> {
            self.output.copy_to_host(host)
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod host_only {
    use super::*;

    /// No communicator runs on GPUs in a build without the `cuda` feature.
    pub fn runs_on_gpu(_: &Communicator) -> bool {
        false
    }

    /// No copy bound without GPUs.
    pub fn copy_bound(_: &[Communicator], _: usize, _: usize) -> Result<Option<CopyBound>, Error> {
        Ok(None)
    }

    /// Never made: a build without the `cuda` feature has no device buffers.
    pub enum GpuCopy {}

    impl GpuCopy {
        pub fn for_rank(_: &Communicator, _: &[u8], _: &[u8]) -> Result<Option<Self>, Error> {
            Ok(None)
        }

        pub fn user(&self, _: usize, _: usize, _: bool) -> Result<UserBuffers<'_>, Error> {
            match *self {}
        }

        pub fn add_steps(&mut self, _: &Communicator, _: usize, _: usize) -> Result<(), Error> {
            match *self {}
        }

        pub fn step_users(
            &self,
            _: usize,
            _: usize,
            _: bool,
            _: usize,
        ) -> Result<Vec<UserBuffers<'_>>, Error> {
            match *self {}
        }

        pub fn upload_output(&mut self, _: &[u8]) -> Result<(), Error> {
            match *self {}
        }

        pub fn download_output(&self, _: &mut [u8]) -> Result<(), Error> {
            match *self {}
        }
    }
}
