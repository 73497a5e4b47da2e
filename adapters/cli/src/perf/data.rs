//! Test data for `oxccl perf`: inputs whose results are exact in every data type.
//!
//! Rank `r` holds small positive integers with a period of 8 elements: `1 + (3r + i) % 8`,
//! or `1 + (r + i) % 2` for products. Every partial result is then exactly representable
//! (f16 and bf16 included) or wraps identically in every order (integers), so the
//! expected output does not depend on the algorithm's reduction order, and only eight
//! expected elements need computing.

use oxccl::platform::reduce::reduce_scalar;
use oxccl::{bf16, f16, DataType, OpKind, OpParam, ReduceOp};

/// Elements per period of the pattern.
const PERIOD: usize = 8;

/// A heap buffer aligned to 8 bytes (enough for every data type), viewed as bytes.
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    pub fn zeroed(len: usize) -> Self {
        Aligned {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

fn small_int(rank: usize, i: usize, op: ReduceOp) -> u8 {
    match op {
        ReduceOp::Prod => 1 + ((rank + i) % 2) as u8,
        _ => 1 + ((3 * rank + i) % PERIOD) as u8,
    }
}

/// The bytes of the small integer `v` as one element of `dtype`.
fn element(dtype: DataType, v: u8) -> Vec<u8> {
    let f = f32::from(v);
    match dtype {
        DataType::I8 | DataType::U8 => vec![v],
        DataType::I16 | DataType::U16 => u16::from(v).to_le_bytes().to_vec(),
        DataType::I32 | DataType::U32 => u32::from(v).to_le_bytes().to_vec(),
        DataType::I64 | DataType::U64 => u64::from(v).to_le_bytes().to_vec(),
        DataType::F16 => f16::from_f32(f).to_le_bytes().to_vec(),
        DataType::Bf16 => bf16::from_f32(f).to_le_bytes().to_vec(),
        DataType::F32 => f.to_le_bytes().to_vec(),
        DataType::F64 => f64::from(v).to_le_bytes().to_vec(),
    }
}

/// One period of rank `rank`'s input.
fn period(op: &OpParam, rank: usize) -> Vec<u8> {
    (0..PERIOD)
        .flat_map(|i| element(op.dtype, small_int(rank, i, op.op)))
        .collect()
}

/// Fill `buf` with rank `rank`'s input pattern.
pub fn fill_input(op: &OpParam, rank: usize, buf: &mut [u8]) {
    let pattern = period(op, rank);
    for (chunk, p) in buf
        .chunks_mut(pattern.len())
        .zip(std::iter::repeat(&pattern))
    {
        chunk.copy_from_slice(&p[..chunk.len()]);
    }
}

/// One period of the expected output of `op` over `ranks` ranks.
pub fn expected_period(op: &OpParam, ranks: usize) -> Result<Vec<u8>, String> {
    if op.kind != OpKind::AllReduce {
        return Err(format!("oxccl perf cannot check {} yet", op.kind));
    }
    let es = op.dtype.size();
    let inputs: Vec<Vec<u8>> = (0..ranks).map(|r| period(op, r)).collect();
    let mut out = inputs[0].clone();
    for input in &inputs[1..] {
        for i in 0..PERIOD {
            let r = i * es..(i + 1) * es;
            let v = reduce_scalar(op.dtype, op.op, &out[r.clone()], &input[r.clone()]);
            out[r].copy_from_slice(&v);
        }
    }
    Ok(out)
}

/// Elements of `out` that differ from the repeated `expected` period.
pub fn count_wrong(out: &[u8], expected: &[u8], elem_size: usize) -> usize {
    out.chunks(expected.len())
        .map(|chunk| {
            chunk
                .chunks(elem_size)
                .zip(expected.chunks(elem_size))
                .filter(|(a, b)| a != b)
                .count()
        })
        .sum()
}
