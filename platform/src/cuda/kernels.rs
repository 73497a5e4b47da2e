//! The program kernel's CUDA C: `program.cu` (the interpreter of a rank's tasks, see
//! `program.rs`) after a prelude generated here, compiled by NVRTC once per architecture
//! to a CUBIN and kept in the process and on disk (`module_cache`).
//!
//! The prelude holds one reduce op per (data type, reduce op), 12 x 4 = 48, and
//! `reduce_dispatch`, which runs a block's slice of `dst[i] = op(src0[i], src1[i], ...)`
//! for every destination with the op of a pair index ([`pair_index`]), folding left to
//! right with every step rounded to the element type: the host kernels' semantics
//! ([`crate::reduce`]), bit for bit, so a collective gives the same bytes on every device,
//! NaNs aside: a sum or product with a NaN operand is a NaN on both, but the GPU's
//! arithmetic returns its canonical NaN where the host's keeps the operand's payload.
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
//! Threads move 16 bytes at a time (four vectors in flight each for a Copy, one for a
//! reduction) when every operand is 16-byte aligned, one element at a time otherwise and
//! for the tail; a stride over the K blocks of the task's stream covers any count. A
//! Copy is the byte "reduction" of one source ([`COPY_PAIR`]).

use crate::dtype::{DataType, ReduceOp};

/// Threads per block of the program kernel (its `__launch_bounds__`).
pub const THREADS: u32 = 512;
/// Sources and destinations of one task at most (they are staged in shared memory).
pub const MAX_OPERANDS: usize = 256;
/// The dispatch index of a Copy (after the 48 reduce pairs).
pub const COPY_PAIR: usize = DataType::ALL.len() * ReduceOp::ALL.len();
/// The program kernel's entry point.
pub const PROGRAM_KERNEL: &str = "oxccl_program";

/// The dispatch index of `(dtype, op)`.
pub fn pair_index(dtype: DataType, op: ReduceOp) -> usize {
    let d = DataType::ALL.iter().position(|&x| x == dtype).unwrap_or(0);
    let o = ReduceOp::ALL.iter().position(|&x| x == op).unwrap_or(0);
    d * ReduceOp::ALL.len() + o
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

/// The C name of the reduce op for `(dtype, op)`.
pub fn op_name(dtype: DataType, op: ReduceOp) -> String {
    let op = match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Prod => "prod",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
    };
    format!("Op_{}_{op}", dtype.name())
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

// A block's slice (block j of k) of dst[..][i] = fold(op, src[..][i]); F::apply is the op.
template <typename T, typename F, bool IS_COPY>
__device__ __noinline__ void reduce_slice(const unsigned long long* src, unsigned nsrc,
                                             const unsigned long long* dst, unsigned ndst,
                                             unsigned long long n, unsigned j, unsigned k) {
  typedef unsigned long long u64;
  const u64 first = (u64)j * blockDim.x + threadIdx.x;
  const u64 stride = (u64)k * blockDim.x;
  constexpr int V = 16 / sizeof(T);
  // Vectors in flight per thread: four for copies, one for reductions (each of the 48 is
  // compiled: unrolling them all as far multiplies NVRTC's time).
  constexpr int U = IS_COPY ? 4 : 1;
  u64 misaligned = 0;
  for (unsigned s = 0; s < nsrc; ++s) misaligned |= src[s];
  for (unsigned d = 0; d < ndst; ++d) misaligned |= dst[d];
  u64 done = 0;
  if ((misaligned & 15) == 0) {
    const u64 vectors = n / V;
    for (u64 base = first; base < vectors; base += stride * U) {
      uint4 acc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const u64 v = base + u * stride;
        if (v < vectors) acc[u] = ((const uint4*)src[0])[v];
      }
      for (unsigned s = 1; s < nsrc; ++s) {
        uint4 in[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const u64 v = base + u * stride;
          if (v < vectors) in[u] = ((const uint4*)src[s])[v];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          T* a = (T*)&acc[u];
          const T* b = (const T*)&in[u];
#pragma unroll
          for (int x = 0; x < V; ++x) a[x] = F::apply(a[x], b[x]);
        }
      }
      for (unsigned d = 0; d < ndst; ++d) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const u64 v = base + u * stride;
          if (v < vectors) ((uint4*)dst[d])[v] = acc[u];
        }
      }
    }
    done = vectors * V;
  }
  for (u64 i = done + first; i < n; i += stride) {
    T acc = ((const T*)src[0])[i];
    for (unsigned s = 1; s < nsrc; ++s) acc = F::apply(acc, ((const T*)src[s])[i]);
    for (unsigned d = 0; d < ndst; ++d) ((T*)dst[d])[i] = acc;
  }
}
"#;

