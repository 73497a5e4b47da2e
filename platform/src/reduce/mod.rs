//! Element-wise reduction kernels for the host.
//!
//! Every reducing collective (all-reduce, reduce, reduce-scatter) ends up, on the CPU, in
//! one loop: read element `i` of a few buffers, combine them, write element `i` of one or
//! more buffers. This module is that loop, written once for all twelve [`DataType`]s and
//! four [`ReduceOp`]s, plus [`reduce_scalar`], a deliberately naive one-element version
//! that serves as the oracle other reduction paths are tested against.
//!
//! The loop works in blocks of 2 KiB. Each block of the sources is folded into an
//! accumulator on the stack, and the finished block is stored to every destination.
//! Accumulating apart is what makes in-place reduction safe: a destination may be one of
//! the sources, because no byte of a block is written until every source has been read
//! for that block. Within a block the fold goes strip by strip (128 bytes for the native
//! types, 256 bytes of `f32` for `f16` and `bf16`, see `widening`), each strip's partial
//! result held in registers while every source is folded into it, and every source's
//! lines a kilobyte ahead requested meanwhile (`prefetch`): the hardware prefetchers
//! follow too few of a reduction's many streams. The element type and the operator (a
//! zero-sized type) are compile-time parameters of those loops; the `(dtype, op)` pair
//! is matched once per call, never per element.
//!
//! `f16` is the one type LLVM cannot vectorise on its own: on x86-64 CPUs with F16C the
//! conversions are done inline with those instructions, elsewhere through `half`'s slice
//! conversions (with the sources ping-ponged through two stack buffers). `bf16` converts
//! with branch-free bit operations of its own (a shift to widen, an add and a mask to
//! round), which LLVM vectorises.
//!
//! # Semantics
//!
//! `dst[i] = op(srcs[0][i], srcs[1][i], ...)`, folded left to right,
//! `((s0 op s1) op s2) ...`, with every pairwise step rounded to the element type. The
//! fold order is fixed, so the result for a given set of sources is bit-for-bit the same
//! however a collective chunks the buffers, and on every rank.
//!
//! - Integers: `Sum` and `Prod` wrap (`wrapping_add`, `wrapping_mul`); `Max` and `Min`
//!   are the ordinary integer ones.
//! - `f32` and `f64`: `Sum` and `Prod` are IEEE addition and multiplication; `Max` and
//!   `Min` are [`f32::max`] and [`f32::min`], which ignore NaN (a NaN operand yields the
//!   other operand). When both operands are zeros of opposite sign, either may be
//!   returned, as those functions document.
//! - `f16` and `bf16`: each step converts both operands to `f32`, applies the `f32`
//!   operator and rounds the result back to nearest-even. Rounding after every step,
//!   rather than once at the end, is deliberate: it is what a ring or tree produces, where
//!   every partial result travels and is stored in the buffer's own type. So in `f16`,
//!   `2048 + 1 == 2048`, and `2048 + 1 + 1` is still 2048.
//!
//! Bytes are in the machine's native order, which is little-endian on every target
//! oxccl runs on.

use std::mem::MaybeUninit;

use smallvec::SmallVec;
use std::ops::{Add, Mul};

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::dtype::{DataType, ReduceOp};

mod copy;
mod prefetch;
mod widening;
pub use copy::copy_bytes;

/// Bytes per block of the kernel loop: the stack accumulator's size.
const BLOCK_BYTES: usize = 2048;

/// Elements per step of the portable `f16` path's detour through `f32`.
const HALF_CHUNK: usize = 128;

/// Element-wise reduction: for every element `i < count`, each
/// `dst[i] = op(srcs[0][i], srcs[1][i], ...)`, folding left to right
/// (`((s0 op s1) op s2) ...`), each step rounded to the element type.
///
/// Panics if `srcs` is empty. With no `dsts` or a `count` of 0 it writes nothing.
///
/// # Safety
/// - `srcs` is non-empty; each src pointer is valid for reads of `count * dtype.size()`
///   bytes and aligned to `dtype.size()`;
/// - each dst pointer is valid for writes of the same length and aligned;
/// - a dst may be exactly equal to a src pointer (accumulate in place), but must not
///   otherwise overlap any src, nor any other dst;
/// - nothing else writes those bytes during the call.
pub unsafe fn reduce_raw(
    dtype: DataType,
    op: ReduceOp,
    srcs: &[*const u8],
    dsts: &[*mut u8],
    count: usize,
) {
    let bytes = count.saturating_mul(dtype.size());
    // SAFETY: the caller upholds this function's contract, which is `reduce_part`'s.
    unsafe { reduce_part(dtype, op, srcs, dsts, count, bytes) }
}

