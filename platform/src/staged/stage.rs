//! A submission's device buffers staged in host memory: copied in before the host device
//! runs it, what it wrote copied back after.

use super::{HostPin, StageCopies, StagedProgram};
use crate::device::{DeviceSpan, Submission, UserBuffers};
use crate::error::{AllocFault, DeviceError};
use crate::ir::Rank;
use parking_lot::Mutex;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment and granularity of staging memory: the system's page (4 KiB, or 16 or
/// 64 KiB on some arm64 kernels). More than any reduction needs, and what page-locking
/// takes: the driver locks whole pages and refuses a page locked twice, so a block that
/// may be locked ([`StageCopies::pin`]) shares no page with any other memory.
fn page() -> usize {
    rustix::param::page_size()
}

/// Host memory of whole pages, zeroed when allocated, freed on drop (unlocked first when
/// the backend locked it); kept between calls by the [`StagePool`].
pub(super) struct HostBytes {
    ptr: NonNull<u8>,
    cap: usize,
    /// Keeps the block page-locked while it lives ([`StageCopies::pin`]).
    pin: Option<Box<dyn HostPin>>,
}

// SAFETY: `HostBytes` owns its allocation, as a `Box<[u8]>` does; its pin is `Send`.
unsafe impl Send for HostBytes {}

