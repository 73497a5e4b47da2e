//! Version, unique ids, communicators and errors: the non-collective functions.
//!
//! Communicators are created from [`Config::from_env`] (the `OXCCL_*` variables), with
//! the fields of an `oxcclConfig_t` on top for `oxcclCommInitRankConfig`. The config
//! struct is versioned as NCCL's is: `size`, `magic` and `version` first, set by
//! `OXCCL_CONFIG_INITIALIZER`; a struct this library does not know is refused, and a
//! field left at `OXCCL_CONFIG_UNDEF_INT` (or NULL) keeps the environment's value.

use crate::buffers::{read_array, write_out, Span};
use crate::handles::{Comm, OxcclComm, COMMS};
use crate::result::{error_string, guard, last_error, CError, OxcclResult};
use oxccl::framework::bootstrap::UNIQUE_ID_BYTES;
use oxccl::framework::config::MAX_BUFFSIZE_MIB;
use oxccl::framework::limits::{MAX_HOST_THREADS, MAX_RANKS};
use oxccl::{Communicator, Config, Rank, UniqueId};
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::Arc;
use std::time::Duration;

/// `oxcclUniqueId`: 128 bytes, NCCL's `ncclUniqueId` size.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct OxcclUniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

/// `OXCCL_CONFIG_MAGIC`.
pub const CONFIG_MAGIC: c_uint = 0x6f78_6363;
/// `OXCCL_CONFIG_VERSION`: 2 added `sharedBuffers`; a version 1 struct is still taken.
pub const CONFIG_VERSION: c_uint = 2;
/// `OXCCL_CONFIG_UNDEF_INT`: a field left unset.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;

/// `oxcclConfig_t`, version 2: version 1's fields, then `sharedBuffers` (the same layout
/// as the C struct's: version 1's ends on a pointer, so it has no trailing padding).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OxcclConfig {
    pub v1: OxcclConfigV1,
    pub shared_buffers: c_int,
}

/// `oxcclConfig_t` as version 1 had it, which a program built against that `oxccl.h`
/// passes.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OxcclConfigV1 {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub timeout_seconds: c_int,
    pub buffer_size_mib: c_int,
    pub host_threads: c_int,
    pub zero_copy: c_int,
    pub algo: *const c_char,
}

/// `OXCCL_VERSION_CODE` of this build: NCCL's `major * 10000 + minor * 100 + patch`.
pub fn version_code() -> c_int {
    let part = |s: &str| s.parse::<c_int>().unwrap_or(0);
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// `ncclGetVersion`.
///
/// # Safety
/// `version` points at a writable `int` (checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn oxcclGetVersion(version: *mut c_int) -> OxcclResult {
    guard("oxcclGetVersion", || {
        // SAFETY: `version` is writable when valid (this function's contract).
        unsafe { write_out("version", version, version_code()) }
    })
}

/// `ncclGetErrorString`.
#[no_mangle]
pub extern "C" fn oxcclGetErrorString(result: c_int) -> *const c_char {
    error_string(result).as_ptr()
}

/// `ncclGetLastError`: the calling thread's last error message, whatever `comm`.
#[no_mangle]
pub extern "C" fn oxcclGetLastError(_comm: *mut OxcclComm) -> *const c_char {
    last_error()
}

/// `ncclGetUniqueId`: start a job's root in this process (see [`UniqueId::new`]).
///
/// # Safety
/// `unique_id` points at a writable `oxcclUniqueId` (checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn oxcclGetUniqueId(unique_id: *mut OxcclUniqueId) -> OxcclResult {
    guard("oxcclGetUniqueId", || {
        // Checked before a root is started for an id that could not be handed out.
        Span::array("uniqueId", unique_id.cast_const(), 1)?;
        let id = UniqueId::new().map_err(|e| CError::from_oxccl(&e.into(), None))?;
        // SAFETY: `unique_id` is writable when valid (this function's contract).
        unsafe { write_out("uniqueId", unique_id, id_bytes(&id)?) }
    })
}

