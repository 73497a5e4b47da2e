//! The reduce kernels: CUDA C written here, compiled by NVRTC once per process and
//! architecture, and cached.
//!
//! One translation unit holds a kernel per (data type, reduce op): 12 x 4 = 48 entry
//! points named [`kernel_name`]. Each takes one argument by value, [`Args`]: up to
//! [`MAX_SRCS`] source and [`MAX_DSTS`] destination pointers and an element count, and
//! computes `dst[i] = op(src0[i], src1[i], ...)` for every destination, folding left to
//! right with every step rounded to the element type: the host kernels' semantics
//! ([`crate::reduce`]), bit for bit, so a collective gives the same bytes on every device.
//!
//! - Integers wrap: sums and products are done in the unsigned type of the same width
//!   (products of 8- and 16-bit values in 32 bits), whose overflow C defines.
//! - `f32`/`f64`: IEEE operations, no contraction (`--fmad=false`); max and min are
//!   `fmax`/`fmin`, which ignore a NaN operand as Rust's `max`/`min` do.
//! - `f16`/`bf16` (`cuda_fp16.h`, `cuda_bf16.h`): each step widens both operands to
//!   `float`, applies the `f32` op and rounds back to nearest-even.
//!
//! Every element is read from every source before any destination is written, by the
//! same thread, so a destination may be one of the sources (accumulate in place).
//! Threads move 16 bytes at a time when every pointer is 16-byte aligned, one element
//! at a time otherwise and for the tail; a grid-stride loop covers any count with the
//! grid the launch chose.

use crate::dtype::{DataType, ReduceOp};

/// Sources per launch; a reduction over more is folded over several launches.
pub const MAX_SRCS: usize = 32;
/// Destinations per launch; further destinations are copied from the first.
pub const MAX_DSTS: usize = 8;

/// The kernels' one argument, laid out as the C `Args` struct.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct Args {
    pub src: [u64; MAX_SRCS],
    pub dst: [u64; MAX_DSTS],
    /// Elements.
    pub n: u64,
    pub nsrc: i32,
    pub ndst: i32,
}

/// The C name of a data type.
fn c_type(dtype: DataType) -> &'static str {
    match dtype {
        DataType::I8 => "signed char",
        DataType::U8 => "unsigned char",
        DataType::I16 => "short",
        DataType::U16 => "unsigned short",
        DataType::I32 => "int",
        DataType::U32 => "unsigned int",
        DataType::I64 => "long long",
        DataType::U64 => "unsigned long long",
        DataType::F16 => "__half",
        DataType::Bf16 => "__nv_bfloat16",
        DataType::F32 => "float",
        DataType::F64 => "double",
    }
}

/// The entry point of the kernel for `(dtype, op)`.
pub fn kernel_name(dtype: DataType, op: ReduceOp) -> String {
    let op = match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Prod => "prod",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
    };
    format!("oxccl_reduce_{}_{op}", dtype.name())
}

/// The C expression combining `a` and `b` of `dtype` with `op`.
fn combine(dtype: DataType, op: ReduceOp) -> String {
    let t = c_type(dtype);
    match dtype {
        DataType::F16 => float_step("__half2float", "__float2half_rn", op),
        DataType::Bf16 => float_step("__bfloat162float", "__float2bfloat16_rn", op),
        DataType::F32 | DataType::F64 => {
            let (max, min) = match dtype {
                DataType::F32 => ("fmaxf", "fminf"),
                _ => ("fmax", "fmin"),
            };
            match op {
                ReduceOp::Sum => "a + b".into(),
                ReduceOp::Prod => "a * b".into(),
                ReduceOp::Max => format!("{max}(a, b)"),
                ReduceOp::Min => format!("{min}(a, b)"),
            }
        }
        _ => {
            // Wrapping arithmetic in an unsigned type at least 32 bits wide.
            let wide = match dtype.size() {
                8 => "unsigned long long",
                _ => "unsigned int",
            };
            match op {
                ReduceOp::Sum => format!("({t})(({wide})a + ({wide})b)"),
                ReduceOp::Prod => format!("({t})(({wide})a * ({wide})b)"),
                ReduceOp::Max => "(a > b ? a : b)".into(),
                ReduceOp::Min => "(a < b ? a : b)".into(),
            }
        }
    }
}