/// [`reduce_raw`] over one part of a larger task whose destinations are `task_bytes`
/// long each (a chunk of a task that workers share): the whole task's size, not the
/// part's, decides whether the result is stored with non-temporal stores, so a task
/// stores alike however it is cut.
///
/// # Safety
/// As [`reduce_raw`].
pub unsafe fn reduce_part(
    dtype: DataType,
    op: ReduceOp,
    srcs: &[*const u8],
    dsts: &[*mut u8],
    count: usize,
    task_bytes: usize,
) {
    assert!(!srcs.is_empty(), "reduce_part: no source buffers");
    debug_assert!(
        count == 0
            || (srcs.iter().all(|p| is_multiple(*p as usize, dtype.size()))
                && dsts.iter().all(|p| is_multiple(*p as usize, dtype.size()))),
        "reduce_part: buffer not aligned for {dtype}"
    );
    let part = Part { count, task_bytes };
    // SAFETY: the caller upholds this function's contract, which is `reduce_op`'s
    // contract with `T` the Rust type of `dtype`.
    unsafe {
        match dtype {
            DataType::I8 => reduce_op::<i8>(op, srcs, dsts, part),
            DataType::U8 => reduce_op::<u8>(op, srcs, dsts, part),
            DataType::I16 => reduce_op::<i16>(op, srcs, dsts, part),
            DataType::U16 => reduce_op::<u16>(op, srcs, dsts, part),
            DataType::I32 => reduce_op::<i32>(op, srcs, dsts, part),
            DataType::U32 => reduce_op::<u32>(op, srcs, dsts, part),
            DataType::I64 => reduce_op::<i64>(op, srcs, dsts, part),
            DataType::U64 => reduce_op::<u64>(op, srcs, dsts, part),
            DataType::F16 => reduce_op::<f16>(op, srcs, dsts, part),
            DataType::Bf16 => reduce_op::<bf16>(op, srcs, dsts, part),
            DataType::F32 => reduce_op::<f32>(op, srcs, dsts, part),
            DataType::F64 => reduce_op::<f64>(op, srcs, dsts, part),
        }
    }
}

/// The elements one kernel call reduces, and the destination length of the task they
/// belong to (which decides the stores, see [`reduce_part`]).
#[derive(Copy, Clone)]
struct Part {
    count: usize,
    task_bytes: usize,
}

/// Copy `len` bytes from `src` to every destination. A large copy goes block by block:
/// each block of the source is read once, while it is in the cache, and stored to every
/// destination with non-temporal stores (the result will not be read again before it
/// leaves the cache); so a copy to `n` destinations makes `len` bytes of reads, not
/// `n * len`, and no read-for-ownership of the destinations. A smaller one stores
/// through the cache, to every destination a block of the source at a time
/// ([`CACHED_BLOCK_BYTES`]).
///
/// # Safety
/// `src` is valid for reads of `len` bytes and each dst for writes of `len` bytes; no dst
/// overlaps `src` or another dst; nothing else writes those bytes during the call.
pub unsafe fn copy_raw(src: *const u8, dsts: &[*mut u8], len: usize) {
    let streaming = copy_streams(len, dsts.len(), CopyScope::default());
    // SAFETY: the caller upholds this function's contract, which is `copy_part`'s.
    unsafe { copy_part(src, dsts, len, streaming) }
}

/// What a copy is part of, for [`copy_streams`]: the bytes its program's data tasks move
/// in all (each one's length times its destinations), and the bytes the whole
/// operation's user buffers take on the copy's host (0 when not known).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyScope {
    pub program_bytes: usize,
    pub footprint: usize,
}

/// Whether a copy of `len` bytes to `dsts` destinations, a task of `scope`, goes block by
/// block with streaming stores, reading its source once: when it writes
/// [`COPY_STREAM_BYTES`] itself, or writes at least [`STREAM_BYTES`] in a program that
/// writes [`PROGRAM_STREAM_BYTES`], or has one destination of at least [`STREAM_BYTES`] in
/// an operation whose footprint is at least [`FOOTPRINT_STREAM_BYTES`]. Otherwise its
/// stores are cached, block by block when it has several destinations
/// ([`CACHED_BLOCK_BYTES`]), each block of the source read again from the first-level
/// cache. The cost model charges a host thread the source once for it, or more than a copy
/// per destination when the operation's buffers pass the last-level cache
/// (`oxccl_framework`'s `cost::thread_bytes`).
pub fn copy_streams(len: usize, dsts: usize, scope: CopyScope) -> bool {
    let writes = len.saturating_mul(dsts);
    let large_program = scope.program_bytes >= PROGRAM_STREAM_BYTES;
    let large_operation = dsts == 1 && scope.footprint >= FOOTPRINT_STREAM_BYTES;
    writes >= COPY_STREAM_BYTES || (writes >= STREAM_BYTES && (large_program || large_operation))
}

/// [`copy_raw`] over one part of a larger copy, streaming or not as the whole copy does
/// ([`copy_streams`]): every part of a task stores alike (see [`reduce_part`]).
///
/// # Safety
/// As [`copy_raw`].
pub unsafe fn copy_part(src: *const u8, dsts: &[*mut u8], len: usize, streaming: bool) {
    if !streaming {
        // SAFETY: forwarded from this function's contract.
        unsafe { copy_cached(src, dsts, len) };
        return;
    }
    let targets: SmallVec<[(*mut u8, bool); 8]> = dsts.iter().map(|&dst| (dst, true)).collect();
    let mut start = 0;
    while start < len {
        let n = BLOCK_BYTES.min(len - start);
        // SAFETY: `start + n <= len`; the caller guarantees `src` is readable there, every
        // destination writable there, and that no destination overlaps it.
        unsafe {
            store::to_all(
                &targets,
                start,
                std::slice::from_raw_parts(src.add(start), n),
            )
        };
        start += n;
    }
    store::fence();
}

/// A copy to several destinations with cached stores goes in blocks of this many bytes:
/// each block of the source is copied to every destination while it is in the
/// first-level cache (32 KiB of data on the development machine's cores and on most x86
/// cores; the destination lines pass through the rest).
///
/// Copying the whole source to one destination after another read it again from the
/// outer caches for every destination. An 8-rank AllGather by `mesh-push` (each rank
/// copies its block into every rank's output) measured, against that, 0.65x to 1.03x the
/// time at 512 KiB and 0.81x to 0.90x at 2 MiB, in blocks of 16 KiB (three alternating
/// runs of `oxccl perf all-gather --ranks 8 -b 128K -e 8M -f 4 --algo mesh-push -n 40 -w
/// 5`; Broadcast by `mesh-push` 0.84x to 0.95x and 0.77x to 0.88x). Medians of three
/// runs over block sizes at 512 KiB, 1 MiB and 2 MiB: 4 KiB 94, 116 and 234 µs; 8 KiB 93,
/// 115 and 245; 16 KiB 101, 124 and 226; 32 KiB 121, 137 and 278; whole 113, 174 and 275.
/// At 4 MiB, where the stores fill the last-level cache, blocks changed nothing beyond
/// the noise: medians of 936 to 1100 µs for blocks of 4 to 64 KiB, 964 and 1043 µs
/// whole, in two such sweeps.
const CACHED_BLOCK_BYTES: usize = 8 << 10;

