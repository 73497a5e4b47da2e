//! Tasks as stream work: a Copy is an async copy (or one kernel for several
//! destinations), a Reduce launches the NVRTC kernel for its type and op, a Post writes a
//! signal word and a Wait waits for it and clears it (stream memory operations, so no
//! host thread sits in the data path).

use super::compile::{Addr, Op};
use super::driver::{cu, Gpu};
use super::kernels::{Args, MAX_DSTS, MAX_SRCS};
use super::CudaError;
use crate::dtype::{DataType, ReduceOp};
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};

/// Threads per block of the reduce kernels (their `__launch_bounds__`).
const THREADS: u32 = 512;
/// Blocks per multiprocessor at most: enough to hide latency, few enough for the grid
/// stride loop to keep every block busy.
const BLOCKS_PER_SM: u32 = 4;

/// Where the rank's own Input and Output are for this submission.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Bases {
    pub input: CUdeviceptr,
    pub output: CUdeviceptr,
}

impl Bases {
    fn at(&self, addr: Addr) -> CUdeviceptr {
        match addr {
            Addr::Fixed(p) => p,
            Addr::Own { buf, offset } => {
                let base = match buf {
                    crate::ir::Buf::Input => self.input,
                    _ => self.output,
                };
                base + offset as u64
            }
        }
    }
}

/// Queue `op` on `stream`.
pub(crate) fn enqueue(gpu: &Gpu, stream: CUstream, op: &Op, at: &Bases) -> Result<(), CudaError> {
    match op {
        Op::Copy { src, dsts, len } => {
            let src = at.at(*src);
            let dsts: Vec<_> = dsts.iter().map(|d| at.at(*d)).collect();
            copy(gpu, stream, src, &dsts, *len)
        }
        Op::Reduce {
            srcs,
            dsts,
            count,
            dtype,
            op,
        } => {
            let srcs: Vec<_> = srcs.iter().map(|s| at.at(*s)).collect();
            let dsts: Vec<_> = dsts.iter().map(|d| at.at(*d)).collect();
            reduce(gpu, stream, (*dtype, *op), &srcs, &dsts, *count)
        }
        Op::Post { addr } => post(stream, *addr),
        Op::Wait { addr, .. } => wait(stream, *addr),
    }
}

/// Set the word at `addr` to 1, after every earlier write of the stream (the driver's
/// default memory barrier).
pub(crate) fn post(stream: CUstream, addr: CUdeviceptr) -> Result<(), CudaError> {
    write_word(stream, addr, 1)
}

/// Write `value` to the word at `addr`.
pub(crate) fn write_word(stream: CUstream, addr: CUdeviceptr, value: u32) -> Result<(), CudaError> {
    cu!(cuStreamWriteValue32_v2(stream, addr, value, 0))
}

/// Block the stream until the word at `addr` is 1, then clear it.
fn wait(stream: CUstream, addr: CUdeviceptr) -> Result<(), CudaError> {
    let eq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
    cu!(cuStreamWaitValue32_v2(stream, addr, 1, eq))?;
    write_word(stream, addr, 0)
}

/// Block the stream until the word at `addr` is at least `value` (cyclic 32-bit compare,
/// so epochs may wrap).
pub(crate) fn wait_at_least(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
) -> Result<(), CudaError> {
    let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    cu!(cuStreamWaitValue32_v2(stream, addr, value, geq))
}

fn copy(
    gpu: &Gpu,
    stream: CUstream,
    src: CUdeviceptr,
    dsts: &[CUdeviceptr],
    len: usize,
) -> Result<(), CudaError> {
    if let [dst] = dsts {
        return cu!(cuMemcpyDtoDAsync_v2(*dst, src, len, stream));
    }
    // One read, several writes: the byte "reduction" of one source is a copy.
    reduce(
        gpu,
        stream,
        (DataType::U8, ReduceOp::Sum),
        &[src],
        dsts,
        len,
    )
}

/// `dsts = op(srcs...)` over `count` elements, folded left to right across as many
/// launches as the sources need; destinations past the first [`MAX_DSTS`] are copied
/// from the first.
fn reduce(
    gpu: &Gpu,
    stream: CUstream,
    (dtype, op): (DataType, ReduceOp),
    srcs: &[CUdeviceptr],
    dsts: &[CUdeviceptr],
    count: usize,
) -> Result<(), CudaError> {
    if count == 0 {
        return Ok(());
    }
    // A wide reduction accumulates in a destination no later source reads (compile
    // refuses the task when there is none).
    let wide = srcs.get(MAX_SRCS..).unwrap_or_default();
    let acc = *dsts
        .iter()
        .find(|d| !wide.contains(d))
        .ok_or(CudaError::ReduceTooWide {
            sources: srcs.len(),
            max: MAX_SRCS,
        })?;
    let mut first = 0;
    while first < srcs.len() {
        let fold_in = usize::from(first > 0);
        let take = (MAX_SRCS - fold_in).min(srcs.len() - first);
        let last = first + take == srcs.len();
        let mut inputs = Vec::with_capacity(take + fold_in);
        if first > 0 {
            inputs.push(acc);
        }
        inputs.extend_from_slice(&srcs[first..first + take]);
        let outputs: Vec<_> = match last {
            true => dsts.iter().copied().take(MAX_DSTS).collect(),
            false => vec![acc],
        };
        launch(gpu, stream, (dtype, op), &inputs, &outputs, count)?;
        first += take;
    }
    let bytes = count * dtype.size();
    for &dst in dsts.iter().skip(MAX_DSTS) {
        cu!(cuMemcpyDtoDAsync_v2(dst, dsts[0], bytes, stream))?;
    }
    Ok(())
}

fn launch(
    gpu: &Gpu,
    stream: CUstream,
    (dtype, op): (DataType, ReduceOp),
    srcs: &[CUdeviceptr],
    dsts: &[CUdeviceptr],
    count: usize,
) -> Result<(), CudaError> {
    let mut args = Args {
        src: [0; MAX_SRCS],
        dst: [0; MAX_DSTS],
        n: count as u64,
        nsrc: srcs.len() as i32,
        ndst: dsts.len() as i32,
    };
    args.src[..srcs.len()].copy_from_slice(srcs);
    args.dst[..dsts.len()].copy_from_slice(dsts);
    let per_thread = (16 / dtype.size()) as u64;
    let units = (count as u64).div_ceil(per_thread);
    let blocks = units
        .div_ceil(u64::from(THREADS))
        .clamp(1, u64::from(gpu.sms * BLOCKS_PER_SM)) as u32;
    let mut params = [(&mut args as *mut Args).cast::<std::ffi::c_void>()];
    cu!(cuLaunchKernel(
        gpu.kernel(dtype, op),
        blocks,
        1,
        1,
        THREADS,
        1,
        1,
        0,
        stream,
        params.as_mut_ptr(),
        std::ptr::null_mut(),
    ))
}
