//! The shared-memory transport: processes of one host map each other's segments.
//!
//! Each rank of a multi-process job places its CCL buffers, its link-region signal words,
//! its `done_epoch` and a doorbell in a [`Segment`] (a POSIX shared-memory object, listed
//! in `/dev/shm` while it has a name); every peer process of the same host maps it, and a
//! scratch allocation gets a segment of its own. A peer then posts the rank's notifies
//! with the same compare-and-swap a thread would, and wakes it through the doorbell
//! ([`futex`]): a `futex` on a word of the segment, which the kernel resolves across
//! processes. Names are made from the job's tag and the rank, so a peer finds a segment
//! without asking for its name, and the name is removed as soon as every peer has mapped
//! it ([`Segment::attached`]): a process killed afterwards leaves nothing in `/dev/shm`.

pub mod futex;
mod segment;

pub use segment::{segment_name, Segment, ShmError};
