//! ReduceScatter executors: rank `r`'s output becomes the reduction over every rank of
//! input block `r`.
//!
//! The input blocks are described by [`KernelArgs::blocks`], so the same code runs on
//! packed CCL buffers (staged) and on the user's buffer (zero-copy). In place, the output
//! is block `r` of the one buffer; only rank `r` reads that block, in the very task that
//! writes it, so no executor needs a detour for it.
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod double_ring;
pub mod hier_levels;
pub mod mesh;
pub mod nb;
pub mod nhr;
pub mod rhd;
pub mod ring;
