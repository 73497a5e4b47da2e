//! Communicators and graphs behind opaque handles.
//!
//! A handle is the address of an object kept alive by a table of live handles. Every
//! call looks its handle up and holds a reference for the call's length: a NULL handle,
//! one already destroyed, or one never made is `oxcclInvalidArgument` rather than
//! undefined behaviour, and `oxcclCommDestroy` on one thread while another thread's call
//! runs frees the communicator only when that call ends. (A destroyed handle's address
//! may be reused by a later communicator, as a freed pointer may be in C.)

use crate::graph::Capturing;
use crate::result::{is_fatal, CError, OxcclResult};
use oxccl::platform::DeviceError;
use oxccl::{Communicator, Error, Rank};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// The C type behind `oxcclComm_t`: never constructed, only pointed to.
#[repr(C)]
pub struct OxcclComm {
    _opaque: [u8; 0],
}

/// The objects of one kind that C holds handles to.
pub struct Table<T> {
    live: LazyLock<Mutex<HashMap<usize, Arc<T>>>>,
    /// What C calls a handle of this table, for messages (`comm`, `graph`).
    what: &'static str,
}

impl<T> Table<T> {
    pub const fn new(what: &'static str) -> Self {
        Table {
            live: LazyLock::new(|| Mutex::new(HashMap::new())),
            what,
        }
    }

    /// Keep `value` alive and return its handle.
    pub fn insert(&self, value: Arc<T>) -> usize {
        let handle = Arc::as_ptr(&value) as usize;
        self.live.lock().insert(handle, value);
        handle
    }

    /// The object behind `handle`, held for the caller's call.
    pub fn get(&self, handle: usize) -> Result<Arc<T>, CError> {
        self.live
            .lock()
            .get(&handle)
            .cloned()
            .ok_or_else(|| self.unknown(handle))
    }

    /// Forget `handle`: the object lives on while calls still hold it.
    pub fn remove(&self, handle: usize) -> Result<Arc<T>, CError> {
        self.live
            .lock()
            .remove(&handle)
            .ok_or_else(|| self.unknown(handle))
    }

    fn unknown(&self, handle: usize) -> CError {
        match handle {
            0 => CError::invalid(format!("{} is NULL", self.what)),
            _ => CError::invalid(format!(
                "{} {handle:#x} is not a live handle (destroyed, or never returned by oxccl)",
                self.what
            )),
        }
    }
}

/// Every live communicator.
pub static COMMS: Table<Comm> = Table::new("comm");

/// One rank's communicator as C holds it.
pub struct Comm {
    pub inner: Communicator,
    state: Mutex<CommState>,
}

#[derive(Default)]
struct CommState {
    /// `oxcclCommFinalize` was called.
    finalized: bool,
    /// `oxcclCommDestroy` or `oxcclCommAbort` was called (calls deferred in a group
    /// still hold the communicator).
    closed: bool,
    /// The first failure that broke the communicator, as a call met it.
    failure: Option<CError>,
    /// Calls are recorded into a graph instead of run.
    capture: Option<Capturing>,
}

impl Comm {
    pub fn new(inner: Communicator) -> Self {
        Comm {
            inner,
            state: Mutex::new(CommState::default()),
        }
    }

    /// The communicator of `handle`.
    pub fn lookup(handle: *const OxcclComm) -> Result<Arc<Comm>, CError> {
        COMMS.get(handle as usize)
    }

    /// The communicator of `handle`, refused once finalized.
    pub fn usable(handle: *const OxcclComm) -> Result<Arc<Comm>, CError> {
        let comm = Self::lookup(handle)?;
        comm.check_usable()?;
        Ok(comm)
    }

    /// Refuse a call on a finalized or closed communicator.
    pub fn check_usable(&self) -> Result<(), CError> {
        let state = self.state.lock();
        if state.closed {
            return Err(CError::usage(format!(
                "rank {}'s communicator was destroyed before this deferred call ran",
                self.rank()
            )));
        }
        if state.finalized {
            return Err(CError::usage(format!(
                "rank {}'s communicator was finalized: only oxcclCommDestroy, oxcclCommAbort \
                 and the queries are allowed after oxcclCommFinalize",
                self.rank()
            )));
        }
        Ok(())
    }

    pub fn rank(&self) -> Rank {
        self.inner.rank()
    }

    pub fn size(&self) -> usize {
        self.inner.size()
    }

    /// Identifies the ranks that share this communicator's device: calls of one thread
    /// on communicators with the same key run as one framework group call.
    pub fn device_key(&self) -> usize {
        Arc::as_ptr(self.inner.framework().device()) as *const () as usize
    }

    /// Mark finalized; refused while a capture is open.
    pub fn finalize(&self) -> Result<(), CError> {
        let mut state = self.state.lock();
        if state.capture.is_some() {
            return Err(CError::usage(
                "a graph capture is open on this communicator: end it with \
                 oxcclGraphCaptureEnd before oxcclCommFinalize",
            ));
        }
        state.finalized = true;
        Ok(())
    }

    /// Mark closed (destroyed or aborted).
    pub fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        state.capture = None;
    }

    /// A call's outcome as C sees it; a failure that broke the communicator is kept for
    /// `oxcclCommGetAsyncError`.
    pub fn outcome(&self, result: Result<(), Error>) -> Result<(), CError> {
        result.map_err(|err| self.failed(&err))
    }

    /// An error of a call on this communicator as C sees it, kept for
    /// `oxcclCommGetAsyncError` when it broke the communicator.
    pub fn failed(&self, err: &Error) -> CError {
        let c = CError::from_oxccl(err, Some(self.rank()));
        if is_fatal(err) {
            self.keep_failure(&c);
        }
        c
    }

    /// Keep `c` for `oxcclCommGetAsyncError` unless an earlier failure is kept.
    fn keep_failure(&self, c: &CError) {
        self.state.lock().failure.get_or_insert_with(|| c.clone());
    }

    /// An error that keeps this rank from starting a call its peers make (its stream,
    /// a staging copy): the communicator is aborted, so that they return instead of
    /// waiting for it, and the error kept for `oxcclCommGetAsyncError`. A device already
    /// stopped (a peer's failure, an abort, met while this rank waited for its stream) is
    /// not this rank's failure: it is reported as it is ([`Comm::failed`]).
    pub fn failed_to_start(&self, err: &Error) -> CError {
        if let Error::Device(DeviceError::Aborted { .. }) = err {
            return self.failed(err);
        }
        let c = CError::from_oxccl(err, Some(self.rank()));
        self.inner.framework().abort_failed_call(c.message.clone());
        self.keep_failure(&c);
        c
    }

    /// What `oxcclCommGetAsyncError` reports.
    pub fn async_error(&self) -> OxcclResult {
        if let Some(failure) = &self.state.lock().failure {
            return failure.code;
        }
        // A failure no call of this rank met yet: a peer's, or an abort.
        match self.inner.framework().failure() {
            Some(err) => crate::result::code_of(&err, Some(self.inner.rank())),
            None => OxcclResult::Success,
        }
    }

    /// Run `f` on the communicator's capture slot.
    pub fn with_capture<R>(&self, f: impl FnOnce(&mut Option<Capturing>) -> R) -> R {
        f(&mut self.state.lock().capture)
    }

    /// Whether calls on this communicator are recorded instead of run.
    pub fn capturing(&self) -> bool {
        self.state.lock().capture.is_some()
    }
}
