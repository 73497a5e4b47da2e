//! Graph calls: capture a communicator's calls once, compile them, launch them many times.
//!
//! `oxcclGraphCaptureBegin(comm)` opens a capture: from then on the calls on `comm`
//! (single calls, and the calls of groups, a group's sends and receives as one step) are
//! recorded, not run. Each step keeps the caller's buffers, as a CUDA graph keeps the
//! pointers it captured. `oxcclGraphCaptureEnd(comm, &graph)` compiles the capture
//! ([`Capture::compile`]: a collective call, every rank ends its capture at the same
//! point, and a rank that captured another sequence is told which step differs) and
//! returns the graph. `oxcclGraphLaunch(graph, stream)` binds every step's captured
//! buffers again and runs the sequence ([`Graph::launch`]), also a collective call.
//!
//! A launch of a [`Graph`] binds all its steps at once, as slices alive together; two
//! steps sharing bytes that one of them writes (an AllReduce in place, then an AllGather
//! of its result) would be aliasing slices. So a capture is cut into parts of disjoint
//! steps, cut where any rank's next step meets what its part touches (the ranks agree on
//! the cuts when the capture ends); each part is one compiled graph, and a launch runs
//! the parts one after the other. A capture without such reuse is one part.
//!
//! Inside a group, capture ends and launches are deferred like calls and run at the
//! group's end, after its collectives: each communicator's in order, the communicators
//! side by side, one thread each. That is how one thread ends the captures of, or
//! launches, the ranks of `oxcclCommInitAll`, which must all take part at once.

use crate::buffers::write_out;
use crate::collectives::OxcclStream;
use crate::group::{self, Pending};
use crate::handles::{Comm, OxcclComm, Table};
use crate::result::{guard, CError, OxcclResult};
use crate::step::{Footprint, Step};
use oxccl_graph::{Capture, Graph};
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::Arc;

/// The C type behind `oxcclGraph_t`: never constructed, only pointed to.
#[repr(C)]
pub struct OxcclGraph {
    _opaque: [u8; 0],
}

/// Every live graph.
static GRAPHS: Table<GraphObj> = Table::new("graph");

/// A communicator's open capture: the steps with their buffers, and where this rank's
/// steps stop being disjoint.
#[derive(Default)]
pub struct Capturing {
    steps: Vec<Step>,
    /// Indices of steps that touch bytes an earlier step of their part writes (or write
    /// what it touches): each starts a new part.
    starts: Vec<usize>,
    /// What the current part's steps touch.
    footprint: Footprint,
}

/// A compiled graph as C holds it: its parts, each a range of steps compiled as one
/// [`Graph`], launched in order.
pub struct GraphObj {
    comm: Arc<Comm>,
    parts: Vec<(Range<usize>, Graph)>,
    /// The captured steps; locked for a launch, since staged steps reuse their blocks.
    steps: Mutex<Vec<Step>>,
}

/// Graph work deferred to a group's end.
pub enum GraphWork {
    /// Compile `comm`'s capture and write the graph's handle to `out`.
    End { comm: Arc<Comm>, out: usize },
    /// Launch the graph after the work queued on the caller's stream (device memory
    /// only).
    Launch(Arc<GraphObj>, Option<usize>),
}

/// Record `step` into `comm`'s open capture instead of running it.
pub fn record(comm: &Comm, step: Step) -> Result<(), CError> {
    comm.with_capture(|slot| {
        let open = slot
            .as_mut()
            .ok_or_else(|| CError::usage("the communicator's capture ended before this call"))?;
        if open.footprint.claim(&step).is_err() {
            open.starts.push(open.steps.len());
            open.footprint = Footprint::default();
            open.footprint.claim(&step)?;
        }
        open.steps.push(step);
        Ok(())
    })
}

/// Graph work, and whether its stream was waited for ([`GraphWork::wait_stream`]).
type Waited = (GraphWork, Result<(), CError>);

