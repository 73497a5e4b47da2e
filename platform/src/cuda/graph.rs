//! A sequence of calls of one GPU as a CUDA graph: graph mode's launches (`oxccl-graph`)
//! replayed by the driver instead of launched call by call.
//!
//! A replayed sequence is the same program kernels an eager call would launch, one per
//! step, in a chain of kernel nodes: cooperative (the node attribute, as
//! `cuLaunchCooperativeKernel` is for a launch), each with the grid its programs need
//! ([`GpuGroup::grid`]), so the graph is built once per sequence of programs. The nodes
//! are added one by one rather than captured from a stream: a replay changes each node's
//! argument (its epoch, where its table of user buffers starts), which takes the node's
//! handle, and capture does not hand those out.
//!
//! What changes from one replay to the next is written before it, on the GPU's stream:
//! every step's descriptor (the user buffers bound this time, the fence lists) into the
//! graph's own descriptor memory in one copy, the barrier counters zeroed in one memset;
//! then `cuGraphLaunch` and the GPU's done event. Each step and rank has its own fault and
//! progress words (a block of mapped host memory of the graph's), so the watchdog names
//! the step that stuck, not the words a later or earlier step left.
//!
//! A graph is kept per GPU for the programs it was built for ([`SequenceGraph::fits`]),
//! by weak reference: the programs' owner (the user's `Graph`) decides how long they live,
//! and a graph whose programs are gone is dropped at the next build.

use super::compile::CudaProgram;
use super::driver::{cu, Gpu};
use super::group::{GpuGroup, Grid};
use super::launch::Launch;
use super::memory::{DevAlloc, Mapped};
use super::program::{Params, ENTRY_WORDS};
use super::{CudaError, Shared};
use crate::device::Compiled;
use crate::error::{ConfigFault, DeviceError};
use cudarc::driver::sys;
use std::sync::{Arc, Weak};

/// Graphs a GPU keeps (most recently used last).
pub(crate) const GRAPHS_KEPT: usize = 8;

/// One step of a sequence on a GPU: the programs of its ranks (by slot), at one epoch.
pub(crate) struct StepPrograms<'a> {
    pub compiled: Vec<&'a Arc<Compiled>>,
    pub programs: Vec<&'a CudaProgram>,
}

/// One step's node and where its memory lies.
struct GraphStep {
    node: sys::CUgraphNode,
    grid: Grid,
    /// Word offset of its descriptor in the graph's descriptor memory, and its capacity.
    desc_at: usize,
    desc_words: usize,
    /// Word offset of its barrier counters.
    counters_at: usize,
    /// Per run (by slot): the index of its fault word in the graph's word block.
    words_at: Vec<usize>,
}

/// A sequence of calls of one GPU, instantiated.
pub(crate) struct SequenceGraph {
    gpu: Arc<Gpu>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    steps: Vec<GraphStep>,
    desc: DevAlloc,
    counters: DevAlloc,
    counters_len: usize,
    words: Arc<Mapped>,
    /// The programs it was built for, per step and slot.
    programs: Vec<Vec<Weak<Compiled>>>,
}

// SAFETY: the graph handles are used with the GPU's context current, from one thread at
// a time (the GPU's list of graphs is behind a lock).
unsafe impl Send for SequenceGraph {}
// SAFETY: as above.
unsafe impl Sync for SequenceGraph {}

/// Words of a step's descriptor at most: an entry per stream, then per run its two
/// fence lists (each at most every local rank), then the table of user buffers.
fn desc_capacity(grid: Grid, runs: usize, local: usize, ranks: usize) -> Option<usize> {
    let entries = grid.entries.checked_mul(ENTRY_WORDS)?;
    let fences = runs.checked_mul(local.checked_mul(2)?.checked_add(2)?)?;
    entries
        .checked_add(fences)?
        .checked_add(ranks.checked_mul(2)?)
}

