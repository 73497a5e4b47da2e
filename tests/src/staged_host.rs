//! `staged-host`: a backend kind for tests, registered by this crate (so by every test
//! binary and rank program that links it): the staged device
//! ([`oxccl::platform::staged`]) with host memory standing for a GPU's. It is what the
//! cuda backend runs for the ranks of a job of processes, with `memcpy` where a GPU has
//! its copies across the bus; CI has no GPU, so the framework, the transports and real
//! processes drive that path through this kind. [`crate::execute_on`] binds its calls as
//! device spans (`UserBuffers::Device`) over the test's host buffers.

use oxccl::platform::registry::Memory;
use oxccl::platform::staged::{HostAddressed, StagedDevice};
use oxccl::{Communicator, DeviceSpan, UserBuffers};
use std::sync::Arc;

/// The kind's name, for `Config::device` or `OXCCL_DEVICE`.
pub const STAGED_HOST: &str = "staged-host";

oxccl::platform::register_backend!(
    STAGED_HOST,
    "tests only: the cuda backend's staging across processes, host memory for a GPU's",
    Memory::PerRank,
    |config| {
        // SAFETY: device spans reach this kind only through `device_binding`, which
        // spans buffers the caller borrows for the whole call.
        let copies = unsafe { HostAddressed::new() };
        Ok(Arc::new(StagedDevice::new(
            STAGED_HOST,
            config,
            Box::new(copies),
        )?))
    }
);

/// Whether `comm` runs on the `staged-host` kind.
pub fn runs_staged(comm: &Communicator) -> bool {
    comm.framework().device().kind() == STAGED_HOST
}

/// `bytes` as a span of "device memory" for the `staged-host` kind: its address and
/// length.
pub fn span_of(bytes: &[u8]) -> DeviceSpan {
    DeviceSpan {
        addr: bytes.as_ptr() as u64,
        len: bytes.len(),
    }
}

/// `input` and `out` as a call's device buffers (`out` alone when `in_place`): the
/// spans of host memory the `staged-host` kind copies from and back to. Both borrows
/// outlive the call made with the binding.
pub fn device_binding<'a>(in_place: bool, input: &'a [u8], out: &'a mut [u8]) -> UserBuffers<'a> {
    let output = span_of(out);
    let input = match in_place {
        true => output,
        false => span_of(input),
    };
    UserBuffers::Device {
        input,
        output,
        in_place,
    }
}