/// Run deferred graph work: each communicator's items in order, the communicators side by
/// side (one thread each) when there are several.
///
/// Launches wait for their streams first, on the calling thread: a stream handle may name
/// the calling thread's own stream (`cudaStreamPerThread`), which a spawned thread would
/// take for its own.
pub fn run_work(work: Vec<GraphWork>) -> Vec<Result<(), CError>> {
    let mut by_comm: Vec<(usize, Vec<Waited>)> = Vec::new();
    for item in work {
        let key = Arc::as_ptr(item.comm()) as usize;
        let waited = item.wait_stream();
        match by_comm.iter_mut().find(|(k, _)| *k == key) {
            Some((_, items)) => items.push((item, waited)),
            None => by_comm.push((key, vec![(item, waited)])),
        }
    }
    let run = |items: Vec<Waited>| items.into_iter().map(run_one).collect::<Vec<_>>();
    if by_comm.len() <= 1 {
        return by_comm
            .into_iter()
            .flat_map(|(_, items)| run(items))
            .collect();
    }
    std::thread::scope(|s| {
        let threads: Vec<_> = by_comm
            .into_iter()
            .map(|(_, items)| s.spawn(move || run(items)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl GraphWork {
    /// The communicator the work runs on.
    fn comm(&self) -> &Arc<Comm> {
        match self {
            GraphWork::End { comm, .. } => comm,
            GraphWork::Launch(graph, _) => &graph.comm,
        }
    }

    /// A launch: wait for the work queued on its stream (device memory only). A wait
    /// that fails aborts the communicator, which releases the peers that would wait for
    /// the launch.
    fn wait_stream(&self) -> Result<(), CError> {
        let GraphWork::Launch(graph, stream) = self else {
            return Ok(());
        };
        let comm = &graph.comm;
        comm.check_usable()?;
        let streams: Vec<usize> = stream.iter().copied().collect();
        comm.sync_streams(&streams)
            .map_err(|e| comm.failed_to_start(&e))
    }
}

/// `work`, once its stream was waited for (`waited`: see [`run_work`]).
fn run_one((work, waited): Waited) -> Result<(), CError> {
    waited?;
    match work {
        GraphWork::End { comm, out } => end_capture(&comm, out),
        GraphWork::Launch(graph, _) => launch(&graph),
    }
}

/// Compile `comm`'s capture, part by part, and hand out the graph.
fn end_capture(comm: &Arc<Comm>, out: usize) -> Result<(), CError> {
    comm.check_usable()?;
    let open = comm
        .with_capture(Option::take)
        .ok_or_else(|| CError::usage("no graph capture is open on this communicator"))?;
    let ranges = agree_parts(comm, &open)?;
    let whole = ranges.len() == 1;
    let mut parts = Vec::with_capacity(ranges.len());
    for range in ranges {
        let mut capture = Capture::new();
        for step in &open.steps[range.clone()] {
            // SAFETY: the step's spans are the caller's live buffers (they stay valid for
            // every launch); the call is only described, its slices end here.
            let recorded = capture.record(&unsafe { step.op_call() });
            recorded.map_err(|e| CError::from_oxccl(&e, Some(comm.rank())))?;
        }
        match capture.compile(&comm.inner) {
            Ok(graph) => parts.push((range, graph)),
            Err(err) => {
                let refused = comm.failed(&err);
                return Err(match whole {
                    true => refused,
                    false => CError::new(
                        refused.code,
                        format!(
                            "steps {}..{} of the capture, compiled as one part (step numbers \
                             below count from its start): {}",
                            range.start, range.end, refused.message
                        ),
                    ),
                });
            }
        }
    }
    let handle = GRAPHS.insert(Arc::new(GraphObj {
        comm: comm.clone(),
        parts,
        steps: Mutex::new(open.steps),
    }));
    // SAFETY: `out` was checked writable when oxcclGraphCaptureEnd was called, and stays
    // so until the group ends (that function's contract).
    unsafe {
        write_out(
            "graph",
            out as *mut *mut OxcclGraph,
            handle as *mut OxcclGraph,
        )
    }
}

/// The parts every rank compiles: the ranges between the steps where any rank's steps
/// stop being disjoint, agreed with two AllGathers (every rank must compile the same
/// parts). Ranks that captured different numbers of steps compile one part, whose
/// compile then tells every rank of the mismatch.
fn agree_parts(comm: &Comm, open: &Capturing) -> Result<Vec<Range<usize>>, CError> {
    let len = open.steps.len();
    let lens = comm
        .inner
        .all_gather_to_vec(&[len as u64])
        .map_err(|e| comm.failed(&e))?;
    if lens.iter().any(|&l| l != len as u64) {
        return Ok(std::iter::once(0..len).collect());
    }
    let words = len.div_ceil(64).max(1);
    let mut mine = vec![0u64; words];
    for &start in &open.starts {
        mine[start / 64] |= 1 << (start % 64);
    }
    let all = comm
        .inner
        .all_gather_to_vec(&mine)
        .map_err(|e| comm.failed(&e))?;
    let starts = (1..len).filter(|&i| all.chunks(words).any(|w| w[i / 64] & (1 << (i % 64)) != 0));
    let mut bounds: Vec<usize> = std::iter::once(0).chain(starts).collect();
    bounds.push(len);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}

/// Bind every captured step's buffers again and run the graph's parts in order, once the
/// work queued on the launch's stream was waited for ([`GraphWork::wait_stream`]: the
/// launch's stream, as a CUDA graph launches on one; the streams the steps were captured
/// on are not waited for).
fn launch(obj: &GraphObj) -> Result<(), CError> {
    obj.comm.check_usable()?;
    let comm = &obj.comm;
    let steps = obj.steps.lock();
    for (range, graph) in &obj.parts {
        let part = &steps[range.clone()];
        for step in part {
            // SAFETY: the captured buffers stay valid for every launch (the contract of
            // oxcclGraphCaptureBegin); the steps' own blocks are locked for this launch.
            unsafe { step.copy_in() }.map_err(|e| comm.failed_to_start(&e))?;
        }
        // SAFETY: as above; no two steps of a part share a byte that one writes (the
        // capture's footprint), so the slices of one part's launch do not alias.
        let calls = part.iter().map(|s| unsafe { s.op_call() }).collect();
        comm.outcome(graph.launch(&comm.inner, calls))?;
        for step in part {
            // SAFETY: as for `copy_in`; the part's slices are gone.
            comm.outcome(unsafe { step.copy_out() })?;
        }
    }
    Ok(())
}

/// Begin capturing `comm`'s calls.
///
/// # Safety
/// `comm` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclGraphCaptureBegin(comm: *mut OxcclComm) -> OxcclResult {
    guard("oxcclGraphCaptureBegin", || {
        let comm = Comm::usable(comm)?;
        comm.with_capture(|slot| match slot {
            Some(_) => Err(CError::usage(
                "a graph capture is already open on this communicator; end it first",
            )),
            None => {
                *slot = Some(Capturing::default());
                Ok(())
            }
        })
    })
}

/// End `comm`'s capture and compile it (collective), writing the graph to `graph`.
///
/// # Safety
/// `comm` is a handle from oxccl (checked); `graph` points at a writable `oxcclGraph_t`
/// (checked for NULL and alignment), which stays valid until the group ends when the
/// call is made inside one.
#[no_mangle]
pub unsafe extern "C" fn oxcclGraphCaptureEnd(
    comm: *mut OxcclComm,
    graph: *mut *mut OxcclGraph,
) -> OxcclResult {
    group::call("oxcclGraphCaptureEnd", || {
        let comm = Comm::usable(comm)?;
        // SAFETY: `graph` is writable when valid (this function's contract).
        unsafe { write_out("graph", graph, std::ptr::null_mut()) }?;
        if !comm.capturing() {
            return Err(CError::usage(
                "no graph capture is open on this communicator: call \
                 oxcclGraphCaptureBegin first",
            ));
        }
        let out = graph as usize;
        Ok(Pending::Graph(GraphWork::End { comm, out }))
    })
}

/// Launch `graph` on its captured buffers (collective).
///
/// # Safety
/// `graph` is a handle from oxccl (checked) or NULL; the captured buffers are valid.
#[no_mangle]
pub unsafe extern "C" fn oxcclGraphLaunch(
    graph: *mut OxcclGraph,
    stream: *mut OxcclStream,
) -> OxcclResult {
    group::call("oxcclGraphLaunch", || {
        let obj = GRAPHS.get(graph as usize)?;
        let stream = obj.comm.stream(stream)?;
        obj.comm.check_usable()?;
        Ok(Pending::Graph(GraphWork::Launch(obj, stream)))
    })
}

/// Free `graph`; a launch in flight on another thread finishes first.
///
/// # Safety
/// `graph` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclGraphDestroy(graph: *mut OxcclGraph) -> OxcclResult {
    guard("oxcclGraphDestroy", || {
        GRAPHS.remove(graph as usize).map(drop)
    })
}
