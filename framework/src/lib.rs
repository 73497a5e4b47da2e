//! # oxccl-framework
//!
//! The middle layer of oxccl, after HCCL's framework layer: it turns a collective call into
//! per-rank programs of the platform's task IR, without knowing any concrete algorithm.
//!
//! A call flows through:
//! 1. [`op`]: the operator and its parameters, validated against the bound buffers;
//! 2. [`select`]: `select_alg`, a chain of the `OXCCL_ALGO` override, plugin selectors, the
//!    tuning table and the built-in choice by [`cost`] model among the executors whose
//!    declared [`executor::Constraints`] hold and whose links exist;
//! 3. [`planner`]: the chosen executor's resource request (with its typed plan), then the
//!    loop that stages through the CCL buffers (or runs on user buffers) and calls the
//!    executor's `kernel_run` per iteration: one rank's program, with no device;
//! 4. [`communicator`]: caches the program, has its device compile it, and submits it with
//!    the call's epoch: the device's epoch fence keeps back-to-back operations apart, and a
//!    program ends with its executor's last task (there is no closing exchange).
//!
//! ## Layering
//!
//! The pure parts sit below the stateful ones, and imports only point down:
//!
//! ```text
//! communicator, agreement, config          state: devices, ranks, the environment
//! analyzer (recording = select + plan)     proofs over planned programs
//! select                                    select_alg: screening, cost model, cache
//! cost                                      replay and analytic estimate of programs
//! planner                                   pure: (executor, op, topology, rank, layout,
//!                                           mode, in-place, CCL bytes) -> request, program
//! executor, registry, op, topology, tune,   data and contracts
//! digest, limits, error
//! ```
//!
//! Nothing below `communicator` builds a communicator or a device: selection models its
//! candidates by planning them, and the analyzer's recording plans every rank the same way
//! a communicator does, so what is proved and timed is what runs.
//!
//! Before a call runs, its ranks agree on what it is ([`agreement`]): a mismatched or
//! refused call is an error on every rank, and nothing moves. Ranks can also compare one
//! number for everything their selections depend on ([`digest`],
//! [`Communicator::selection_digest`]). Every size a caller, a file or a plugin supplies
//! is checked against [`limits`].
//!
//! [`registry`](mod@registry) holds the executors and templates registered at link time with
//! [`register_executor!`] and [`register_template!`]; [`config`] reads the environment in
//! one place; [`topology`] says which links exist.

pub mod agreement;
pub mod analyzer;
pub mod arith;
pub mod bootstrap;
pub mod communicator;
pub mod config;
pub mod cost;
pub mod digest;
pub mod error;
pub mod executor;
mod fast_hash;
pub mod limits;
pub mod link_access;
pub mod msccl;
pub mod op;
pub mod planner;
pub mod registry;
pub mod select;
pub mod topology;
pub mod transport;
pub mod tune;

pub use communicator::{Communicator, GroupCall, Step};
pub use config::{Config, HostFiguresFrom};
pub use error::{ArgError, ConfigError, Error};
pub use executor::{
    BufRange, Constraints, Executor, ExecutorEntry, KernelArgs, KernelCtx, LinkNeed, Mode, Peers,
    Plan, PlanCtx, ResourceRequest, TemplateEntry,
};
pub use op::{OpKind, OpParam};
pub use registry::registry;
pub use select::{
    select_alg, AlgoOverride, CandidateReport, Explanation, SelectRequest, Selection,
    SelectorEntry, Verdict, SIMULATION_BUDGET,
};
pub use topology::Topology;

/// Re-exported so plugins need no direct dependency on the platform crate.
pub use oxccl_platform as platform;

#[doc(hidden)]
pub use inventory;
#[doc(hidden)]
pub use linkme;