/// A 16-bit float step: widen, the `f32` op, round back to nearest-even.
fn float_step(widen: &str, narrow: &str, op: ReduceOp) -> String {
    let f = match op {
        ReduceOp::Sum => format!("{widen}(a) + {widen}(b)"),
        ReduceOp::Prod => format!("{widen}(a) * {widen}(b)"),
        ReduceOp::Max => format!("fmaxf({widen}(a), {widen}(b))"),
        ReduceOp::Min => format!("fminf({widen}(a), {widen}(b))"),
    };
    format!("{narrow}({f})")
}

const PRELUDE: &str = r#"#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T> struct Args {
  const T* src[MAX_SRCS];
  T* dst[MAX_DSTS];
  unsigned long long n;
  int nsrc;
  int ndst;
};

// dst[i] = fold(op, src[..][i]) for every destination; F::apply is the op.
template <typename T, typename F>
__device__ __forceinline__ void reduce(const Args<T>& a) {
  const unsigned long long n = a.n;
  const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  constexpr int V = 16 / sizeof(T);
  unsigned long long misaligned = 0;
  for (int s = 0; s < a.nsrc; ++s) misaligned |= (unsigned long long)a.src[s];
  for (int d = 0; d < a.ndst; ++d) misaligned |= (unsigned long long)a.dst[d];
  unsigned long long done = 0;
  if ((misaligned & 15) == 0) {
    const unsigned long long vectors = n / V;
    for (unsigned long long v = first; v < vectors; v += stride) {
      uint4 acc_bits = ((const uint4*)a.src[0])[v];
      T* acc = (T*)&acc_bits;
      for (int s = 1; s < a.nsrc; ++s) {
        uint4 in_bits = ((const uint4*)a.src[s])[v];
        const T* in = (const T*)&in_bits;
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = F::apply(acc[k], in[k]);
      }
      for (int d = 0; d < a.ndst; ++d) ((uint4*)a.dst[d])[v] = acc_bits;
    }
    done = vectors * V;
  }
  for (unsigned long long i = done + first; i < n; i += stride) {
    T acc = a.src[0][i];
    for (int s = 1; s < a.nsrc; ++s) acc = F::apply(acc, a.src[s][i]);
    for (int d = 0; d < a.ndst; ++d) a.dst[d][i] = acc;
  }
}
"#;

/// The whole translation unit: the prelude and the 48 kernels.
pub fn source() -> String {
    let mut src = format!("#define MAX_SRCS {MAX_SRCS}\n#define MAX_DSTS {MAX_DSTS}\n{PRELUDE}");
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let name = kernel_name(dtype, op);
            let t = c_type(dtype);
            src.push_str(&format!(
                "\nstruct Op_{name} {{ static __device__ __forceinline__ {t} apply({t} a, {t} b) \
                 {{ return {}; }} }};\n\
                 extern \"C\" __global__ void __launch_bounds__(512) {name}(Args<{t}> a) \
                 {{ reduce<{t}, Op_{name}>(a); }}\n",
                combine(dtype, op)
            ));
        }
    }
    src
}

/// Where the CUDA headers are looked for, in order: `OXCCL_CUDA_INCLUDE`,
/// `$CUDA_HOME/include`, `$CUDA_PATH/include`, `/usr/local/cuda/include`.
pub fn include_candidates() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("OXCCL_CUDA_INCLUDE") {
        dirs.push(dir.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            dirs.push(std::path::PathBuf::from(home).join("include"));
        }
    }
    dirs.push("/usr/local/cuda/include".into());
    dirs
}

