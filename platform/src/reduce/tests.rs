//! Kernel tests against the scalar oracle.

use super::*;

const COUNTS: [usize; 9] = [0, 1, 7, 63, 64, 65, 1000, 4096, 4099];

/// A 64-bit linear congruential generator (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 16
    }

    /// A value in [-4, 4] on a 1/256 grid: sums and products of up to four of them
    /// stay finite and need rounding in the narrow types.
    fn small(&mut self) -> f64 {
        ((self.next() % 2049) as f64 - 1024.0) / 256.0
    }

    /// One element of `dtype`, as bytes.
    fn element(&mut self, dtype: DataType) -> Vec<u8> {
        match dtype {
            DataType::F16 => f16::from_f64(self.small()).to_ne_bytes().to_vec(),
            DataType::Bf16 => bf16::from_f64(self.small()).to_ne_bytes().to_vec(),
            DataType::F32 => (self.small() as f32).to_ne_bytes().to_vec(),
            DataType::F64 => self.small().to_ne_bytes().to_vec(),
            _ => self.next().to_ne_bytes()[..dtype.size()].to_vec(),
        }
    }
}

/// A byte buffer aligned to 8, so that it is aligned for every data type.
struct Buf {
    words: Vec<u64>,
    len: usize,
}

impl Buf {
    fn new(bytes: &[u8]) -> Buf {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Buf {
            words,
            len: bytes.len(),
        }
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[..self.len]
    }
}

fn random_buf(rng: &mut Lcg, dtype: DataType, count: usize) -> Buf {
    let bytes: Vec<u8> = (0..count).flat_map(|_| rng.element(dtype)).collect();
    Buf::new(&bytes)
}

/// The oracle: a left fold of [`reduce_scalar`] over the sources, element by element.
fn expected(dtype: DataType, op: ReduceOp, srcs: &[Buf]) -> Vec<u8> {
    let size = dtype.size();
    let elements = |b: &Buf| b.bytes().chunks_exact(size).map(<[u8]>::to_vec).collect();
    let mut acc: Vec<Vec<u8>> = elements(&srcs[0]);
    for src in &srcs[1..] {
        for (a, b) in acc.iter_mut().zip(src.bytes().chunks_exact(size)) {
            *a = reduce_scalar(dtype, op, a, b);
        }
    }
    acc.concat()
}

/// Out of place, into two destinations at once.
fn check_two_dsts(dtype: DataType, op: ReduceOp, srcs: &[Buf], want: &[u8]) {
    let count = want.len() / dtype.size();
    let ptrs: Vec<*const u8> = srcs.iter().map(|s| s.bytes().as_ptr()).collect();
    let mut d0 = Buf::new(&vec![0xa5; want.len()]);
    let mut d1 = Buf::new(&vec![0x5a; want.len()]);
    let dsts = [d0.bytes_mut().as_mut_ptr(), d1.bytes_mut().as_mut_ptr()];
    // SAFETY: all buffers hold `count` elements, are 8-aligned and are distinct.
    unsafe { reduce_raw(dtype, op, &ptrs, &dsts, count) };
    assert_eq!(
        d0.bytes(),
        want,
        "{dtype} {op} n={} count={count}",
        srcs.len()
    );
    assert_eq!(
        d1.bytes(),
        want,
        "{dtype} {op} n={} count={count}",
        srcs.len()
    );
}

/// In place: the destination is source `which`.
fn check_in_place(dtype: DataType, op: ReduceOp, srcs: &[Buf], which: usize, want: &[u8]) {
    let count = want.len() / dtype.size();
    let mut bufs: Vec<Buf> = srcs.iter().map(|s| Buf::new(s.bytes())).collect();
    let ptrs: Vec<*mut u8> = bufs
        .iter_mut()
        .map(|b| b.bytes_mut().as_mut_ptr())
        .collect();
    let src_ptrs: Vec<*const u8> = ptrs.iter().map(|p| p.cast_const()).collect();
    // SAFETY: all buffers hold `count` elements and are 8-aligned; the only
    // destination is exactly source `which`, and no buffer is touched during the call.
    unsafe { reduce_raw(dtype, op, &src_ptrs, &[ptrs[which]], count) };
    let got = bufs[which].bytes();
    assert_eq!(
        got,
        want,
        "{dtype} {op} n={} count={count} in place at {which}",
        srcs.len()
    );
}