/// The whole translation unit: the prelude, the 48 ops and their dispatch, then
/// `program.cu`.
pub fn source() -> String {
    let mut src = format!(
        "#define THREADS {THREADS}\n#define MAX_OPERANDS {MAX_OPERANDS}\n\
         #define COPY_PAIR {COPY_PAIR}\n{PRELUDE}"
    );
    let mut cases = String::new();
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let name = op_name(dtype, op);
            let t = c_type(dtype);
            src.push_str(&format!(
                "struct {name} {{ static __device__ __forceinline__ {t} apply({t} a, {t} b) \
                 {{ return {}; }} }};\n",
                combine(dtype, op)
            ));
            cases.push_str(&format!(
                "    case {}: reduce_slice<{t}, {name}, false>(src, nsrc, dst, ndst, n, j, k); break;\n",
                pair_index(dtype, op)
            ));
        }
    }
    let copy = op_name(DataType::U8, ReduceOp::Sum);
    src.push_str(&format!(
        "\n__device__ __noinline__ void reduce_dispatch(unsigned pair, \
         const unsigned long long* src, unsigned nsrc, const unsigned long long* dst, \
         unsigned ndst, unsigned long long n, unsigned j, unsigned k) {{\n  switch (pair) {{\n\
         {cases}    case COPY_PAIR: reduce_slice<unsigned char, {copy}, true>(src, 1, dst, ndst, n, j, k); break;\n\
         \x20   default: break;\n  }}\n}}\n\n"
    ));
    src.push_str(include_str!("program.cu"));
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
    use super::super::module_cache;
    use super::super::CudaError;
    use cudarc::nvrtc::{result, sys};
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::ffi::{c_char, CStr, CString};
    use std::sync::{Arc, OnceLock};

    /// Whether NVRTC can be loaded (checked before any call, which would panic).
    pub fn present() -> bool {
        // SAFETY: only tries to open the library.
        unsafe { sys::is_culib_present() }
    }

    /// What NVRTC makes of [`super::source`] for one real architecture.
    pub struct Image {
        /// The PTX (the virtual architecture's code, which CI checks).
        pub ptx: String,
        /// The CUBIN: machine code for the architecture, what the driver loads. Loading
        /// PTX instead would make the driver compile it again (as long again as NVRTC
        /// took, whenever its own cache misses) and would tie the module to a driver
        /// that knows the PTX's version; a CUBIN needs neither.
        pub cubin: Vec<u8>,
    }

    /// The CUBIN of [`super::source`] for `arch` (`sm_80`, `sm_90`, ...): compiled on
    /// the first call for that architecture, then served from a process-wide cache.
    /// Threads that miss together wait for one compile (NVRTC takes seconds and hundreds
    /// of megabytes) rather than each running their own.
    pub fn compile_module(arch: &str) -> Result<Arc<[u8]>, CudaError> {
        static CACHE: OnceLock<Mutex<HashMap<String, Arc<[u8]>>>> = OnceLock::new();
        let mut cache = CACHE.get_or_init(Default::default).lock();
        if let Some(module) = cache.get(arch) {
            return Ok(module.clone());
        }
        let module: Arc<[u8]> = compile_or_load(arch)?.into();
        cache.insert(arch.to_string(), module.clone());
        Ok(module)
    }

    /// The CUBIN from the disk cache ([`module_cache`]), else compiled and stored.
    fn compile_or_load(arch: &str) -> Result<Vec<u8>, CudaError> {
        if !present() {
            return Err(CudaError::NoNvrtc);
        }
        let include = super::find_headers()?;
        let folder = module_cache::dir(|k| std::env::var(k).ok());
        let source = super::source();
        let version = nvrtc_version();
        let include_text = include.display().to_string();
        let key = module_cache::key(&[
            &source,
            arch,
            &version,
            &options(arch, &include).join(" "),
            &include_text,
        ]);
        if let Some(cubin) = folder.as_deref().and_then(|d| module_cache::load(d, &key)) {
            return Ok(cubin);
        }
        let image = compile_uncached(arch, &include)?;
        if let Some(d) = folder.as_deref() {
            module_cache::store(d, &key, &image.cubin);
        }
        Ok(image.cubin)
    }

    /// NVRTC's version, as `major.minor` (part of the cache key).
    fn nvrtc_version() -> String {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC is present (checked by the caller); the call writes two ints.
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        format!("{major}.{minor}")
    }

    /// A real architecture (`sm_XX`), so NVRTC makes a CUBIN beside the PTX.
    fn options(arch: &str, include: &std::path::Path) -> Vec<String> {
        vec![
            format!("--gpu-architecture={arch}"),
            format!("--include-path={}", include.display()),
            "--std=c++17".into(),
            "--fmad=false".into(),
            "-default-device".into(),
        ]
    }

    /// PTX and CUBIN of [`super::source`] for `arch`, compiled now (no cache read or
    /// written): what the CI test uses, so that a cached file cannot hide a broken NVRTC.
    pub fn compile_now(arch: &str) -> Result<Image, CudaError> {
        if !present() {
            return Err(CudaError::NoNvrtc);
        }
        compile_uncached(arch, &super::find_headers()?)
    }

    /// An NVRTC program, destroyed on drop.
    struct Program(sys::nvrtcProgram);

    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: created by `create_program`, destroyed once, here.
            let _ = unsafe { result::destroy_program(self.0) };
        }
    }

    fn compile_uncached(arch: &str, include: &std::path::Path) -> Result<Image, CudaError> {
        let failed = |log: String| CudaError::Compile {
            arch: arch.to_string(),
            log,
        };
        let source =
            CString::new(super::source()).map_err(|_| failed("a NUL byte in the source".into()))?;
        // `source` outlives the program (NVRTC may keep a pointer to it).
        let program =
            Program(result::create_program(&source, None).map_err(|e| failed(format!("{e:?}")))?);
        // SAFETY (this and the calls below): `program` is live until it drops.
        if let Err(e) = unsafe { result::compile_program(program.0, &options(arch, include)) } {
            let log = unsafe { result::get_program_log(program.0) }
                .map(|log| text(&log))
                .unwrap_or_else(|_| format!("{e:?} (and no log)"));
            return Err(failed(log));
        }
        let ptx = unsafe { result::get_ptx(program.0) }.map_err(|e| failed(format!("{e:?}")))?;
        let cubin = unsafe { cubin(program.0) }.map_err(|e| failed(format!("no CUBIN: {e:?}")))?;
        Ok(Image {
            ptx: text(&ptx),
            cubin,
        })
    }

    /// A NUL-terminated buffer from NVRTC as text.
    fn text(buf: &[c_char]) -> String {
        // SAFETY: `c_char` and `u8` have the same size and alignment.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
        CStr::from_bytes_until_nul(bytes)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| String::from_utf8_lossy(bytes).into_owned())
    }

    /// The CUBIN of a program compiled for a real architecture.
    ///
    /// # Safety
    /// `program` is live and compiled.
    unsafe fn cubin(program: sys::nvrtcProgram) -> Result<Vec<u8>, result::NvrtcError> {
        let mut size = 0usize;
        unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }.result()?;
        let mut image = vec![0u8; size];
        unsafe { sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast()) }.result()?;
        Ok(image)
    }
}

