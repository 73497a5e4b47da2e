//! A compiled capture, launched with buffers bound.

use oxccl::framework::Step;
use oxccl::{Communicator, Error, OpCall};

/// One rank's compiled sequence (see the crate docs). It owns its programs and does not
/// borrow the communicator; it launches only on the communicator rank that compiled it.
#[derive(Clone, Debug)]
pub struct Graph {
    steps: Vec<Step>,
}

impl Graph {
    pub(crate) fn new(steps: Vec<Step>) -> Self {
        Graph { steps }
    }

    /// Steps in the graph.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the graph has no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The compiled steps, in order: operator, form, sizes and executor of each.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Run the graph on `comm` (the rank that compiled it) with `calls` bound, one per
    /// step in capture order, each with the operator and buffer sizes captured; blocks
    /// until every step is done on this rank. Every rank launches its graph at the same
    /// point of its calls. A binding that differs from the capture is
    /// [`Error::GraphBinding`], before anything runs.
    pub fn launch(&self, comm: &Communicator, calls: Vec<OpCall<'_>>) -> Result<(), Error> {
        if calls.len() != self.steps.len() {
            return Err(Error::GraphBinding {
                step: calls.len().min(self.steps.len()),
                reason: format!(
                    "does not match: {} steps were captured and {} calls bound; bind one \
                     call per step",
                    self.steps.len(),
                    calls.len()
                ),
            });
        }
        let mut users = Vec::with_capacity(calls.len());
        for (index, (call, step)) in calls.into_iter().zip(&self.steps).enumerate() {
            let (op, user) = call.into_parts();
            if op != *step.op() {
                return Err(Error::GraphBinding {
                    step: index,
                    reason: format!(
                        "was captured as {} and is bound as {}",
                        describe(step.op()),
                        describe(&op)
                    ),
                });
            }
            users.push(user);
        }
        comm.framework().run_sequence(&self.steps, users)
    }
}

/// `all-reduce f32 Sum count 256`, or `... with a layout`.
fn describe(op: &oxccl::OpParam) -> String {
    let mut text = format!("{} {}", op.kind, op.dtype);
    if op.kind.reduces() {
        text += &format!(" {:?}", op.op);
    }
    if let Some(root) = op.root {
        text += &format!(" root {root}");
    }
    match op.layout {
        Some(_) => text + " with its layout",
        None => text + &format!(" count {}", op.count),
    }
}
