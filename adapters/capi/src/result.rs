//! Result codes (NCCL's numbering), the calling thread's last error, and the guard every
//! exported function runs in.
//!
//! A failing call returns its code and leaves a message for `oxcclGetLastError`: what the
//! call was, what was wrong, and the causes of an oxccl error in order (the framework's
//! messages say what to do). [`guard`] catches a panic of the body and reports it as
//! `oxcclInternalError`, so unwinding never reaches C.

use oxccl::platform::transport::shm::ShmError;
use oxccl::platform::transport::tcp::TcpError;
use oxccl::platform::{AbortCause, DeviceError};
use oxccl::{Error, Rank};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `oxcclResult_t`: NCCL's `ncclResult_t` numbering. `oxcclInProgress` (7) is never
/// returned, since every call blocks, so it has no variant here.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OxcclResult {
    Success = 0,
    UnhandledCudaError = 1,
    SystemError = 2,
    InternalError = 3,
    InvalidArgument = 4,
    InvalidUsage = 5,
    RemoteError = 6,
}

/// A failed call: its code and what to tell the caller.
#[derive(Clone, Debug)]
pub struct CError {
    pub code: OxcclResult,
    pub message: String,
}

impl CError {
    pub fn new(code: OxcclResult, message: impl Into<String>) -> Self {
        CError {
            code,
            message: message.into(),
        }
    }

    /// `oxcclInvalidArgument` with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        CError::new(OxcclResult::InvalidArgument, message)
    }

    /// `oxcclInvalidUsage` with `message`.
    pub fn usage(message: impl Into<String>) -> Self {
        CError::new(OxcclResult::InvalidUsage, message)
    }

    /// `err`, met by `rank` (when known: it tells a failure of this rank from a peer's),
    /// with its causes.
    pub fn from_oxccl(err: &Error, rank: Option<Rank>) -> Self {
        CError::new(
            code_of(err, rank),
            oxccl::framework::error::with_causes(err),
        )
    }
}

/// Whether `err` leaves the communicator broken (what `oxcclCommGetAsyncError` reports),
/// as opposed to a call refused with the communicator unaffected.
pub fn is_fatal(err: &Error) -> bool {
    match err {
        Error::Aborted { .. }
        | Error::RankFailed { .. }
        | Error::CallTimeout { .. }
        | Error::ExecutorStuck { .. }
        | Error::WaitNeverPosted { .. } => true,
        Error::Device(d) => !matches!(d, DeviceError::Busy { .. }),
        _ => false,
    }
}

/// The `ncclResult_t` an oxccl error maps to. Errors of the caller's arguments are
/// `InvalidArgument`; calls that cannot run as made (ranks disagreeing, a rank busy, a
/// communicator aborted by its own user, no executor for the shape) `InvalidUsage`; a
/// failure that another rank caused or suffered `RemoteError`; the system refusing
/// (sockets, shared memory, memory) `SystemError`; a wrong program of an executor
/// `InternalError`.
pub fn code_of(err: &Error, rank: Option<Rank>) -> OxcclResult {
    use OxcclResult::*;
    match err {
        Error::Arg(_)
        | Error::Config(_)
        | Error::UnknownOperator { .. }
        | Error::UnknownAlgorithm { .. }
        | Error::AlgoFile(_) => InvalidArgument,
        Error::Bootstrap(b) => bootstrap_code(b),
        Error::NoTransport { .. } => SystemError,
        Error::Mismatch { .. }
        | Error::PeerRefused { .. }
        | Error::Busy { .. }
        | Error::NoExecutor { .. }
        | Error::Unsupported { .. }
        | Error::NoLink { .. }
        | Error::Disconnected { .. }
        | Error::TooManyTasks { .. }
        | Error::CaptureMismatch { .. }
        | Error::GraphBinding { .. } => InvalidUsage,
        Error::CallTimeout { .. } | Error::WaitNeverPosted { .. } => RemoteError,
        Error::Registry(_)
        | Error::PlanType { .. }
        | Error::PutOnlyLink { .. }
        | Error::Nonconforming { .. }
        | Error::BadProgram { .. }
        | Error::AsymmetricScratch { .. }
        | Error::ExecutorStuck { .. }
        | Error::GraphCheck { .. } => InternalError,
        Error::RankFailed {
            rank: failed,
            cause,
        } => match rank {
            Some(me) if me == *failed => code_of(cause, rank),
            _ => RemoteError,
        },
        Error::Aborted { cause } => code_of(cause, rank),
        Error::Device(d) => device_code(d, rank),
    }
}

fn bootstrap_code(err: &oxccl::framework::bootstrap::BootstrapError) -> OxcclResult {
    use oxccl::framework::bootstrap::BootstrapError as B;
    match err {
        B::BadId { .. } | B::BadRank { .. } => OxcclResult::InvalidArgument,
        B::Refused { .. } | B::ScatteredHost { .. } => OxcclResult::InvalidUsage,
        B::Protocol { .. } => OxcclResult::RemoteError,
        _ => OxcclResult::SystemError,
    }
}

