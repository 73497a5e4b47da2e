//! A byte copy that is fast whatever the alignment of its two ends.
//!
//! Every Copy task of the host device ends in a copy of bytes between user buffers, CCL
//! buffers and peers' buffers, at whatever offsets the collective's blocks fall. glibc's
//! `memcpy` copies anything above 2 KiB with `rep movsb` on CPUs that advertise fast
//! string moves (ERMS/FSRM), and on the development machine (an AMD EPYC, glibc 2.36)
//! that instruction runs at 3.5 GB/s when the destination sits a few bytes past the
//! source modulo 64 (1, 4 and 8 measured), against 42 to 48 GB/s otherwise: 512 KiB
//! copied into 8 destinations 8 bytes past the source took 1198 µs through `memcpy` and
//! 87 µs through [`copy_bytes`] (best of 50, the ignored test `copy_throughput`), and at
//! that offset `memcpy` ran at 3 to 3.5 GB/s from 2.5 KiB to 512 KiB. Which case a copy
//! meets depends on where the allocator put the user's buffers and on the block offsets. A
//! mesh-push AllGather whose blocks start at multiples of 8 bytes but not of 64 (`oxccl
//! perf all-gather --ranks 8 -b 4194368 --algo mesh-push`: blocks of 524296 bytes, each
//! copied from an input to its offset in every output) took 1609 µs through `memcpy` and
//! 1200 µs through this copy, out of place (5 alternating runs, medians); rhd, which
//! copies between equal offsets of two outputs, 1364 and 1328 µs.
//!
//! [`copy_bytes`] keeps `memcpy` for short copies, where glibc uses vector moves, and
//! otherwise runs a vector loop of its own: unaligned loads, stores aligned to the
//! vector size, whose speed does not depend on the source's alignment. The loop uses
//! AVX2 where the CPU has it (checked at run time, once) and SSE2, part of x86-64,
//! elsewhere; other architectures keep `memcpy`.

/// Copies up to this long go to `memcpy`, which moves them with vector instructions
/// (glibc switches to `rep movsb` above 2 KiB).
const MEMCPY_BYTES: usize = 2048;

