//! One named shared-memory segment: created by its owner, mapped by its peers.
//!
//! A segment starts with a small header — a magic that the owner writes last (so a peer
//! that sees it sees a complete header), the payload's length and the weight of the
//! peers that mapped it against the weight expected — and then the
//! payload, 4096-byte aligned, which the user lays out. The owner creates it with `O_EXCL`
//! and mode 0600 (only the job's user can map it); a peer waits, within a deadline, for it
//! to appear, maps it and adds its weight (the ranks it serves). The peer whose weight
//! completes the count removes the name: the mappings stay valid, and nothing is left in
//! `/dev/shm` whatever happens to the processes afterwards. A segment still named when its owner
//! drops it is unlinked then.
//!
//! A peer reads the payload's length from the header once, checks it against the
//! mapping, and keeps it: a faulty or hostile owner that rewrites its header afterwards
//! cannot make this process reach past the mapping.

use rustix::fs::Mode;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm::OFlags;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// "OXCCLSHM", the header's first word once the header is complete.
const MAGIC: u64 = u64::from_le_bytes(*b"OXCCLSHM");

/// Bytes before the payload: one page, so the payload is page aligned.
const HEADER_BYTES: usize = 4096;

/// How often a peer looks for a segment that is not there yet.
const ATTACH_POLL: Duration = Duration::from_millis(2);

/// The header at the start of every segment.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    payload: AtomicU64,
    /// Weight of the peers that mapped it so far.
    attached: AtomicU32,
    /// Weight at which every expected peer has mapped it: the name is removed then.
    expected: AtomicU32,
}

/// Why a segment could not be created or mapped.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ShmError {
    #[error(
        "cannot create the shared-memory segment {name} of {bytes} bytes; check the free \
         space of /dev/shm (a container may need a larger --shm-size)"
    )]
    Create {
        name: String,
        bytes: usize,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "the shared-memory segment {name} did not appear within {waited:?}; its owner has \
         not created it (is that process alive and in the same job?)"
    )]
    Missing { name: String, waited: Duration },
    #[error(
        "the process that was to create the shared-memory segment {name} is gone (killed or \
         crashed before it set its rank up)"
    )]
    OwnerGone { name: String },
    #[error(
        "the peers did not all map the shared-memory segment {name} within {waited:?}; does \
         every rank make the same collective allocations (alloc_shared), and is it alive?"
    )]
    Unmapped { name: String, waited: Duration },
    #[error("cannot map the shared-memory segment {name}")]
    Map {
        name: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("a shared-memory segment of {bytes} bytes plus its header cannot be laid out")]
    TooLarge { bytes: usize },
    #[error("the shared-memory segment {name} is not one of oxccl's: {reason}")]
    Foreign { name: String, reason: String },
}

/// A mapped segment.
pub struct Segment {
    name: String,
    base: NonNull<u8>,
    /// Bytes mapped.
    len: usize,
    /// Bytes of the payload, fixed when the segment was created or mapped.
    payload: usize,
    owner: bool,
    named: AtomicBool,
}

// SAFETY: the segment owns its mapping; the payload is shared memory whose concurrent use
// is the program's business (proved by the analyzer), as for device memory; the header is
// accessed through atomics only.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

/// The name of `rank`'s segment `what` in the job `tag`: `/oxccl-<tag>-r<rank>-<what>`.
pub fn segment_name(tag: &str, rank: usize, what: &str) -> String {
    format!("/oxccl-{tag}-r{rank}-{what}")
}

impl Segment {
    /// Create `name` with `payload` bytes (zeroed), owned by this process, to be mapped
    /// by peers of total weight `expected` (0: nobody; the name goes when the owner drops).
    pub fn create(name: &str, payload: usize, expected: u32) -> Result<Segment, ShmError> {
        Self::create_with(name, payload, expected, |_| {})
    }