#[test]
fn kernels_match_the_scalar_oracle() {
    let mut rng = Lcg(0x0c0ffee);
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            for n in 1..=4 {
                for count in COUNTS {
                    let srcs: Vec<Buf> =
                        (0..n).map(|_| random_buf(&mut rng, dtype, count)).collect();
                    let want = expected(dtype, op, &srcs);
                    check_two_dsts(dtype, op, &srcs, &want);
                    check_in_place(dtype, op, &srcs, 0, &want);
                    check_in_place(dtype, op, &srcs, n - 1, &want);
                }
            }
        }
    }
}

#[test]
fn streaming_stores_match_the_oracle() {
    // Large enough for non-temporal stores, for the widest and narrowest types, with a
    // tail that is not a whole block.
    let mut rng = Lcg(0x57ea);
    for dtype in [DataType::I8, DataType::F32, DataType::F64] {
        let count = STREAM_BYTES / dtype.size() + 3;
        let srcs: Vec<Buf> = (0..3).map(|_| random_buf(&mut rng, dtype, count)).collect();
        let want = expected(dtype, ReduceOp::Sum, &srcs);
        check_two_dsts(dtype, ReduceOp::Sum, &srcs, &want);
        check_in_place(dtype, ReduceOp::Sum, &srcs, 1, &want);
    }
}

#[test]
fn many_destinations_stream_together_and_match_the_oracle() {
    // Each destination below the bar, all of them above it (mesh-push's one reduction
    // into every rank's output), with a tail that is not a whole block.
    let mut rng = Lcg(0x8d57);
    for dtype in [DataType::U8, DataType::F32] {
        let count = STREAM_ALL_BYTES / 8 / dtype.size() + 5;
        let srcs: Vec<Buf> = (0..8).map(|_| random_buf(&mut rng, dtype, count)).collect();
        let want = expected(dtype, ReduceOp::Max, &srcs);
        let ptrs: Vec<*const u8> = srcs.iter().map(|s| s.bytes().as_ptr()).collect();
        let mut outs: Vec<Buf> = (0..8).map(|_| Buf::new(&vec![0xa5; want.len()])).collect();
        let dsts: Vec<*mut u8> = outs
            .iter_mut()
            .map(|d| d.bytes_mut().as_mut_ptr())
            .collect();
        // SAFETY: all buffers hold `count` elements, are 8-aligned and are distinct.
        unsafe { reduce_raw(dtype, ReduceOp::Max, &ptrs, &dsts, count) };
        for (i, out) in outs.iter().enumerate() {
            assert_eq!(out.bytes(), want, "{dtype} destination {i}");
        }
    }
}

/// The 16-bit floats over every bit pattern (NaNs, infinities, subnormals, values whose
/// sums and products overflow), eight sources, counts that end in a whole strip of the
/// register fold, a short one and a tail below a vector, under every operator, in
/// place and out of place; `f16` NaNs left out (the oracle's conversions do not promise
/// F16C's NaN payloads; `bf16`'s are compared in the test after this one).
#[test]
fn half_types_match_the_oracle_over_every_bit_pattern_and_eight_sources() {
    let mut rng = Lcg(0xb16f);
    for dtype in [DataType::F16, DataType::Bf16] {
        let nan = |bits: u16| match dtype {
            DataType::F16 => f16::from_bits(bits).is_nan(),
            _ => false,
        };
        let mut any = |count: usize| {
            let bits = std::iter::repeat_with(|| rng.next() as u16).filter(|&b| !nan(b));
            let bytes: Vec<u8> = bits.take(count).flat_map(u16::to_ne_bytes).collect();
            Buf::new(&bytes)
        };
        for count in [64, 128 + 9, 3 * 1024 + 67, 5] {
            let srcs: Vec<Buf> = (0..8).map(|_| any(count)).collect();
            for op in ReduceOp::ALL {
                let want = expected(dtype, op, &srcs);
                check_two_dsts(dtype, op, &srcs, &want);
                check_in_place(dtype, op, &srcs, 3, &want);
            }
        }
    }
}