/// `id` as an `oxcclUniqueId`, refused when its text does not fit 128 bytes.
fn id_bytes(id: &UniqueId) -> Result<OxcclUniqueId, CError> {
    let text = id.to_string();
    if text.len() > UNIQUE_ID_BYTES {
        return Err(CError::new(
            OxcclResult::InternalError,
            format!(
                "the job's id {text:?} is {} bytes, more than oxcclUniqueId's {UNIQUE_ID_BYTES}",
                text.len()
            ),
        ));
    }
    let mut out = OxcclUniqueId {
        internal: [0; UNIQUE_ID_BYTES],
    };
    for (o, b) in out.internal.iter_mut().zip(id.to_bytes()) {
        *o = b as c_char;
    }
    Ok(out)
}

/// The job's id back from an `oxcclUniqueId`.
fn id_of(raw: &OxcclUniqueId) -> Result<UniqueId, CError> {
    let bytes: Vec<u8> = raw.internal.iter().map(|&c| c as u8).collect();
    UniqueId::from_bytes(&bytes).map_err(|e| {
        CError::invalid(format!(
            "commId is not an id from oxcclGetUniqueId: {e}; hand every rank the id rank 0 got"
        ))
    })
}

/// `nranks` and `rank` as a communicator's size and rank.
fn size_and_rank(nranks: c_int, rank: c_int) -> Result<(usize, Rank), CError> {
    let n = usize::try_from(nranks)
        .ok()
        .filter(|&n| (1..=MAX_RANKS).contains(&n))
        .ok_or_else(|| CError::invalid(format!("nranks {nranks}: pass 1 to {MAX_RANKS}")))?;
    let r = usize::try_from(rank)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| CError::invalid(format!("rank {rank}: pass 0 to {}", n - 1)))?;
    Ok((n, r))
}

/// The environment's configuration, `algo` overriding `OXCCL_ALGO` when given.
fn env_config(algo: Option<&str>) -> Result<Config, CError> {
    let config = Config::from_lookup(|var| match (var, algo) {
        ("OXCCL_ALGO", Some(a)) => Some(a.to_string()),
        _ => std::env::var(var).ok(),
    })
    .map_err(|e| CError::from_oxccl(&e.into(), None))?;
    Ok(config)
}

/// `comm` as C holds it, refused when its device does not run calls (`sim` records
/// them: a C caller would get no data back). Pointers are host memory, or the device's
/// when it offers user memory by address (see [`crate::side`]).
fn admitted(comm: Communicator) -> Result<Comm, CError> {
    let device = comm.framework().device();
    if !device.capabilities().executes {
        return Err(CError::invalid(format!(
            "OXCCL_DEVICE={}: this device records calls without running them; the C ABI \
             runs on the host device or cuda",
            device.kind()
        )));
    }
    Ok(Comm::new(comm))
}

/// Refuse to create communicators when no algorithm is linked in: what a static link
/// that dropped the algorithms' registrations (objects nothing references) leaves.
fn check_linked() -> Result<(), CError> {
    let registry = oxccl::registry().map_err(|e| CError::from_oxccl(&e, None))?;
    if registry.executors().next().is_none() {
        return Err(CError::usage(
            "no collective algorithm is linked into this program: link liboxccl_capi.a \
             whole (-Wl,--whole-archive liboxccl_capi.a -Wl,--no-whole-archive), or link \
             liboxccl_capi.so",
        ));
    }
    Ok(())
}

/// Register `comm` and write its handle through `out`.
///
/// # Safety
/// As [`write_out`]'s.
unsafe fn hand_out(out: *mut *mut OxcclComm, comm: Communicator) -> Result<(), CError> {
    let handle = COMMS.insert(Arc::new(admitted(comm)?));
    // SAFETY: this function's contract.
    unsafe { write_out("comm", out, handle as *mut OxcclComm) }
}

