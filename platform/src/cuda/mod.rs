//! The CUDA backend (feature `cuda`): the task IR on NVIDIA GPUs, through `cudarc`'s
//! driver API and NVRTC, both loaded at run time.

mod error;
pub mod kernels;

pub use error::CudaError;