/// One cached copy of `src` to every destination, block by block
/// ([`CACHED_BLOCK_BYTES`]) when there are several.
///
/// # Safety
/// As [`copy_raw`].
unsafe fn copy_cached(src: *const u8, dsts: &[*mut u8], len: usize) {
    let block = match dsts.len() {
        0 | 1 => len,
        _ => CACHED_BLOCK_BYTES,
    };
    let mut start = 0;
    while start < len {
        let n = block.min(len - start);
        for &dst in dsts {
            // SAFETY: `start + n <= len`; the caller guarantees both ranges and that they
            // do not overlap.
            unsafe { copy_bytes(src.add(start), dst.add(start), n) };
        }
        start += n;
    }
}

/// Safe wrapper over byte slices, for tests and small host-side uses:
/// `dst = op(srcs...)`.
///
/// Panics (with a clear message) if lengths differ, are not a multiple of `dtype.size()`,
/// `srcs` is empty, or slices are misaligned for the dtype. Empty slices are never
/// misaligned.
pub fn reduce_slices(dtype: DataType, op: ReduceOp, srcs: &[&[u8]], dst: &mut [u8]) {
    let size = dtype.size();
    assert!(!srcs.is_empty(), "reduce_slices: no source buffers");
    assert!(
        is_multiple(dst.len(), size),
        "reduce_slices: length {} is not a multiple of the {dtype} element size {size}",
        dst.len()
    );
    for (i, src) in srcs.iter().enumerate() {
        assert!(
            src.len() == dst.len(),
            "reduce_slices: source {i} has {} bytes but the destination has {}",
            src.len(),
            dst.len()
        );
    }
    if dst.is_empty() {
        return;
    }
    let misaligned = |p: *const u8| !is_multiple(p as usize, size);
    assert!(
        !misaligned(dst.as_ptr()) && !srcs.iter().any(|s| misaligned(s.as_ptr())),
        "reduce_slices: a buffer is not aligned to {size} bytes for {dtype}"
    );
    let src_ptrs: Vec<*const u8> = srcs.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: every slice holds the same whole number of elements and is aligned (checked
    // above); `dst` is a unique borrow, so it overlaps no source, and nothing else can
    // write the borrowed bytes during the call.
    unsafe { reduce_raw(dtype, op, &src_ptrs, &[dst.as_mut_ptr()], dst.len() / size) }
}

/// Reduce one element pair, scalar reference semantics (used by tests across the project
/// as the oracle): `a` and `b` are the little-endian bytes of one element each; returns
/// the bytes of `op(a, b)`.
///
/// This is written independently of the block kernels, one element at a time, so that it
/// can check them. Panics if `a` or `b` is not exactly `dtype.size()` bytes.
pub fn reduce_scalar(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8]) -> Vec<u8> {
    let size = dtype.size();
    assert!(
        a.len() == size && b.len() == size,
        "reduce_scalar: operands have {} and {} bytes, a {dtype} has {size}",
        a.len(),
        b.len()
    );
    macro_rules! apply {
        ($x:expr, $y:expr, $sum:ident, $prod:ident) => {{
            let (x, y) = ($x, $y);
            match op {
                ReduceOp::Sum => x.$sum(y),
                ReduceOp::Prod => x.$prod(y),
                ReduceOp::Max => x.max(y),
                ReduceOp::Min => x.min(y),
            }
        }};
    }
    macro_rules! int {
        ($t:ty) => {
            bytes(apply!(
                read::<$t>(a),
                read::<$t>(b),
                wrapping_add,
                wrapping_mul
            ))
        };
    }
    macro_rules! float {
        ($t:ty) => {
            bytes(apply!(read::<$t>(a), read::<$t>(b), add, mul))
        };
    }
    macro_rules! half {
        ($t:ty) => {
            bytes(<$t>::from_f32(apply!(
                read::<$t>(a).to_f32(),
                read::<$t>(b).to_f32(),
                add,
                mul
            )))
        };
    }
    match dtype {
        DataType::I8 => int!(i8),
        DataType::U8 => int!(u8),
        DataType::I16 => int!(i16),
        DataType::U16 => int!(u16),
        DataType::I32 => int!(i32),
        DataType::U32 => int!(u32),
        DataType::I64 => int!(i64),
        DataType::U64 => int!(u64),
        DataType::F16 => half!(f16),
        DataType::Bf16 => half!(bf16),
        DataType::F32 => float!(f32),
        DataType::F64 => float!(f64),
    }
}

/// Reads one element from (possibly unaligned) bytes of exactly its size.
fn read<T: bytemuck::Pod>(bytes: &[u8]) -> T {
    bytemuck::pod_read_unaligned(bytes)
}

/// The bytes of one element.
fn bytes<T: bytemuck::Pod>(value: T) -> Vec<u8> {
    bytemuck::bytes_of(&value).to_vec()
}

/// Whether `x` is a multiple of `size`, a power of two (every element size is).
fn is_multiple(x: usize, size: usize) -> bool {
    x & (size - 1) == 0
}

