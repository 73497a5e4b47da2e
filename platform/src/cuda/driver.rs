//! The driver API as the backend uses it: loading checked before any call, every call's
//! result turned into a [`CudaError`] naming the call, and one [`Gpu`] per CUDA device
//! (its primary context, its properties and the reduce kernels loaded into it).

use super::kernels;
use super::CudaError;
use cudarc::driver::sys;
use std::ffi::CString;
use std::sync::OnceLock;

/// Run a driver call; a result other than success is a [`CudaError::Driver`] naming it.
macro_rules! cu {
    ($call:ident ( $($arg:expr),* $(,)? )) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the caller of `cu!` upholds the driver call's contract (valid handles and
        // pointers, the GPU's context current on this thread).
        let result = unsafe { cudarc::driver::sys::$call($($arg),*) };
        $crate::cuda::driver::check(stringify!($call), result)
    }};
}
pub(crate) use cu;

/// `Ok` for `CUDA_SUCCESS`, else the error named after `call`.
pub(crate) fn check(call: &'static str, result: sys::CUresult) -> Result<(), CudaError> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let name = cudarc::driver::result::DriverError(result)
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{result:?}"));
    Err(CudaError::Driver {
        call,
        code: result as i32,
        name,
    })
}

/// A non-blocking stream in the current context (no implicit order with the legacy
/// stream).
pub(crate) fn new_stream() -> Result<sys::CUstream, CudaError> {
    let mut stream = std::ptr::null_mut();
    let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
    cu!(cuStreamCreate(&mut stream, flags))?;
    Ok(stream)
}

/// An event in the current context; `timing`: one that records time (else the cheaper
/// kind that only orders and completes).
pub(crate) fn new_event(timing: bool) -> Result<sys::CUevent, CudaError> {
    let mut event = std::ptr::null_mut();
    let flags = match timing {
        true => sys::CUevent_flags::CU_EVENT_DEFAULT,
        false => sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
    } as u32;
    cu!(cuEventCreate(&mut event, flags))?;
    Ok(event)
}

/// Load the driver and initialise it, once per process; the number of CUDA devices.
pub(crate) fn init() -> Result<usize, CudaError> {
    static INIT: OnceLock<Result<usize, CudaError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the library; no driver call is made without it.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        cu!(cuInit(0))?;
        let mut count = 0;
        cu!(cuDeviceGetCount(&mut count))?;
        Ok(usize::try_from(count).unwrap_or(0))
    })
    .clone()
}

/// A CUDA device's primary context (the one the runtime API, and so PyTorch and JAX,
/// use), retained the first time the process asks for it and never released.
///
/// Releasing the last retain resets the context: the next user pays its creation again
/// (and the backend its module load), which tests and tools that open devices one after
/// another would pay each time. The runtime API keeps its primary contexts for the life
/// of the process too, and so does NCCL through it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct PrimaryContext {
    pub ordinal: usize,
    pub device: sys::CUdevice,
    pub context: sys::CUcontext,
}

// SAFETY: a context handle may be made current on any thread; the handle itself is never
// written after it is retained.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// Device `ordinal`'s primary context, retained once per process.
    pub fn of(ordinal: usize) -> Result<Self, CudaError> {
        static RETAINED: OnceLock<parking_lot::Mutex<Vec<PrimaryContext>>> = OnceLock::new();
        let count = init()?;
        let index = i32::try_from(ordinal)
            .ok()
            .filter(|_| ordinal < count)
            .ok_or(CudaError::NoOrdinal { ordinal, count })?;
        let mut retained = RETAINED.get_or_init(Default::default).lock();
        if let Some(found) = retained.iter().find(|c| c.ordinal == ordinal) {
            return Ok(*found);
        }
        let mut device = 0;
        cu!(cuDeviceGet(&mut device, index))?;
        let mut context = std::ptr::null_mut();
        cu!(cuDevicePrimaryCtxRetain(&mut context, device))?;
        let primary = PrimaryContext {
            ordinal,
            device,
            context,
        };
        retained.push(primary);
        Ok(primary)
    }

    /// Make the context current on the calling thread while the guard lives.
    pub fn bind(&self) -> Result<Current, CudaError> {
        Current::make(self.context)
    }
}