impl SequenceGraph {
    /// Build and instantiate the graph of `steps` on `group`'s GPU.
    pub fn build(
        shared: &Shared,
        group: &GpuGroup,
        steps: &[StepPrograms<'_>],
    ) -> Result<SequenceGraph, DeviceError> {
        let gpu = &group.gpu;
        let _current = gpu.bind()?;
        let too_large = || {
            DeviceError::from(ConfigFault::TooLarge {
                what: "a CUDA graph's descriptors",
            })
        };
        let (local, ranks) = (shared.ranks.len(), shared.config.ranks);
        // Each step's place in the graph's memory; its node is added once the graph exists.
        let mut layout = Vec::with_capacity(steps.len());
        let (mut desc_len, mut counters_len, mut words_len) = (0usize, 0usize, 0usize);
        for step in steps {
            let grid = group.grid(step.programs.iter().copied())?;
            let runs = step.programs.len();
            let desc_words = desc_capacity(grid, runs, local, ranks).ok_or_else(too_large)?;
            let mut words_at = Vec::with_capacity(runs);
            for program in &step.programs {
                words_at.push(words_len);
                words_len = words_len
                    .checked_add(1 + program.streams.len())
                    .ok_or_else(too_large)?;
            }
            layout.push(GraphStep {
                node: std::ptr::null_mut(),
                grid,
                desc_at: desc_len,
                desc_words,
                counters_at: counters_len,
                words_at,
            });
            desc_len = desc_len.checked_add(desc_words).ok_or_else(too_large)?;
            counters_len = counters_len
                .checked_add(grid.counters(runs))
                .ok_or_else(too_large)?;
        }
        let desc_bytes = desc_len.checked_mul(8).ok_or_else(too_large)?;
        let counters_bytes = counters_len.checked_mul(4).ok_or_else(too_large)?;
        let mut built = SequenceGraph {
            gpu: gpu.clone(),
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            steps: Vec::new(),
            desc: DevAlloc::zeroed(gpu, desc_bytes, "a CUDA graph's descriptors")?,
            counters: DevAlloc::zeroed(gpu, counters_bytes, "a CUDA graph's counters")?,
            counters_len,
            words: Arc::new(Mapped::new(gpu, words_len)?),
            programs: steps
                .iter()
                .map(|s| s.compiled.iter().map(|c| Arc::downgrade(c)).collect())
                .collect(),
        };
        cu!(cuGraphCreate(&mut built.graph, 0))?;
        let mut previous = None;
        for step in &mut layout {
            let desc = built.desc.ptr + step.desc_at as u64 * 8;
            let params = step.grid.params(shared, desc, 0, 0);
            step.node = built.add_node(step.grid, params, previous)?;
            previous = Some(step.node);
        }
        built.steps = layout;
        cu!(cuGraphInstantiateWithFlags(&mut built.exec, built.graph, 0))?;
        Ok(built)
    }

    /// A cooperative kernel node of the program kernel after `previous`.
    fn add_node(
        &self,
        grid: Grid,
        mut params: Params,
        previous: Option<sys::CUgraphNode>,
    ) -> Result<sys::CUgraphNode, DeviceError> {
        let mut args = [(&mut params as *mut Params).cast::<std::ffi::c_void>()];
        let node_params = kernel_node(&self.gpu, grid, &mut args);
        let deps: Vec<sys::CUgraphNode> = previous.into_iter().collect();
        let mut node = std::ptr::null_mut();
        cu!(cuGraphAddKernelNode_v2(
            &mut node,
            self.graph,
            deps.as_ptr(),
            deps.len(),
            &node_params
        ))?;
        // SAFETY: an all-zero attribute value is valid; only `cooperative` is read.
        let mut value: sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
        value.cooperative = 1;
        cu!(cuGraphKernelNodeSetAttribute(
            node,
            sys::CUkernelNodeAttrID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            &value
        ))?;
        Ok(node)
    }

    /// Whether the graph was built for exactly these programs (a weak reference keeps
    /// its program's allocation, so no other program can have the same address).
    pub fn fits(&self, steps: &[StepPrograms<'_>]) -> bool {
        self.programs.len() == steps.len()
            && self.programs.iter().zip(steps).all(|(kept, step)| {
                kept.len() == step.compiled.len()
                    && kept
                        .iter()
                        .zip(&step.compiled)
                        .all(|(k, c)| std::ptr::eq(k.as_ptr(), Arc::as_ptr(c)))
            })
    }

    /// Whether every program it was built for is still alive.
    pub fn is_live(&self) -> bool {
        self.programs.iter().flatten().all(|w| w.strong_count() > 0)
    }

    /// Replay the graph with `steps` (per step its epoch and its runs, by slot, as
    /// [`SequenceGraph::build`] saw their programs) bound, and record the GPU's done
    /// event after it.
    pub fn replay(
        &self,
        shared: &Shared,
        group: &GpuGroup,
        steps: &[(u64, Vec<Arc<Launch>>)],
    ) -> Result<(), DeviceError> {
        let _current = self.gpu.bind()?;
        let total = self.steps.last().map_or(0, |s| s.desc_at + s.desc_words);
        let mut host = vec![0u64; total];
        for (at, (epoch, runs)) in self.steps.iter().zip(steps) {
            for (run, &first) in runs.iter().zip(&at.words_at) {
                run.use_graph_words(self.words.clone(), first);
                run.reset_progress();
            }
            let counters = self.counters.ptr + at.counters_at as u64 * 4;
            let (words, users) = group.descriptor(shared, runs, at.grid, counters)?;
            if words.len() > at.desc_words {
                return Err(CudaError::GraphDescriptor {
                    words: words.len(),
                    capacity: at.desc_words,
                }
                .into());
            }
            host[at.desc_at..at.desc_at + words.len()].copy_from_slice(&words);
            let desc = self.desc.ptr + at.desc_at as u64 * 8;
            let mut params = at.grid.params(shared, desc, users, *epoch);
            let mut args = [(&mut params as *mut Params).cast::<std::ffi::c_void>()];
            let node_params = kernel_node(&self.gpu, at.grid, &mut args);
            cu!(cuGraphExecKernelNodeSetParams_v2(
                self.exec,
                at.node,
                &node_params
            ))?;
        }
        let stream = group.stream;
        cu!(cuMemcpyHtoDAsync_v2(
            self.desc.ptr,
            host.as_ptr().cast(),
            host.len() * 8,
            stream
        ))?;
        cu!(cuMemsetD32Async(
            self.counters.ptr,
            0,
            self.counters_len,
            stream
        ))?;
        cu!(cuGraphLaunch(self.exec, stream))?;
        cu!(cuEventRecord(group.done, stream))?;
        Ok(())
    }
}

/// The program kernel's node parameters for `grid` with `args` (the driver copies the
/// argument when the node is added or set).
fn kernel_node(
    gpu: &Gpu,
    grid: Grid,
    args: &mut [*mut std::ffi::c_void; 1],
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: gpu.program,
        gridDimX: grid.blocks(),
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: grid.threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

impl Drop for SequenceGraph {
    fn drop(&mut self) {
        let Ok(_current) = self.gpu.bind() else {
            return;
        };
        if !self.exec.is_null() {
            let _ = cu!(cuGraphExecDestroy(self.exec));
        }
        if !self.graph.is_null() {
            let _ = cu!(cuGraphDestroy(self.graph));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_descriptor_holds_its_entries_fences_and_user_table() {
        let grid = Grid {
            threads: 512,
            k: 4,
            entries: 16,
        };
        // 8 runs of 2 streams, 8 local ranks, 8 ranks: entries, 8 x (2 + 16), 16.
        assert_eq!(
            desc_capacity(grid, 8, 8, 8),
            Some(16 * ENTRY_WORDS + 8 * 18 + 16)
        );
        assert_eq!(desc_capacity(grid, usize::MAX, 8, 8), None);
        assert_eq!(desc_capacity(grid, 1, 1, usize::MAX), None);
    }
}
