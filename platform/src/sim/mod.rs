//! The `sim` device: runs nothing, records every rank's program.
//!
//! It plays the role of wgpu's noop backend: the framework drives it exactly as it drives
//! the host device (same resource requests, same orchestration), and the analyzer and cost
//! model read the recorded programs back with [`SimDevice::take_programs`].

use crate::device::{Device, DeviceConfig, Execution, ScratchId, UserBuffers};
use crate::error::DeviceError;
use crate::ir::RankProgram;
use parking_lot::Mutex;
use std::any::Any;
use std::sync::Arc;

/// A recorded execution.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub program: Arc<RankProgram>,
    pub in_place: bool,
    pub input_bytes: usize,
    pub output_bytes: usize,
    pub scratch: Option<ScratchId>,
}

/// Records programs instead of running them.
#[derive(Debug)]
pub struct SimDevice {
    config: DeviceConfig,
    scratch: Mutex<Vec<usize>>,
    local_notifies: Mutex<usize>,
    recorded: Mutex<Vec<Recorded>>,
    remote_user_buffers: bool,
}

impl SimDevice {
    /// A sim device; `remote_user_buffers` chooses which eager mode the framework uses.
    pub fn new(config: DeviceConfig, remote_user_buffers: bool) -> Self {
        SimDevice {
            config,
            scratch: Mutex::new(Vec::new()),
            local_notifies: Mutex::new(0),
            recorded: Mutex::new(Vec::new()),
            remote_user_buffers,
        }
    }

    /// Every execution recorded so far, in call order; clears the record.
    pub fn take_programs(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.recorded.lock())
    }

    /// Bytes per rank of each scratch allocation, by [`ScratchId`].
    pub fn scratch_sizes(&self) -> Vec<usize> {
        self.scratch.lock().clone()
    }

    /// Local notifies reserved per rank.
    pub fn local_notifies(&self) -> usize {
        *self.local_notifies.lock()
    }
}

impl Device for SimDevice {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn remote_user_buffers(&self) -> bool {
        self.remote_user_buffers
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        let mut scratch = self.scratch.lock();
        scratch.push(bytes_per_rank);
        Ok(ScratchId(scratch.len() - 1))
    }

    fn reserve_local_notifies(&self, local: usize) -> Result<(), DeviceError> {
        let mut n = self.local_notifies.lock();
        *n = (*n).max(local);
        Ok(())
    }

    fn execute_group(&self, group: Vec<Execution<'_>>) -> Vec<Result<(), DeviceError>> {
        group
            .into_iter()
            .map(|e| {
                let rank = e.program.rank;
                if let Some(gate) = &e.gate {
                    match gate.wait(self.config.exec_timeout) {
                        None => {
                            return Err(DeviceError::GateTimeout {
                                rank,
                                waited: self.config.exec_timeout,
                            })
                        }
                        Some(Err(cause)) => return Err(DeviceError::Refused { rank, cause }),
                        Some(Ok(())) => {}
                    }
                }
                let (in_place, input_bytes, output_bytes) = match &e.user {
                    UserBuffers::OutOfPlace { input, output } => (false, input.len(), output.len()),
                    UserBuffers::InPlace(buf) => (true, buf.len(), buf.len()),
                };
                self.recorded.lock().push(Recorded {
                    program: e.program,
                    in_place,
                    input_bytes,
                    output_bytes,
                    scratch: e.scratch,
                });
                Ok(())
            })
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
