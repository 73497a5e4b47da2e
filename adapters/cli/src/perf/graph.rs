//! `oxccl perf --graph`: the same rows measured through graph mode (`oxccl-graph`).
//!
//! Every rank captures `steps` copies of the row's call (each step with its own
//! receive buffer; the first step's is the row's, with its guards), compiles once, and
//! each timed iteration is one launch of every rank's graph (a group launch over the
//! ranks this thread drives). The time reported is per call (per launch over `steps`),
//! so a row compares directly with the eager row of the same size. The in-place result
//! is checked with a one-step graph of its own. On GPUs (`--device cuda`) the steps bind
//! device buffers (the row's device copies, then a device receive buffer per step), so
//! the cuda backend replays each launch as a CUDA graph.

use super::data::Aligned;
use super::gpu::GpuCopy;
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
    /// The rank's device copies on GPUs (bound instead of the host buffers), and the
    /// guard bytes before the receive buffer in them.
    pub gpu: Option<(&'b GpuCopy, usize)>,
}

impl RankBinding<'_> {
    /// The first `steps` steps' calls: the row's buffers for the first, the extra ones
    /// after (on the GPU where the rank runs on one).
    fn calls(&mut self, in_place: bool, steps: usize) -> Result<Vec<OpCall<'_>>, Error> {
        let len = self.output.len();
        let op = self.op;
        if let Some((gpu, guard)) = &self.gpu {
            let users = gpu.step_users(*guard, len, in_place, steps)?;
            return Ok(users
                .into_iter()
                .map(|user| OpCall::new(op.clone(), user))
                .collect());
        }
        let rest = self.extra.iter_mut().map(|a| &mut a.bytes_mut()[..len]);
        let input = self.input;
        Ok(std::iter::once(&mut *self.output)
            .chain(rest)
            .take(steps)
            .map(|output| {
                let user = match in_place {
                    true => UserBuffers::InPlace(output),
                    false => UserBuffers::OutOfPlace { input, output },
                };
                OpCall::new(op.clone(), user)
            })
            .collect())
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
                for call in rank.calls(in_place, steps)? {
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
                Ok((graph, comm, rank.calls(in_place, self.steps)?))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Graph::launch_group(launches).into_iter().collect()
    }
}