/// A reduction operator on `T`, as a zero-sized type so that kernels monomorphise per op.
trait Op<T> {
    /// Whether the operator is IEEE arithmetic (`Sum`, `Prod`), whose NaN results are
    /// always quiet and carry an operand's payload or the default one; `Max` and `Min`
    /// return an operand as it is.
    const ARITHMETIC: bool = false;

    fn apply(a: T, b: T) -> T;
}

struct Sum;
struct Prod;
struct Max;
struct Min;

/// Implements the four operators for types whose sum and product are the methods
/// `$sum` and `$prod`; `max` and `min` are `Ord`'s for integers, NaN-ignoring for floats.
macro_rules! ops {
    ($sum:ident, $prod:ident: $($t:ty),*) => {$(
        impl Op<$t> for Sum {
            const ARITHMETIC: bool = true;
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.$sum(b) }
        }
        impl Op<$t> for Prod {
            const ARITHMETIC: bool = true;
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.$prod(b) }
        }
        impl Op<$t> for Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.max(b) }
        }
        impl Op<$t> for Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.min(b) }
        }
    )*};
}

ops!(wrapping_add, wrapping_mul: i8, u8, i16, u16, i32, u32, i64, u64);
ops!(add, mul: f32, f64);

/// The storage type of one element, and how two blocks combine into a third.
trait Lane: bytemuck::Pod {
    /// The type the operators compute in.
    type Compute;

    /// `out[i] = O(a[i], b[i])` for every `i`, rounded to `Self`. All three have the
    /// same length.
    fn combine<O: Op<Self::Compute>>(out: &mut [Self], a: &[Self], b: &[Self]);

    /// `out[i] = O(...O(O(s0[i], s1[i]), s2[i])..., sk[i])` over elements `start..` of
    /// every source, with `spare` (as long as `out`) as scratch, in the order and
    /// rounding of repeated [`Lane::combine`]s, which is what this default does: two
    /// buffers ping-ponged through the cache. `end` is the elements every source holds
    /// (at least `start + out.len()`): a fold may prefetch up to there.
    ///
    /// # Safety
    /// Every source is aligned for `Self` and valid for reads of `start + out.len()`
    /// elements, which nothing writes during the call; `srcs` is non-empty.
    #[inline(always)]
    unsafe fn fold<O: Op<Self::Compute>>(
        out: &mut [Self],
        spare: &mut [Self],
        srcs: &[*const u8],
        start: usize,
        end: usize,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { fold_pingpong::<Self, O>(out, spare, srcs, start, end) }
    }
}

/// [`Lane::fold`]'s default: [`WIDE_STRIP_BYTES`] at a time, each strip folded by
/// [`reduce_block`] (the sources ping-ponged through two buffers in the first-level
/// cache) after the lines ahead of it in every source were requested.
///
/// # Safety
/// As [`Lane::fold`].
#[inline(always)]
unsafe fn fold_pingpong<T: Lane, O: Op<T::Compute>>(
    out: &mut [T],
    spare: &mut [T],
    srcs: &[*const u8],
    start: usize,
    end: usize,
) {
    let size = std::mem::size_of::<T>();
    let strip = WIDE_STRIP_BYTES / size;
    let mut at = start;
    for (out, spare) in out.chunks_mut(strip).zip(spare.chunks_mut(strip)) {
        let lines = prefetch::Lines::ahead_of(at * size, std::mem::size_of_val(out), end * size);
        for &src in srcs {
            lines.request(src);
        }
        // SAFETY: forwarded from this function's contract, for elements
        // `at..at + out.len()`, within `start..start + out.len()` of the whole.
        let in_spare =
            unsafe { reduce_block::<T, O>(srcs, at, out, spare) }.as_ptr() == spare.as_ptr();
        if in_spare {
            out.copy_from_slice(spare);
        }
        at += out.len();
    }
}

macro_rules! native_lanes {
    ($($t:ty),*) => {$(
        impl Lane for $t {
            type Compute = $t;

            #[inline(always)]
            fn combine<O: Op<$t>>(out: &mut [$t], a: &[$t], b: &[$t]) {
                for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                    *o = O::apply(x, y);
                }
            }

            /// Strip by strip, each strip's partial result held in registers while
            /// every source is folded into it: one load per source element and one
            /// store per result, where ping-ponging through a buffer makes three
            /// memory operations per source element. Same order, same bits.
            #[inline(always)]
            unsafe fn fold<O: Op<$t>>(
                out: &mut [$t],
                _spare: &mut [$t],
                srcs: &[*const u8],
                start: usize,
                end: usize,
            ) {
                let end_byte = end * std::mem::size_of::<$t>();
                const STRIP: usize = STRIP_BYTES / std::mem::size_of::<$t>();
                let (first, rest) = srcs.split_first().expect("fold: no sources");
                let mut strips = out.chunks_exact_mut(STRIP);
                let mut at = start;
                for strip in &mut strips {
                    let mut acc = [<$t>::default(); STRIP];
                    // SAFETY: forwarded from this function's contract, for elements
                    // `at..at + STRIP`, within `start..start + out.len()`.
                    unsafe { fold_span::<$t, O>(&mut acc, *first, rest, at, end_byte) };
                    strip.copy_from_slice(&acc);
                    at += STRIP;
                }
                // SAFETY: as above, for the elements after the last whole strip.
                unsafe {
                    fold_span::<$t, O>(strips.into_remainder(), *first, rest, at, end_byte)
                };
            }
        }
    )*};
}