    /// [`Segment::create`], with `init` run on the payload before the segment is
    /// published (before the header's magic, which a peer waits for, is written).
    pub fn create_with(
        name: &str,
        payload: usize,
        expected: u32,
        init: impl FnOnce(*mut u8),
    ) -> Result<Segment, ShmError> {
        let len = payload
            .checked_next_multiple_of(4096)
            .and_then(|p| p.checked_add(HEADER_BYTES))
            .ok_or(ShmError::TooLarge { bytes: payload })?;
        let failed = |e: rustix::io::Errno| ShmError::Create {
            name: name.to_string(),
            bytes: len,
            source: Arc::new(e.into()),
        };
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR;
        let fd = rustix::shm::open(name, flags, Mode::RUSR | Mode::WUSR).map_err(failed)?;
        // Reserve every page now: a tmpfs that runs out later would kill the process
        // with SIGBUS on its first touch of a page; now it is an error that says so.
        let sized = rustix::fs::ftruncate(&fd, len as u64).and_then(|()| {
            rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, len as u64)
        });
        let mapped = sized.and_then(|()| map(&fd, len));
        let base = match mapped {
            Ok(base) => base,
            Err(e) => {
                let _ = rustix::shm::unlink(name);
                return Err(failed(e));
            }
        };
        let segment = Segment {
            name: name.to_string(),
            base,
            len,
            payload,
            owner: true,
            named: AtomicBool::new(true),
        };
        let header = segment.header();
        header.payload.store(payload as u64, Ordering::Relaxed);
        header.expected.store(expected, Ordering::Relaxed);
        init(segment.payload().0);
        header.magic.store(MAGIC, Ordering::Release);
        Ok(segment)
    }

    /// Map the segment `name` that another process creates, waiting up to `wait` for it
    /// to appear, and add `weight` to its peers; the peer that completes the expected
    /// weight removes the name.
    pub fn attach(name: &str, wait: Duration, weight: u32) -> Result<Segment, ShmError> {
        Self::attach_while(name, wait, weight, || true)
    }

    /// [`Segment::attach`], giving up as soon as `owner_alive()` says the process that
    /// would create the segment is gone.
    pub fn attach_while(
        name: &str,
        wait: Duration,
        weight: u32,
        owner_alive: impl Fn() -> bool,
    ) -> Result<Segment, ShmError> {
        let deadline = Instant::now() + wait;
        let map_err = |e: rustix::io::Errno| ShmError::Map {
            name: name.to_string(),
            source: Arc::new(e.into()),
        };
        loop {
            match rustix::shm::open(name, OFlags::RDWR, Mode::empty()) {
                Ok(fd) => {
                    let size = rustix::fs::fstat(&fd).map_err(map_err)?.st_size;
                    let len = usize::try_from(size).unwrap_or(0);
                    if len >= HEADER_BYTES {
                        let base = map(&fd, len).map_err(map_err)?;
                        let mut segment = Segment {
                            name: name.to_string(),
                            base,
                            len,
                            payload: 0,
                            owner: false,
                            named: AtomicBool::new(true),
                        };
                        if segment.header().magic.load(Ordering::Acquire) == MAGIC {
                            segment.payload = segment.checked_payload()?;
                            segment.count_in(weight);
                            return Ok(segment);
                        }
                    }
                }
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(map_err(e)),
            }
            // Not there, or its owner is still writing the header.
            if !owner_alive() {
                return Err(ShmError::OwnerGone {
                    name: name.to_string(),
                });
            }
            if Instant::now() >= deadline {
                return Err(ShmError::Missing {
                    name: name.to_string(),
                    waited: wait,
                });
            }
            std::thread::sleep(ATTACH_POLL);
        }
    }

    /// Wait, up to `wait` and while `peers_alive()`, until every expected peer mapped
    /// this segment (created here): a collective allocation's barrier, after which the
    /// owner may drop it without taking it from a peer that has yet to map it.
    pub fn wait_mapped(
        &self,
        wait: Duration,
        peers_alive: impl Fn() -> bool,
    ) -> Result<(), ShmError> {
        let deadline = Instant::now() + wait;
        let header = self.header();
        let mut pause = Duration::from_micros(20);
        while header.attached.load(Ordering::Acquire) < header.expected.load(Ordering::Relaxed) {
            let unmapped = ShmError::Unmapped {
                name: self.name.clone(),
                waited: wait,
            };
            if Instant::now() >= deadline || !peers_alive() {
                return Err(unmapped);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(ATTACH_POLL);
        }
        Ok(())
    }

    fn count_in(&self, weight: u32) {
        let header = self.header();
        let before = header.attached.fetch_add(weight, Ordering::AcqRel);
        let expected = header.expected.load(Ordering::Relaxed);
        if before < expected && before.saturating_add(weight) >= expected {
            self.unlink();
        }
    }

    /// The payload length the header claims, if the mapping holds it.
    fn checked_payload(&self) -> Result<usize, ShmError> {
        let claimed = self.header().payload.load(Ordering::Relaxed);
        let payload = usize::try_from(claimed).unwrap_or(usize::MAX);
        match HEADER_BYTES
            .checked_add(payload)
            .is_some_and(|n| n <= self.len)
        {
            true => Ok(payload),
            false => Err(ShmError::Foreign {
                name: self.name.clone(),
                reason: format!("its header claims {payload} bytes, it has {}", self.len),
            }),
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long, page aligned, and the header
        // is only accessed through atomics.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    /// The payload: its first byte (page aligned) and its length (fixed at create or
    /// attach, never re-read from the header).
    pub fn payload(&self) -> (*mut u8, usize) {
        // SAFETY: HEADER_BYTES is within the mapping (checked at create and attach).
        (
            unsafe { self.base.as_ptr().add(HEADER_BYTES) },
            self.payload,
        )
    }

    /// The weight of the peers that have mapped the segment.
    pub fn attached(&self) -> u32 {
        self.header().attached.load(Ordering::Acquire)
    }

    /// Remove the segment's name (the mappings stay); once only.
    pub fn unlink(&self) {
        if self.named.swap(false, Ordering::AcqRel) {
            let _ = rustix::shm::unlink(self.name.as_str());
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owner {
            self.unlink();
        }
        // SAFETY: `base` and `len` are the mapping made in `create` or `attach`, and
        // nothing borrows from it past the segment's life (its users hold an `Arc`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("len", &self.len)
            .field("owner", &self.owner)
            .finish()
    }
}

/// Map `len` bytes of `fd`, shared, readable and writable.
fn map(fd: &rustix::fd::OwnedFd, len: usize) -> rustix::io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel aliases no Rust object.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )?
    };
    NonNull::new(ptr.cast()).ok_or(rustix::io::Errno::NOMEM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique(what: &str) -> String {
        segment_name(&format!("test{}", std::process::id()), 0, what)
    }

    #[test]
    fn a_peer_sees_the_owners_bytes_and_the_name_goes_with_unlink() {
        let name = unique("a");
        let owner = Segment::create(&name, 10_000, 3).expect("create");
        let peer = Segment::attach(&name, Duration::from_secs(5), 2).expect("attach");
        assert_eq!(owner.attached(), 2);
        let (p, len) = owner.payload();
        assert_eq!(len, 10_000);
        assert_eq!(p as usize % 4096, 0);
        // SAFETY: within the payload; nothing else touches it in this test.
        unsafe { p.add(9_999).write(0xab) };
        let (q, _) = peer.payload();
        // SAFETY: as above, through the peer's mapping of the same bytes.
        assert_eq!(unsafe { q.add(9_999).read() }, 0xab);
        let last = Segment::attach(&name, Duration::from_secs(5), 1).expect("attach");
        assert_eq!(last.attached(), 3);
        let gone = Segment::attach(&name, Duration::from_millis(20), 1).unwrap_err();
        assert!(
            matches!(gone, ShmError::Missing { .. }),
            "the last peer removed the name: {gone}"
        );
        // SAFETY: the mappings outlive the name.
        assert_eq!(unsafe { q.add(9_999).read() }, 0xab);
    }

    #[test]
    fn a_peer_keeps_the_length_it_checked_and_sizes_that_wrap_are_refused() {
        let name = unique("len");
        let owner = Segment::create(&name, 100, 1).expect("create");
        let peer = Segment::attach(&name, Duration::from_secs(5), 1).expect("attach");
        owner.header().payload.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(
            peer.payload().1,
            100,
            "a rewritten header changes nothing here"
        );
        let huge = Segment::create(&unique("huge"), usize::MAX - 10, 0).unwrap_err();
        assert!(matches!(huge, ShmError::TooLarge { .. }), "{huge}");
    }

    #[test]
    fn waiting_for_a_segment_ends_when_its_owner_is_gone() {
        let name = unique("gone");
        let start = Instant::now();
        let err = Segment::attach_while(&name, Duration::from_secs(30), 1, || false).unwrap_err();
        assert!(matches!(err, ShmError::OwnerGone { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn creating_a_taken_name_fails_and_dropping_the_owner_unlinks() {
        let name = unique("b");
        let owner = Segment::create(&name, 1, 5).expect("create");
        let again = Segment::create(&name, 1, 5).unwrap_err();
        assert!(matches!(again, ShmError::Create { .. }), "{again}");
        drop(owner);
        assert!(Segment::attach(&name, Duration::from_millis(20), 1).is_err());
    }

    #[test]
    fn a_doorbell_wakes_a_sleeper_through_another_mapping() {
        let name = unique("c");
        let owner = Segment::create(&name, 64, 1).expect("create");
        let peer = Segment::attach(&name, Duration::from_secs(5), 1).expect("attach");
        // SAFETY: the payload is page aligned and at least 4 bytes; used as one atomic.
        let bell = |s: &Segment| unsafe { &*s.payload().0.cast::<AtomicU32>() };
        let start = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                super::super::futex::ring(bell(&peer));
            });
            while bell(&owner).load(Ordering::Acquire) == 0 {
                super::super::futex::wait(bell(&owner), 0, Duration::from_secs(10));
            }
        });
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "woken by the ring"
        );
    }
}