/// A context made current on this thread; dropping it puts back the context that was
/// current before. A caller's thread may be working on another GPU (PyTorch sets its
/// device per thread, and a thread may drive ranks of several GPUs): a call into oxccl
/// leaves the thread's context as it found it, as NCCL leaves the thread's device.
#[must_use = "the context is current only while the guard lives"]
pub(crate) struct Current {
    /// The context to put back; `None`: it was this one already.
    previous: Option<sys::CUcontext>,
}

impl Current {
    fn make(context: sys::CUcontext) -> Result<Self, CudaError> {
        let mut previous = std::ptr::null_mut();
        cu!(cuCtxGetCurrent(&mut previous))?;
        if previous == context {
            return Ok(Current { previous: None });
        }
        cu!(cuCtxSetCurrent(context))?;
        Ok(Current {
            previous: Some(previous),
        })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let Some(previous) = self.previous else {
            return;
        };
        // Best effort: a context destroyed meanwhile cannot be made current again, and
        // the thread is left with none rather than a dangling one.
        if cu!(cuCtxSetCurrent(previous)).is_err() {
            let _ = cu!(cuCtxSetCurrent(std::ptr::null_mut()));
        }
    }
}

/// Threads per block of the program kernel, tried in order: the largest whose grid fits
/// the GPU at once (many ranks of many streams on one GPU get smaller blocks).
pub(crate) const BLOCK_SIZES: [u32; 4] = [kernels::THREADS, 256, 128, 64];

/// One CUDA device: its primary context, properties, and the kernels loaded into it.
pub(crate) struct Gpu {
    pub ordinal: usize,
    pub device: sys::CUdevice,
    pub context: sys::CUcontext,
    pub name: String,
    /// Streaming multiprocessors, which size the program kernel's grids.
    pub sms: u32,
    /// Blocks of the program kernel the GPU holds at once (a cooperative launch's most),
    /// per block size in [`BLOCK_SIZES`] order.
    pub resident_blocks: Vec<u32>,
    /// The program kernel ([`kernels::PROGRAM_KERNEL`]).
    pub program: sys::CUfunction,
    /// Where allocations are made and freed (stream-ordered, from the device's pool):
    /// `cuMemFree` would wait for every stream of the device, including those of ranks
    /// waiting for the very thread that frees, so nothing here ever calls it.
    pub alloc_stream: sys::CUstream,
    module: sys::CUmodule,
}

// SAFETY: driver handles may be used from any thread once the context is made current on
// it ([`Gpu::bind`]); `Gpu` is read-only after `open`.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({})", self.ordinal, self.name)
    }
}

