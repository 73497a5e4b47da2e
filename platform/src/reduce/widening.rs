//! Folds for the two types that compute in `f32` (`bf16` and `f16`), with the partial
//! result held in `f32` registers strip by strip, as the native types' fold holds it in
//! their own.
//!
//! The order and rounding are [`Lane::combine`]'s, repeated: every step applies the
//! operator in `f32` and rounds the result to the element type. The accumulator holds
//! each rounded partial result widened back to `f32`, which is exact, so the next step
//! reads what a stored and reloaded element would give, and the final narrowing is
//! exact too. What is saved is the traffic through the first-level cache that the
//! ping-pong fold makes (two buffers written and read back per source), and, for
//! `bf16`, the 16-bit packs of every step: rounding to `bf16` inside an `f32` is a
//! 32-bit add and mask, which every x86-64 vector unit has, so only the final store
//! narrows.
//!
//! On the 2-core CI VM, one thread reducing 8 sources into one destination (a scratch
//! benchmark of `reduce_raw`, best of 8 or of 2000 rounds, reads and writes per second;
//! two runs before these folds and the prefetching of [`super::prefetch`], then after,
//! two runs for `bf16` and `f32` and one for `f16`):
//!
//! | type | 64 KiB sources (cache) | 1 MiB | 32 MiB (memory) |
//! |---|---|---|---|
//! | `bf16` | 12.1, 14.0 → 19.0, 19.0 GB/s | 9.9, 9.7 → 14.6, 16.3 | 3.8, 4.9 → 11.9, 12.2 |
//! | `f16` | 26.2, 27.1 → 26.3 | 19.8, 19.5 → 18.7 | 8.2, 7.8 → 12.9 |
//! | `f32` (for scale) | 73.7, 75.5 → 74.1, 65.1 | 26.1, 25.6 → 24.6, 24.7 | 11.6, 10.9 → 14.6, 14.1 |
//!
//! An 8-rank ReduceScatter of 64 MiB (`oxccl perf reduce-scatter --ranks 8 -b 64M -e 64M
//! -n 10 -w 3 -d <type>`, out of place, one run each) took 50.0 ms in `bf16` and 35.4 ms
//! in `f16` before, against 23.4 ms in `f32`; after, with the prefetching, 23.3, 22.0 and
//! 20.2 ms.

use half::bf16;

use super::{bf16_quieted, bf16_rounded, bf16_to_f32, prefetch, src_block, Op, WIDE_STRIP_BYTES};

/// Elements of one strip: as many `f32` accumulators as [`WIDE_STRIP_BYTES`] holds.
const STRIP: usize = WIDE_STRIP_BYTES / 4;

/// `O(a, b)` rounded to the nearest `bf16` (ties to even, NaNs quiet), as an `f32`:
/// [`super::f32_to_bf16`] widened back, in 32-bit lanes throughout, so that every x86-64
/// vector unit runs it (the oracle tests compare its results with `half`'s rounding).
///
/// `a` and `b` are `bf16` values (their low 16 bits are zero). Then an arithmetic
/// operator's NaN result has zero low bits too and is quiet (IEEE arithmetic quiets a NaN
/// operand and keeps its payload, or makes the default NaN), so the rounding add leaves
/// it as it is and the NaN test that [`super::f32_to_bf16`] makes is skipped: a third of
/// the instructions of a step. `Max` and `Min` return an operand unchanged, which may be
/// a signalling NaN, so theirs is quieted as there.
#[inline(always)]
fn apply_rounded<O: Op<f32>>(a: f32, b: f32) -> f32 {
    let x = O::apply(a, b);
    f32::from_bits(match O::ARITHMETIC || !x.is_nan() {
        true => bf16_rounded(x.to_bits()),
        false => bf16_quieted(x.to_bits()),
    })
}