/// `acc[i] = O(...O(first[start + i], rest[0][start + i])..., rest[k][start + i])`,
/// prefetching ahead in every source up to its byte `end_byte`.
///
/// # Safety
/// Every source is aligned for `T` and valid for reads of `start + acc.len()` elements,
/// which nothing writes during the call.
#[inline(always)]
unsafe fn fold_span<T: Lane, O: Op<T>>(
    acc: &mut [T],
    first: *const u8,
    rest: &[*const u8],
    start: usize,
    end_byte: usize,
) {
    let at = start * std::mem::size_of::<T>();
    let lines = prefetch::Lines::ahead_of(at, std::mem::size_of_val(acc), end_byte);
    lines.request(first);
    // SAFETY: forwarded from this function's contract.
    acc.copy_from_slice(unsafe { src_block::<T>(first, start, acc.len()) });
    for &src in rest {
        lines.request(src);
        // SAFETY: forwarded from this function's contract.
        let more = unsafe { src_block::<T>(src, start, acc.len()) };
        for (a, &b) in acc.iter_mut().zip(more) {
            *a = O::apply(*a, b);
        }
    }
}

/// Bytes of one strip of [`Lane::fold`] for the native types: eight SSE registers.
const STRIP_BYTES: usize = 128;

/// Bytes of one strip of [`Lane::fold`]'s default, for the types that compute in a wider
/// one (`f16`, `bf16`).
const WIDE_STRIP_BYTES: usize = 256;

native_lanes!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

impl Lane for f16 {
    type Compute = f32;

    #[inline(always)]
    fn combine<O: Op<f32>>(out: &mut [f16], a: &[f16], b: &[f16]) {
        #[cfg(target_arch = "x86_64")]
        if f16c::available() {
            // SAFETY: the CPU has AVX and F16C.
            return unsafe { f16c::combine::<O>(out, a, b) };
        }
        combine_f16_chunked::<O>(out, a, b);
    }

    /// In `f32` registers with F16C where the CPU has it ([`widening`]), the tail of
    /// fewer than eight elements, and every `f16` elsewhere, by the ping-pong fold.
    #[inline(always)]
    unsafe fn fold<O: Op<f32>>(
        out: &mut [f16],
        spare: &mut [f16],
        srcs: &[*const u8],
        start: usize,
        end: usize,
    ) {
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if f16c::available() {
            // SAFETY: the CPU has AVX and F16C; the rest is this function's contract.
            done = unsafe { widening::f16c::fold_f16::<O>(out, srcs, start, end) };
        }
        let (out, spare) = (&mut out[done..], &mut spare[done..]);
        // SAFETY: forwarded from this function's contract, for the elements after `done`.
        unsafe { fold_pingpong::<f16, O>(out, spare, srcs, start + done, end) };
    }
}

/// The portable `f16` path: whole chunks through `half`'s slice conversions, which use
/// the CPU's conversion instructions where `half` knows them.
fn combine_f16_chunked<O: Op<f32>>(out: &mut [f16], a: &[f16], b: &[f16]) {
    let mut wide_a = [0f32; HALF_CHUNK];
    let mut wide_b = [0f32; HALF_CHUNK];
    let chunks = out.chunks_mut(HALF_CHUNK).zip(a.chunks(HALF_CHUNK));
    for ((out, a), b) in chunks.zip(b.chunks(HALF_CHUNK)) {
        let (wide_a, wide_b) = (&mut wide_a[..a.len()], &mut wide_b[..b.len()]);
        a.convert_to_f32_slice(wide_a);
        b.convert_to_f32_slice(wide_b);
        for (x, &y) in wide_a.iter_mut().zip(wide_b.iter()) {
            *x = O::apply(*x, y);
        }
        out.convert_from_f32_slice(wide_a);
    }
}

/// The x86-64 `f16` path. `half`'s slice conversions make an indirect call per eight
/// elements; converting inline with F16C, with the operator applied in between, is about
/// six times faster. The instructions round to nearest-even, as `half::f16::from_f32`
/// does (it uses the same instruction where the CPU has it).
#[cfg(target_arch = "x86_64")]
mod f16c {
    use std::arch::x86_64::{
        _mm256_cvtph_ps, _mm256_cvtps_ph, _mm_loadu_si128, _mm_storeu_si128,
        _MM_FROUND_TO_NEAREST_INT,
    };

    use half::f16;

    use super::Op;

    /// Whether this CPU can run [`combine`].
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx") && is_x86_feature_detected!("f16c")
    }

    /// `out[i] = O(a[i], b[i])` in `f32`, rounded to `f16`, eight lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX and F16C ([`available`]).
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn combine<O: Op<f32>>(out: &mut [f16], a: &[f16], b: &[f16]) {
        let mut out8 = out.chunks_exact_mut(8);
        let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
        let (a_tail, b_tail) = (a8.remainder(), b8.remainder());
        for ((o, x), y) in (&mut out8).zip(a8).zip(b8) {
            // SAFETY: `x` and `y` are 8 `f16`s, 16 bytes each; these loads take any
            // alignment; the caller guarantees AVX and F16C.
            let (x, y) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().cast())),
                    _mm256_cvtph_ps(_mm_loadu_si128(y.as_ptr().cast())),
                )
            };
            let (mut x, y): ([f32; 8], [f32; 8]) = (bytemuck::cast(x), bytemuck::cast(y));
            for (p, q) in x.iter_mut().zip(y) {
                *p = O::apply(*p, q);
            }
            // SAFETY: `o` is 8 `f16`s, 16 bytes; this store takes any alignment; the
            // caller guarantees AVX and F16C.
            unsafe {
                let narrow = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(bytemuck::cast(x));
                _mm_storeu_si128(o.as_mut_ptr().cast(), narrow);
            }
        }
        super::combine_f16_chunked::<O>(out8.into_remainder(), a_tail, b_tail);
    }
}

impl Lane for bf16 {
    type Compute = f32;

