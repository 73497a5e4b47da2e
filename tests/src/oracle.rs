//! The scalar reference: element-wise reduction written independently of the kernels.
//!
//! Typed, one element at a time, left to right over the ranks; f16 and bf16 go through f32
//! and are rounded after every step. Integer sum and product wrap.

use oxccl::{bf16, f16, DataType, ReduceOp};

trait Scalar: bytemuck::Pod {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
int_scalar!(i8, u8, i16, u16, i32, u32, i64, u64);

fn float_combine(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

impl Scalar for f32 {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

impl Scalar for f64 {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
        float_combine(op, a, b)
    }
}

impl Scalar for f16 {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
        f16::from_f32(f32::combine(op, a.to_f32(), b.to_f32()))
    }
}

impl Scalar for bf16 {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
        bf16::from_f32(f32::combine(op, a.to_f32(), b.to_f32()))
    }
}

/// The fold in place over the first input's copy, element by element: no typed copy of
/// every input (that was a third of the oracle's time on large cases).
fn fold_typed<T: Scalar>(op: ReduceOp, inputs: &[&[u8]]) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    let mut acc = inputs[0].to_vec();
    for input in &inputs[1..] {
        for (a, x) in acc.chunks_exact_mut(size).zip(input.chunks_exact(size)) {
            let folded = T::combine(
                op,
                bytemuck::pod_read_unaligned(a),
                bytemuck::pod_read_unaligned(x),
            );
            a.copy_from_slice(bytemuck::bytes_of(&folded));
        }
    }
    acc
}

/// `op` folded over `inputs` (little-endian element bytes), element by element.
pub fn fold(dtype: DataType, op: ReduceOp, inputs: &[&[u8]]) -> Vec<u8> {
    match dtype {
        DataType::I8 => fold_typed::<i8>(op, inputs),
        DataType::U8 => fold_typed::<u8>(op, inputs),
        DataType::I16 => fold_typed::<i16>(op, inputs),
        DataType::U16 => fold_typed::<u16>(op, inputs),
        DataType::I32 => fold_typed::<i32>(op, inputs),
        DataType::U32 => fold_typed::<u32>(op, inputs),
        DataType::I64 => fold_typed::<i64>(op, inputs),
        DataType::U64 => fold_typed::<u64>(op, inputs),
        DataType::F16 => fold_typed::<f16>(op, inputs),
        DataType::Bf16 => fold_typed::<bf16>(op, inputs),
        DataType::F32 => fold_typed::<f32>(op, inputs),
        DataType::F64 => fold_typed::<f64>(op, inputs),
    }
}
