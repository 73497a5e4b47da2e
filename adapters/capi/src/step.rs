//! One rank's call as data: the operator, the spans it binds, and what oxccl owns for it.
//!
//! The collective functions build a [`Step`] from NCCL's arguments; [`Step::new`] checks
//! it as the framework will (`OpParam::validate`) and refuses bindings that would alias,
//! so every argument error is found before the call is deferred or run, and a refused
//! call reaches no other rank (as NCCL's argument errors do not). The group runs the
//! step: it makes the slices ([`Step::user_buffers`]) only for the call's length.
//!
//! NCCL's in-place forms are one buffer in oxccl ([`Binding::InPlace`]); a send and a
//! receive buffer that overlap in any other way are refused, since the two would become
//! a shared and a mutable slice of the same bytes.

use crate::buffers::Span;
use crate::handles::Comm;
use crate::result::CError;
use crate::side::{device_span, Block};
use oxccl::{Error, OpCall, OpParam, UserBuffers};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The buffers of one call.
#[derive(Copy, Clone, Debug)]
pub enum Binding {
    /// A send buffer read and a distinct receive buffer written.
    OutOfPlace { input: Span, output: Span },
    /// One buffer, read and written.
    InPlace(Span),
}

impl Binding {
    /// NCCL's in-place form, where the receive buffer `output` is the one buffer, or
    /// `input()` read into `output`.
    pub fn onto(
        output: Span,
        in_place: bool,
        input: impl FnOnce() -> Result<Span, CError>,
    ) -> Result<Binding, CError> {
        Ok(match in_place {
            true => Binding::InPlace(output),
            false => Binding::OutOfPlace {
                input: input()?,
                output,
            },
        })
    }

    /// NCCL's in-place form, where the send buffer `input` is the one buffer, or `input`
    /// written into `output()`.
    pub fn from(
        input: Span,
        in_place: bool,
        output: impl FnOnce() -> Result<Span, CError>,
    ) -> Result<Binding, CError> {
        Ok(match in_place {
            true => Binding::InPlace(input),
            false => Binding::OutOfPlace {
                input,
                output: output()?,
            },
        })
    }

    /// The spans and whether each is written.
    pub fn spans(&self) -> Vec<(Span, bool)> {
        match *self {
            Binding::OutOfPlace { input, output } => vec![(input, false), (output, true)],
            Binding::InPlace(buf) => vec![(buf, true)],
        }
    }
}

/// A staged copy: `len` bytes between the caller's `user` span and oxccl's `staged` one.
#[derive(Copy, Clone, Debug)]
pub struct Stage {
    pub user: Span,
    pub staged: Span,
}

/// One rank's call, checked, ready to run, defer or record.
pub struct Step {
    pub comm: Arc<Comm>,
    pub param: OpParam,
    pub binding: Binding,
    /// Copied from the caller's buffers into the binding before the call runs.
    stage_in: Vec<Stage>,
    /// Copied from the binding into the caller's buffers after the call succeeded.
    stage_out: Vec<Stage>,
    /// Memory the binding points into that oxccl owns (kept for the step's life).
    _owned: Vec<Block>,
    /// The caller's streams the step waits for before it runs (device memory only: see
    /// [`crate::side`]).
    streams: Vec<usize>,
}

impl Step {
    /// A step on the caller's buffers, refused when they alias or the framework's
    /// validation of `param` against them fails.
    pub fn new(comm: Arc<Comm>, param: OpParam, binding: Binding) -> Result<Step, CError> {
        Self::with_owned(comm, param, binding, Vec::new())
    }

    /// A step whose binding points into `owned` blocks (besides the caller's buffers).
    pub fn with_owned(
        comm: Arc<Comm>,
        param: OpParam,
        binding: Binding,
        owned: Vec<Block>,
    ) -> Result<Step, CError> {
        Self::staged(comm, param, binding, owned, Vec::new(), Vec::new())
    }