impl HostBytes {
    /// At least `len` zeroed bytes, whole pages.
    fn zeroed(len: usize) -> Result<Self, DeviceError> {
        let alloc = |fault| DeviceError::Alloc {
            what: "host staging buffer",
            bytes: len,
            fault,
        };
        if len == 0 {
            // A dangling, aligned, never dereferenced pointer: an empty slice's address.
            let ptr = NonNull::new(page() as *mut u8).expect("non-zero");
            return Ok(HostBytes {
                ptr,
                cap: 0,
                pin: None,
            });
        }
        let cap = len
            .checked_next_multiple_of(page())
            .ok_or_else(|| alloc(AllocFault::OutOfMemory))?;
        let layout = Layout::from_size_align(cap, page()).map_err(|e| alloc(e.into()))?;
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| alloc(AllocFault::OutOfMemory))?;
        Ok(HostBytes {
            ptr,
            cap,
            pin: None,
        })
    }

    /// The first `len` bytes (at most the capacity).
    fn slice(&self, len: usize) -> &[u8] {
        assert!(len <= self.cap, "a staged span within its block");
        // SAFETY: `cap` initialised bytes at `ptr` (zeroed, then only ever written),
        // owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    /// The first `len` bytes, writable (at most the capacity).
    fn slice_mut(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.cap, "a staged span within its block");
        // SAFETY: as above, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        // Unlocked while the pages are still this block's.
        if let Some(pin) = self.pin.take() {
            if !pin.unpin() {
                tracing::warn!(
                    bytes = self.cap,
                    "a staging block could not be unlocked; it is kept, not freed"
                );
                return;
            }
        }
        if self.cap > 0 {
            let layout = Layout::from_size_align(self.cap, page()).expect("allocated with it");
            // SAFETY: allocated by `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Staging blocks kept between calls, so that a call of a size seen before neither
/// allocates nor faults its pages in again (a fresh gigabyte is a quarter of a million
/// page faults, which would cost more than the copies across the bus). At most `keep`
/// blocks are kept: two per local rank, its input's and its output's.
pub(super) struct StagePool {
    free: Mutex<Vec<HostBytes>>,
    keep: usize,
}

impl StagePool {
    pub(super) fn new(keep: usize) -> Arc<Self> {
        Arc::new(StagePool {
            free: Mutex::new(Vec::new()),
            keep,
        })
    }

    /// A block of at least `len` bytes: the smallest kept one that holds them, else a
    /// new one, which `copies` may page-lock for local rank `rank` (kept locked for the
    /// block's life, whichever rank it is lent to next).
    fn take(
        &self,
        len: usize,
        copies: &dyn StageCopies,
        rank: Rank,
    ) -> Result<HostBytes, DeviceError> {
        if len == 0 {
            return HostBytes::zeroed(0);
        }
        let mut free = self.free.lock();
        let fits = (0..free.len())
            .filter(|&i| free[i].cap >= len)
            .min_by_key(|&i| free[i].cap);
        match fits {
            Some(i) => Ok(free.swap_remove(i)),
            None => {
                drop(free);
                let mut block = HostBytes::zeroed(len)?;
                let cap = block.cap;
                block.pin = copies.pin(rank, block.slice_mut(cap));
                Ok(block)
            }
        }
    }

    /// Keep `block` for a later call; past `keep` blocks, the smallest goes.
    fn give(&self, block: HostBytes) {
        if block.cap == 0 {
            return;
        }
        let mut free = self.free.lock();
        free.push(block);
        if free.len() > self.keep {
            let smallest = (0..free.len()).min_by_key(|&i| free[i].cap);
            if let Some(i) = smallest {
                let gone = free.swap_remove(i);
                drop(free);
                drop(gone);
            }
        }
    }

    /// The capacities of the blocks kept now, smallest first.
    #[cfg(test)]
    fn kept(&self) -> Vec<usize> {
        let mut caps: Vec<usize> = self.free.lock().iter().map(|b| b.cap).collect();
        caps.sort_unstable();
        caps
    }
}

/// The host copies of one submission's device buffers, and where its result goes back.
/// Its blocks return to the pool when it drops.
pub(super) struct Stage {
    rank: Rank,
    /// Out of place: the input's copy (empty in place).
    input: Option<HostBytes>,
    /// The output's copy (in place: the one buffer's).
    output: Option<HostBytes>,
    in_place: bool,
    /// The input's span (in place: the output's).
    input_span: DeviceSpan,
    /// Where the output's first `back` bytes go once the call succeeded.
    output_span: DeviceSpan,
    back: usize,
    pool: Arc<StagePool>,
}

impl Drop for Stage {
    fn drop(&mut self) {
        for block in [self.input.take(), self.output.take()]
            .into_iter()
            .flatten()
        {
            self.pool.give(block);
        }
    }
}

impl Stage {
    /// Copy in what the program may read of `input` and `output` (all of the output it
    /// reaches unless it overwrites all of it, so bytes it leaves alone come back as they
    /// were).
    pub(super) fn copy_in(
        copies: &dyn StageCopies,
        pool: &Arc<StagePool>,
        program: &StagedProgram,
        rank: Rank,
        (input, output, in_place): (DeviceSpan, DeviceSpan, bool),
    ) -> Result<Self, DeviceError> {
        let (read_in, reach_out) = match program.whole_buffers {
            true => (input.len, output.len),
            false => program.host.user_extent,
        };
        let mut stage = Stage {
            rank,
            input: None,
            output: None,
            in_place,
            input_span: input,
            output_span: output,
            back: reach_out,
            pool: pool.clone(),
        };
        // Owned by the stage from here: an error below gives them back.
        stage.output = Some(pool.take(output.len, copies, rank)?);
        if in_place {
            // One buffer read and written through both names: what either reaches.
            stage.back = read_in.max(reach_out);
            let reach = stage.back;
            load(copies, rank, output, stage.output_mut(), reach)?;
            return Ok(stage);
        }
        stage.input = Some(pool.take(input.len, copies, rank)?);
        let block = stage.input.as_mut().expect("just taken");
        load(copies, rank, input, block.slice_mut(input.len), read_in)?;
        if program.preload_output || program.whole_buffers {
            load(copies, rank, output, stage.output_mut(), reach_out)?;
        }
        Ok(stage)
    }

    /// The output's copy, the output span's length.
    fn output_mut(&mut self) -> &mut [u8] {
        let len = self.output_span.len;
        self.output.as_mut().expect("taken").slice_mut(len)
    }

    /// The host buffers bound for the host device.
    ///
    /// # Safety
    ///
    /// The buffers live as long as `self`: the caller keeps `self` alive, and does not
    /// touch it, until whatever runs on the returned bindings ended.
    pub(super) unsafe fn bindings<'a>(&mut self) -> UserBuffers<'a> {
        let output = self.output_mut();
        // SAFETY: the caller's promise above; the two blocks are distinct.
        let output: &'a mut [u8] = unsafe { &mut *(output as *mut [u8]) };
        if self.in_place {
            return UserBuffers::InPlace(output);
        }
        let input = self
            .input
            .as_ref()
            .expect("taken")
            .slice(self.input_span.len);
        // SAFETY: as above.
        let input: &'a [u8] = unsafe { &*(input as *const [u8]) };
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
        let block = self.output.as_ref().expect("taken");
        copies.to_device(self.rank, block.slice(self.back), span)
    }
}

/// Copy the first `len` bytes of `span` into `host`.
fn load(
    copies: &dyn StageCopies,
    rank: Rank,
    span: DeviceSpan,
    host: &mut [u8],
    len: usize,
) -> Result<(), DeviceError> {
    if len == 0 {
        return Ok(());
    }
    let span = span.slice(0, len).expect("checked binding");
    copies.to_host(rank, span, &mut host[..len])
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
    pool: &Arc<StagePool>,
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
            let spans = (input, output, in_place);
            let mut stage = Stage::copy_in(copies, pool, &program, rank, spans)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staged::HostAddressed;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Copies that never run, and pins that count themselves.
    #[derive(Default)]
    struct Pins {
        pinned: Arc<Mutex<Vec<(Rank, usize, usize)>>>,
        unpinned: Arc<AtomicUsize>,
    }

    struct Unpin(Arc<AtomicUsize>);

    impl HostPin for Unpin {
        fn unpin(self: Box<Self>) -> bool {
            self.0.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    impl StageCopies for Pins {
        fn to_host(&self, _: Rank, _: DeviceSpan, _: &mut [u8]) -> Result<(), DeviceError> {
            unreachable!("the pool copies nothing")
        }

        fn to_device(&self, _: Rank, _: &[u8], _: DeviceSpan) -> Result<(), DeviceError> {
            unreachable!("the pool copies nothing")
        }

        fn pin(&self, rank: Rank, block: &mut [u8]) -> Option<Box<dyn HostPin>> {
            let at = block.as_ptr() as usize;
            self.pinned.lock().push((rank, at, block.len()));
            Some(Box::new(Unpin(self.unpinned.clone())))
        }
    }

    fn copies() -> HostAddressed {
        // SAFETY: these tests copy nothing through it.
        unsafe { HostAddressed::new() }
    }

    #[test]
    fn the_pool_lends_the_smallest_block_that_fits_and_keeps_the_largest() {
        let page = page();
        let pool = StagePool::new(2);
        let copies = copies();
        let blocks: Vec<HostBytes> = [100, 2 * page + 1, page + 1]
            .into_iter()
            .map(|len| pool.take(len, &copies, 0).unwrap())
            .collect();
        assert_eq!(
            blocks.iter().map(|b| b.cap).collect::<Vec<_>>(),
            vec![page, 3 * page, 2 * page],
            "whole pages"
        );
        assert!(blocks
            .iter()
            .all(|b| b.slice(b.cap).iter().all(|&x| x == 0)));
        let at = |b: &HostBytes| b.slice(0).as_ptr();
        assert!(blocks.iter().all(|b| (at(b) as usize).is_multiple_of(page)));
        let two_pages = at(&blocks[2]);
        blocks.into_iter().for_each(|b| pool.give(b));
        assert_eq!(
            pool.kept(),
            vec![2 * page, 3 * page],
            "past two, the smallest went"
        );
        let lent = pool.take(page + 50, &copies, 1).unwrap();
        assert_eq!(
            (lent.cap, at(&lent)),
            (2 * page, two_pages),
            "the same block again"
        );
        assert_eq!(pool.kept(), vec![3 * page]);
        let fresh = pool.take(4 * page, &copies, 0).unwrap();
        assert_eq!(
            (fresh.cap, pool.kept()),
            (4 * page, vec![3 * page]),
            "none fits: a new one"
        );
        assert_eq!(pool.take(0, &copies, 0).unwrap().cap, 0);
        pool.give(pool.take(0, &copies, 0).unwrap());
        assert_eq!(pool.kept(), vec![3 * page], "empty blocks are not kept");
    }

    #[test]
    fn a_new_block_is_pinned_once_for_its_life_and_unpinned_when_freed() {
        let page = page();
        let pool = StagePool::new(1);
        let pins = Pins::default();
        let first = pool.take(10, &pins, 3).unwrap();
        let first_at = first.slice(0).as_ptr() as usize;
        assert_eq!(
            *pins.pinned.lock(),
            vec![(3, first_at, page)],
            "the whole block"
        );
        pool.give(first);
        let again = pool.take(page, &pins, 5).unwrap();
        assert_eq!(pins.pinned.lock().len(), 1, "a kept block is lent as it is");
        assert!(again.pin.is_some(), "and stays pinned for another rank");
        let second = pool.take(2 * page, &pins, 5).unwrap();
        assert_eq!(pins.pinned.lock().len(), 2);
        assert_eq!(pins.unpinned.load(Ordering::Relaxed), 0);
        pool.give(again);
        pool.give(second);
        assert_eq!(pool.kept(), vec![2 * page]);
        assert_eq!(
            pins.unpinned.load(Ordering::Relaxed),
            1,
            "the block the pool let go"
        );
        drop(pool);
        assert_eq!(pins.unpinned.load(Ordering::Relaxed), 2);
        let plain = StagePool::new(1).take(page, &copies(), 0).unwrap();
        assert!(
            plain.pin.is_none(),
            "copies that do not pin leave blocks unpinned"
        );
    }
}
