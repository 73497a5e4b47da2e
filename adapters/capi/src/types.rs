//! NCCL's data type and reduce op numbers, as oxccl's types.
//!
//! The C caller's enums arrive as plain `int`s (a value outside a Rust enum would be
//! undefined behaviour): every value is checked, and the ones oxccl lacks are refused
//! with what to do instead.

use crate::result::CError;
use oxccl::{DataType, ReduceOp};
use std::ffi::c_int;

/// `ncclDataType_t` (0 to 9) as oxccl's [`DataType`].
pub fn data_type(raw: c_int) -> Result<DataType, CError> {
    Ok(match raw {
        0 => DataType::I8,
        1 => DataType::U8,
        2 => DataType::I32,
        3 => DataType::U32,
        4 => DataType::I64,
        5 => DataType::U64,
        6 => DataType::F16,
        7 => DataType::F32,
        8 => DataType::F64,
        9 => DataType::Bf16,
        other => {
            return Err(CError::invalid(format!(
                "datatype {other} is not an oxcclDataType_t: use oxcclInt8 (0) to \
                 oxcclBfloat16 (9); NCCL's 8-bit floats (10, 11) have no oxccl type"
            )))
        }
    })
}

/// `ncclRedOp_t` (0 to 3) as oxccl's [`ReduceOp`].
pub fn reduce_op(raw: c_int) -> Result<ReduceOp, CError> {
    Ok(match raw {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Prod,
        2 => ReduceOp::Max,
        3 => ReduceOp::Min,
        4 => {
            return Err(CError::invalid(
                "op oxcclAvg (4) is not supported by oxccl: reduce with oxcclSum and divide \
                 by the rank count",
            ))
        }
        other => {
            return Err(CError::invalid(format!(
                "op {other} is not an oxcclRedOp_t: use oxcclSum (0), oxcclProd (1), \
                 oxcclMax (2) or oxcclMin (3); user-defined ops are not supported"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nccl_number_maps_to_its_type() {
        let sizes: Vec<usize> = (0..10).map(|t| data_type(t).unwrap().size()).collect();
        assert_eq!(sizes, [1, 1, 4, 4, 8, 8, 2, 4, 8, 2]);
        assert_eq!(data_type(9).unwrap(), DataType::Bf16);
        for bad in [-1, 10, 11, 1000] {
            assert!(data_type(bad).unwrap_err().message.contains("oxcclInt8"));
        }
    }

    #[test]
    fn avg_and_unknown_ops_are_refused() {
        assert_eq!(reduce_op(2).unwrap(), ReduceOp::Max);
        assert!(reduce_op(4).unwrap_err().message.contains("oxcclAvg"));
        assert!(reduce_op(5).unwrap_err().message.contains("user-defined"));
        assert!(reduce_op(-3).is_err());
    }
}
