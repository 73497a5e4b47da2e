//! # oxccl-algorithms
//!
//! The built-in executors and the templates they are made of, after HCCL's algorithms
//! layer. One algorithm per file, one folder per operator (`all_reduce/`, `all_gather/`,
//! `reduce_scatter/`, `broadcast/`, `reduce/`, `scatter/`, `gather/`, `all_to_all/`,
//! `all_gather_v/`, `reduce_scatter_v/`, `all_to_all_v/`, `send_recv/`, `barrier/`);
//! reusable patterns in `templates/`. Everything registers itself at link time, so linking this
//! crate is all it takes to make the built-ins selectable.

pub mod all_gather;
pub mod all_gather_v;
pub mod all_reduce;
pub mod all_to_all;
pub mod all_to_all_v;
pub mod barrier;
pub mod broadcast;
pub mod gather;
pub mod reduce;
pub mod reduce_scatter;
pub mod reduce_scatter_v;
pub mod scatter;
pub mod send_recv;
pub mod templates;
