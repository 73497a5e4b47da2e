//! C pointers as checked byte spans, and the one place that turns spans into slices.
//!
//! A [`Span`] is an address and a length in bytes that passed every check a caller's
//! pointer can be given without reading it: not NULL (unless empty), aligned for the data
//! type, a byte length that neither overflows nor passes `isize::MAX`, and an end that
//! does not wrap the address space. Whether the memory is really the caller's, and stays
//! so while oxccl uses it, is the caller's promise, as in NCCL.
//!
//! Slices are made from spans only in [`Span::slice`] and [`Span::slice_mut`], whose
//! callers ([`crate::step`]) make sure that a mutable slice never overlaps another slice
//! alive at the same time, and in [`read_array`], which copies a caller's array out.

use crate::result::CError;
use oxccl::DataType;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::ptr::NonNull;

/// A checked range of a caller's memory. Holds the address as an integer, so that a
/// deferred call can be moved to the thread that runs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub addr: usize,
    pub len: usize,
}

impl Span {
    /// The empty span.
    pub const EMPTY: Span = Span { addr: 0, len: 0 };

    /// `elements` elements of `dtype` at `ptr`, the argument named `what`.
    pub fn of(
        what: &str,
        ptr: *const c_void,
        elements: usize,
        dtype: DataType,
    ) -> Result<Span, CError> {
        let len = byte_len(what, elements, dtype)?;
        Self::bytes(what, ptr, len, dtype.size())
    }

    /// `len` bytes at `ptr` aligned to `align`, the argument named `what`.
    pub fn bytes(what: &str, ptr: *const c_void, len: usize, align: usize) -> Result<Span, CError> {
        let addr = ptr as usize;
        if len == 0 {
            return Ok(Span { addr, len });
        }
        if ptr.is_null() {
            return Err(CError::invalid(format!(
                "{what} is NULL but the call needs {len} bytes there"
            )));
        }
        if !addr.is_multiple_of(align) {
            return Err(CError::invalid(format!(
                "{what} ({addr:#x}) is not aligned to the data type's {align} bytes"
            )));
        }
        if addr.checked_add(len).is_none() {
            return Err(CError::invalid(format!(
                "{what} ({addr:#x}) plus {len} bytes passes the end of the address space"
            )));
        }
        Ok(Span { addr, len })
    }

    /// `n` values of `T` at `ptr` (an array argument named `what`): the byte count
    /// checked for overflow, the pointer for NULL and `T`'s alignment.
    pub fn array<T>(what: &str, ptr: *const T, n: usize) -> Result<Span, CError> {
        let len = n
            .checked_mul(size_of::<T>())
            .ok_or_else(|| CError::invalid(format!("{what}: {n} entries overflow a byte count")))?;
        Self::bytes(what, ptr.cast(), len, align_of::<T>())
    }

    /// One past the last byte.
    pub fn end(&self) -> usize {
        self.addr + self.len
    }

    /// Whether the two spans share a byte.
    pub fn overlaps(&self, other: &Span) -> bool {
        self.len > 0 && other.len > 0 && self.addr < other.end() && other.addr < self.end()
    }

