//! Software prefetch for the reduction folds: while a strip of every source is folded, the
//! lines [`AHEAD_BYTES`] further on in each are requested.
//!
//! A reduction reads as many streams at once as it has sources, a strip of 128 bytes
//! from each in turn, and the hardware prefetchers keep too few of them far enough ahead
//! when the sources come from memory: one thread reducing 8 sources of 32 MiB into one
//! destination (streaming stores, f32 sum) moved 14.9 GB/s of reads and writes without
//! these requests and 17.4 GB/s with them at 1 KiB ahead; two threads at once 29.7
//! against 34.2 GB/s, which is what two threads' copies of the same sizes move (33.3).
//! At 512 B and 2 KiB ahead the rates were within 3% of 1 KiB's; when the sources are
//! in the cache (8 sources of 16 KiB to 4 MiB) the requests changed nothing beyond the
//! noise. (A scratch benchmark of this loop on the 2-core CI VM, best of 6 rounds.) An
//! 8-rank ReduceScatter of 64 MiB (`oxccl perf reduce-scatter --ranks 8 -b 64M -e 64M -n
//! 10 -w 3`, `hier-ring` and `mesh`, two runs each) took 23.4 and 23.8 ms out of place
//! before, 20.4 to 20.8 ms after.

/// How far ahead of the strip being folded each source is requested.
const AHEAD_BYTES: usize = 1024;

/// A cache line, the unit of a prefetch.
const LINE_BYTES: usize = 64;

/// The byte range of every source to request, the same in each.
#[derive(Copy, Clone)]
pub(super) struct Lines {
    from: usize,
    to: usize,
}

impl Lines {
    /// The bytes [`AHEAD_BYTES`] past `at..at + len`, cut at `end` (the sources' length):
    /// nothing past a source's end is requested.
    #[inline(always)]
    pub(super) fn ahead_of(at: usize, len: usize, end: usize) -> Lines {
        let from = at.saturating_add(AHEAD_BYTES);
        Lines {
            from,
            to: from.saturating_add(len).min(end),
        }
    }

    /// Request these lines of the source at `src`.
    #[inline(always)]
    pub(super) fn request(self, src: *const u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let mut at = self.from;
            while at < self.to {
                // SAFETY: SSE is part of x86-64; `at` is below the source's length, and
                // a prefetch reads nothing and cannot fault.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(at).cast::<i8>()) };
                at += LINE_BYTES;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = src;
    }
}