/// `ncclCommInitRank`.
///
/// # Safety
/// `comm` points at a writable `oxcclComm_t` (checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn oxcclCommInitRank(
    comm: *mut *mut OxcclComm,
    nranks: c_int,
    comm_id: OxcclUniqueId,
    rank: c_int,
) -> OxcclResult {
    guard("oxcclCommInitRank", || {
        // SAFETY: `comm` is writable when valid (this function's contract).
        unsafe { init_rank(comm, nranks, &comm_id, rank, None) }
    })
}

/// `ncclCommInitRankConfig`; a NULL `config` is [`oxcclCommInitRank`].
///
/// # Safety
/// As [`oxcclCommInitRank`]; `config` is NULL or points at an `oxcclConfig_t` whose
/// `algo`, when set, is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn oxcclCommInitRankConfig(
    comm: *mut *mut OxcclComm,
    nranks: c_int,
    comm_id: OxcclUniqueId,
    rank: c_int,
    config: *const OxcclConfig,
) -> OxcclResult {
    guard("oxcclCommInitRankConfig", || {
        let config = match config.is_null() {
            true => None,
            // SAFETY: a readable config (this function's contract).
            false => Some(unsafe { read_config(config) }?),
        };
        // SAFETY: `comm` is writable and `config->algo` a string when valid (this
        // function's contract).
        unsafe { init_rank(comm, nranks, &comm_id, rank, config) }
    })
}

/// Join the job of `comm_id` and hand the communicator out through `out`.
///
/// # Safety
/// `out` as [`write_out`]'s; `config.algo` NULL or a NUL-terminated string.
unsafe fn init_rank(
    out: *mut *mut OxcclComm,
    nranks: c_int,
    comm_id: &OxcclUniqueId,
    rank: c_int,
    config: Option<OxcclConfig>,
) -> Result<(), CError> {
    // SAFETY: this function's contract.
    unsafe { write_out("comm", out, std::ptr::null_mut()) }?;
    let (n, r) = size_and_rank(nranks, rank)?;
    let id = id_of(comm_id)?;
    let config = match config {
        // SAFETY: this function's contract.
        Some(c) => unsafe { configured(&c) }?,
        None => env_config(None)?,
    };
    check_linked()?;
    let config = on_current_gpu(config);
    let comm =
        Communicator::init_rank(&id, n, r, config).map_err(|e| CError::from_oxccl(&e, Some(r)))?;
    // SAFETY: this function's contract.
    unsafe { hand_out(out, comm) }
}

/// NCCL's placement of `ncclCommInitRank`: on cuda, a rank given no placement
/// (`OXCCL_CUDA_DEVICES`) runs on the calling thread's current CUDA device
/// (`cudaSetDevice`), when the caller made one current. Otherwise the backend's own
/// placement stands (round-robin from the process's `LOCAL_RANK`); a driver that cannot
/// be asked is reported when the backend opens.
fn on_current_gpu(mut config: Config) -> Config {
    if config.device == "cuda" && config.gpus.is_empty() {
        if let Ok(Some(ordinal)) = oxccl::platform::cuda::current_gpu() {
            config.gpus = vec![ordinal];
        }
    }
    config
}