    /// The span as a shared slice.
    ///
    /// # Safety
    /// The span must be readable memory that nothing writes while the slice lives.
    pub unsafe fn slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: not NULL and not wrapping (checked when the span was made), within
        // `isize::MAX` bytes (`byte_len`), readable and unwritten (the caller's promise).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The span as a mutable slice.
    ///
    /// # Safety
    /// The span must be writable memory that nothing else reads or writes while the slice
    /// lives (no other slice made from an overlapping span is alive).
    pub unsafe fn slice_mut<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `slice`, and exclusive (the caller's promise).
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// Bytes of `elements` elements of `dtype`, refused when the product overflows or passes
/// the largest slice (`isize::MAX` bytes).
pub fn byte_len(what: &str, elements: usize, dtype: DataType) -> Result<usize, CError> {
    elements
        .checked_mul(dtype.size())
        .filter(|&b| isize::try_from(b).is_ok())
        .ok_or_else(|| {
            CError::invalid(format!(
                "{what}: {elements} elements of {dtype} overflow a byte count; pass a smaller \
                 count"
            ))
        })
}

/// `count * factor` elements, refused when it overflows (`what` names the count).
pub fn times(what: &str, count: usize, factor: usize) -> Result<usize, CError> {
    count.checked_mul(factor).ok_or_else(|| {
        CError::invalid(format!(
            "{what} {count} times {factor} overflows an element count; pass a smaller count"
        ))
    })
}

/// Zeroed host memory that oxccl owns: the buffer NCCL leaves unused on some ranks (the
/// send buffer of a broadcast's non-root ranks, the receive buffer of a reduce's), which
/// oxccl's binding still needs, and the staging buffers of fused sends and receives.
/// Large blocks come from the allocator's zeroed pages, committed only when touched.
pub struct HostBlock {
    ptr: NonNull<u8>,
    /// The allocation's layout: at least one byte, so that the allocator can serve it.
    layout: Layout,
    /// Bytes asked for.
    len: usize,
}

// SAFETY: a HostBlock owns its allocation alone (it hands out only `Span`s, whose users
// follow `Span::slice`'s rules), like a `Box<[u8]>`.
unsafe impl Send for HostBlock {}
// SAFETY: as above; `&HostBlock` reads nothing.
unsafe impl Sync for HostBlock {}

/// Alignment of a [`HostBlock`]: the largest element of any data type.
const BLOCK_ALIGN: usize = 8;

impl HostBlock {
    /// `len` zeroed bytes, aligned for every data type.
    pub fn zeroed(len: usize) -> Result<HostBlock, CError> {
        let layout = Layout::from_size_align(len.max(1), BLOCK_ALIGN)
            .map_err(|e| CError::invalid(format!("a buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            CError::new(
                crate::result::OxcclResult::SystemError,
                format!("cannot allocate {len} bytes of host memory"),
            )
        })?;
        Ok(HostBlock { ptr, layout, len })
    }

    /// The whole block.
    pub fn span(&self) -> Span {
        Span {
            addr: self.ptr.as_ptr() as usize,
            len: self.len,
        }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `zeroed`, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Write `value` through the out-pointer argument `what`, after checking it (not NULL,
/// aligned).
///
/// # Safety
/// `ptr`, when not NULL and aligned, points at memory writable for a `T`.
pub unsafe fn write_out<T>(what: &str, ptr: *mut T, value: T) -> Result<(), CError> {
    Span::array(what, ptr.cast_const(), 1)?;
    // SAFETY: not NULL and aligned (checked); writable is the caller's promise.
    unsafe { ptr.write(value) };
    Ok(())
}

/// `n` values of `T` at `ptr`, the array argument named `what`, copied out.
///
/// # Safety
/// `ptr`, when not NULL and aligned, points at `n` readable `T`s.
pub unsafe fn read_array<T: Copy>(what: &str, ptr: *const T, n: usize) -> Result<Vec<T>, CError> {
    let span = Span::array(what, ptr, n)?;
    if span.len == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: not NULL, aligned, `n` entries that do not wrap (checked); readable is the
    // caller's promise, as in NCCL.
    Ok(unsafe { std::slice::from_raw_parts(span.addr as *const T, n) }.to_vec())
}

/// Copy `len` bytes between two spans that do not overlap.
///
/// # Safety
/// `from` must be readable and `to` writable for `len` bytes, neither used elsewhere
/// meanwhile.
pub unsafe fn copy(from: Span, to: Span, len: usize) {
    assert!(len <= from.len && len <= to.len && !from.overlaps(&to));
    if len > 0 {
        // SAFETY: both ranges checked above and valid by the caller's promise.
        unsafe {
            oxccl::platform::reduce::copy_bytes(from.addr as *const u8, to.addr as *mut u8, len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_refuse_null_misaligned_and_overflowing_pointers() {
        let word = 0u64;
        let p = &word as *const u64 as *const c_void;
        assert!(Span::of("sendbuff", p, 1, DataType::F64).is_ok());
        let null = Span::of("sendbuff", std::ptr::null(), 4, DataType::F32).unwrap_err();
        assert!(
            null.message.contains("sendbuff is NULL"),
            "{}",
            null.message
        );
        assert!(Span::of("sendbuff", std::ptr::null(), 0, DataType::F32).is_ok());
        let odd = (p as usize + 1) as *const c_void;
        let err = Span::of("recvbuff", odd, 1, DataType::I32).unwrap_err();
        assert!(
            err.message.contains("not aligned to the data type's 4"),
            "{}",
            err.message
        );
        let err = Span::of("recvbuff", p, usize::MAX / 2, DataType::I32).unwrap_err();
        assert!(err.message.contains("overflow"), "{}", err.message);
        let high = (usize::MAX - 7) as *const c_void;
        let err = Span::of("recvbuff", high, 2, DataType::F64).unwrap_err();
        assert!(
            err.message.contains("end of the address space"),
            "{}",
            err.message
        );
    }

    #[test]
    fn overlap_needs_a_shared_byte() {
        let a = Span { addr: 100, len: 10 };
        assert!(a.overlaps(&Span { addr: 109, len: 1 }));
        assert!(!a.overlaps(&Span { addr: 110, len: 5 }));
        assert!(!a.overlaps(&Span { addr: 105, len: 0 }));
    }

    #[test]
    fn a_host_block_is_zeroed_and_aligned() {
        let block = HostBlock::zeroed(24).unwrap();
        let span = block.span();
        assert_eq!(span.addr % BLOCK_ALIGN, 0);
        // SAFETY: the block is ours and nothing else uses it.
        assert!(unsafe { span.slice() }.iter().all(|&b| b == 0));
    }
}