    /// Through `f32` with branch-free conversions (a shift each way, rounding by an add).
    /// Only the trait's ping-pong fold calls it, which `bf16` does not use (its fold
    /// is [`widening`]'s), so it is not compiled a second time for AVX2.
    #[inline(always)]
    fn combine<O: Op<f32>>(out: &mut [bf16], a: &[bf16], b: &[bf16]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            let wide = O::apply(bf16_to_f32(x.to_bits()), bf16_to_f32(y.to_bits()));
            *o = bf16::from_bits(f32_to_bf16(wide));
        }
    }

    /// In `f32` registers ([`widening`]), compiled for AVX2 where the CPU has it.
    #[inline(always)]
    unsafe fn fold<O: Op<f32>>(
        out: &mut [bf16],
        _spare: &mut [bf16],
        srcs: &[*const u8],
        start: usize,
        end: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        if widening::avx2::available() {
            // SAFETY: the CPU has AVX2; the rest is this function's contract.
            return unsafe { widening::avx2::fold_bf16::<O>(out, srcs, start, end) };
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { widening::fold_bf16::<O>(out, srcs, start, end) }
    }
}

/// A `bf16`'s value: its bits are the upper half of an `f32`'s. Unlike
/// `half::bf16::to_f32` this does not quiet a signalling NaN: the operators' arithmetic
/// quiets it (and `max`/`min` ignore any NaN), and [`f32_to_bf16`] quiets every NaN it
/// rounds, so the stored result has the same bits either way (a test compares every NaN
/// pattern with the scalar reference), and the loop saves a select per operand.
#[inline(always)]
fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// The `bf16` nearest to `x`, ties to even, as `half::bf16::from_f32` rounds (the tests
/// compare every result with it). A NaN keeps its upper bits with the quiet bit set. Both
/// results are computed and one is selected, so the loop has no branch.
#[inline(always)]
fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let wide = if x.is_nan() {
        bf16_quieted(bits)
    } else {
        bf16_rounded(bits)
    };
    (wide >> 16) as u16
}

/// The bits of a number `x` (not a NaN) rounded to `bf16`, ties to even, in the upper
/// half of an `f32`'s: adding `0x7FFF` plus the kept part's lowest bit carries into the
/// kept half exactly when the dropped half is above one half, or is one half and the
/// kept part is odd.
#[inline(always)]
fn bf16_rounded(bits: u32) -> u32 {
    bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000
}

/// The bits of a NaN cut to `bf16`: its upper half, with the quiet bit set.
#[inline(always)]
fn bf16_quieted(bits: u32) -> u32 {
    (bits | 0x0040_0000) & 0xFFFF_0000
}

/// Dispatches on `op` for element type `T`.
///
/// # Safety
/// As [`reduce_raw`], with `T` the Rust type of its `dtype`.
unsafe fn reduce_op<T: Lane>(op: ReduceOp, srcs: &[*const u8], dsts: &[*mut u8], part: Part)
where
    Sum: Op<T::Compute>,
    Prod: Op<T::Compute>,
    Max: Op<T::Compute>,
    Min: Op<T::Compute>,
{
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match op {
            ReduceOp::Sum => reduce_blocks::<T, Sum>(srcs, dsts, part),
            ReduceOp::Prod => reduce_blocks::<T, Prod>(srcs, dsts, part),
            ReduceOp::Max => reduce_blocks::<T, Max>(srcs, dsts, part),
            ReduceOp::Min => reduce_blocks::<T, Min>(srcs, dsts, part),
        }
    }
}

/// The kernel: reduce each block of the sources into a stack buffer, then store that
/// buffer to every destination.
///
/// # Safety
/// As [`reduce_raw`], with `T` the Rust type of its `dtype` and `srcs` non-empty.
unsafe fn reduce_blocks<T: Lane, O: Op<T::Compute>>(
    srcs: &[*const u8],
    dsts: &[*mut u8],
    Part { count, task_bytes }: Part,
) {
    // Only as much of the accumulators as the first block uses is initialised: zeroing
    // all 4 KiB was most of a small reduction's cost (a 1 KiB AllReduce on 8 ranks
    // reduces blocks of 128 bytes).
    let used = (count * std::mem::size_of::<T>())
        .min(BLOCK_BYTES)
        .div_ceil(8);
    let mut storage = [[MaybeUninit::<u64>::uninit(); BLOCK_BYTES / 8]; 2];
    let [front, back] = &mut storage;
    let (front, back) = (
        bytemuck::cast_slice_mut(zeroed(&mut front[..used])),
        bytemuck::cast_slice_mut(zeroed(&mut back[..used])),
    );
    let streaming =
        task_bytes >= STREAM_BYTES || task_bytes.saturating_mul(dsts.len()) >= STREAM_ALL_BYTES;
    // Decided once per destination: in place, the block was just read from that very
    // destination, its lines are in the cache, a cached store costs no extra read, and a
    // streaming store would first have to evict them.
    let targets: SmallVec<[(*mut u8, bool); 8]> = dsts
        .iter()
        .map(|&dst| (dst, streaming && !srcs.contains(&dst.cast_const())))
        .collect();
    let mut start = 0;
    while start < count {
        let n = front.len().min(count - start);
        // SAFETY: `start + n <= count`; the destinations are written only below, after
        // `fold` has returned and its borrows of the sources have ended.
        unsafe { T::fold::<O>(&mut front[..n], &mut back[..n], srcs, start, count) };
        // SAFETY: every destination is valid for writes of `count` aligned `T`s and
        // `start + n <= count`; the block is on this stack frame, so it overlaps none.
        unsafe {
            store::to_all(
                &targets,
                start * std::mem::size_of::<T>(),
                bytemuck::cast_slice(&front[..n]),
            )
        };
        start += n;
    }
    if streaming {
        store::fence();
    }
}