/// The `oxcclConfig_t` at `ptr`, refused unless this library knows its size, magic and
/// version.
///
/// # Safety
/// `ptr`, when not NULL and aligned, points at a readable `size_t`, and at a readable
/// `oxcclConfig_t` when that says so.
unsafe fn read_config(ptr: *const OxcclConfig) -> Result<OxcclConfig, CError> {
    Span::bytes(
        "config",
        ptr.cast(),
        size_of::<usize>(),
        align_of::<OxcclConfig>(),
    )?;
    // SAFETY: not NULL and aligned (checked); the size field comes first in every
    // version, readable by the caller's promise.
    let size = unsafe { ptr.cast::<usize>().read() };
    let (config, expected) = match size {
        // SAFETY: the caller's struct has this version's size (checked), aligned (checked).
        s if s == size_of::<OxcclConfig>() => (unsafe { ptr.read() }, CONFIG_VERSION),
        // SAFETY: as above, the version 1 layout, a prefix of this one.
        s if s == size_of::<OxcclConfigV1>() => {
            let v1 = unsafe { ptr.cast::<OxcclConfigV1>().read() };
            let shared_buffers = CONFIG_UNDEF_INT;
            (OxcclConfig { v1, shared_buffers }, 1)
        }
        _ => {
            return Err(CError::invalid(format!(
                "config->size is {size}, but this library's oxcclConfig_t (version \
                 {CONFIG_VERSION}) has {} bytes, and version 1's had {}: start from \
                 OXCCL_CONFIG_INITIALIZER of the oxccl.h this library came with",
                size_of::<OxcclConfig>(),
                size_of::<OxcclConfigV1>()
            )))
        }
    };
    let OxcclConfig { v1: head, .. } = config;
    if head.magic != CONFIG_MAGIC {
        return Err(CError::invalid(format!(
            "config->magic is {:#x}, not OXCCL_CONFIG_MAGIC ({CONFIG_MAGIC:#x}): start from \
             OXCCL_CONFIG_INITIALIZER",
            head.magic
        )));
    }
    if head.version != expected {
        return Err(CError::invalid(format!(
            "config->version is {}, but a struct of {size} bytes is version {expected} \
             (this library knows versions 1 and {CONFIG_VERSION})",
            head.version
        )));
    }
    Ok(config)
}

/// The environment's configuration with `c`'s set fields on top.
///
/// # Safety
/// `c.algo` is NULL or a NUL-terminated string.
unsafe fn configured(config: &OxcclConfig) -> Result<Config, CError> {
    let c = &config.v1;
    let algo = match c.algo.is_null() {
        true => None,
        // SAFETY: a NUL-terminated string, the caller's promise (documented in oxccl.h).
        false => Some(
            unsafe { CStr::from_ptr(c.algo) }
                .to_str()
                .map_err(|_| CError::invalid("config->algo is not UTF-8"))?,
        ),
    };
    let shared_buffers = config.shared_buffers;
    let mut config = env_config(algo)?;
    // Calls complete before they return either way: a non-blocking communicator never
    // sees oxcclInProgress, which NCCL's contract allows. The value is only checked.
    field("blocking", c.blocking, 0, 1)?;
    if let Some(t) = field("timeoutSeconds", c.timeout_seconds, 1, 1_000_000_000)? {
        config.exec_timeout = Duration::from_secs(t as u64);
    }
    let max_mib = c_int::try_from(MAX_BUFFSIZE_MIB).unwrap_or(c_int::MAX);
    if let Some(mib) = field("bufferSizeMiB", c.buffer_size_mib, 1, max_mib)? {
        config.ccl_buffer_bytes = (mib as usize) << 20;
    }
    let max_threads = c_int::try_from(MAX_HOST_THREADS).unwrap_or(c_int::MAX);
    if let Some(t) = field("hostThreads", c.host_threads, 0, max_threads)? {
        config.host_threads = t as usize;
    }
    if let Some(z) = field("zeroCopy", c.zero_copy, 0, 1)? {
        config.zero_copy = z == 1;
    }
    if let Some(s) = field("sharedBuffers", shared_buffers, 0, 1)? {
        config.shared_buffers = s == 1;
    }
    Ok(config)
}

/// An int field of the config: `None` when unset, else its value within `min..=max`.
fn field(name: &str, value: c_int, min: c_int, max: c_int) -> Result<Option<c_int>, CError> {
    match value {
        CONFIG_UNDEF_INT => Ok(None),
        v if (min..=max).contains(&v) => Ok(Some(v)),
        v => Err(CError::invalid(format!(
            "config->{name} is {v}: pass {min} to {max}, or leave it OXCCL_CONFIG_UNDEF_INT"
        ))),
    }
}