/// The `bf16` fold: `out[i] = O(...O(s0[i], s1[i])..., sk[i])` over elements `start..` of
/// every source, each step rounded to `bf16`, prefetching up to element `end`.
///
/// # Safety
/// As [`super::Lane::fold`].
#[inline(always)]
pub(super) unsafe fn fold_bf16<O: Op<f32>>(
    out: &mut [bf16],
    srcs: &[*const u8],
    start: usize,
    end: usize,
) {
    let mut strips = out.chunks_exact_mut(STRIP);
    let mut at = start;
    for strip in &mut strips {
        // A whole strip: its accumulators, of a length known here, stay in registers.
        let mut acc = [0f32; STRIP];
        // SAFETY: forwarded from this function's contract, for elements `at..at + STRIP`.
        unsafe { fold_bf16_span::<O>(&mut acc, strip, srcs, at, end) };
        at += STRIP;
    }
    let tail = strips.into_remainder();
    let mut acc = [0f32; STRIP];
    // SAFETY: as above, for the elements after the last whole strip.
    unsafe { fold_bf16_span::<O>(&mut acc[..tail.len()], tail, srcs, at, end) };
}

/// One strip of [`fold_bf16`]: elements `at..at + out.len()`, with `acc` (as long as
/// `out`) for the partial results.
///
/// # Safety
/// As [`super::Lane::fold`], for those elements.
#[inline(always)]
unsafe fn fold_bf16_span<O: Op<f32>>(
    acc: &mut [f32],
    out: &mut [bf16],
    srcs: &[*const u8],
    at: usize,
    end: usize,
) {
    let (first, rest) = srcs.split_first().expect("fold: no sources");
    let n = out.len();
    let lines = prefetch::Lines::ahead_of(at * 2, n * 2, end * 2);
    lines.request(*first);
    // SAFETY: forwarded from this function's contract.
    let head = unsafe { src_block::<bf16>(*first, at, n) };
    for (a, x) in acc.iter_mut().zip(head) {
        *a = bf16_to_f32(x.to_bits());
    }
    for &src in rest {
        lines.request(src);
        // SAFETY: as above.
        let more = unsafe { src_block::<bf16>(src, at, n) };
        for (a, y) in acc.iter_mut().zip(more) {
            *a = apply_rounded::<O>(*a, bf16_to_f32(y.to_bits()));
        }
    }
    for (o, a) in out.iter_mut().zip(acc.iter()) {
        // Exact: `a` is a `bf16`'s value (a widened source or a rounded result).
        *o = bf16::from_bits((a.to_bits() >> 16) as u16);
    }
}

/// The `bf16` fold compiled for AVX2 (chosen at run time), whose 16-bit packs the final
/// narrowing uses.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use half::bf16;

    use super::Op;

    /// Whether this CPU can run this module's functions.
    pub(in super::super) fn available() -> bool {
        is_x86_feature_detected!("avx2")
    }

    /// [`super::fold_bf16`], vectorised with AVX2.
    ///
    /// # Safety
    /// As [`super::fold_bf16`], and the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(in super::super) unsafe fn fold_bf16<O: Op<f32>>(
        out: &mut [bf16],
        srcs: &[*const u8],
        start: usize,
        end: usize,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { super::fold_bf16::<O>(out, srcs, start, end) }
    }
}

/// The `f16` fold with F16C's conversions (x86-64, chosen at run time): eight lanes at a
/// time, each step rounded to `f16` by a conversion there and back.
#[cfg(target_arch = "x86_64")]
pub(super) mod f16c {
    use std::arch::x86_64::{
        __m256, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm_loadu_si128, _mm_storeu_si128,
        _MM_FROUND_TO_NEAREST_INT,
    };

    use half::f16;

    use super::{prefetch, Op, STRIP};