/// `words`, each set to zero, as initialised words.
fn zeroed(words: &mut [MaybeUninit<u64>]) -> &mut [u64] {
    for w in words.iter_mut() {
        w.write(0);
    }
    // SAFETY: every element was just initialised, and `MaybeUninit<u64>` has `u64`'s
    // layout.
    unsafe { &mut *(std::ptr::from_mut(words) as *mut [u64]) }
}

/// Results at least this large are written with non-temporal stores: they will not be read
/// again before they leave the cache, and streaming them skips the read-for-ownership that
/// a normal store does first, a third of the memory traffic of an out-of-place reduction.
const STREAM_BYTES: usize = 256 << 10;

/// A result stored to several destinations streams when they take this much together,
/// even if each is below [`STREAM_BYTES`]: a reduction into every rank's output
/// (mesh-push) fills the cache with all of them once the operation outgrows it. On 8
/// in-process ranks of the development machine (`oxccl perf all-reduce --ranks 8
/// --algo mesh-push`, 5 alternating runs, medians, out of place):
/// - at 1 MiB (8 destinations of 128 KiB, 16 MiB of buffers in all, which its caches
///   mostly hold) streaming took 359 µs, cached stores 229 µs, so the bar is above that;
/// - at 2 MiB (256 KiB each, [`STREAM_BYTES`] streams them) cached stores to 8
///   destinations of 256 KiB took 882 µs against 682 µs streaming.
///
/// The bar was 1 MiB, from a measurement when this path was three times slower (645
/// µs streaming against 890 µs cached at 1 MiB).
const STREAM_ALL_BYTES: usize = 2 << 20;

/// Copies that write at least this much in all stream: a copy's source is often a block
/// a peer has just written (staged algorithms pass data through the cache), and below the
/// last-level cache's size a cached store is faster than a streaming one, so the bar is
/// higher than a reduction's, whose many sources leave no room in the cache anyway. On 8
/// in-process ranks of the development machine, a mesh-push AllGather of 4 MiB (each rank
/// copies 512 KiB into 8 outputs, 4 MiB in all) took 1262 µs streaming and 1079 µs with
/// cached stores out of place; at 8 and 16 MiB, which stream under either bar, the two
/// builds measured alike (`oxccl perf all-gather --ranks 8 --algo mesh-push`, 5
/// alternating runs, medians; Broadcast's mesh-push the same: 1254 against 1033 µs).
const COPY_STREAM_BYTES: usize = 8 << 20;

/// A program whose data tasks write at least this much in all streams each copy that writes
/// at least [`STREAM_BYTES`], whatever that copy's own size: across its ranks the operation
/// writes several times the last-level cache, so what one of its copies stores is evicted
/// before a later step reads it, and a cached store only adds a read for ownership. On 8
/// in-process ranks of the development machine, AllGathers whose ranks copy blocks below
/// [`COPY_STREAM_BYTES`] (medians of 4 alternating runs of `oxccl perf all-gather --ranks 8
/// -b S -e S --algo <executor> -n 10 -w 2`, cached stores against this rule):
/// - at 32 MiB (blocks of 4 MiB, 32 MiB per program): `ring` 17.1 against 12.7 ms, `mesh`
///   14.5 against 10.5, `rhd` 13.2 against 12.6; `mesh-push`, which streamed before,
///   10.2 against 10.3;
/// - at 8 MiB (blocks of 1 MiB, 8 MiB per program): `ring` 3.67 against 2.93 ms, `rhd`
///   2.93 against 2.74, `mesh` 2.48 against 2.56, `mesh-push` 2.52 against 2.53.
///
/// At 4 MiB (4 MiB per program) cached stores stay faster (see [`COPY_STREAM_BYTES`]), so
/// the bar sits above that.
const PROGRAM_STREAM_BYTES: usize = 8 << 20;

/// A copy to one destination streams when the operation's user buffers take at least this
/// much on its host, even if its program is below [`PROGRAM_STREAM_BYTES`]: what such an
/// operation stores is evicted before anyone reads it, and a cached store only adds a
/// read for ownership. The programs of executors whose ranks each put one block
/// (`put-mesh` Gather: a 4 MiB copy per rank at 32 MiB) or a few (AlltoAll at 4 MiB:
/// 512 KiB to each peer) are small, yet their operations' buffers take 60 to 64 MiB. On
/// 8 in-process ranks of the development machine (32 MiB of last-level cache), cached
/// stores against streaming ones (`oxccl perf <op> --ranks 8 -b S -e S -n 20 -w 3 --algo
/// <executor>`, alternating runs):
/// - Gather at 32 MiB by `put-mesh`: 1810 and 1698 µs against 1511 and 1576 out of place
///   (64 MiB), 1608 and 1547 against 1187 and 1340 in place (60 MiB);
/// - AlltoAll at 4 MiB out of place (64 MiB), three runs each: `mesh` 2128 to 2461 µs
///   against 1491 to 1688, `put-mesh` 2021 to 2561 against 1446 to 1958, `pairwise` 1972
///   to 2817 against 1487 to 1675.
///
/// AllGather at 4 MiB (36 MiB) is faster with cached stores (see [`COPY_STREAM_BYTES`]),
/// so the bar lies between: 1.5 times that cache. Copies to several destinations keep
/// the program's bar: `mesh-push` AllReduce at 4 MiB (eight destinations of 512 KiB,
/// 64 MiB of buffers) gained nothing from streaming in five alternating runs.
pub const FOOTPRINT_STREAM_BYTES: usize = 48 << 20;

