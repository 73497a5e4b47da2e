//! The slice checks every executing backend's compile makes, written once: a slice
//! names a rank of the communicator, has the task's length and whole elements, never
//! writes Input, lies within its buffer; the rank's own user-buffer slices add up to the
//! extent and alignment a binding must have; a task's destinations overlap nothing.

use crate::dtype::DataType;
use crate::error::{ConfigFault, SliceFault};
use crate::ir::{Buf, Slice};

/// The checks that need nothing but the slice and its task: a rank of the communicator
/// of `ranks`, the task's `len`, not Input when it is written, whole `elem`s (a
/// reduction's element type; `None` for a copy).
pub(crate) fn check_slice(
    slice: Slice,
    ranks: usize,
    len: usize,
    elem: Option<DataType>,
    write: bool,
) -> Result<(), SliceFault> {
    if slice.rank >= ranks {
        return Err(SliceFault::NoSuchRank {
            rank: slice.rank,
            ranks,
        });
    }
    if slice.len != len {
        return Err(SliceFault::LengthMismatch {
            len: slice.len,
            task_len: len,
        });
    }
    if write && slice.buf == Buf::Input {
        return Err(SliceFault::WritesInput);
    }
    match elem {
        Some(dtype) if !slice.len.is_multiple_of(dtype.size()) => {
            Err(SliceFault::PartialElement { dtype })
        }
        _ => Ok(()),
    }
}

/// How far a program reaches into its rank's own Input and Output, and the alignment its
/// reductions need of them: what a binding is checked against, once per submission.
#[derive(Copy, Clone, Debug)]
pub(crate) struct UserReach {
    /// Bytes of (Input, Output).
    pub extent: (usize, usize),
    pub align: (usize, usize),
}

impl Default for UserReach {
    fn default() -> Self {
        UserReach {
            extent: (0, 0),
            align: (1, 1),
        }
    }
}

impl UserReach {
    /// Count `slice`, of the rank's own Input or Output, whose element is `elem` (if it is
    /// reduced): its offset must be a whole number of elements. An end past `usize::MAX`
    /// saturates, so the binding check refuses every buffer.
    pub fn note(&mut self, slice: Slice, elem: Option<DataType>) -> Result<(), SliceFault> {
        if let Some(dtype) = elem {
            if !slice.offset.is_multiple_of(dtype.size()) {
                return Err(SliceFault::Misaligned { dtype });
            }
        }
        let end = slice.offset.saturating_add(slice.len);
        let need = elem.map_or(1, DataType::size);
        let (extent, align) = match slice.buf {
            Buf::Input => (&mut self.extent.0, &mut self.align.0),
            _ => (&mut self.extent.1, &mut self.align.1),
        };
        *extent = (*extent).max(end);
        *align = (*align).max(need);
        Ok(())
    }

    /// Whether buffers of `lens` bytes at addresses `addrs` (Input, Output) hold this
    /// reach and are aligned for its reductions; the first side that does not.
    pub fn fits(&self, lens: (usize, usize), addrs: (u64, u64)) -> Result<(), Unfit> {
        let sides = [
            (Buf::Input, lens.0, self.extent.0, self.align.0, addrs.0),
            (Buf::Output, lens.1, self.extent.1, self.align.1, addrs.1),
        ];
        for (buf, len, needed, align, addr) in sides {
            if len < needed {
                return Err(Unfit::TooShort { buf, len, needed });
            }
            if needed > 0 && !addr.is_multiple_of(align as u64) {
                return Err(Unfit::Misaligned { buf, align });
            }
        }
        Ok(())
    }
}

/// Why user buffers do not fit a [`UserReach`]: the rank's own binding reports it as a
/// [`ConfigFault`], a backend that lets peers reach them names the peer too.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unfit {
    TooShort { buf: Buf, len: usize, needed: usize },
    Misaligned { buf: Buf, align: usize },
}

impl From<Unfit> for ConfigFault {
    fn from(u: Unfit) -> Self {
        match u {
            Unfit::TooShort { buf, len, needed } => {
                ConfigFault::UserBufferTooShort { buf, len, needed }
            }
            Unfit::Misaligned { buf, align } => ConfigFault::UserBufferMisaligned { buf, align },
        }
    }
}

/// `slice` lies within a buffer of `buffer_len` bytes: its end, computed without
/// wrapping (not trusting `Slice::end`), is at most `buffer_len`.
pub(crate) fn within(slice: Slice, buffer_len: usize) -> Result<(), SliceFault> {
    let inside = slice
        .offset
        .checked_add(slice.len)
        .is_some_and(|end| end <= buffer_len);
    match inside {
        true => Ok(()),
        false => Err(SliceFault::OutOfBounds { buffer_len }),
    }
}

/// Destinations must not overlap each other or any source, except that a Reduce may list a
/// destination among its sources exactly (accumulate in place). `key` places an operand:
/// (address space, start); operands of different spaces never overlap.
pub(crate) fn check_overlaps<T: Copy + HasSlice>(
    srcs: &[T],
    dsts: &[T],
    len: usize,
    reduce: bool,
    key: impl Fn(&T) -> (usize, usize),
) -> Result<(), (Slice, SliceFault)> {
    let overlap = |a: (usize, usize), b: (usize, usize)| {
        // Saturating keeps the check sound even for ranges at the top of the space.
        a.0 == b.0 && len > 0 && a.1 < b.1.saturating_add(len) && b.1 < a.1.saturating_add(len)
    };
    for (i, d) in dsts.iter().enumerate() {
        let dk = key(d);
        for o in &dsts[i + 1..] {
            if overlap(dk, key(o)) {
                return Err((d.slice(), SliceFault::Overlaps { other: o.slice() }));
            }
        }
        for s in srcs {
            let sk = key(s);
            if overlap(dk, sk) && !(reduce && dk == sk) {
                return Err((d.slice(), SliceFault::Overlaps { other: s.slice() }));
            }
        }
    }
    Ok(())
}

/// Something that came from a slice of the program, for error messages.
pub(crate) trait HasSlice {
    fn slice(&self) -> Slice;
}
