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

/// What every rank's output must hold, as periods of the input pattern.
///
/// AllReduce: the reduced period everywhere. AllGather: output block `s` is rank `s`'s
/// input, so its own period, from the block's start. ReduceScatter: rank `r`'s output is
/// element `r * count + i` of every input reduced, so the reduced period rotated by
/// `r * count`. Comparing against a period keeps the check linear and cheap at 64 MiB.
pub struct Expected {
    op: OpParam,
    ranks: usize,
    /// One period of each rank's input.
    inputs: Vec<Vec<u8>>,
    /// One period of the reduction over every rank's input.
    reduced: Vec<u8>,
}

impl Expected {
    /// The expectation for `op` over `ranks` ranks, or why it cannot be checked.
    pub fn new(op: &OpParam, ranks: usize) -> Result<Self, String> {
        if !matches!(
            op.kind,
            OpKind::AllReduce | OpKind::AllGather | OpKind::ReduceScatter
        ) {
            return Err(format!("oxccl perf cannot check {} yet", op.kind));
        }
        let es = op.dtype.size();
        let inputs: Vec<Vec<u8>> = (0..ranks).map(|r| period(op, r)).collect();
        let mut reduced = inputs[0].clone();
        for input in &inputs[1..] {
            for i in 0..PERIOD {
                let r = i * es..(i + 1) * es;
                let v = reduce_scalar(op.dtype, op.op, &reduced[r.clone()], &input[r.clone()]);
                reduced[r].copy_from_slice(&v);
            }
        }
        Ok(Expected {
            op: op.clone(),
            ranks,
            inputs,
            reduced,
        })
    }

    /// Wrong elements of `rank`'s result: `buf` is its output buffer, or its one buffer
    /// of an in-place call (where ReduceScatter's result is block `rank`).
    pub fn count_wrong(&self, rank: usize, in_place: bool, buf: &[u8]) -> usize {
        let es = self.op.dtype.size();
        let block = self.op.count * es;
        match self.op.kind {
            OpKind::AllGather => (0..self.ranks)
                .map(|s| count_wrong(&buf[s * block..(s + 1) * block], &self.inputs[s], es))
                .sum(),
            OpKind::ReduceScatter => {
                let at = if in_place { rank * block } else { 0 };
                let phase = (rank * self.op.count) % PERIOD;
                let mut rotated = self.reduced.clone();
                rotated.rotate_left(phase * es);
                count_wrong(&buf[at..at + block], &rotated, es)
            }
            _ => count_wrong(&buf[..block], &self.reduced, es),
        }
    }
}

/// Elements of `out` that differ from the repeated `expected` period.
fn count_wrong(out: &[u8], expected: &[u8], elem_size: usize) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The inputs of every rank, in full.
    fn inputs(op: &OpParam, ranks: usize, len: usize) -> Vec<Aligned> {
        (0..ranks)
            .map(|r| {
                let mut a = Aligned::zeroed(len);
                fill_input(op, r, a.bytes_mut());
                a
            })
            .collect()
    }

    #[test]
    fn all_gather_expects_each_block_from_its_rank() {
        let op = OpParam::all_gather(5, DataType::I32);
        let e = Expected::new(&op, 3).unwrap();
        let ins = inputs(&op, 3, 20);
        let gathered: Vec<u8> = ins.iter().flat_map(|a| a.bytes().to_vec()).collect();
        assert_eq!(e.count_wrong(1, false, &gathered), 0);
        let mut swapped = gathered.clone();
        swapped[..20].copy_from_slice(ins[1].bytes());
        assert!(e.count_wrong(1, false, &swapped) > 0);
    }

    #[test]
    fn reduce_scatter_expects_the_own_block_reduced() {
        let op = OpParam::reduce_scatter(5, DataType::F32, ReduceOp::Sum);
        let ins = inputs(&op, 3, 60);
        let e = Expected::new(&op, 3).unwrap();
        for rank in 0..3 {
            let block = |r: usize| -> Vec<f32> {
                bytemuck::pod_collect_to_vec(&ins[r].bytes()[rank * 20..(rank + 1) * 20])
            };
            let sum: Vec<f32> = (0..5).map(|i| (0..3).map(|r| block(r)[i]).sum()).collect();
            let out: Vec<u8> = bytemuck::cast_slice(&sum).to_vec();
            assert_eq!(e.count_wrong(rank, false, &out), 0, "rank {rank}");
            let mut in_place = vec![0u8; 60];
            in_place[rank * 20..(rank + 1) * 20].copy_from_slice(&out);
            assert_eq!(e.count_wrong(rank, true, &in_place), 0, "rank {rank}");
            // Another rank's block is wrong here.
            assert!(
                e.count_wrong((rank + 1) % 3, false, &out) > 0,
                "rank {rank}"
            );
        }
    }
}
