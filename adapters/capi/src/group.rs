//! `oxcclGroupStart` / `oxcclGroupEnd`: deferred calls, per thread.
//!
//! Between the outermost start and its end (groups nest, NCCL-style, by a per-thread
//! depth) every call is checked at once, as outside a group, and deferred. At the end:
//!
//! 1. a group in which a call was refused runs nothing and returns that call's error
//!    (NCCL's rule): the rank's other calls would otherwise run out of step;
//! 2. each communicator's sends and receives become one call ([`fuse`]), at the place of
//!    its first send or receive: oxccl matches point-to-point transfers within one call;
//! 3. a communicator in capture records its calls into its graph ([`crate::graph`]);
//! 4. the others run in rounds: round `k` holds each communicator's `k`-th call, and the
//!    calls of the communicators that share a device (the ranks of `oxcclCommInitAll`)
//!    run as one framework group call, which is how one thread drives several ranks;
//!    communicators of different devices run side by side, one thread each;
//! 5. graph launches and capture ends of the group run last: each communicator's in
//!    order, the communicators side by side, one thread each.
//!
//! The caller's streams are waited for on the calling thread, before any thread is
//! spawned: a stream handle may name the calling thread's own stream
//! (`cudaStreamPerThread`).
//!
//! Everything that can be checked is checked before anything runs (communicators still
//! usable, fused buffers disjoint, no two calls of a round touching the same bytes with
//! one writing them); the errors of the calls that ran come from `oxcclGroupEnd`, the
//! first one returned.

use crate::buffers::Span;
use crate::graph::{self, GraphWork};
use crate::handles::Comm;
use crate::result::{guard, CError, OxcclResult};
use crate::side::Block;
use crate::step::{check_disjoint, Binding, Stage, Step};
use oxccl::framework::op::{P2pItem, VLayout};
use oxccl::framework::GroupCall;
use oxccl::{DataType, OpKind, OpParam, Rank, ReduceOp};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One send or one receive, waiting to be fused with the others of its communicator.
pub struct P2pPart {
    pub comm: Arc<Comm>,
    /// The caller's buffer: read by a send, written by a receive.
    pub span: Span,
    pub peer: Rank,
    pub send: bool,
    /// The caller's stream (device memory only).
    pub stream: Option<usize>,
}

/// A checked call, run now or deferred to the group's end.
pub enum Pending {
    Step(Step),
    P2p(P2pPart),
    Graph(GraphWork),
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    pending: Vec<Pending>,
    /// The first call of the open group that was refused.
    refused: Option<CError>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

/// `oxcclGroupStart`.
pub fn start() -> Result<(), CError> {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    Ok(())
}

/// `oxcclGroupEnd`: the outermost one runs the group.
pub fn end() -> Result<(), CError> {
    let (pending, refused) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(CError::usage(
                "oxcclGroupEnd without a matching oxcclGroupStart on this thread",
            ));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), None));
        }
        Ok((std::mem::take(&mut g.pending), g.refused.take()))
    })?;
    if let Some(err) = refused {
        return Err(CError::new(
            err.code,
            format!(
                "a call of this group was refused, so the group ran nothing: {}",
                err.message
            ),
        ));
    }
    run_all(pending)
}

/// The body of exported function `name` that builds one call: `build`'s call (or
/// refusal) submitted, run in [`guard`].
pub fn call(name: &str, build: impl FnOnce() -> Result<Pending, CError>) -> OxcclResult {
    guard(name, || submit(build()))
}

/// Run the call `item` describes, or defer it when a group is open on this thread. A
/// refusal is returned at once, and inside a group also kept for `oxcclGroupEnd`.
pub fn submit(item: Result<Pending, CError>) -> Result<(), CError> {
    let item = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Some(item);
        }
        match item {
            Ok(pending) => {
                g.pending.push(pending);
                None
            }
            Err(err) => {
                g.refused.get_or_insert_with(|| err.clone());
                Some(Err(err))
            }
        }
    });
    match item {
        None => Ok(()),
        Some(item) => run_all(vec![item?]),
    }
}

/// One communicator's share of a group: its calls in order, its point-to-point parts
/// gathered at the place of the first one.
struct Sequence {
    comm: Arc<Comm>,
    entries: Vec<Entry>,
}

enum Entry {
    Step(Step),
    P2p(Vec<P2pPart>),
}