/// The first candidate folder that has `cuda_fp16.h`.
pub fn find_headers() -> Result<std::path::PathBuf, super::CudaError> {
    let tried = include_candidates();
    tried
        .iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .cloned()
        .ok_or_else(|| super::CudaError::NoHeaders {
            tried: tried.iter().map(|d| d.display().to_string()).collect(),
        })
}

#[cfg(feature = "cuda")]
mod nvrtc {
    use super::super::CudaError;
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock};

    /// Whether NVRTC can be loaded (checked before any call, which would panic).
    pub fn present() -> bool {
        // SAFETY: only tries to open the library.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    }

    /// PTX of [`super::source`] for `arch` (`sm_80`, `sm_90`, ...): compiled on the first
    /// call for that architecture, then served from a process-wide cache.
    pub fn compile_ptx(arch: &str) -> Result<Arc<str>, CudaError> {
        static CACHE: OnceLock<Mutex<HashMap<String, Arc<str>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(ptx) = cache.lock().get(arch) {
            return Ok(ptx.clone());
        }
        let ptx: Arc<str> = compile_uncached(arch)?.into();
        cache.lock().insert(arch.to_string(), ptx.clone());
        Ok(ptx)
    }

    fn compile_uncached(arch: &str) -> Result<String, CudaError> {
        if !present() {
            return Err(CudaError::NoNvrtc);
        }
        let include = super::find_headers()?;
        let options = cudarc::nvrtc::CompileOptions {
            arch: None,
            options: vec![
                format!("--gpu-architecture={arch}"),
                format!("--include-path={}", include.display()),
                "--std=c++17".into(),
                "--fmad=false".into(),
                "-default-device".into(),
            ],
            ..Default::default()
        };
        match cudarc::nvrtc::compile_ptx_with_opts(super::source(), options) {
            Ok(ptx) => Ok(ptx.to_src()),
            Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => Err(CudaError::Compile {
                arch: arch.to_string(),
                log: log.to_string_lossy().into_owned(),
            }),
            Err(e) => Err(CudaError::Compile {
                arch: arch.to_string(),
                log: e.to_string(),
            }),
        }
    }
}

#[cfg(feature = "cuda")]
pub use nvrtc::{compile_ptx, present as nvrtc_present};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<Args>(), 8 * (MAX_SRCS + MAX_DSTS) + 16);
    }

    #[test]
    fn every_dtype_and_op_has_one_kernel() {
        let src = source();
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let entry = format!("void __launch_bounds__(512) {}(", kernel_name(dtype, op));
                assert_eq!(src.matches(&entry).count(), 1, "{entry}");
            }
        }
    }

    /// The kernels compile to PTX for sm_80 and sm_90 with the NVRTC found at run time (CI
    /// installs the PyPI wheel: scripts/install-cuda-ci.sh); skipped, saying why, without
    /// NVRTC or the headers, unless `OXCCL_REQUIRE_NVRTC` is set (as in CI, where a skip
    /// would hide a broken install).
    #[cfg(feature = "cuda")]
    #[test]
    fn every_kernel_compiles_to_ptx_for_sm80_and_sm90() {
        let required = std::env::var_os("OXCCL_REQUIRE_NVRTC").is_some();
        let missing = match (nvrtc_present(), find_headers()) {
            (false, _) => Some(super::super::CudaError::NoNvrtc.to_string()),
            (true, Err(e)) => Some(e.to_string()),
            (true, Ok(_)) => None,
        };
        if let Some(why) = missing {
            assert!(!required, "OXCCL_REQUIRE_NVRTC is set: {why}");
            eprintln!("skipped: {why}");
            return;
        }
        for arch in ["sm_80", "sm_90"] {
            let ptx = compile_ptx(arch).unwrap_or_else(|e| panic!("{e}"));
            let target = format!(".target {arch}");
            assert!(ptx.contains(&target), "no {target} in the PTX");
            for dtype in DataType::ALL {
                for op in ReduceOp::ALL {
                    let entry = format!(".entry {}(", kernel_name(dtype, op));
                    assert!(ptx.contains(&entry), "{arch}: no {entry}");
                }
            }
        }
    }
}