/// Checks the portable `f16` path, which the oracle test reaches only on CPUs
/// without F16C, against the oracle.
fn check_portable_f16<O: Op<f32>>(op: ReduceOp, a: &[f16], b: &[f16]) {
    let mut got = vec![f16::ZERO; a.len()];
    combine_f16_chunked::<O>(&mut got, a, b);
    for ((x, y), g) in a.iter().zip(b).zip(&got) {
        let want = reduce_scalar(DataType::F16, op, &x.to_ne_bytes(), &y.to_ne_bytes());
        assert_eq!(g.to_ne_bytes(), *want, "{op}({x}, {y})");
    }
}

#[test]
fn portable_f16_path_matches_the_oracle() {
    let mut rng = Lcg(16);
    let mut data = |n| -> Vec<f16> { (0..n).map(|_| f16::from_f64(rng.small())).collect() };
    for n in [0, 1, 7, 127, 128, 129, 1000] {
        let (a, b) = (data(n), data(n));
        check_portable_f16::<Sum>(ReduceOp::Sum, &a, &b);
        check_portable_f16::<Prod>(ReduceOp::Prod, &a, &b);
        check_portable_f16::<Max>(ReduceOp::Max, &a, &b);
        check_portable_f16::<Min>(ReduceOp::Min, &a, &b);
    }
}

#[test]
fn reduce_slices_matches_the_oracle() {
    let mut rng = Lcg(7);
    for dtype in DataType::ALL {
        let srcs: Vec<Buf> = (0..3).map(|_| random_buf(&mut rng, dtype, 300)).collect();
        let want = expected(dtype, ReduceOp::Sum, &srcs);
        let views: Vec<&[u8]> = srcs.iter().map(Buf::bytes).collect();
        let mut dst = Buf::new(&vec![0; want.len()]);
        reduce_slices(dtype, ReduceOp::Sum, &views, dst.bytes_mut());
        assert_eq!(dst.bytes(), want, "{dtype}");
    }
}

fn f16_sum(values: &[f32]) -> f32 {
    let bufs: Vec<Buf> = values
        .iter()
        .map(|v| Buf::new(&f16::from_f32(*v).to_ne_bytes()))
        .collect();
    let views: Vec<&[u8]> = bufs.iter().map(Buf::bytes).collect();
    let mut dst = [0u16; 1];
    reduce_slices(
        DataType::F16,
        ReduceOp::Sum,
        &views,
        bytemuck::bytes_of_mut(&mut dst),
    );
    f16::from_bits(dst[0]).to_f32()
}

#[test]
fn f16_sum_rounds_after_every_step() {
    assert_eq!(f16_sum(&[2048.0, 1.0]), 2048.0);
    // Rounded once at the end this would be 2050; rounded per step it stays 2048.
    assert_eq!(f16_sum(&[2048.0, 1.0, 1.0]), 2048.0);
    assert_eq!(f16_sum(&[1.0, 1.0, 2048.0]), 2050.0);
    // Ties go to even: 2049 is halfway between 2048 and 2050.
    assert_eq!(f16_sum(&[2050.0, 1.0]), 2052.0);
}