/// Run a group's calls (see the module docs).
fn run_all(items: Vec<Pending>) -> Result<(), CError> {
    let (checked, graph_work) = checked(items)?;
    let (captured, runs): (Vec<_>, Vec<_>) =
        checked.into_iter().partition(|(comm, _)| comm.capturing());
    let rounds = into_rounds(runs.into_iter().map(|(_, steps)| steps).collect());
    for round in &rounds {
        check_disjoint(&round.iter().collect::<Vec<_>>())?;
    }
    for (comm, steps) in captured {
        for step in steps {
            graph::record(&comm, step)?;
        }
    }
    let mut results: Vec<Result<(), CError>> = Vec::new();
    for round in rounds {
        results.extend(run_round(round));
    }
    results.extend(graph::run_work(graph_work));
    results.into_iter().collect()
}

/// Communicators with their calls in order.
type Calls = Vec<(Arc<Comm>, Vec<Step>)>;

/// Each communicator's calls in order, its sends and receives fused, after checking that
/// it is still usable; and the graph work, apart.
fn checked(items: Vec<Pending>) -> Result<(Calls, Vec<GraphWork>), CError> {
    let mut sequences: Vec<Sequence> = Vec::new();
    let mut graph_work: Vec<GraphWork> = Vec::new();
    for item in items {
        match item {
            Pending::Step(step) => sequence_of(&mut sequences, &step.comm)
                .entries
                .push(Entry::Step(step)),
            Pending::P2p(part) => add_part(sequence_of(&mut sequences, &part.comm), part),
            Pending::Graph(work) => graph_work.push(work),
        }
    }
    let mut checked = Vec::with_capacity(sequences.len());
    for seq in sequences {
        seq.comm.check_usable()?;
        let steps = seq
            .entries
            .into_iter()
            .map(|e| match e {
                Entry::Step(step) => Ok(step),
                Entry::P2p(parts) => fuse(&seq.comm, parts),
            })
            .collect::<Result<Vec<Step>, CError>>()?;
        checked.push((seq.comm, steps));
    }
    Ok((checked, graph_work))
}

fn sequence_of<'s>(sequences: &'s mut Vec<Sequence>, comm: &Arc<Comm>) -> &'s mut Sequence {
    let at = match sequences.iter().position(|s| Arc::ptr_eq(&s.comm, comm)) {
        Some(at) => at,
        None => {
            sequences.push(Sequence {
                comm: comm.clone(),
                entries: Vec::new(),
            });
            sequences.len() - 1
        }
    };
    &mut sequences[at]
}

fn add_part(seq: &mut Sequence, part: P2pPart) {
    for entry in &mut seq.entries {
        if let Entry::P2p(parts) = entry {
            parts.push(part);
            return;
        }
    }
    seq.entries.push(Entry::P2p(vec![part]));
}

/// Round `k`: the `k`-th call of every communicator that has one.
fn into_rounds(runs: Vec<Vec<Step>>) -> Vec<Vec<Step>> {
    let mut rounds: Vec<Vec<Step>> = Vec::new();
    for steps in runs {
        for (k, step) in steps.into_iter().enumerate() {
            if rounds.len() <= k {
                rounds.push(Vec::new());
            }
            rounds[k].push(step);
        }
    }
    rounds
}

/// One communicator's sends and receives as one send/recv call over bytes (every rank
/// fuses the same way, so the `k`-th send of a rank to a peer still meets the `k`-th
/// receive there). One send and one receive bind the caller's buffers; more are staged
/// through blocks of oxccl's, since one call binds one buffer each way.
fn fuse(comm: &Arc<Comm>, parts: Vec<P2pPart>) -> Result<Step, CError> {
    let streams: Vec<usize> = parts.iter().filter_map(|p| p.stream).collect();
    Ok(fused(comm, parts)?.on_streams(streams))
}

/// [`fuse`]'s step, before it waits for the parts' streams.
fn fused(comm: &Arc<Comm>, parts: Vec<P2pPart>) -> Result<Step, CError> {
    let (sends, recvs): (Vec<P2pPart>, Vec<P2pPart>) = parts
        .into_iter()
        .filter(|p| p.span.len > 0)
        .partition(|p| p.send);
    let item = |p: &P2pPart, offset| P2pItem {
        peer: p.peer,
        offset,
        count: p.span.len,
    };
    let param = |s: Vec<P2pItem>, r: Vec<P2pItem>| {
        let layout = VLayout::P2p { sends: s, recvs: r };
        OpParam::vector(OpKind::SendRecv, layout, DataType::U8, ReduceOp::Sum)
    };
    if sends.len() <= 1 && recvs.len() <= 1 {
        let input = sends.first().map_or(Span::EMPTY, |p| p.span);
        let output = recvs.first().map_or(Span::EMPTY, |p| p.span);
        let op = param(
            sends.iter().map(|p| item(p, 0)).collect(),
            recvs.iter().map(|p| item(p, 0)).collect(),
        );
        return Step::new(comm.clone(), op, Binding::OutOfPlace { input, output });
    }
    let (send_block, send_items, stage_in) = stage(comm, &sends, &item)?;
    let (recv_block, recv_items, stage_out) = stage(comm, &recvs, &item)?;
    let binding = Binding::OutOfPlace {
        input: send_block.span(),
        output: recv_block.span(),
    };
    let step = Step::staged(
        comm.clone(),
        param(send_items, recv_items),
        binding,
        vec![send_block, recv_block],
        stage_in,
        stage_out,
    )?;
    check_disjoint(&[&step])?;
    Ok(step)
}