impl Gpu {
    /// Device `ordinal` in its primary context ([`PrimaryContext`]), with the kernels for
    /// its architecture loaded (compiled by NVRTC on the first use in the process).
    pub fn open(ordinal: usize) -> Result<Gpu, CudaError> {
        let primary = PrimaryContext::of(ordinal)?;
        let device = primary.device;
        let name = device_name(device);
        let attr = |a| -> Result<i32, CudaError> {
            let mut v = 0;
            cu!(cuDeviceGetAttribute(&mut v, a, device))?;
            Ok(v)
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let lacks = |feature| CudaError::Lacks {
            ordinal,
            name: name.clone(),
            feature,
        };
        if major < 7 {
            return Err(lacks("compute capability 7.0"));
        }
        if attr(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? == 0 {
            return Err(lacks("mapped host memory"));
        }
        if attr(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? == 0 {
            return Err(lacks("cooperative launches"));
        }
        // Every allocation is stream-ordered (see `alloc_stream`); some virtualised GPUs
        // have no pools, where each allocation would fail with a bare driver error.
        if attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? == 0 {
            return Err(lacks("stream-ordered memory pools (cuMemAllocAsync)"));
        }
        let mut gpu = Gpu {
            ordinal,
            device,
            context: primary.context,
            name,
            sms: sms.max(1) as u32,
            resident_blocks: Vec::new(),
            program: std::ptr::null_mut(),
            alloc_stream: std::ptr::null_mut(),
            module: std::ptr::null_mut(),
        };
        let current = gpu.bind()?;
        gpu.alloc_stream = new_stream()?;
        gpu.load_kernels(&format!("sm_{major}{minor}"))?;
        drop(current);
        Ok(gpu)
    }

    /// Make this GPU's context current on the calling thread while the guard lives.
    pub fn bind(&self) -> Result<Current, CudaError> {
        Current::make(self.context)
    }

    fn load_kernels(&mut self, arch: &str) -> Result<(), CudaError> {
        let cubin = kernels::compile_module(arch)?;
        // The driver reads the ELF image's own sizes; the image stays alive past the call.
        cu!(cuModuleLoadData(&mut self.module, cubin.as_ptr().cast()))?;
        let name = CString::new(kernels::PROGRAM_KERNEL).expect("no NUL");
        cu!(cuModuleGetFunction(
            &mut self.program,
            self.module,
            name.as_ptr()
        ))?;
        for threads in BLOCK_SIZES {
            let mut per_sm = 0;
            cu!(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut per_sm,
                self.program,
                threads as i32,
                0
            ))?;
            let resident = (per_sm.max(0) as u32).saturating_mul(self.sms);
            self.resident_blocks.push(resident);
        }
        Ok(())
    }

    /// The largest block size of which `blocks` fit on the GPU at once, with how many
    /// fit; `None` if not even the smallest does.
    pub fn block_size_for(&self, blocks: usize) -> Option<(u32, usize)> {
        BLOCK_SIZES
            .iter()
            .zip(&self.resident_blocks)
            .map(|(&t, &r)| (t, r as usize))
            .find(|&(_, resident)| resident >= blocks)
    }

    /// Let this GPU's streams reach `other`'s memory (a no-op for the same device).
    pub fn reach(&self, other: &Gpu) -> Result<(), CudaError> {
        if self.device == other.device {
            return Ok(());
        }
        let mut can = 0;
        cu!(cuDeviceCanAccessPeer(&mut can, self.device, other.device))?;
        if can == 0 {
            return Err(CudaError::NoPeerAccess {
                a: self.ordinal,
                b: other.ordinal,
            });
        }
        let _current = self.bind()?;
        // Pool allocations (every buffer here) are reachable from another device only
        // when the pool says so.
        let mut pool = std::ptr::null_mut();
        cu!(cuDeviceGetDefaultMemPool(&mut pool, other.device))?;
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.ordinal as i32,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        cu!(cuMemPoolSetAccess(pool, &access, 1))?;
        match cu!(cuCtxEnablePeerAccess(other.context, 0)) {
            Err(CudaError::Driver { code, .. })
                if code == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED as i32 =>
            {
                Ok(())
            }
            other => other,
        }
    }
}

impl Drop for Gpu {
    /// The primary context stays retained ([`PrimaryContext`]).
    fn drop(&mut self) {
        if let Ok(_current) = self.bind() {
            if !self.alloc_stream.is_null() {
                let _ = cu!(cuStreamSynchronize(self.alloc_stream));
                let _ = cu!(cuStreamDestroy_v2(self.alloc_stream));
            }
            if !self.module.is_null() {
                let _ = cu!(cuModuleUnload(self.module));
            }
        }
    }
}

fn device_name(device: sys::CUdevice) -> String {
    let mut buf = [0 as std::ffi::c_char; 128];
    if cu!(cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, device)).is_err() {
        return "unknown".into();
    }
    // SAFETY: the driver wrote a NUL-terminated name into `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
