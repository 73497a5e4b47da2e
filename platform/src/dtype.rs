//! Element types and reduction operators.
//!
//! oxccl moves bytes; it only needs to know element types where it reduces. The twelve
//! [`DataType`]s are the ones HCCL and NCCL share. [`Element`] ties a Rust type to its
//! [`DataType`] so that the typed eager API can check buffers at compile time.

use std::fmt;
use std::str::FromStr;

/// The element type of a collective's buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F16,
    Bf16,
    F32,
    F64,
}

impl DataType {
    /// Every data type, in a fixed order (tests and `oxccl perf -d all` iterate over it).
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::U8,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::I16 | DataType::U16 | DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// True for the floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::Bf16 | DataType::F32 | DataType::F64
        )
    }

    /// The short name used on the command line and in nccl-tests tables.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I16 => "int16",
            DataType::U16 => "uint16",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::F16 => "half",
            DataType::Bf16 => "bfloat16",
            DataType::F32 => "float",
            DataType::F64 => "double",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a data type or reduce op name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{given}`; known: {known}")]
pub struct ParseNameError {
    pub what: &'static str,
    pub given: String,
    pub known: String,
}

impl FromStr for DataType {
    type Err = ParseNameError;

    /// Accepts the nccl-tests names (`float`, `half`, `bfloat16`, `int32`...) and the Rust
    /// names (`f32`, `f16`, `bf16`, `i32`...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let found = DataType::ALL.into_iter().find(|d| {
            d.name() == lower || rust_name(*d) == lower || alias(*d).contains(&lower.as_str())
        });
        found.ok_or_else(|| ParseNameError {
            what: "data type",
            given: s.to_string(),
            known: DataType::ALL.map(|d| d.name()).join(", "),
        })
    }
}

fn rust_name(d: DataType) -> &'static str {
    match d {
        DataType::I8 => "i8",
        DataType::U8 => "u8",
        DataType::I16 => "i16",
        DataType::U16 => "u16",
        DataType::I32 => "i32",
        DataType::U32 => "u32",
        DataType::I64 => "i64",
        DataType::U64 => "u64",
        DataType::F16 => "f16",
        DataType::Bf16 => "bf16",
        DataType::F32 => "f32",
        DataType::F64 => "f64",
    }
}

fn alias(d: DataType) -> &'static [&'static str] {
    match d {
        DataType::I8 => &["char"],
        DataType::I32 => &["int"],
        DataType::F16 => &["float16", "fp16"],
        DataType::Bf16 => &["bfloat16", "bf16"],
        DataType::F32 => &["float32", "fp32"],
        DataType::F64 => &["float64", "fp64"],
        _ => &[],
    }
}

/// Element-wise reduction operator.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    /// Every reduce op, in a fixed order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// The nccl-tests name.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == lower)
            .ok_or_else(|| ParseNameError {
                what: "reduce op",
                given: s.to_string(),
                known: ReduceOp::ALL.map(|o| o.name()).join(", "),
            })
    }
}

/// A Rust type that is one of oxccl's [`DataType`]s.
///
/// Implemented for the primitive integers and floats and for [`half::f16`]/[`half::bf16`].
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The data type this Rust type stands for.
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DataType = DataType::$d; })*
    };
}

element!(
    i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
    i64 => I64, u64 => U64, half::f16 => F16, half::bf16 => Bf16, f32 => F32, f64 => F64,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(d.name().parse::<DataType>().unwrap(), d);
            assert_eq!(rust_name(d).parse::<DataType>().unwrap(), d);
        }
        for o in ReduceOp::ALL {
            assert_eq!(o.name().parse::<ReduceOp>().unwrap(), o);
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = "f128".parse::<DataType>().unwrap_err();
        assert!(err.to_string().contains("bfloat16"), "{err}");
        let err = "avg".parse::<ReduceOp>().unwrap_err();
        assert!(err.to_string().contains("sum, prod, max, min"), "{err}");
    }
}
