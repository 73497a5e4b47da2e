//! `oxccl perf --graph`: the same rows measured through graph mode (`oxccl-graph`).
//!
//! Every rank captures `steps` copies of the row's call (each step with its own
//! receive buffer; the first step's is the row's, with its guards), compiles once, and
//! each timed iteration is one launch of every rank's graph (a group launch over the
//! ranks this thread drives). The time reported is per call (per launch over `steps`),
//! so a row compares directly with the eager row of the same size. The in-place result
//! is checked with a one-step graph of its own.

use super::data::Aligned;
use oxccl::{Communicator, Error, OpCall, OpParam, UserBuffers};
use oxccl_graph::{Capture, Graph};

/// One form's graphs, one per rank this thread drives.
pub struct Graphs {
    graphs: Vec<Graph>,
    pub steps: usize,
}

/// What a rank binds at every launch: the row's buffers (receive buffer inside its
/// guards) and the extra receive buffers of the steps after the first.
pub struct RankBinding<'b> {
    pub comm: &'b Communicator,
    pub op: &'b OpParam,
    pub input: &'b [u8],
    pub output: &'b mut [u8],
    pub extra: &'b mut [Aligned],
}

impl RankBinding<'_> {
    /// Every step's call: the row's buffers for the first, the extra ones after.
    fn calls(&mut self, in_place: bool) -> Vec<OpCall<'_>> {
        let len = self.output.len();
        let rest = self.extra.iter_mut().map(|a| &mut a.bytes_mut()[..len]);
        let (input, op) = (self.input, self.op);
        std::iter::once(&mut *self.output)
            .chain(rest)
            .map(|output| {
                let user = match in_place {
                    true => UserBuffers::InPlace(output),
                    false => UserBuffers::OutOfPlace { input, output },
                };
                OpCall::new(op.clone(), user)
            })
            .collect()
    }
}

impl Graphs {
    /// Capture `steps` calls per rank of `ranks` and compile them.
    pub fn compile(
        ranks: &mut [RankBinding<'_>],
        steps: usize,
        in_place: bool,
    ) -> Result<Self, Error> {
        let captures = ranks
            .iter_mut()
            .map(|rank| {
                let mut capture = Capture::new();
                for call in rank.calls(in_place).into_iter().take(steps) {
                    capture.record(&call)?;
                }
                Ok((capture, rank.comm))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let graphs = Capture::compile_group(captures)
            .into_iter()
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Graphs { graphs, steps })
    }

    /// One launch of every rank's graph.
    pub fn launch(&self, ranks: &mut [RankBinding<'_>], in_place: bool) -> Result<(), Error> {
        let launches = self
            .graphs
            .iter()
            .zip(ranks.iter_mut())
            .map(|(graph, rank)| {
                let comm = rank.comm;
                let calls = rank.calls(in_place).into_iter().take(self.steps).collect();
                (graph, comm, calls)
            })
            .collect();
        Graph::launch_group(launches).into_iter().collect()
    }
}