/// `ncclCommInitAll`: `ndev` ranks in this process.
///
/// # Safety
/// `comms` points at `ndev` writable `oxcclComm_t`; `devlist` is NULL or holds `ndev` ints.
#[no_mangle]
pub unsafe extern "C" fn oxcclCommInitAll(
    comms: *mut *mut OxcclComm,
    ndev: c_int,
    devlist: *const c_int,
) -> OxcclResult {
    guard("oxcclCommInitAll", || {
        let (n, _) = size_and_rank(ndev, 0)
            .map_err(|_| CError::invalid(format!("ndev {ndev}: pass 1 to {MAX_RANKS}")))?;
        let out = Span::array("comms", comms.cast_const(), n)?;
        // SAFETY: `devlist` holds `ndev` ints when valid (this function's contract).
        let gpus = unsafe { check_devlist(devlist, n) }?;
        check_linked()?;
        let mut config = env_config(None)?;
        if !gpus.is_empty() {
            config.gpus = gpus;
        }
        let made = Communicator::init_all(n, config).map_err(|e| CError::from_oxccl(&e, None))?;
        let admitted = made
            .into_iter()
            .map(admitted)
            .collect::<Result<Vec<Comm>, CError>>()?;
        for (i, comm) in admitted.into_iter().enumerate() {
            let handle = COMMS.insert(Arc::new(comm));
            // SAFETY: `out` holds `n` aligned handles (checked), writable by the caller's
            // promise; `i < n`.
            unsafe {
                (out.addr as *mut *mut OxcclComm)
                    .add(i)
                    .write(handle as *mut OxcclComm)
            };
        }
        Ok(())
    })
}

/// NULL (empty), or `n` distinct non-negative device numbers: rank `i`'s CUDA device on
/// cuda (the placement `OXCCL_CUDA_DEVICES` gives otherwise; several ranks on one GPU
/// come from there, as NCCL's devlist refuses repeats), ignored by the host device.
///
/// # Safety
/// `devlist`, when not NULL and aligned, points at `n` readable ints.
unsafe fn check_devlist(devlist: *const c_int, n: usize) -> Result<Vec<usize>, CError> {
    if devlist.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: `n` readable ints when valid (this function's contract).
    let list = unsafe { read_array("devlist", devlist, n) }?;
    let mut seen = list.clone();
    seen.sort_unstable();
    if seen.first().is_some_and(|&d| d < 0) || seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(CError::invalid(format!(
            "devlist {list:?}: pass NULL, or {n} distinct non-negative device numbers"
        )));
    }
    Ok(list.into_iter().map(|d| d as usize).collect())
}

/// `ncclCommFinalize`: calls are blocking, so nothing is outstanding; later calls but
/// the queries and destroy/abort are refused.
///
/// # Safety
/// `comm` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclCommFinalize(comm: *mut OxcclComm) -> OxcclResult {
    guard("oxcclCommFinalize", || Comm::usable(comm)?.finalize())
}

/// `ncclCommDestroy`.
///
/// # Safety
/// `comm` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclCommDestroy(comm: *mut OxcclComm) -> OxcclResult {
    guard("oxcclCommDestroy", || {
        COMMS.remove(comm as usize)?.close();
        Ok(())
    })
}

/// `ncclCommAbort`: stop the communicator everywhere, then free it.
///
/// # Safety
/// `comm` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclCommAbort(comm: *mut OxcclComm) -> OxcclResult {
    guard("oxcclCommAbort", || {
        let comm = COMMS.remove(comm as usize)?;
        comm.inner.abort();
        comm.close();
        Ok(())
    })
}

/// `ncclCommGetAsyncError`.
///
/// # Safety
/// `comm` is a handle from oxccl (checked); `async_error` points at a writable
/// `oxcclResult_t` (checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn oxcclCommGetAsyncError(
    comm: *mut OxcclComm,
    async_error: *mut OxcclResult,
) -> OxcclResult {
    guard("oxcclCommGetAsyncError", || {
        let comm = Comm::lookup(comm)?;
        // SAFETY: `async_error` is writable when valid (this function's contract).
        unsafe { write_out("asyncError", async_error, comm.async_error()) }
    })
}