    /// A step that copies `stage_in` before it runs and `stage_out` after.
    pub fn staged(
        comm: Arc<Comm>,
        param: OpParam,
        binding: Binding,
        owned: Vec<Block>,
        stage_in: Vec<Stage>,
        stage_out: Vec<Stage>,
    ) -> Result<Step, CError> {
        if let Binding::OutOfPlace { input, output } = binding {
            if input.overlaps(&output) {
                return Err(CError::invalid(format!(
                    "the send buffer [{:#x}, {:#x}) and the receive buffer [{:#x}, {:#x}) \
                     overlap but are not this operator's in-place form; pass distinct \
                     buffers, or NCCL's in-place pointers",
                    input.addr,
                    input.end(),
                    output.addr,
                    output.end()
                )));
            }
        }
        let (input_len, output_len) = match binding {
            Binding::OutOfPlace { input, output } => (Some(input.len), output.len),
            Binding::InPlace(buf) => (None, buf.len),
        };
        param
            .validate(comm.rank(), comm.size(), input_len, output_len)
            .map_err(|e| CError::invalid(e.to_string()))?;
        let step = Step {
            comm,
            param,
            binding,
            stage_in,
            stage_out,
            _owned: owned,
            streams: Vec::new(),
        };
        step.comm.check_spans(&step.touched())?;
        Ok(step)
    }

    /// The step, waiting for each of `streams` before it runs.
    pub fn on_streams(mut self, streams: impl IntoIterator<Item = usize>) -> Step {
        self.streams.extend(streams);
        self.streams.sort_unstable();
        self.streams.dedup();
        self
    }

    /// The binding's spans, and the caller's spans that staging reads (`false`) and
    /// writes (`true`): every byte the step touches while it runs.
    pub fn touched(&self) -> Vec<(Span, bool)> {
        let mut spans = self.binding.spans();
        spans.extend(self.stage_in.iter().map(|s| (s.user, false)));
        spans.extend(self.stage_out.iter().map(|s| (s.user, true)));
        spans
    }

    /// The binding as the framework's buffers.
    ///
    /// # Safety
    /// The spans must be the caller's live buffers (NCCL's contract), and no slice of
    /// another step overlapping a written span may be alive while these are.
    pub unsafe fn user_buffers(&self) -> UserBuffers<'_> {
        if self.comm.user_memory().is_some() {
            return self.device_buffers();
        }
        // SAFETY: the binding's spans do not overlap each other unless they are one
        // in-place span (`Step::new`); the rest is the caller's promise.
        unsafe {
            match self.binding {
                Binding::OutOfPlace { input, output } => UserBuffers::OutOfPlace {
                    input: input.slice(),
                    output: output.slice_mut(),
                },
                Binding::InPlace(buf) => UserBuffers::InPlace(buf.slice_mut()),
            }
        }
    }

    /// The binding as device spans (checked by the device when the step was made).
    fn device_buffers(&self) -> UserBuffers<'_> {
        let (input, output, in_place) = match self.binding {
            Binding::OutOfPlace { input, output } => (input, output, false),
            Binding::InPlace(buf) => (buf, buf, true),
        };
        UserBuffers::Device {
            input: device_span(input),
            output: device_span(output),
            in_place,
        }
    }

    /// The step as a facade call (what graph capture records).
    ///
    /// # Safety
    /// As [`Step::user_buffers`].
    pub unsafe fn op_call(&self) -> OpCall<'_> {
        // SAFETY: the caller's promise.
        OpCall::new(self.param.clone(), unsafe { self.user_buffers() })
    }

    /// Make the step ready to run: wait for the caller's streams, copy the staged sends
    /// in. On the caller's thread: a stream handle may name that thread's own stream
    /// (`cudaStreamPerThread`).
    ///
    /// # Safety
    /// As [`Step::copy_in`].
    pub unsafe fn prepare(&self) -> Result<(), Error> {
        self.comm.sync_streams(&self.streams)?;
        // SAFETY: the caller's promise.
        unsafe { self.copy_in() }
    }

    /// Copy the staged sends in, before the step runs.
    ///
    /// # Safety
    /// The caller's staged spans must be live, and unused by other steps meanwhile.
    pub unsafe fn copy_in(&self) -> Result<(), Error> {
        for s in &self.stage_in {
            // SAFETY: `staged` is oxccl's own block; `user` is the caller's promise.
            unsafe { self.comm.copy(s.user, s.staged) }?;
        }
        Ok(())
    }

    /// Copy the staged receives out, after the step succeeded.
    ///
    /// # Safety
    /// As [`Step::copy_in`].
    pub unsafe fn copy_out(&self) -> Result<(), Error> {
        for s in &self.stage_out {
            // SAFETY: as in `copy_in`.
            unsafe { self.comm.copy(s.staged, s.user) }?;
        }
        Ok(())
    }
}