/// Storing a finished block.
mod store {
    /// Write `block` to `dst`, with non-temporal stores when `streaming` and the target
    /// allows it: 16 bytes at a time from a 16-byte aligned address, 4 at a time before
    /// it and after the last whole 16 (so a destination 4-byte aligned streams whole, as
    /// an `f32` block at an odd element offset does). Every byte of a streamed block is
    /// stored non-temporally: a line written partly by cached stores and partly by
    /// streaming ones is flushed from the cache on each (a head stored with `memcpy` and
    /// the rest streamed: `oxccl perf all-gather --ranks 8 -b 67108928` took 42.7 ms
    /// instead of the 27.9 ms of storing those blocks through the cache, medians of 3).
    /// A block the 4-byte stores cannot cover is stored normally. Streaming stores must
    /// be followed by [`fence`] before the data is published.
    ///
    /// # Safety
    /// `dst` is valid for writes of `block.len()` bytes that overlap nothing in `block`.
    #[inline]
    pub(super) unsafe fn store(dst: *mut u8, block: &[u8], streaming: bool) {
        #[cfg(target_arch = "x86_64")]
        if streaming && (dst as usize).is_multiple_of(4) && block.len().is_multiple_of(4) {
            let head = ((16 - dst as usize % 16) % 16).min(block.len());
            let body = (block.len() - head) & !15;
            let (front, rest) = block.split_at(head);
            let (middle, tail) = rest.split_at(body);
            // SAFETY: the three parts tile `block` and `dst..dst + block.len()` in order;
            // `dst` and both short parts are 4-byte multiples, and `dst + head` is
            // 16-byte aligned.
            unsafe {
                stream_words(dst, front);
                stream_aligned(dst.add(head), middle);
                stream_words(dst.add(head + body), tail);
            }
            return;
        }
        let _ = streaming;
        // SAFETY: the caller guarantees `dst` is valid and does not overlap `block`.
        unsafe { super::copy_bytes(block.as_ptr(), dst, block.len()) };
    }

    /// Non-temporal stores of `block` (a multiple of 16 bytes) to `dst`.
    ///
    /// # Safety
    /// `dst` is 16-byte aligned and valid for writes of `block.len()` bytes that overlap
    /// nothing in `block`.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    unsafe fn stream_aligned(dst: *mut u8, block: &[u8]) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        for (i, chunk) in block.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of x86-64; `dst + 16 i` is 16-byte aligned and inside
            // the destination; `chunk` is 16 readable bytes.
            unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                _mm_stream_si128(dst.add(16 * i).cast::<__m128i>(), v);
            }
        }
    }

    /// Non-temporal 4-byte stores of `block` (a multiple of 4 bytes) to `dst`.
    ///
    /// # Safety
    /// `dst` is 4-byte aligned and valid for writes of `block.len()` bytes that overlap
    /// nothing in `block`.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    unsafe fn stream_words(dst: *mut u8, block: &[u8]) {
        for (i, word) in block.chunks_exact(4).enumerate() {
            let v = i32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
            // SAFETY: SSE2 is part of x86-64; `dst + 4 i` is 4-byte aligned and inside
            // the destination.
            unsafe { std::arch::x86_64::_mm_stream_si32(dst.add(4 * i).cast::<i32>(), v) };
        }
    }

    /// Write `block` at byte `at` of every target, streaming to those marked so.
    ///
    /// # Safety
    /// Every target is valid for writes of `at + block.len()` bytes, none overlapping
    /// `block`.
    #[inline]
    pub(super) unsafe fn to_all(targets: &[(*mut u8, bool)], at: usize, block: &[u8]) {
        for &(dst, streaming) in targets {
            // SAFETY: forwarded from this function's contract.
            unsafe { store(dst.add(at), block, streaming) };
        }
    }

    /// Order streaming stores before everything after them.
    #[inline]
    pub(super) fn fence() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86-64; sfence has no other requirement.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        }
    }
}

/// Reduces elements `start..start + front.len()` of every source, left to right, into
/// one of the two equal-length stack buffers (ping-ponging between them, so that no
/// step reads and writes the same slice) and returns the one holding the result.
///
/// # Safety
/// Every source is aligned for `T` and valid for reads of `start + front.len()`
/// elements, which nothing writes during the call; `srcs` is non-empty.
unsafe fn reduce_block<'a, T: Lane, O: Op<T::Compute>>(
    srcs: &[*const u8],
    start: usize,
    mut front: &'a mut [T],
    mut back: &'a mut [T],
) -> &'a [T] {
    let n = front.len();
    // SAFETY: forwarded from this function's contract.
    let first = unsafe { src_block::<T>(srcs[0], start, n) };
    let Some((second, rest)) = srcs[1..].split_first() else {
        front.copy_from_slice(first);
        return front;
    };
    // SAFETY: forwarded from this function's contract.
    T::combine::<O>(front, first, unsafe { src_block::<T>(*second, start, n) });
    for &src in rest {
        // SAFETY: forwarded from this function's contract.
        T::combine::<O>(back, front, unsafe { src_block::<T>(src, start, n) });
        std::mem::swap(&mut front, &mut back);
    }
    front
}

/// Elements `start..start + n` of the source at `base`, as a slice.
///
/// # Safety
/// `base` is aligned for `T` and valid for reads of `start + n` elements, and nothing
/// writes those bytes while the returned slice lives.
#[inline(always)]
unsafe fn src_block<'a, T: Lane>(base: *const u8, start: usize, n: usize) -> &'a [T] {
    // SAFETY: forwarded from this function's contract.
    unsafe { std::slice::from_raw_parts(base.cast::<T>().add(start), n) }
}

#[cfg(test)]
mod tests;