    /// Eight `f16`s at `p`, widened.
    ///
    /// # Safety
    /// `p` is valid for reads of 16 bytes; the CPU has AVX and F16C.
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> [f32; 8] {
        // SAFETY: forwarded from this function's contract; the load takes any alignment.
        bytemuck::cast(unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) })
    }

    /// `x` rounded to `f16` to nearest-even (as `half::f16::from_f32`), as `f32`s.
    ///
    /// # Safety
    /// The CPU has AVX and F16C.
    #[inline(always)]
    unsafe fn round8(x: [f32; 8]) -> [f32; 8] {
        let x: __m256 = bytemuck::cast(x);
        // SAFETY: forwarded from this function's contract.
        bytemuck::cast(unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) })
    }

    /// The fold over the first `out.len() / 8 * 8` elements of `out` (the rest is left
    /// to the caller); returns how many it did.
    ///
    /// # Safety
    /// As [`super::super::Lane::fold`], and the CPU has AVX and F16C.
    #[target_feature(enable = "avx,f16c")]
    pub(in super::super) unsafe fn fold_f16<O: Op<f32>>(
        out: &mut [f16],
        srcs: &[*const u8],
        start: usize,
        end: usize,
    ) -> usize {
        let (first, rest) = srcs.split_first().expect("fold: no sources");
        if rest.is_empty() {
            // A copy: the caller's fold moves the bits as they are, where a conversion
            // there and back would quiet a signalling NaN.
            return 0;
        }
        let whole = out.len() / 8 * 8;
        let mut strips = out[..whole].chunks_exact_mut(STRIP);
        let mut at = start;
        for strip in &mut strips {
            // A whole strip: its accumulators, of a number known here, stay in registers.
            let mut acc = [[0f32; 8]; STRIP / 8];
            // SAFETY: elements `at..at + STRIP` lie within `start..start + out.len()`;
            // AVX and F16C are enabled.
            unsafe { fold_span::<O>(&mut acc, strip, (*first, rest), at, end) };
            at += STRIP;
        }
        let tail = strips.into_remainder();
        let mut acc = [[0f32; 8]; STRIP / 8];
        // SAFETY: as above, for the whole groups of eight after the last whole strip.
        unsafe { fold_span::<O>(&mut acc[..tail.len() / 8], tail, (*first, rest), at, end) };
        whole
    }

    /// One strip of [`fold_f16`]: elements `at..at + out.len()` (a multiple of 8), with
    /// `acc` (a group of eight per eight elements) for the partial results.
    ///
    /// # Safety
    /// As [`super::super::Lane::fold`], for those elements, and the CPU has AVX and F16C.
    #[inline(always)]
    unsafe fn fold_span<O: Op<f32>>(
        acc: &mut [[f32; 8]],
        out: &mut [f16],
        (first, rest): (*const u8, &[*const u8]),
        at: usize,
        end: usize,
    ) {
        let lines = prefetch::Lines::ahead_of(at * 2, out.len() * 2, end * 2);
        lines.request(first);
        let first = first.cast::<f16>();
        for (g, a) in acc.iter_mut().enumerate() {
            // SAFETY: elements `at + 8 g..at + 8 g + 8` are among this strip's, which
            // the caller guarantees are readable; AVX and F16C are enabled.
            *a = unsafe { load8(first.add(at + 8 * g)) };
        }
        for &src in rest {
            lines.request(src);
            let src = src.cast::<f16>();
            for (g, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let y = unsafe { load8(src.add(at + 8 * g)) };
                for (p, q) in a.iter_mut().zip(y) {
                    *p = O::apply(*p, q);
                }
                // SAFETY: AVX and F16C are enabled.
                *a = unsafe { round8(*a) };
            }
        }
        for (g, a) in acc.iter().enumerate() {
            // SAFETY: `out` holds `8 * acc.len()` elements; the conversion is exact (every
            // lane is an `f16`'s value); the store takes any alignment.
            unsafe {
                let narrow = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(bytemuck::cast(*a));
                _mm_storeu_si128(out.as_mut_ptr().add(8 * g).cast(), narrow);
            }
        }
    }
}