#[test]
fn scalar_semantics() {
    let r = |d, op, a: &[u8], b: &[u8]| reduce_scalar(d, op, a, b);
    assert_eq!(r(DataType::I8, ReduceOp::Sum, &[127], &[1]), [128]);
    assert_eq!(r(DataType::U8, ReduceOp::Prod, &[16], &[17]), [16]);
    assert_eq!(r(DataType::I8, ReduceOp::Max, &[0xff], &[1]), [1]);
    assert_eq!(r(DataType::U8, ReduceOp::Max, &[0xff], &[1]), [0xff]);
    let (nan, one) = (f32::NAN.to_ne_bytes(), 1f32.to_ne_bytes());
    assert_eq!(r(DataType::F32, ReduceOp::Max, &nan, &one), one);
    assert_eq!(r(DataType::F32, ReduceOp::Min, &one, &nan), one);
    let bf = |v: f32| bf16::from_f32(v).to_ne_bytes();
    assert_eq!(
        r(DataType::Bf16, ReduceOp::Sum, &bf(256.0), &bf(1.0)),
        bf(256.0)
    );
}

#[test]
fn nan_is_ignored_by_max_and_min_kernels() {
    let a = [f32::NAN, 1.0, f32::NAN, -3.0].repeat(50);
    let b = [2.0, f32::NAN, f32::NAN, -4.0].repeat(50);
    let mut dst = [0f32; 200];
    let srcs = [bytemuck::cast_slice(&a), bytemuck::cast_slice(&b)];
    reduce_slices(
        DataType::F32,
        ReduceOp::Max,
        &srcs,
        bytemuck::cast_slice_mut(&mut dst),
    );
    for (i, v) in dst.iter().enumerate() {
        match i % 4 {
            0 => assert_eq!(*v, 2.0),
            1 => assert_eq!(*v, 1.0),
            2 => assert!(v.is_nan()),
            _ => assert_eq!(*v, -3.0),
        }
    }
}

#[test]
#[should_panic(expected = "source 1 has 8 bytes but the destination has 4")]
fn reduce_slices_rejects_length_mismatch() {
    let (a, b, mut d) = ([0u32; 1], [0u32; 2], [0u32; 1]);
    let srcs = [bytemuck::cast_slice(&a), bytemuck::cast_slice(&b)];
    reduce_slices(
        DataType::U32,
        ReduceOp::Sum,
        &srcs,
        bytemuck::cast_slice_mut(&mut d),
    );
}

#[test]
#[should_panic(expected = "not a multiple of the int32 element size 4")]
fn reduce_slices_rejects_partial_elements() {
    let (a, mut d) = ([0u8; 6], [0u8; 6]);
    reduce_slices(DataType::I32, ReduceOp::Sum, &[&a], &mut d);
}

#[test]
#[should_panic(expected = "not aligned to 8 bytes for double")]
fn reduce_slices_rejects_misalignment() {
    let mut buf = Buf::new(&[0; 32]);
    let (a, d) = buf.bytes_mut().split_at_mut(16);
    reduce_slices(DataType::F64, ReduceOp::Sum, &[&a[4..12]], &mut d[..8]);
}

#[test]
#[should_panic(expected = "no source buffers")]
fn reduce_slices_rejects_no_sources() {
    reduce_slices(DataType::F32, ReduceOp::Sum, &[], &mut []);
}

/// Single-thread throughput; run with
/// `cargo test --release -- --ignored --nocapture throughput`.
#[test]
#[ignore = "timing, prints only"]
fn throughput() {
    const BYTES: usize = 4 << 20;
    for dtype in [DataType::F32, DataType::F16, DataType::Bf16, DataType::I8] {
        let (a, b) = (Buf::new(&vec![0; BYTES]), Buf::new(&vec![0; BYTES]));
        let mut d = Buf::new(&vec![0; BYTES]);
        let srcs = [a.bytes(), b.bytes()];
        let iters = 100;
        reduce_slices(dtype, ReduceOp::Sum, &srcs, d.bytes_mut());
        let t = std::time::Instant::now();
        for _ in 0..iters {
            reduce_slices(dtype, ReduceOp::Sum, &srcs, d.bytes_mut());
        }
        let secs = t.elapsed().as_secs_f64();
        let gbs = (iters * BYTES) as f64 / secs / 1e9;
        eprintln!(
            "{dtype} sum, 2 x 4 MiB -> 4 MiB: {gbs:.2} GB/s of output, {:.2} GB/s moved",
            3.0 * gbs
        );
    }
}