/// Copy `len` bytes from `src` to `dst`.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes; the ranges do not
/// overlap.
#[inline]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len > MEMCPY_BYTES {
        // SAFETY: forwarded from this function's contract; `len` is above one vector.
        unsafe { x86::copy_long(src, dst, len) };
        return;
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256,
        _mm_loadu_si128, _mm_store_si128, _mm_storeu_si128,
    };

    /// The vector loop of [`super::copy_bytes`], AVX2 when the CPU has it.
    ///
    /// # Safety
    /// As [`super::copy_bytes`], and `len` at least 32 bytes (one AVX2 vector).
    #[inline]
    pub(super) unsafe fn copy_long(src: *const u8, dst: *mut u8, len: usize) {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2; the rest is this function's contract.
            unsafe { copy_avx2(src, dst, len) }
        } else {
            // SAFETY: SSE2 is part of x86-64; the rest is this function's contract.
            unsafe { copy_sse2(src, dst, len) }
        }
    }

    /// Bytes the loops move per iteration: four vectors, so that loads run ahead of the
    /// stores that wait for them.
    const UNROLL: usize = 4;

    /// Generates one copy loop for a vector width: the first vector stored unaligned,
    /// then aligned stores from the first aligned destination address, and the last
    /// vector stored unaligned at the end (it may rewrite bytes the loop wrote, with the
    /// same values). `len` must be at least one vector.
    macro_rules! copy_loop {
        ($name:ident, $feature:literal, $vec:ty, $loadu:ident, $store:ident, $storeu:ident) => {
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name(src: *const u8, dst: *mut u8, len: usize) {
                const W: usize = std::mem::size_of::<$vec>();
                // SAFETY (whole body): every access is inside `0..len` of both ranges,
                // which the caller guarantees valid and disjoint: the head and tail
                // vectors start at 0 and `len - W`, the loop's at `i < end <= len - W`
                // (aligned by `skip`, which is below `W`), and `len >= W`.
                unsafe {
                    let head = $loadu(src.cast::<$vec>());
                    let tail = $loadu(src.add(len - W).cast::<$vec>());
                    let skip = (W - dst as usize % W) % W;
                    let mut i = skip;
                    let end = len - W;
                    while i + UNROLL * W <= end {
                        let a = $loadu(src.add(i).cast::<$vec>());
                        let b = $loadu(src.add(i + W).cast::<$vec>());
                        let c = $loadu(src.add(i + 2 * W).cast::<$vec>());
                        let d = $loadu(src.add(i + 3 * W).cast::<$vec>());
                        $store(dst.add(i).cast::<$vec>(), a);
                        $store(dst.add(i + W).cast::<$vec>(), b);
                        $store(dst.add(i + 2 * W).cast::<$vec>(), c);
                        $store(dst.add(i + 3 * W).cast::<$vec>(), d);
                        i += UNROLL * W;
                    }
                    while i < end {
                        $store(dst.add(i).cast::<$vec>(), $loadu(src.add(i).cast::<$vec>()));
                        i += W;
                    }
                    $storeu(dst.cast::<$vec>(), head);
                    $storeu(dst.add(end).cast::<$vec>(), tail);
                }
            }
        };
    }

    copy_loop!(
        copy_avx2,
        "avx2",
        __m256i,
        _mm256_loadu_si256,
        _mm256_store_si256,
        _mm256_storeu_si256
    );
    copy_loop!(
        copy_sse2,
        "sse2",
        __m128i,
        _mm_loadu_si128,
        _mm_store_si128,
        _mm_storeu_si128
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths around every edge of the loops: the `memcpy` bar, one vector, the unrolled
    /// step, and odd lengths past them.
    const LENGTHS: &[usize] = &[
        0, 1, 31, 64, 2047, 2048, 2049, 2050, 2080, 2111, 2175, 4096, 4097, 65_599,
    ];

    /// Copies `len` bytes from offset `from` of a patterned buffer to offset `to` of a
    /// guarded one with `copy`, and checks every byte written and every guard byte left.
    fn check(copy: unsafe fn(*const u8, *mut u8, usize), len: usize, from: usize, to: usize) {
        let src: Vec<u8> = (0..len + 64).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0xEEu8; len + 128];
        // SAFETY: `from + len <= src.len()`, `to + len <= dst.len()`, and the two are
        // distinct allocations.
        unsafe { copy(src[from..].as_ptr(), dst[to..].as_mut_ptr(), len) };
        assert_eq!(
            &dst[to..to + len],
            &src[from..from + len],
            "len {len} {from}->{to}"
        );
        assert!(
            dst[..to].iter().chain(&dst[to + len..]).all(|&b| b == 0xEE),
            "len {len} {from}->{to} wrote outside its destination"
        );
    }

    #[test]
    fn copies_every_length_at_every_alignment_and_nothing_else() {
        for &len in LENGTHS {
            for from in [0, 1, 8, 15, 16, 33, 63] {
                for to in [0, 1, 4, 8, 17, 32, 40, 63] {
                    check(copy_bytes, len, from, to);
                }
            }
        }
    }

    /// `memcpy` against [`copy_bytes`] with the destination at several offsets past the
    /// source modulo 64 (the figures in this module's doc); run with
    /// `cargo test --release -p oxccl-platform -- --ignored --nocapture copy_throughput`.
    #[test]
    #[ignore = "timing, prints only"]
    fn copy_throughput() {
        type Copy = unsafe fn(*const u8, *mut u8, usize);
        unsafe fn memcpy(src: *const u8, dst: *mut u8, len: usize) {
            // SAFETY: forwarded from the caller.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
        }
        const DSTS: usize = 8;
        let page = 4096;
        for len in [4096, 64 << 10, 512 << 10] {
            let src = vec![7u8; len + 2 * page];
            let mut dsts: Vec<Vec<u8>> = (0..DSTS).map(|_| vec![0u8; len + 2 * page]).collect();
            let base = |p: *const u8| p.align_offset(page);
            for shift in [0, 8, 16] {
                for (name, copy) in [("memcpy", memcpy as Copy), ("copy_bytes", copy_bytes)] {
                    let mut best = f64::INFINITY;
                    for _ in 0..50 {
                        let t = std::time::Instant::now();
                        for d in dsts.iter_mut() {
                            let to = base(d.as_ptr()) + shift;
                            let from = base(src.as_ptr());
                            // SAFETY: both ranges lie inside their vectors (`to + len` and
                            // `from + len` are below `len + 2 * page`), which are distinct.
                            unsafe { copy(src[from..].as_ptr(), d[to..].as_mut_ptr(), len) };
                        }
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    let gbs = (DSTS * len) as f64 / best / 1e9;
                    eprintln!(
                        "{len:>7} B to {DSTS} destinations {shift:>2} B past the source: \
                         {name:<10} {:8.1} us  {gbs:6.1} GB/s",
                        best * 1e6
                    );
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_sse2_loop_copies_as_the_avx2_one() {
        /// [`x86::copy_sse2`] with `copy_bytes`'s signature (its bar included).
        unsafe fn sse2(src: *const u8, dst: *mut u8, len: usize) {
            if len <= MEMCPY_BYTES {
                // SAFETY: forwarded from the caller.
                return unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            }
            // SAFETY: SSE2 is part of x86-64; the rest is forwarded from the caller.
            unsafe { x86::copy_sse2(src, dst, len) }
        }
        for &len in LENGTHS {
            for (from, to) in [(0, 0), (1, 0), (0, 9), (15, 17), (63, 40)] {
                check(sse2, len, from, to);
            }
        }
    }
}
