//! # oxccl-graph: capture once, replay many times
//!
//! HCCL's graph mode, in oxccl's terms. A framework that runs the same collectives every
//! training step captures them once per rank ([`Capture`]), compiles the capture
//! ([`Capture::compile`]: select_alg, resource calculation and the device's compile for
//! every step, once), and launches the compiled [`Graph`] every step with that step's
//! buffers bound ([`Graph::launch`]). What an eager call does on every call — validate
//! the operator, look up the program cache, agree with the other ranks on what the call
//! is, return to the caller between calls — a graph does once at compile, or not at all:
//!
//! - **Agreed at compile.** Every rank compiles its capture at the same point of its
//!   calls; the ranks exchange a fixed record per step (operator, type, reduce op, root,
//!   counts, form, the executor chosen) with an AllGather on the communicator itself, so
//!   it works alike for ranks in one process and in many. A rank that captured another
//!   sequence is told at compile, on every rank, naming the first differing step and what
//!   each rank passed ([`oxccl::Error::CaptureMismatch`]); no graph exists then.
//! - **Owned programs.** A graph holds its compiled programs; the eager program cache
//!   may evict its own entries without touching a graph.
//! - **Rebound per launch.** A launch binds one call per step, of the sizes and form
//!   captured (anything else is [`oxccl::Error::GraphBinding`] before anything runs),
//!   so the buffers may change every launch. Programs reach user buffers directly where
//!   the links allow it (zero-copy in-process), as eager calls do.
//! - **Fused.** A launch hands every step to the device at once when the device queues a
//!   rank's submissions (the host device does): consecutive steps are ordered by the
//!   epoch fence alone, each step waiting only for the ranks its data depends on, and the
//!   calling thread returns once, at the end. The cuda backend runs a group launch of
//!   every rank's steps on device buffers as one CUDA graph per GPU, built once and
//!   replayed (`OXCCL_CUDA_GRAPHS`). Launches are numbered like calls, so graph
//!   launches and eager calls may be mixed, in the same order on every rank.
//! - **Checked, optionally.** With `OXCCL_GRAPH_CHECK=1` compile also proves the whole
//!   sequence with the analyzer (each step, and the steps back to back under the epoch
//!   fence); a failure refuses the graph ([`oxccl::Error::GraphCheck`]).
//!
//! ```
//! use oxccl::{Communicator, Config, OpCall, ReduceOp};
//! use oxccl_graph::Capture;
//!
//! let comms = Communicator::init_all(2, Config::default()).unwrap();
//! std::thread::scope(|s| {
//!     for comm in &comms {
//!         s.spawn(move || {
//!             let mut grads = vec![1.0f32; 256];
//!             let mut capture = Capture::new();
//!             capture.record(&OpCall::all_reduce_in_place(&mut grads, ReduceOp::Sum)).unwrap();
//!             let graph = capture.compile(comm).unwrap();
//!             for step in 0..3 {
//!                 grads.fill(step as f32);
//!                 let calls = vec![OpCall::all_reduce_in_place(&mut grads, ReduceOp::Sum)];
//!                 graph.launch(comm, calls).unwrap();
//!                 assert!(grads.iter().all(|&x| x == 2.0 * step as f32));
//!             }
//!         });
//!     }
//! });
//! ```

mod agree;
mod capture;
mod check;
mod graph;

pub use capture::{Capture, MAX_STEPS};
pub use graph::Graph;