/// The branch-free `bf16` rounding agrees with `half`'s on every `f32` bit pattern of
/// interest: every upper half with the dropped half at its rounding boundaries (zero, just
/// below, at and just above one half, all ones), which covers ties, carries into the
/// exponent, infinities, NaNs and subnormals.
#[test]
fn bf16_rounding_matches_half_on_every_boundary() {
    for upper in 0..=u16::MAX {
        for lower in [0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF] {
            let x = f32::from_bits((u32::from(upper) << 16) | lower);
            assert_eq!(
                f32_to_bf16(x),
                bf16::from_f32(x).to_bits(),
                "{:#010x}",
                x.to_bits()
            );
        }
        let exact = bf16::from_bits(upper).to_f32();
        if !exact.is_nan() {
            assert_eq!(bf16_to_f32(upper).to_bits(), exact.to_bits());
        }
    }
}

/// Every `bf16` NaN (quiet and signalling, both signs) against NaNs and numbers, under
/// every operator, two and three sources: the kernel's bits equal the scalar reference's
/// (which quiets NaNs when it widens, where the kernel leaves that to the arithmetic).
#[test]
fn bf16_nans_reduce_to_the_reference_bits() {
    let nans = (0..=u16::MAX).filter(|&b| b & 0x7FFF > 0x7F80);
    let mut values: Vec<u16> = nans.collect();
    let numbers = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        3.0e38,
    ];
    values.extend(numbers.iter().map(|&v| bf16::from_f32(v).to_bits()));
    let all: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    for shift in [1, 7, 128] {
        let other: Vec<u8> = values
            .iter()
            .cycle()
            .skip(shift)
            .take(values.len())
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let (a, b) = (Buf::new(&all), Buf::new(&other));
        for op in ReduceOp::ALL {
            for srcs in [vec![&a, &b], vec![&b, &a, &b]] {
                let mut d = Buf::new(&vec![0; all.len()]);
                let bytes: Vec<&[u8]> = srcs.iter().map(|s| s.bytes()).collect();
                reduce_slices(DataType::Bf16, op, &bytes, d.bytes_mut());
                let owned: Vec<Buf> = srcs.iter().map(|s| Buf::new(s.bytes())).collect();
                assert_eq!(d.bytes(), expected(DataType::Bf16, op, &owned), "{op:?}");
            }
        }
    }
}

#[test]
fn copies_reach_every_destination_at_every_size_and_alignment() {
    // Below and above the streaming bar, in one cached block and several (the last one
    // short), with a tail that is not a whole block, into
    // aligned destinations and shifted ones: by 4 and 8 bytes (streamed, 4 bytes at a
    // time up to the first 16-byte boundary, when the length is a multiple of 4) and by
    // 1 (stored without streaming); from a source that is not aligned either. Nothing is
    // written around the shifted destinations.
    const SHIFTS: [usize; 3] = [1, 4, 8];
    const GUARD: usize = 16;
    let mut rng = Lcg(0xc0b1);
    let big = COPY_STREAM_BYTES / 3;
    let blocks = 3 * CACHED_BLOCK_BYTES + 4097;
    for len in [
        0,
        1,
        15,
        4099,
        4100,
        CACHED_BLOCK_BYTES + 1,
        blocks,
        big / 4 * 4 + 20,
        big + 17,
    ] {
        let src = random_buf(&mut rng, DataType::U8, len + 1);
        let src = &src.bytes()[1..];
        let mut aligned = [Buf::new(&vec![0xa5; len]), Buf::new(&vec![0x5a; len])];
        let mut shifted: Vec<Buf> = SHIFTS
            .iter()
            .map(|shift| Buf::new(&vec![0x3c; shift + len + GUARD]))
            .collect();
        let mut dsts: Vec<*mut u8> = aligned
            .iter_mut()
            .map(|b| b.bytes_mut().as_mut_ptr())
            .collect();
        for (b, shift) in shifted.iter_mut().zip(SHIFTS) {
            dsts.push(b.bytes_mut()[shift..].as_mut_ptr());
        }
        // SAFETY: every buffer holds `len` bytes from its pointer and none overlaps.
        unsafe { copy_raw(src.as_ptr(), &dsts, len) };
        for (i, got) in aligned.iter().map(Buf::bytes).enumerate() {
            assert!(got == src, "len {len}: destination {i} differs");
        }
        for (b, shift) in shifted.iter().zip(SHIFTS) {
            let (before, rest) = b.bytes().split_at(shift);
            let (got, after) = rest.split_at(len);
            assert!(
                got == src,
                "len {len}: the destination shifted by {shift} differs"
            );
            assert!(
                before.iter().chain(after).all(|&x| x == 0x3c),
                "len {len}: wrote around the destination shifted by {shift}"
            );
        }
    }
}