#[cfg(feature = "cuda")]
pub use nvrtc::{compile_module, compile_now, present as nvrtc_present, Image};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_and_op_has_one_case_and_copy_has_its_own() {
        let src = source();
        let mut seen = std::collections::HashSet::new();
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let case = format!(
                    "case {}: reduce_slice<{}, {}, false>",
                    pair_index(dtype, op),
                    c_type(dtype),
                    op_name(dtype, op)
                );
                assert_eq!(src.matches(&case).count(), 1, "{case}");
                assert!(seen.insert(pair_index(dtype, op)));
            }
        }
        assert!(!seen.contains(&COPY_PAIR));
        assert_eq!(src.matches("case COPY_PAIR:").count(), 1);
        let entry = format!("__launch_bounds__(THREADS) {PROGRAM_KERNEL}(");
        assert_eq!(src.matches(&entry).count(), 1);
    }

    /// The kernel compiles to PTX and to a whole CUBIN (what the driver loads) for sm_80
    /// and sm_90 with the NVRTC found at run time (CI installs the PyPI wheel:
    /// scripts/install-cuda-ci.sh), every (type, op) case with it; skipped, saying why,
    /// without NVRTC or the headers, unless `OXCCL_REQUIRE_NVRTC` is set (as in CI, where
    /// a skip would hide a broken install).
    #[cfg(feature = "cuda")]
    #[test]
    fn the_program_kernel_compiles_to_ptx_for_sm80_and_sm90() {
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
            let Image { ptx, cubin } = compile_now(arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                super::super::module_cache::whole(&cubin),
                "{arch}: the CUBIN ({} bytes) is not a whole ELF file",
                cubin.len()
            );
            let target = format!(".target {arch}");
            assert!(ptx.contains(&target), "no {target} in the PTX");
            let entry = format!(".entry {PROGRAM_KERNEL}(");
            assert!(ptx.contains(&entry), "{arch}: no {entry}");
            // One instantiation of reduce_slice per (type, op), and the copy's.
            assert!(ptx.contains("reduce_dispatch"), "{arch}: no dispatch");
        }
    }
}
