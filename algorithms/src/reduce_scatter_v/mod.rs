//! ReduceScatterV executors: rank `r`'s output becomes the reduction over every rank of
//! input block `r` (`counts[r]` elements at `displs[r]`, the same layout on every rank).
//!
//! As for AllGatherV, the framework runs these operators in one iteration on the user's
//! buffers; the executors move the blocks in rounds of one slot-sized piece of every block
//! through the CCL buffers themselves (see [`crate::all_gather_v`]). In place, the output
//! is block `r` of the one buffer; only rank `r` reads that block, in the very task that
//! writes it.

pub mod mesh;
pub mod relay_mesh;
pub mod ring;