#[test]
fn the_parts_of_a_streaming_task_store_what_the_whole_would() {
    // A task big enough to stream, run as chunks of odd lengths (as workers share a split
    // task): each chunk stores as the whole does, and the bytes equal the oracle's.
    let mut rng = Lcg(0x9a27);
    let dtype = DataType::F32;
    let count = 1000;
    let task_bytes = STREAM_BYTES.max(COPY_STREAM_BYTES);
    let srcs = [
        random_buf(&mut rng, dtype, count),
        random_buf(&mut rng, dtype, count),
    ];
    let ptrs: Vec<*const u8> = srcs.iter().map(|b| b.bytes().as_ptr()).collect();
    let mut reduced = Buf::new(&vec![0; count * 4]);
    let mut copied = [Buf::new(&vec![0; count * 4]), Buf::new(&vec![0; count * 4])];
    let mut from = 0;
    for part in [1, 63, 100, 836] {
        let out = reduced.bytes_mut()[from * 4..].as_mut_ptr();
        let moved: Vec<*const u8> = ptrs.iter().map(|p| p.wrapping_add(from * 4)).collect();
        let copies: Vec<*mut u8> = copied
            .iter_mut()
            .map(|b| b.bytes_mut()[from * 4..].as_mut_ptr())
            .collect();
        // SAFETY: every pointer is `from` elements into a buffer of `count`, with `part`
        // elements left after it (the parts add up to `count`); none overlaps another.
        unsafe {
            reduce_part(dtype, ReduceOp::Sum, &moved, &[out], part, task_bytes);
            copy_part(moved[0], &copies, part * 4, true);
        }
        from += part;
    }
    assert_eq!(from, count);
    assert_eq!(reduced.bytes(), expected(dtype, ReduceOp::Sum, &srcs));
    for c in &copied {
        assert!(c.bytes() == srcs[0].bytes());
    }
}

#[test]
fn a_copy_to_one_destination_streams_in_a_large_operation_even_from_a_small_program() {
    let scope = |program_bytes, footprint| CopyScope {
        program_bytes,
        footprint,
    };
    // Gather's put-mesh at 32 MiB on 8 ranks: each rank puts one 4 MiB block, in an
    // operation of 64 MiB of buffers.
    assert!(copy_streams(4 << 20, 1, scope(4 << 20, 64 << 20)));
    assert!(copy_streams(
        4 << 20,
        1,
        scope(4 << 20, FOOTPRINT_STREAM_BYTES)
    ));
    // An AllGather's 4 MiB program in 36 MiB of buffers keeps its cached stores.
    assert!(!copy_streams(4 << 20, 1, scope(4 << 20, 36 << 20)));
    // Not worth it for a short copy, however large the operation.
    assert!(!copy_streams(128 << 10, 1, scope(128 << 10, 1 << 30)));
    // A copy to several destinations goes by its program (mesh-push's broadcast of a
    // reduced block).
    assert!(!copy_streams(512 << 10, 8, scope(9 << 19, 64 << 20)));
    assert!(copy_streams(512 << 10, 8, scope(PROGRAM_STREAM_BYTES, 0)));
    // Unknown footprint: the program's rule alone, as before.
    assert!(!copy_streams(4 << 20, 1, CopyScope::default()));
}
