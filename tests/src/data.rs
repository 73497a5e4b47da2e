//! Test inputs that differ per rank and per element, and whose reductions are exact.
//!
//! Integers take pseudo-random values over their whole range: wrapping sum and product,
//! max and min give the same result in any order. Floats take small integers (sum: -8..=8,
//! product: ±1 and ±2, max/min: -100..=100), so every partial result is exact even in f16
//! and bf16, and the expected output does not depend on the algorithm's reduction order.

use oxccl::{bf16, f16, DataType, ReduceOp};

/// splitmix64: a cheap, well-mixed hash of (rank, element, seed).
fn mix(rank: usize, i: usize, seed: u64) -> u64 {
    let mut z = seed ^ ((rank as u64) << 40) ^ (i as u64);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn small_float(op: ReduceOp, h: u64) -> f32 {
    match op {
        ReduceOp::Sum => (h % 17) as f32 - 8.0,
        ReduceOp::Prod => [-2.0, -1.0, 1.0, 2.0][(h % 4) as usize],
        ReduceOp::Max | ReduceOp::Min => (h % 201) as f32 - 100.0,
    }
}

/// Rank `rank`'s input of `count` elements.
pub fn input(dtype: DataType, op: ReduceOp, rank: usize, count: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dtype.size());
    for i in 0..count {
        let h = mix(rank, i, seed);
        let f = small_float(op, h);
        match dtype {
            DataType::F16 => out.extend_from_slice(&f16::from_f32(f).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f32(f).to_le_bytes()),
            DataType::F32 => out.extend_from_slice(&f.to_le_bytes()),
            DataType::F64 => out.extend_from_slice(&f64::from(f).to_le_bytes()),
            _ => out.extend_from_slice(&h.to_le_bytes()[..dtype.size()]),
        }
    }
    out
}