/// The bytes a set of calls that run together touch: what they write, and what they
/// read. Calls whose slices are alive at the same time (the calls of a group's round, the
/// steps of one part of a graph) must not share a byte that one of them writes: the two
/// would be a mutable slice and another slice of the same memory. Checked per span in
/// O(log n), so long groups and captures stay cheap.
#[derive(Default)]
pub struct Footprint {
    /// Written ranges, disjoint, by start.
    written: BTreeMap<usize, usize>,
    /// The union of the read ranges, as disjoint ranges by start.
    read: BTreeMap<usize, usize>,
}

impl Footprint {
    /// Add every span `step` touches, or refuse the first that meets the footprint,
    /// which then holds part of the step (callers drop a footprint that refused). The
    /// step's own spans are checked against each other the same way: its binding is
    /// disjoint by construction, its staged copies (several sends and receives) are not.
    pub fn claim(&mut self, step: &Step) -> Result<(), CError> {
        for (span, writes) in step.touched() {
            if span.len == 0 {
                continue;
            }
            let clash = match writes {
                true => overlapping(&self.written, span).or_else(|| overlapping(&self.read, span)),
                false => overlapping(&self.written, span),
            };
            if let Some((start, end)) = clash {
                return Err(CError::invalid(format!(
                    "rank {}'s {} {} [{:#x}, {:#x}), which another call run with it \
                     touches ([{start:#x}, {end:#x})), one of them writing: calls of one \
                     group round run at once and need buffers of their own",
                    step.comm.rank(),
                    step.param.kind,
                    if writes { "writes" } else { "reads" },
                    span.addr,
                    span.end()
                )));
            }
            match writes {
                true => {
                    self.written.insert(span.addr, span.end());
                }
                false => insert_union(&mut self.read, span),
            }
        }
        Ok(())
    }
}

/// A range of the disjoint `set` that shares a byte with `span`.
fn overlapping(set: &BTreeMap<usize, usize>, span: Span) -> Option<(usize, usize)> {
    if span.len == 0 {
        return None;
    }
    // The last range starting before the span's end is the only one that can reach it:
    // the ones before it end before it starts.
    set.range(..span.end())
        .next_back()
        .filter(|(_, &end)| end > span.addr)
        .map(|(&start, &end)| (start, end))
}

/// Add `span` to the disjoint `set`, merging the ranges it meets.
fn insert_union(set: &mut BTreeMap<usize, usize>, span: Span) {
    let (mut start, mut end) = (span.addr, span.end());
    while let Some((s, e)) = set
        .range(..=end)
        .next_back()
        .filter(|(_, &e)| e >= start)
        .map(|(&s, &e)| (s, e))
    {
        set.remove(&s);
        start = start.min(s);
        end = end.max(e);
    }
    set.insert(start, end);
}

/// Refuse `steps` when two of them (or two staged buffers of one) share a byte that one
/// of them writes (see [`Footprint`]).
pub fn check_disjoint(steps: &[&Step]) -> Result<(), CError> {
    let mut footprint = Footprint::default();
    steps.iter().try_for_each(|s| footprint.claim(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(addr: usize, len: usize) -> Span {
        Span { addr, len }
    }

    #[test]
    fn the_read_union_merges_what_it_meets() {
        let mut set = BTreeMap::new();
        insert_union(&mut set, span(10, 5));
        insert_union(&mut set, span(30, 5));
        insert_union(&mut set, span(14, 17));
        assert_eq!(set.into_iter().collect::<Vec<_>>(), [(10, 35)]);
    }

    #[test]
    fn overlap_is_found_from_the_range_before_the_end() {
        let set: BTreeMap<usize, usize> = [(0, 10), (20, 30)].into_iter().collect();
        assert_eq!(overlapping(&set, span(25, 100)), Some((20, 30)));
        assert_eq!(overlapping(&set, span(10, 10)), None);
        assert_eq!(overlapping(&set, span(5, 1)), Some((0, 10)));
        assert_eq!(overlapping(&set, span(5, 0)), None);
    }
}