/// A block holding `parts` one after the other, their items at those offsets, and the
/// copies between the caller's buffers and the block.
fn stage(
    comm: &Comm,
    parts: &[P2pPart],
    item: &dyn Fn(&P2pPart, usize) -> P2pItem,
) -> Result<(Block, Vec<P2pItem>, Vec<Stage>), CError> {
    let total = parts
        .iter()
        .try_fold(0usize, |sum, p| sum.checked_add(p.span.len))
        .ok_or_else(|| CError::invalid("the group's sends or receives overflow a byte count"))?;
    let block = comm.zeroed_block(total)?;
    let mut items = Vec::with_capacity(parts.len());
    let mut stages = Vec::with_capacity(parts.len());
    let mut offset = 0;
    for p in parts {
        items.push(item(p, offset));
        stages.push(Stage {
            user: p.span,
            staged: block.part(offset, p.span.len),
        });
        offset += p.span.len;
    }
    Ok((block, items, stages))
}

/// A step of a round, and whether it was made ready to run ([`Step::prepare`]).
type Ready = (Step, Result<(), CError>);

/// Run one round: the calls of communicators that share a device as one group call,
/// the devices side by side.
///
/// Each step is made ready first, on the calling thread ([`Step::prepare`]: the
/// caller's streams waited for, staged sends copied in): a stream handle may name the
/// calling thread's own stream (`cudaStreamPerThread`), which a thread spawned to run a
/// device would take for its own. A step that cannot start does not run, and aborts its
/// communicator, which releases the peers that would wait for it.
fn run_round(round: Vec<Step>) -> Vec<Result<(), CError>> {
    let mut by_device: BTreeMap<usize, Vec<Ready>> = BTreeMap::new();
    for step in round {
        // SAFETY: the staged spans are the callers' live buffers (NCCL's contract), and
        // no other step of the round writes them (checked before the round).
        let ready = unsafe { step.prepare() }.map_err(|e| step.comm.failed_to_start(&e));
        by_device
            .entry(step.comm.device_key())
            .or_default()
            .push((step, ready));
    }
    if by_device.len() <= 1 {
        return by_device.into_values().flat_map(run_batch).collect();
    }
    std::thread::scope(|s| {
        let threads: Vec<_> = by_device
            .into_values()
            .map(|batch| s.spawn(move || run_batch(batch)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Run the calls of ranks that share one device as one framework group call: each step
/// with whether it was made ready ([`run_round`]); those that were not do not run.
fn run_batch(steps: Vec<Ready>) -> Vec<Result<(), CError>> {
    let (steps, mut outcomes): (Vec<Step>, Vec<Result<(), CError>>) = steps.into_iter().unzip();
    let ready: Vec<&Step> = steps
        .iter()
        .zip(&outcomes)
        .filter(|(_, prepared)| prepared.is_ok())
        .map(|(step, _)| step)
        .collect();
    let calls: Vec<GroupCall<'_, '_>> = ready
        .iter()
        .map(|s| {
            // SAFETY: the callers' live buffers, checked disjoint across the round where
            // written; the slices live until `execute_calls` returns.
            let user = unsafe { s.user_buffers() };
            GroupCall::Run(s.comm.inner.framework(), s.param.clone(), user)
        })
        .collect();
    let mut results = oxccl::framework::Communicator::execute_calls(calls).into_iter();
    for (step, outcome) in steps.iter().zip(&mut outcomes) {
        if outcome.is_err() {
            continue;
        }
        let result = results.next().expect("one result per call run");
        // SAFETY: as for `prepare`; the call's slices are gone.
        *outcome = step
            .comm
            .outcome(result.and_then(|()| unsafe { step.copy_out() }));
    }
    outcomes
}
