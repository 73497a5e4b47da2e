//! Reduce executors: the root's output becomes the reduction of every rank's input.
//!
//! Only the root's output is defined; the others may hold anything afterwards, so the
//! tree and chain executors keep their partial reductions in the non-root outputs. A
//! rank reads a peer's input or output only after that peer said it is ready, and says
//! "done reading" before the peer's iteration may end.

pub mod mesh;
pub mod put_mesh;
pub mod put_rhd;
pub mod relay_mesh;
pub mod relay_reduce_scatter_gather;
pub mod ring;
pub mod tree;
