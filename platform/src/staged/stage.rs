//! A submission's device buffers staged in host memory: copied in before the host device
//! runs it, what it wrote copied back after.

use super::{StageCopies, StagedProgram};
use crate::device::{DeviceSpan, Submission, UserBuffers};
use crate::error::{AllocFault, DeviceError};
use crate::ir::Rank;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of staging memory: a cache line, more than any reduction needs.
const ALIGN: usize = 64;

/// Zeroed host memory of a fixed length, aligned to [`ALIGN`], freed on drop.
pub(super) struct HostBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `HostBytes` owns its allocation; `&self` gives shared reads, `&mut self` the
// only writes.
unsafe impl Send for HostBytes {}
// SAFETY: as above.
unsafe impl Sync for HostBytes {}

impl HostBytes {
    /// `len` zeroed bytes (the allocator maps large zeroed blocks lazily, so bytes a call
    /// never reaches cost no copy and, mostly, no memory).
    pub(super) fn zeroed(len: usize) -> Result<Self, DeviceError> {
        let alloc = |fault| DeviceError::Alloc {
            what: "host staging buffer",
            bytes: len,
            fault,
        };
        if len == 0 {
            // A dangling, aligned, never dereferenced pointer: an empty slice's address.
            let ptr = NonNull::new(ALIGN as *mut u8).expect("non-zero");
            return Ok(HostBytes { ptr, len });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|e| alloc(e.into()))?;
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| alloc(AllocFault::OutOfMemory))?;
        Ok(HostBytes { ptr, len })
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised (zeroed) bytes at `ptr`, owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        if self.len > 0 {
            let layout = Layout::from_size_align(self.len, ALIGN).expect("allocated with it");
            // SAFETY: allocated by `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// The host copies of one submission's device buffers, and where its result goes back.
pub(super) struct Stage {
    rank: Rank,
    /// Out of place: the input's copy (empty in place).
    input: HostBytes,
    /// The output's copy (in place: the one buffer's).
    output: HostBytes,
    in_place: bool,
    /// Where the output's first `back` bytes go once the call succeeded.
    output_span: DeviceSpan,
    back: usize,
}

impl Stage {
    /// Copy in what the program may read of `input` and `output` (all of the output it
    /// reaches unless it overwrites all of it, so bytes it leaves alone come back as they
    /// were).
    pub(super) fn copy_in(
        copies: &dyn StageCopies,
        program: &StagedProgram,
        rank: Rank,
        input: DeviceSpan,
        output: DeviceSpan,
        in_place: bool,
    ) -> Result<Self, DeviceError> {
        let (read_in, reach_out) = match program.whole_buffers {
            true => (input.len, output.len),
            false => program.extent,
        };
        let mut stage = Stage {
            rank,
            input: HostBytes::zeroed(if in_place { 0 } else { input.len })?,
            output: HostBytes::zeroed(output.len)?,
            in_place,
            output_span: output,
            back: reach_out,
        };
        if in_place {
            // One buffer read and written through both names: what either reaches.
            stage.back = read_in.max(reach_out);
            let reach = stage.back;
            load(copies, rank, output, &mut stage.output, reach)?;
        } else {
            load(copies, rank, input, &mut stage.input, read_in)?;
            if program.preload_output || program.whole_buffers {
                load(copies, rank, output, &mut stage.output, reach_out)?;
            }
        }
        Ok(stage)
    }

    /// The host buffers bound for the host device.
    ///
    /// # Safety
    ///
    /// The buffers live as long as `self`: the caller keeps `self` alive, and does not
    /// touch it, until whatever runs on the returned bindings ended.
    pub(super) unsafe fn bindings<'a>(&mut self) -> UserBuffers<'a> {
        let output = self.output.as_mut_slice();
        // SAFETY: the caller's promise above; the two allocations are distinct.
        let output: &'a mut [u8] = unsafe { &mut *(output as *mut [u8]) };
        if self.in_place {
            return UserBuffers::InPlace(output);
        }
        let input: &'a [u8] = unsafe { &*(self.input.as_slice() as *const [u8]) };
        UserBuffers::OutOfPlace { input, output }
    }

    /// After the call succeeded: copy what it wrote back to the device output.
    pub(super) fn copy_back(&self, copies: &dyn StageCopies) -> Result<(), DeviceError> {
        if self.back == 0 {
            return Ok(());
        }
        let span = self
            .output_span
            .slice(0, self.back)
            .expect("checked binding");
        copies.to_device(self.rank, &self.output.as_slice()[..self.back], span)
    }
}

/// Copy the first `len` bytes of `span` into `host`.
fn load(
    copies: &dyn StageCopies,
    rank: Rank,
    span: DeviceSpan,
    host: &mut HostBytes,
    len: usize,
) -> Result<(), DeviceError> {
    if len == 0 {
        return Ok(());
    }
    let span = span.slice(0, len).expect("checked binding");
    copies.to_host(rank, span, &mut host.as_mut_slice()[..len])
}

/// A submission as the host device takes it, and its stage when it had device buffers.
pub(super) struct Staged<'a> {
    pub host: Submission<'a>,
    pub stage: Option<Stage>,
}

/// Stage `s` (when bound to device memory) for the host device: its compiled program
/// unwrapped, its device buffers copied into host memory.
pub(super) fn stage<'a>(
    copies: &dyn StageCopies,
    device_id: usize,
    s: Submission<'a>,
) -> Result<Staged<'a>, DeviceError> {
    let program = StagedProgram::of(&s.compiled, device_id)?;
    s.compiled.check_binding(&s.user)?;
    let host_compiled: Arc<crate::device::Compiled> = program.host.clone();
    let (user, stage) = match s.user {
        UserBuffers::Device {
            input,
            output,
            in_place,
        } => {
            let rank = s.compiled.rank;
            let mut stage = Stage::copy_in(copies, &program, rank, input, output, in_place)?;
            // SAFETY: the bindings point into the stage's heap blocks, which moving the
            // stage leaves where they are; the stage is returned with the submission and
            // kept until the host device's completion ended (see `Staged`'s users).
            let user = unsafe { stage.bindings() };
            (user, Some(stage))
        }
        host => (host, None),
    };
    Ok(Staged {
        host: Submission {
            compiled: host_compiled,
            user,
            epoch: s.epoch,
            gate: s.gate,
        },
        stage,
    })
}
