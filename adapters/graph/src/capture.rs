//! Recording the shapes of a rank's calls.

use crate::agree::{self, Mine};
use crate::{check, Graph};
use oxccl::framework::Step;
use oxccl::{Communicator, Error, OpCall, OpParam};

/// Most steps one capture holds: the compile-time exchange sends a fixed record per step
/// to every rank, so its size is bounded.
pub const MAX_STEPS: usize = 1 << 16;

/// One rank's captured sequence: the operator and the buffer sizes of each call, in
/// order. It borrows nothing: buffers are bound again at every launch.
#[derive(Clone, Debug, Default)]
pub struct Capture {
    steps: Vec<Shape>,
}

/// One captured call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub op: OpParam,
    /// Byte lengths of (input, output); input `None` in place.
    pub lens: (Option<usize>, usize),
}

impl Capture {
    /// An empty capture.
    pub fn new() -> Self {
        Capture::default()
    }

    /// Append `call` (its operator, form and buffer sizes; not its buffers) as the next
    /// step; returns the step's index. The call is checked at compile, as a call with
    /// such buffers would be.
    pub fn record(&mut self, call: &OpCall<'_>) -> Result<usize, Error> {
        if self.steps.len() >= MAX_STEPS {
            return Err(Error::GraphBinding {
                step: self.steps.len(),
                reason: format!(
                    "exceeds the {MAX_STEPS} steps a capture may hold; split the sequence \
                     into several graphs"
                ),
            });
        }
        self.steps.push(Shape {
            op: call.param().clone(),
            lens: call.user().lens_by_form(),
        });
        Ok(self.steps.len() - 1)
    }

    /// Steps captured.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether nothing was captured.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Compile the capture on `comm`: a collective call, made by every rank of the
    /// communicator at the same point of its calls (it runs four AllGathers). Each step is
    /// validated, and the ranks agree that they captured the same sequence; then each
    /// step is selected, planned and compiled, and the ranks agree that they chose the
    /// same executors and that every step could be prepared; else every rank gets
    /// [`Error::CaptureMismatch`] naming the first differing step (or, on the rank whose
    /// step was refused, that step's own error). With `OXCCL_GRAPH_CHECK=1` the analyzer
    /// then proves the sequence ([`Error::GraphCheck`] when it does not pass).
    pub fn compile(self, comm: &Communicator) -> Result<Graph, Error> {
        let inner = comm.framework();
        fn mine<'s>(s: &'s Shape, executor: Option<&'static str>) -> Mine<'s> {
            Mine {
                op: &s.op,
                in_place: s.lens.0.is_none(),
                executor,
            }
        }
        let shapes: Vec<Result<Mine<'_>, Error>> = self
            .steps
            .iter()
            .map(|s| inner.validate_step(&s.op, s.lens).map(|()| mine(s, None)))
            .collect();
        agree::agree(comm, &shapes)?;
        let prepared: Vec<Result<Step, Error>> = self
            .steps
            .iter()
            .map(|s| inner.prepare_step(&s.op, s.lens))
            .collect();
        let executors: Vec<Result<Mine<'_>, Error>> = self
            .steps
            .iter()
            .zip(&prepared)
            .map(|(s, p)| match p {
                Ok(step) => Ok(mine(s, step.executor())),
                Err(e) => Err(e.clone()),
            })
            .collect();
        agree::agree(comm, &executors)?;
        let steps = prepared
            .into_iter()
            .collect::<Result<Vec<_>, Error>>()
            .expect("agree refuses a capture with a refused step");
        if inner.config().graph_check {
            check::prove(inner, &steps)?;
        }
        tracing::debug!(rank = comm.rank(), steps = steps.len(), "graph compiled");
        Ok(Graph::new(steps))
    }

    /// Compile several ranks' captures from one thread (the ranks' compiles meet in
    /// collectives, so each runs on a thread of its own here). One result per entry, in
    /// order.
    pub fn compile_group(captures: Vec<(Capture, &Communicator)>) -> Vec<Result<Graph, Error>> {
        if captures.len() <= 1 {
            return captures
                .into_iter()
                .map(|(capture, comm)| capture.compile(comm))
                .collect();
        }
        std::thread::scope(|s| {
            let compiles: Vec<_> = captures
                .into_iter()
                .map(|(capture, comm)| s.spawn(move || capture.compile(comm)))
                .collect();
            compiles
                .into_iter()
                .map(|c| {
                    c.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }
}