fn device_code(err: &DeviceError, rank: Option<Rank>) -> OxcclResult {
    use OxcclResult::*;
    match err {
        DeviceError::Aborted { cause, .. } => match cause {
            AbortCause::UserAbort { rank: r } | AbortCause::CallFailed { rank: r, .. }
                if Some(*r) == rank =>
            {
                InvalidUsage
            }
            _ => RemoteError,
        },
        DeviceError::Busy { .. } | DeviceError::Refused { .. } => InvalidUsage,
        // Memory that is not from oxcclMemAlloc, in a job that maps user buffers.
        DeviceError::NotShared { .. } => InvalidArgument,
        DeviceError::Config(oxccl::platform::ConfigFault::NoSharedMemory { .. }) => InvalidUsage,
        DeviceError::WaitTimeout { .. }
        | DeviceError::GateTimeout { .. }
        | DeviceError::FenceTimeout { .. } => RemoteError,
        DeviceError::Shm(e) => shm_code(e),
        DeviceError::Tcp(e) => tcp_code(e),
        DeviceError::Alloc { .. } => SystemError,
        // A capture that began between a grouped call and its wait: as at the call.
        DeviceError::Cuda(oxccl::platform::cuda::CudaError::StreamCapturing { .. }) => InvalidUsage,
        DeviceError::Cuda(_) => UnhandledCudaError,
        _ => InternalError,
    }
}

/// A peer that never made its segment, or died, is remote; the system refusing this
/// process a segment is a system error.
fn shm_code(err: &ShmError) -> OxcclResult {
    match err {
        ShmError::Missing { .. } | ShmError::OwnerGone { .. } | ShmError::Unmapped { .. } => {
            OxcclResult::RemoteError
        }
        _ => OxcclResult::SystemError,
    }
}

/// Only setting the transport up is this process's own failure; the rest is a peer or
/// the network.
fn tcp_code(err: &TcpError) -> OxcclResult {
    match err {
        TcpError::Setup { .. } => OxcclResult::SystemError,
        _ => OxcclResult::RemoteError,
    }
}

thread_local! {
    /// The calling thread's last error message, NUL-terminated for `oxcclGetLastError`.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `message` as this thread's last error.
fn set_last_error(message: &str) {
    // An interior NUL would end the C string early: show it as an escape instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// This thread's last error message; the pointer stays valid until this thread's next
/// failing call (the message lives in the thread's storage).
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// Run `body`, the body of exported function `name`: its result as a code, a failure's
/// message recorded for `oxcclGetLastError` (prefixed with `name`), and a panic caught
/// and reported as `oxcclInternalError`.
pub fn guard(name: &str, body: impl FnOnce() -> Result<(), CError>) -> OxcclResult {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        Err(CError::new(
            OxcclResult::InternalError,
            format!(
                "internal error (a panic, caught at the C boundary): {what}; the call's \
                 effects are unknown: abort the communicator"
            ),
        ))
    });
    match outcome {
        Ok(()) => OxcclResult::Success,
        Err(err) => {
            set_last_error(&format!("{name}: {}", err.message));
            err.code
        }
    }
}

/// `ncclGetErrorString`'s texts, one per code.
pub fn error_string(code: i32) -> &'static CStr {
    match code {
        0 => c"no error",
        1 => c"unhandled cuda error (run with OXCCL_LOG=debug for details)",
        2 => c"unhandled system error (run with OXCCL_LOG=debug for details)",
        3 => c"internal error - please report this issue to the oxccl developers",
        4 => c"invalid argument (see oxcclGetLastError for details)",
        5 => c"invalid usage (see oxcclGetLastError for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"operation in progress",
        _ => c"unknown result code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn last() -> String {
        // SAFETY: `last_error` points at this thread's NUL-terminated message, unchanged
        // until the next failing call.
        unsafe { CStr::from_ptr(last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        let code = guard("oxcclTest", || panic!("boom {}", 7));
        assert_eq!(code, OxcclResult::InternalError);
        let text = last();
        assert!(text.starts_with("oxcclTest: internal error"), "{text}");
        assert!(text.contains("boom 7"), "{text}");
    }

    #[test]
    fn a_failure_leaves_its_message_and_success_keeps_it() {
        let code = guard("oxcclTest", || Err(CError::invalid("bad\0thing")));
        assert_eq!(code, OxcclResult::InvalidArgument);
        assert_eq!(last(), "oxcclTest: bad\\0thing");
        assert_eq!(guard("oxcclTest", || Ok(())), OxcclResult::Success);
        assert_eq!(last(), "oxcclTest: bad\\0thing");
    }

    #[test]
    fn failures_of_peers_are_remote_and_own_aborts_are_usage() {
        let peer = Error::RankFailed {
            rank: 2,
            cause: Arc::new(Error::Busy { rank: 2 }),
        };
        assert_eq!(code_of(&peer, Some(0)), OxcclResult::RemoteError);
        assert_eq!(code_of(&peer, Some(2)), OxcclResult::InvalidUsage);
        let own = Error::Device(DeviceError::Aborted {
            rank: 1,
            cause: AbortCause::UserAbort { rank: 1 },
        });
        assert_eq!(code_of(&own, Some(1)), OxcclResult::InvalidUsage);
        assert_eq!(code_of(&own, Some(0)), OxcclResult::RemoteError);
        assert!(is_fatal(&own));
        assert!(!is_fatal(&Error::Busy { rank: 0 }));
    }

    #[test]
    fn memory_peers_cannot_map_is_an_argument_error() {
        let heap = Error::Device(DeviceError::NotShared {
            rank: 0,
            buf: oxccl::Buf::Input,
        });
        assert_eq!(code_of(&heap, Some(0)), OxcclResult::InvalidArgument);
        let unmapped = Error::Device(DeviceError::Shm(ShmError::Unmapped {
            name: "/oxccl-x-r1-u0".into(),
            waited: std::time::Duration::from_secs(1),
        }));
        assert_eq!(code_of(&unmapped, Some(0)), OxcclResult::RemoteError);
    }

    #[test]
    fn every_code_has_its_own_text() {
        let texts: Vec<&CStr> = (0..9).map(error_string).collect();
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
