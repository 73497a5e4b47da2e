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
    /// [`Error::GraphBinding`] before anything runs; the launch still counts as the
    /// graph's calls, so the ranks stay in step (see the framework's
    /// [`run_sequences`](oxccl::framework::Communicator::run_sequences)).
    pub fn launch(&self, comm: &Communicator, calls: Vec<OpCall<'_>>) -> Result<(), Error> {
        let bound = calls.into_iter().map(OpCall::into_parts).collect();
        comm.framework().run_sequence(&self.steps, bound)
    }

    /// Launch several ranks' graphs from one thread (as a [`oxccl::Group`] runs several
    /// ranks' calls): every rank's steps go to the device together. One result per
    /// entry, in order.
    pub fn launch_group(
        launches: Vec<(&Graph, &Communicator, Vec<OpCall<'_>>)>,
    ) -> Vec<Result<(), Error>> {
        let runs = launches
            .into_iter()
            .map(|(graph, comm, calls)| {
                let bound = calls.into_iter().map(OpCall::into_parts).collect();
                (comm.framework(), graph.steps.as_slice(), bound)
            })
            .collect();
        oxccl::framework::Communicator::run_sequences(runs)
    }
}