/// `ncclCommCount`.
///
/// # Safety
/// `comm` is a handle from oxccl (checked); `count` points at a writable `int` (checked).
#[no_mangle]
pub unsafe extern "C" fn oxcclCommCount(comm: *const OxcclComm, count: *mut c_int) -> OxcclResult {
    guard("oxcclCommCount", || {
        let comm = Comm::lookup(comm)?;
        // The size is at most MAX_RANKS (4096): it fits an int.
        // SAFETY: `count` is writable when valid (this function's contract).
        unsafe { write_out("count", count, comm.size() as c_int) }
    })
}

/// `ncclCommUserRank`.
///
/// # Safety
/// `comm` is a handle from oxccl (checked); `rank` points at a writable `int` (checked).
#[no_mangle]
pub unsafe extern "C" fn oxcclCommUserRank(
    comm: *const OxcclComm,
    rank: *mut c_int,
) -> OxcclResult {
    guard("oxcclCommUserRank", || {
        let comm = Comm::lookup(comm)?;
        // SAFETY: `rank` is writable when valid (this function's contract).
        unsafe { write_out("rank", rank, comm.rank() as c_int) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_code_is_nccls_encoding_of_the_crate_version() {
        assert_eq!(version_code(), 100, "0.1.0");
    }

    #[test]
    fn an_id_round_trips_through_128_bytes() {
        let id: UniqueId = "oxccl1-4-000102030405060708090a0b0c0d0e0f@127.0.0.1:4000"
            .parse()
            .unwrap();
        assert_eq!(id_of(&id_bytes(&id).unwrap()).unwrap(), id);
        let mut junk = id_bytes(&id).unwrap();
        junk.internal[0] = b'x' as c_char;
        assert!(id_of(&junk)
            .unwrap_err()
            .message
            .contains("oxcclGetUniqueId"));
    }

    /// A program built against version 1's `oxccl.h` still configures a communicator;
    /// its struct has no `sharedBuffers`, which stays unset.
    #[test]
    fn a_version_1_config_is_taken_and_a_mislabelled_one_refused() {
        let v1 = OxcclConfigV1 {
            size: size_of::<OxcclConfigV1>(),
            magic: CONFIG_MAGIC,
            version: 1,
            blocking: CONFIG_UNDEF_INT,
            timeout_seconds: 7,
            buffer_size_mib: CONFIG_UNDEF_INT,
            host_threads: CONFIG_UNDEF_INT,
            zero_copy: 0,
            algo: std::ptr::null(),
        };
        // SAFETY: a live, aligned struct of the size it says.
        let read = unsafe { read_config((&v1 as *const OxcclConfigV1).cast()) }.unwrap();
        assert_eq!((read.v1.timeout_seconds, read.v1.zero_copy), (7, 0));
        assert_eq!(read.shared_buffers, CONFIG_UNDEF_INT);
        let v2 = OxcclConfig {
            v1: OxcclConfigV1 {
                size: size_of::<OxcclConfig>(),
                version: CONFIG_VERSION,
                ..v1
            },
            shared_buffers: 1,
        };
        // SAFETY: as above.
        let read = unsafe { read_config(&v2) }.unwrap();
        assert_eq!(read.shared_buffers, 1);
        let mislabelled = OxcclConfigV1 { version: 2, ..v1 };
        // SAFETY: as above.
        let err = unsafe { read_config((&mislabelled as *const OxcclConfigV1).cast()) };
        let message = err.unwrap_err().message;
        assert!(message.contains("is version 1"), "{message}");
    }

    #[test]
    fn config_fields_are_checked_by_name() {
        assert_eq!(field("zeroCopy", CONFIG_UNDEF_INT, 0, 1).unwrap(), None);
        assert_eq!(field("zeroCopy", 1, 0, 1).unwrap(), Some(1));
        let err = field("timeoutSeconds", 0, 1, 10).unwrap_err();
        assert!(
            err.message.contains("config->timeoutSeconds is 0"),
            "{}",
            err.message
        );
    }
}
