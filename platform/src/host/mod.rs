//! The host device: ranks are threads of this process, memory is host memory.
//!
//! A small pool of worker threads (one per core unless `host_threads` says otherwise) runs
//! every stream of every local rank, as a device's scheduler would: a stream blocked on a
//! Wait holds no thread, a Post makes the waiting stream runnable again, and big Copy and
//! Reduce tasks are split across idle workers. User buffers are registered for the duration
//! of each `execute` call, so peers can read and write them directly (zero-copy eager mode).
//!
//! Files: `memory` (buffers and user-buffer registry), `pool` (workers), `launch` (stream
//! state, notifies, timeouts), `exec` (Copy/Reduce with checks and splitting).

mod exec;
mod launch;
mod memory;
mod pool;

use crate::device::{Device, DeviceConfig, Execution, ScratchId, UserBuffers};
use crate::error::DeviceError;
use launch::{Launch, NotifyTable, Shared};
use memory::{Memory, Region, UserRegions};
use parking_lot::Mutex;
use std::any::Any;
use std::sync::Arc;

/// The default backend: collectives between threads of one process on CPU cores.
pub struct HostDevice {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ranks", &self.shared.config.ranks)
            .field("ccl_bytes", &self.shared.config.ccl_bytes)
            .field("threads", &self.shared.pool.threads())
            .finish()
    }
}

impl HostDevice {
    /// Create a host device for `config.ranks` ranks, with its CCL buffers and workers.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        if config.ranks == 0 {
            return Err(DeviceError::Config(
                "a device needs at least one rank".into(),
            ));
        }
        if config.link_channels == 0 {
            return Err(DeviceError::Config(
                "links need at least one notify channel".into(),
            ));
        }
        let threads = match config.host_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let pool = pool::WorkerPool::new(threads).map_err(|e| {
            DeviceError::Config(format!("cannot start {threads} worker threads: {e}"))
        })?;
        let layout = config.layout();
        let table = NotifyTable {
            ranks: (0..config.ranks)
                .map(|_| {
                    (0..layout.table_len(0))
                        .map(|_| Default::default())
                        .collect()
                })
                .collect(),
        };
        Ok(HostDevice {
            shared: Arc::new(Shared {
                memory: Memory::new(config.ranks, config.ccl_bytes)?,
                notifies: Mutex::new(table),
                pool,
                running: Mutex::new(Default::default()),
                layout,
                config,
            }),
        })
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.shared.pool.threads()
    }
}

fn user_regions(user: UserBuffers<'_>) -> UserRegions {
    match user {
        UserBuffers::OutOfPlace { input, output } => UserRegions {
            input: Region {
                ptr: input.as_ptr().cast_mut(),
                len: input.len(),
                writable: false,
            },
            output: Region {
                ptr: output.as_mut_ptr(),
                len: output.len(),
                writable: true,
            },
        },
        UserBuffers::InPlace(buf) => {
            let region = Region {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                writable: true,
            };
            UserRegions {
                input: Region {
                    writable: false,
                    ..region
                },
                output: region,
            }
        }
    }
}

impl HostDevice {
    /// Validate, register the user buffers and queue every stream of one execution.
    fn start(&self, e: Execution<'_>) -> Result<(Arc<Launch>, Arc<UserRegions>), DeviceError> {
        let rank = e.program.rank;
        if rank >= self.shared.config.ranks {
            return Err(DeviceError::Config(format!(
                "program for rank {rank} on a device of {} ranks",
                self.shared.config.ranks
            )));
        }
        // The registration lives until `unregister` returns, which waits for every task
        // (local or a peer's) still using these buffers; the borrow of the user buffers
        // outlives `execute_group`, which unregisters before returning.
        let registration = self.shared.memory.register(rank, user_regions(e.user))?;
        let scratch = e.scratch.map(|s| s.0);
        let launch = Launch::new(self.shared.clone(), e.program, scratch, e.gate.is_some());
        if let Err(err) = self.shared.admit(&launch) {
            self.shared.memory.unregister(rank, registration);
            return Err(err);
        }
        match e.gate {
            Some(gate) => {
                let gated = launch.clone();
                gate.when_decided(Box::new(move |outcome| gated.gate_decided(outcome)));
            }
            None => launch.start(),
        }
        Ok((launch, registration))
    }
}

impl Device for HostDevice {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn config(&self) -> &DeviceConfig {
        &self.shared.config
    }

    fn remote_user_buffers(&self) -> bool {
        true
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        let id = self
            .shared
            .memory
            .alloc_scratch(self.shared.config.ranks, bytes_per_rank)?;
        Ok(ScratchId(id))
    }

    fn reserve_local_notifies(&self, local: usize) -> Result<(), DeviceError> {
        let len = self.shared.layout.table_len(local);
        self.shared.notifies.lock().reserve(len);
        Ok(())
    }

    fn execute_group(&self, group: Vec<Execution<'_>>) -> Vec<Result<(), DeviceError>> {
        let mut results: Vec<Result<(), DeviceError>> = Vec::with_capacity(group.len());
        let mut running = Vec::with_capacity(group.len());
        for (i, e) in group.into_iter().enumerate() {
            match self.start(e) {
                Ok(started) => {
                    running.push((i, started));
                    results.push(Ok(()));
                }
                Err(err) => results.push(Err(err)),
            }
        }
        // Work instead of sleeping while the queue has jobs: small operations then finish on
        // this thread without a wakeup.
        while !running.iter().all(|(_, (l, _))| l.is_done()) && self.shared.pool.run_one() {}
        // A part of the group that could not start leaves its peers waiting for it: stop
        // the device, which aborts every launch in flight (this group's and others').
        let start_error = results.iter().find_map(|r| match r {
            Err(DeviceError::Aborted { .. } | DeviceError::Refused { .. }) | Ok(()) => None,
            Err(e) => Some(e.to_string()),
        });
        if let Some(cause) = start_error {
            self.shared.stop(
                format!("a rank of a group call could not start: {cause}"),
                None,
            );
        }
        for (_, (launch, _)) in &running {
            // Errors are collected below; a failure already stopped the device.
            let _ = launch.wait_done();
        }
        for (i, (launch, registration)) in running {
            let rank = launch.rank();
            results[i] = launch.result();
            self.shared.memory.unregister(rank, registration);
        }
        results
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests;
